"""What a solver returns (:class:`Outcome`) and what chainpipe reports (:class:`Result`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from .numeric import OPTIMALITY_RTOL, finite, jsonable
from .plan import Plan

__all__ = ["Outcome", "OptionError", "Result", "Status", "jsonable"]


class Status(str, Enum):
    """What a solve ended with; the value is the word written in JSON and CSV.

    ``OPTIMAL`` only with a proof (to :data:`chainpipe.numeric.OPTIMALITY_RTOL`);
    ``FEASIBLE`` a plan without that proof; ``INFEASIBLE`` a proof that no plan
    exists; ``NO_SOLUTION`` neither a plan nor a proof by the limit; ``ERROR``
    the solver failed (its message says why).
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class OptionError(ValueError):
    """A solver option the solver does not know, or a value it cannot take."""


def number_option(solver: str, name: str, value, *, minimum: float = 0.0,
                  strict: bool = False, integer: bool = False):
    """``value`` as a finite number ``>= minimum`` (``> minimum`` if ``strict``), else OptionError.

    The one check of a solver's numeric option, so that ``-O epsilon=abc`` or
    ``-O max_rounds=-1`` is bad input (exit 2, one line) before any work.
    """
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
        if integer and number != int(number):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        kind = "an integer" if integer else "a number"
        raise OptionError(f"option {name!r} of {solver}: must be {kind}, got {shown}") from None
    if not math.isfinite(number) or number < minimum or (strict and number == minimum):
        op = ">" if strict else ">="
        raise OptionError(f"option {name!r} of {solver}: must be a finite number {op} "
                          f"{minimum:g}, got {shown}")
    return int(number) if integer else number


@dataclass(frozen=True)
class Outcome:
    """A solver's raw answer, before the cost model re-evaluates its plan.

    ``status`` is the solver's claim: ``optimal`` only with a proof. ``lower_bound``
    is a proven bound on the optimal iteration time (seconds) or ``None``.
    """

    status: Status
    plan: Plan | None = None
    lower_bound: float | None = None
    message: str | None = None
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))


@dataclass(frozen=True)
class Result:
    """What :func:`chainpipe.solve` reports: a solver's answer, checked by the cost model.

    Attributes
    ----------
    instance : str
        The instance's name.
    solver : str
        The registered solver name (``"dp"``, ``"cdynp"``, ...).
    status : Status
        ``optimal`` only with a proof; see :class:`Status`.
    plan : Plan or None
        The plan found, or ``None``.
    iteration_time : float or None
        ``T`` of ``plan`` in seconds, recomputed by :func:`chainpipe.evaluate`,
        never taken from the solver's own objective.
    lower_bound : float or None
        The best proven lower bound on the optimum (seconds), ``0 <= bound <= T``.
    solve_time : float
        Wall-clock seconds of the whole solve, building included.
    message : str or None
        One line on why (infeasibility reason, time limit, error).
    stats : dict
        Solver-specific figures (labels, model sizes, backend log summary, ...).
    instance_sha256 : str or None
        The digest of the instance solved (:func:`chainpipe.io.instance_digest`): the
        plan of ``to_dict`` names its instance by it. ``None`` when the solver's caller
        did not hold the whole instance (a CDynP owner holds only the public file).
    devices_total : int or None
        The devices of the instance; ``None`` when the caller does not know them (a
        CDynP owner: the counts are the DCs' private data).
    """

    instance: str
    solver: str
    status: Status
    plan: Plan | None
    iteration_time: float | None
    lower_bound: float | None
    solve_time: float
    message: str | None = None
    stats: dict = field(default_factory=dict)
    instance_sha256: str | None = None
    devices_total: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))

    @property
    def devices_used(self) -> int | None:
        """The devices the plan runs on (``d * t`` summed over its stages), or ``None``."""
        return None if self.plan is None else sum(st.width for st in self.plan.all_stages)

    @property
    def gap(self) -> float | None:
        """``(T - bound) / T``, the one gap definition for every solver."""
        if self.iteration_time is None or self.lower_bound is None:
            return None
        if not math.isfinite(self.iteration_time) or self.iteration_time <= 0:
            return None
        return max(0.0, (self.iteration_time - self.lower_bound) / self.iteration_time)

    def to_dict(self, with_stats: bool = True) -> dict:
        """The result object of the model's result section (plus ``message`` and ``stats``)."""
        d = {
            "instance": self.instance,
            "solver": self.solver,
            "status": self.status.value,
            "iteration_time_s": finite(self.iteration_time),
            "lower_bound_s": finite(self.lower_bound),
            "gap": finite(self.gap),
            "solve_time_s": float(self.solve_time),
            "devices_used": self.devices_used,
            "devices_total": self.devices_total,
            "plan": self.plan_document(),
            "message": self.message,
        }
        if with_stats:
            d["stats"] = jsonable(self.stats)
        return d

    def plan_document(self) -> dict | None:
        """The plan as its file holds it, naming its instance when the digest is known."""
        if self.plan is None:
            return None
        origin = {"name": self.instance, "sha256": self.instance_sha256} \
            if self.instance_sha256 else {"name": self.instance}
        return {"instance": origin, **self.plan.to_dict()}


def result_of(instance: InstanceRef, solver: str, outcome: Outcome, ev,
              elapsed: float) -> Result:
    """A solver's :class:`Outcome` as a :class:`Result`, given its plan's evaluation.

    The plan's ``T`` is the cost model's (``ev``, from :func:`chainpipe.plan.evaluate`
    or, for an owner holding no private data, :func:`chainpipe.plan.combine`); a claimed
    bound above it voids the claim, and ``optimal`` stands only when the bound meets ``T``.
    """
    status, plan, bound, message = outcome.status, outcome.plan, outcome.lower_bound, outcome.message
    ref = {"instance_sha256": instance.sha256, "devices_total": instance.devices_total}

    def error(p, t, why):
        return Result(instance.name, solver, "error", p, t, bound, elapsed, why,
                      dict(outcome.stats), **ref)

    T = None
    if plan is not None:
        if not ev.feasible:
            return error(plan, None, f"solver returned an infeasible plan: {ev.violations[0]}")
        T = ev.iteration_time_s
        if bound is not None and bound > T * (1 + OPTIMALITY_RTOL):
            # the solver's objective disagrees with the cost model: its proof is void
            return error(plan, T, f"solver claimed a lower bound {bound!r} above its plan's "
                                  f"time {T!r}")
        if bound is not None:
            bound = min(max(bound, 0.0), T)  # 0 <= bound <= T, whatever the rounding
        if status == "optimal":
            # a proof of optimality is a bound equal to the plan's time
            if bound is None:
                bound = T
            if (T - bound) > OPTIMALITY_RTOL * T:
                status = "feasible"
    elif bound is not None:
        bound = max(bound, 0.0)
    if plan is None and status in ("optimal", "feasible"):
        return error(None, None, f"solver said {status!r} without a plan")
    return Result(instance.name, solver, status, plan, T, bound, elapsed, message,
                  dict(outcome.stats), **ref)


@dataclass(frozen=True)
class InstanceRef:
    """What a result says of its instance: the name, and the digest and device count when
    the caller holds the whole instance (a CDynP owner holds only the public file)."""

    name: str
    sha256: str | None = None
    devices_total: int | None = None

