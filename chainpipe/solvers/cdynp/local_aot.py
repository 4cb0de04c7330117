"""The kernels of a DC agent's classic label DP (:mod:`.local`), compiled ahead of time.

:class:`.local.LocalDP` runs two kernels of :mod:`chainpipe.solvers.label_kernel`
(``take_layer``, ``local_layer``) and its layer loop :func:`.local_fast.extend_layer`,
which calls a third (``local_extend``) once per state; the arena's ``new_arena`` and
``grown`` are plain Python. ``dp``'s compiled unit (:data:`.label_aot.LABEL`) holds only
the kernels ``dp`` calls, so a CDynP solve imported numba for these (about 0.4 CPU s
with the kernels in numba's disk cache). :data:`UNIT` compiles them, as
:data:`.label_aot.LABEL` compiles ``dp``'s: the very functions (their ``py_func``), under
a digest of ``dp``'s sources and :mod:`.local_fast`, each behind the argument check of
:func:`.label_aot._checked` (a call with other types goes to numba's just-in-time
kernel). :func:`load` gives what :mod:`.local` calls: the compiled kernels when built for
the sources as they are (numba not imported), else :mod:`.local_fast` (numba's
just-in-time kernels, under the same names).

Built by ``python -m chainpipe.solvers.label_aot`` with the other units.
"""

from __future__ import annotations

from .. import label_aot

#: per kernel :mod:`.local` calls, its arguments' types (:data:`.label_aot.ARGS`' notation;
#: ``tests/test_kernel_aot.py`` checks that CDynP passes exactly these)
ARGS = {
    "take_layer": ("i", "f2", "i2", "i2", "i1"),
    "local_layer": ("f2", "i2", "i2", "b", "i", "b"),
    "extend_layer": ("f2", "i1", "i1", "i1", "i2", "f2", "i2", "i1", "i1", "i1", "i2", "i2",
                     "i2", "i1", "f1", "i1", "i1", "f2", "f2", "f2", "i2", "i2", "i1"),
    "candidate_runs": ("b3", "b3", "b1", "f3", "i3", "f3", "f3"),
    "dominance_at": ("b2", "f2", "f2", "f2", "i1", "f2", "b2", "i", "b"),
}


def _jit():
    from . import local_fast

    return local_fast


#: the three kernels, compiled ahead of time into ``cdynp_local_aot_<digest>`` (of the
#: sources ``dp``'s unit is made of, and :mod:`.local_fast`)
UNIT = label_aot.Unit("cdynp_local", ARGS, (*label_aot.SOURCES, "solvers/cdynp/local_fast.py"),
                      jit=lambda: _jit())

_loaded: list = []


def load():
    """What :mod:`.local` calls (``new_arena``, ``grown``, ``take_layer``, ``local_layer``,
    ``extend_layer``): the compiled kernels (each checked) when :data:`UNIT` is built for
    the sources as they are, else :mod:`.local_fast` (numba's just-in-time kernels).
    Decided once per process."""
    if not _loaded:
        module = UNIT.compiled()
        _loaded.append(_jit() if module is None
                       else label_aot.Kernels(module, ARGS, UNIT.handed_call))
    return _loaded[0]
