"""What a MIP backend (HiGHS, CBC) returns, and how a model enters HiGHS.

Both backends take a :class:`chainpipe.formulations.matrix.LinearModel` and answer
with a :class:`MipAnswer`; :mod:`chainpipe.solvers.ilp` turns the answer into an
outcome. Tolerances shared by both are defined here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: absolute MIP gap on the scaled objective (>= 1e3: the cheap lower bound is 1e3 units),
#: so at most 1e-9 relative
ABS_GAP = 1e-6
#: primal feasibility tolerance. Rows such as ``c[p,g] <= cap * w[p,g]`` let a
#: binary that is 1 - tol shave tol * cap off a stage time; with the solvers'
#: defaults (1e-7 / 1e-6) a returned "optimal" objective could understate the plan's
#: true T by about 1e-6 relative, enough to miss OPTIMALITY_RTOL. Tightening the
#: *integrality* tolerance as well made HiGHS's presolve declare feasible models
#: infeasible, so only the primal tolerance is tightened. (Tolerances only enlarge
#: the feasible region, so dual bounds stay valid either way.)
PRIMAL_TOL = 1e-9


#: share of the time left that a MIP backend does not get, at most ``RESERVE_MAX_S``:
#: HiGHS and CBC look at their clock only between phases (HiGHS's presolve ran 1.2 s
#: past its limit on ``large-01``), and the plan must still be decoded after them
RESERVE_SHARE = 0.1
RESERVE_MAX_S = 1.0


def backend_seconds(deadline) -> float | None:
    """Seconds to give a MIP backend: what is left less a reserve, never 0 (``None``: no limit)."""
    left = deadline.backend_limit()
    if left is None:
        return None
    return max(0.05, left - min(RESERVE_MAX_S, RESERVE_SHARE * left))


@dataclass(frozen=True)
class MipAnswer:
    """A backend's answer on the scaled model.

    ``status`` is ``"optimal"`` (gap closed, ``values`` set), ``"stopped"`` (a limit or
    an interrupt; ``values`` set when a solution was found), ``"infeasible"`` (proven)
    or ``"relaxed"`` (LP relaxation solved; ``bound`` is its value). ``bound`` is the
    backend's dual bound on the scaled objective, or ``None``.
    """

    status: str
    bound: float | None
    values: np.ndarray | None
    text: str


def pass_model(highs, model, relax: bool) -> None:
    """Hand ``model`` to a ``highspy.Highs`` in one call (integrality dropped if ``relax``)."""
    import highspy

    integrality = np.zeros(model.num_cols, dtype=np.int32) if relax \
        else model.integer.astype(np.int32)
    status = highs.passModel(
        model.num_cols, model.num_rows, model.nonzeros, int(highspy.MatrixFormat.kRowwise),
        int(highspy.ObjSense.kMinimize), float(model.offset), model.cost, model.col_lower,
        model.col_upper, model.row_lower, model.row_upper, model.starts, model.index,
        model.value, integrality)
    if status == highspy.HighsStatus.kError:
        raise RuntimeError("HiGHS rejected the model")

