"""What a solver returns (:class:`Outcome`) and what chainpipe reports (:class:`Result`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .plan import Plan

STATUSES = ("optimal", "feasible", "infeasible", "no_solution", "error")


class OptionError(ValueError):
    """A solver option the solver does not know, or a value it cannot take."""


@dataclass(frozen=True)
class Outcome:
    """A solver's raw answer, before the cost model re-evaluates its plan.

    ``status`` is the solver's claim: ``optimal`` only with a proof. ``lower_bound``
    is a proven bound on the optimal iteration time (seconds) or ``None``.
    """

    status: str
    plan: Plan | None = None
    lower_bound: float | None = None
    message: str | None = None
    stats: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    instance: str
    solver: str
    status: str
    plan: Plan | None
    iteration_time: float | None  # T of the plan, recomputed by chainpipe.plan.evaluate
    lower_bound: float | None
    solve_time: float
    message: str | None = None
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        """``(T - bound) / T``, the one gap definition for every solver."""
        if self.iteration_time is None or self.lower_bound is None:
            return None
        if not math.isfinite(self.iteration_time) or self.iteration_time <= 0:
            return None
        return max(0.0, (self.iteration_time - self.lower_bound) / self.iteration_time)

    def to_dict(self, with_stats: bool = True) -> dict:
        """The result object of ``problem.md`` section 6 (plus ``message`` and ``stats``)."""
        from .io import finite

        d = {
            "instance": self.instance,
            "solver": self.solver,
            "status": self.status,
            "iteration_time_s": finite(self.iteration_time),
            "lower_bound_s": finite(self.lower_bound),
            "gap": finite(self.gap),
            "solve_time_s": float(self.solve_time),
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "message": self.message,
        }
        if with_stats:
            d["stats"] = jsonable(self.stats)
        return d


def jsonable(x):
    """``x`` with numpy scalars made Python numbers and non-finite floats ``None``."""
    from .io import finite

    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float):
        return finite(x)
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return jsonable(x.item())
    return x
