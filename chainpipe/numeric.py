"""Tolerances and number conversions shared by every layer of chainpipe.

This module imports nothing from chainpipe, so the data, the cost model, the
solvers and the result all use one definition of each.
"""

from __future__ import annotations

import math

#: relative slack on memory limits, shared by the cost model and every solver's tables,
#: so that a stage that fits to the last byte is not rejected by floating-point rounding
MEMORY_RTOL = 1e-9

#: relative tolerance on optimality claims: a proven optimum is optimal within this
OPTIMALITY_RTOL = 1e-6


def finite(x: float | None) -> float | None:
    """JSON-safe float: ``None`` for ``None``, NaN or infinity, else ``float(x)``."""
    return None if x is None or not math.isfinite(x) else float(x)


def jsonable(x):
    """``x`` with numpy scalars made Python numbers and non-finite floats ``None``.

    Enums with a ``str`` value (such as :class:`chainpipe.result.Status`) become
    their value; mappings and sequences are converted recursively.
    """
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, str):
        return str(x)
    if isinstance(x, bool) or x is None or isinstance(x, int):
        return x
    if isinstance(x, float):
        return finite(x)
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return jsonable(x.item())
    return x
