"""``solve(instance, solver=...)`` and the registry of solvers.

A solver is a function ``run(instance, *, time_limit, seed, threads, **options)
-> Outcome`` in its own module, imported only when used. :func:`solve` times it,
re-evaluates its plan with the one cost model and builds the :class:`Result`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import time
from dataclasses import dataclass

from .instance import Instance
from .numeric import OPTIMALITY_RTOL
from .plan import evaluate
from .result import OptionError, Outcome, Result


@dataclass(frozen=True)
class SolverInfo:
    name: str
    target: str  # "module:function"
    exact: bool  # proves optimality when it finishes
    summary: str


SOLVERS: dict[str, SolverInfo] = {
    s.name: s
    for s in (
        SolverInfo("dp", "chainpipe.solvers.dp:run", True,
                   "exact chain dynamic program (the reference optimum)"),
        SolverInfo("cdynp", "chainpipe.solvers.cdynp:run", True,
                   "decomposed privacy-preserving DP: DC agents exchange state summaries"),
        SolverInfo("ilp-assign", "chainpipe.solvers.ilp:run_assign", True,
                   "assignment ILP (layers to stage slots to device groups) via PuLP"),
        SolverInfo("ilp-path", "chainpipe.solvers.ilp:run_path", True,
                   "interval/path ILP (candidate stages as arcs of a layered network) via PuLP"),
        SolverInfo("cpsat", "chainpipe.solvers.cpsat:run", True,
                   "OR-Tools CP-SAT model over candidate stage arcs, integer-scaled with exact bounds"),
        SolverInfo("uniform", "chainpipe.solvers.baselines:uniform", False,
                   "baseline: equal layer counts per stage, DCs filled in chain order (Megatron)"),
        SolverInfo("greedy-fill", "chainpipe.solvers.baselines:greedy_fill", False,
                   "baseline: as many stages per DC as it holds, uniform layers (Atlas)"),
        SolverInfo("proportional", "chainpipe.solvers.baselines:proportional", False,
                   "baseline: layers in proportion to device rates, with memory repair (Metis)"),
        SolverInfo("comm-unaware", "chainpipe.solvers.baselines:comm_unaware", False,
                   "baseline: exact DP with links ignored, then evaluated with links"),
        SolverInfo("uniform-chain", "chainpipe.solvers.baselines:uniform_chain", False,
                   "baseline: uniform layer splits, search over stage count and DC segments (Sailor)"),
        SolverInfo("single-dc", "chainpipe.solvers.baselines:single_dc", False,
                   "baseline: the best plan inside one datacenter"),
    )
}


def solver_function(name: str):
    try:
        info = SOLVERS[name]
    except KeyError:
        raise ValueError(f"unknown solver {name!r}; known: {', '.join(SOLVERS)}") from None
    module, func = info.target.split(":")
    return getattr(importlib.import_module(module), func)


def available_solvers() -> list[SolverInfo]:
    """Registered solvers whose module is present."""
    out = []
    for info in SOLVERS.values():
        module = info.target.split(":")[0]
        if importlib.util.find_spec(module) is not None:
            out.append(info)
    return out


def solve(
    instance: Instance,
    solver: str = "dp",
    time_limit: float | None = None,
    seed: int = 0,
    threads: int = 1,
    **options,
) -> Result:
    """Solve ``instance`` with the named solver; the plan's time comes from ``evaluate``.

    An unknown solver name raises :class:`ValueError`; an option the solver does not
    take raises :class:`~chainpipe.result.OptionError` (a ``ValueError``).
    """
    run = solver_function(solver)
    try:  # a bad option is the caller's mistake: say so before any work is done
        inspect.signature(run).bind(instance, time_limit=time_limit, seed=seed, threads=threads,
                                    **options)
    except TypeError as exc:
        raise OptionError(f"{solver}: {exc}") from None
    start = time.perf_counter()
    outcome: Outcome = run(instance, time_limit=time_limit, seed=seed, threads=threads, **options)
    elapsed = time.perf_counter() - start
    return finish(instance, solver, outcome, elapsed)


def finish(instance: Instance, solver: str, outcome: Outcome, elapsed: float) -> Result:
    """Turn a solver's :class:`Outcome` into a :class:`Result`, re-evaluating its plan."""
    status, plan, bound, message = outcome.status, outcome.plan, outcome.lower_bound, outcome.message
    T = None
    if plan is not None:
        ev = evaluate(instance, plan)
        if not ev.feasible:
            return Result(instance.name, solver, "error", plan, None, bound, elapsed,
                          f"solver returned an infeasible plan: {ev.violations[0]}",
                          dict(outcome.stats))
        T = ev.iteration_time_s
        if status == "optimal":
            # a proof of optimality is a bound equal to the plan's time
            if bound is None or bound > T:
                bound = T
            if (T - bound) > OPTIMALITY_RTOL * T:
                status = "feasible"
        if bound is not None and bound > T * (1 + OPTIMALITY_RTOL):
            return Result(instance.name, solver, "error", plan, T, bound, elapsed,
                          f"solver claimed a lower bound {bound!r} above its plan's time {T!r}",
                          dict(outcome.stats))
    elif status in ("optimal", "feasible"):
        return Result(instance.name, solver, "error", None, None, bound, elapsed,
                      f"solver said {status!r} without a plan", dict(outcome.stats))
    return Result(instance.name, solver, status, plan, T, bound, elapsed, message,
                  dict(outcome.stats))
