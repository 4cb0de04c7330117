"""A leaner start of numba, for processes that chainpipe owns.

A fresh process paid about 0.8 CPU s before its first compiled kernel ran; 0.18 s of it
was ``numba.np.arraymath`` importing ``scipy.linalg`` to learn whether ``np.dot`` and
``np.linalg`` can be compiled, and 0.08 s ``numba.core.typing.cffi_utils`` importing
``cffi`` to type cffi functions. No kernel of the package uses either, so a process that
chainpipe owns (the command line and the agents it starts, and the benchmarks' measured
children, which measure what the command line pays) imports those two numba modules
with the probed package hidden. The price is the process's: numba code there cannot
compile ``np.dot``, ``np.linalg`` or cffi calls. A library user's process (a notebook,
a script that imports chainpipe) keeps numba as it is: nothing is hidden unless
:func:`own_process` was called.
"""

from __future__ import annotations

import sys

_owned = False


def own_process() -> None:
    """Declare the running process chainpipe's own (see the module docstring)."""
    global _owned
    _owned = True


def prepare() -> None:
    """Called by each compiled-kernel module before its first kernel: in a process of
    chainpipe's own, import numba's array functions and cffi typing with the packages
    they only probe hidden (unless either is loaded already)."""
    if _owned:
        _without("numba.np.arraymath", "scipy.linalg")
        _without("numba.core.typing.cffi_utils", "cffi")


def _without(module: str, hidden: str) -> None:
    """Import ``module`` with ``hidden`` made unimportable meanwhile, unless either is
    loaded already."""
    if module in sys.modules or hidden in sys.modules:
        return
    sys.modules[hidden] = None  # an import of it raises ImportError meanwhile
    try:
        __import__(module)
    finally:
        del sys.modules[hidden]
