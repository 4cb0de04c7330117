"""The label kernel compiled ahead of time: the kernels :mod:`.dp` calls, loaded without
numba.

A fresh process that solves with ``dp`` paid about 0.45 CPU s before its first kernel ran
(importing numba, its registries, loading each kernel from numba's disk cache), more
than the whole solve of a ``hybrid/medium`` instance (0.07-0.15 s). :func:`build`
compiles the very functions of :mod:`.label_kernel` (their ``py_func``, one source) with
numba's ahead-of-time compiler (``numba.pycc``) into one extension module, kept beside
numba's cache (``__pycache__`` beside this module, or ``NUMBA_CACHE_DIR``) under a name
that carries a digest of the kernel's sources: an edited source is never run from a
stale build. :func:`load` returns that module's kernels when it is built for the sources
as they are, else :mod:`.label_kernel` itself (numba's just-in-time kernels, compiled on
first use and cached on disk), so the two give the same answers by construction.

Build it with ``python -m chainpipe.solvers.label_aot`` (``make`` does; 25-60 s, needs a
C compiler). The compiled wrappers convert their arguments without checking array
types, so each kernel here checks that every argument has the type it was compiled for
(:data:`ARGS`, what :mod:`.dp` passes) and hands any other call to the just-in-time
kernel. The build targets the architecture's generic CPU (numba 0.68's ``host`` target
for ahead-of-time code ignores the features a virtual machine hides and can emit
instructions the CPU lacks); measured as fast as the just-in-time kernels on
``hybrid-large``.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

#: images per block of the arena (:func:`new_arena`)
BLOCK = 256

_ARENA = ("f2", "i2", "i2", "i1")
#: per kernel :mod:`.dp` calls, its arguments' types: ``f``, ``i``, ``b`` a float64,
#: int64 or bool scalar, ``fN`` / ``iN`` a C-contiguous float64 / int64 array of ``N``
#: dimensions (``tests/test_label_aot.py`` checks that dp passes exactly these)
ARGS = {
    "seed": ("i", "i", *_ARENA),
    "take_layer": ("i", *_ARENA),
    "filter_layer": ("f2", "i2", "i2", "i1", "b", "i"),
    "union_front": ("f2", "b", "i"),
    "advance": ("f2", "f2", "i1", "f2", "f1", "f2", "f2", "f1", "f", "f", "f", "i", "i1",
                *_ARENA),
    "sorted_ranges": ("f3", "i3", "f2", "i"),
    "held_on_grid": ("f2", "f2", "i2", "i1", "i1", "f1"),
    "position_knapsack": ("f3", "i1", "i", "i"),
    "chain_held": ("f4", "i1", "i1", "i"),
    "chain_floor": ("f2", "f4", "i1", "i1", "i", "f1", "f1", "b"),
    "crossing_gain": ("f1", "f", "f1", "i", "f1", "f", "f1"),
}
#: the files the compiled kernels are made of (relative to this package's root)
SOURCES = ("solvers/label_kernel.py", "solvers/labels.py", "cost.py", "tables.py")
_ROOT = Path(__file__).resolve().parents[1]
_SCALARS = {"f": (float, np.float64), "i": (int, np.int64), "b": (bool, np.bool_)}
_DTYPES = {"f": np.dtype(np.float64), "i": np.dtype(np.int64)}


def new_arena(layers: int, blocks: int = 64) -> tuple:
    """An empty image arena: blocks of :data:`BLOCK` images, a chain of blocks per layer
    ``0..layers``, a free list. Plain arrays ``(af, ai, blocks, links)``: the images'
    floats and ints, per block ``(next, fill)``, and ``links = [head per layer, tail per
    layer, first free block, blocks ever used, blocks in the free list]``. (A numba typed
    list of arrays per layer was measured first: its methods compile in every process,
    1.8 s.)"""
    links = np.full(2 * (layers + 1) + 3, -1, dtype=np.int64)
    links[-2:] = 0
    return (np.empty((blocks * BLOCK, 3)), np.empty((blocks * BLOCK, 5), dtype=np.int64),
            np.zeros((blocks, 2), dtype=np.int64), links)


def grown(arena: tuple, short: int) -> tuple:
    """The arena with at least ``short`` more blocks (doubled until so), the used copied."""
    af, ai, blocks, links = arena
    n = len(blocks)
    size = n
    while size - n < short:
        size *= 2
    af2 = np.empty((size * BLOCK, 3))
    ai2 = np.empty((size * BLOCK, 5), dtype=np.int64)
    blocks2 = np.zeros((size, 2), dtype=np.int64)
    af2[:n * BLOCK], ai2[:n * BLOCK], blocks2[:n] = af, ai, blocks
    return af2, ai2, blocks2, links


def digest() -> str:
    """A digest of the kernel's sources, the argument types :data:`ARGS`, NumPy's version
    and the Python build (the compiled module's name carries it)."""
    h = hashlib.sha256(repr(ARGS).encode())
    for name in SOURCES:
        h.update((_ROOT / name).read_bytes())
    h.update(f"{np.__version__} {sys.version} {sys.platform}".encode())
    return h.hexdigest()[:16]


def location() -> Path:
    """Where the compiled module of the sources as they are lives (it may not exist)."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    folder = Path(base) if base else Path(__file__).resolve().parent / "__pycache__"
    return folder / f"label_aot_{digest()}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


class Kernels:
    """The compiled module's kernels (each checked by :func:`_checked`), with the
    arena's Python helpers, under the names :mod:`.label_kernel` gives them."""

    BLOCK = BLOCK
    new_arena = staticmethod(new_arena)
    grown = staticmethod(grown)

    def __init__(self, module):
        for name, kinds in ARGS.items():
            setattr(self, name, _checked(name, getattr(module, name), kinds))

    @staticmethod
    def warm() -> None:
        """Nothing to load (:func:`.label_kernel.warm` loads the just-in-time kernels)."""


_loaded: list = []
#: per compiled kernel, the calls handed to the just-in-time kernel (other argument types)
HANDED: dict = {}


def load():
    """The kernels :mod:`.dp` runs: :class:`Kernels` of the compiled module when it is
    built for the sources as they are, else :mod:`.label_kernel` (numba's just-in-time
    kernels). Decided once per process."""
    if not _loaded:
        _loaded.append(_compiled() or _jit())
    return _loaded[0]


def _jit():
    from . import label_kernel

    return label_kernel


def _compiled() -> Kernels | None:
    """:class:`Kernels` of the compiled module, ``None`` if it is not built or does not
    load (built against another NumPy, say)."""
    path = location()
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return Kernels(module)


def _checked(name: str, fn, kinds: tuple):
    """``fn`` (the compiled kernel ``name``) behind a check that each argument has the
    type of ``kinds`` (:data:`ARGS`); a call with any other goes to the just-in-time
    kernel, which compiles for its types.

    The check is one expression written out per kernel, what it reads bound as local
    names: about 0.15 us per array argument (a loop over the arguments cost 6 us a
    call). It is the price of the compiled module's wrappers, which check nothing: on
    GPT-3 at L = 194 (139,000 calls of ``advance``) 0.3 of a warm solve's 1.5 CPU s.
    (Skipping the check for the object that last passed at a position saved 2 to 4 %
    there, most arrays change from call to call, and kept that object alive: dropped.)"""
    args = [f"a{i}" for i in range(len(kinds))]
    tests = []
    for a, k in zip(args, kinds):
        if len(k) == 1:
            tests.append(f"(_t({a}) is _{k}0 or _t({a}) is _{k}1)")
        else:
            tests.append(f"(_t({a}) is _nd and {a}.dtype == _{k[0]}8 and {a}.ndim == {k[1]}"
                         f" and {a}.flags.c_contiguous)")
    call = ", ".join(args)
    # what the check reads, bound as defaults (local variables: no global look-ups)
    space = {"_fn": fn, "_t": type, "_nd": np.ndarray, "_f8": _DTYPES["f"], "_i8": _DTYPES["i"]}
    for k, types in _SCALARS.items():
        space[f"_{k}0"], space[f"_{k}1"] = types
    bound = ", ".join(f"{v}={v}" for v in space)
    source = (f"def {name}({call}, *, {bound}):\n"
              f"    if {' and '.join(tests)}:\n"
              f"        return _fn({call})\n"
              f"    return _handed({name!r}, {call})\n")
    space["_handed"] = _handed
    exec(compile(source, f"<label_aot.{name}>", "exec"), space)  # noqa: S102 (our own text)
    kernel = space[name]
    kernel.__doc__ = f"The compiled :func:`.label_kernel.{name}` (argument types checked)."
    return kernel


def _handed(name: str, *args):
    """A call of kernel ``name`` with other argument types: counted in :data:`HANDED`,
    run by the just-in-time kernel."""
    HANDED[name] = HANDED.get(name, 0) + 1
    return getattr(_jit(), name)(*args)


def signature(kinds: tuple) -> str:
    """The numba signature (arguments only) of the argument types ``kinds``."""
    names = {"f": "float64", "i": "int64", "b": "boolean"}
    return ", ".join(names[k] if len(k) == 1 else
                     f"{names[k[0]]}[{', '.join([':'] * (int(k[1]) - 1) + ['::1'])}]"
                     for k in kinds)


def build(path: Path | None = None) -> Path:
    """Compile :data:`ARGS`' kernels of :mod:`.label_kernel` into the extension module at
    ``path`` (default :func:`location`); returns the path. Written to a temporary file
    first and moved into place, so a process never loads a half-written module."""
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    from . import label_kernel

    path = Path(path) if path is not None else location()
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC
    name = path.name.split(".")[0]
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        cc = CC(name)
        cc.output_dir = tmp
        cc.verbose = False
        for kernel, kinds in ARGS.items():
            cc.export(kernel, f"({signature(kinds)},)")(getattr(label_kernel, kernel).py_func)
        cc.compile()
        built = next(Path(tmp).glob(name + ".*"))
        os.replace(built, path)
    return path


def main() -> int:
    """``python -m chainpipe.solvers.label_aot``: build the compiled module (unless it is
    built for the sources as they are) and print its path."""
    path = location()
    print(path if path.exists() else build(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
