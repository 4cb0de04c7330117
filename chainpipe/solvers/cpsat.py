"""``cpsat``: the OR-Tools CP-SAT model of :mod:`chainpipe.formulations.cpsat`.

Integer scaling with a valid bound: every time coefficient is rounded *down* in a unit
``UB / 2^30`` (``UB`` the time of a cheap heuristic plan, or of the hint), so CP-SAT's
best bound times the unit never exceeds the true optimum. Every plan CP-SAT finds is
decoded and its exact time computed by :func:`chainpipe.plan.evaluate`. The status is
``optimal`` only when that exact time is within :data:`chainpipe.numeric.OPTIMALITY_RTOL`
of the derived bound; when the scaled optimum is proven but the rounding leaves a
larger gap, the model is rebuilt with the better plan's time as ``UB`` (a finer unit)
and solved again, up to ``max_rounds`` times.

Options: ``log_search_progress`` (bool), ``hint`` (``None``, ``"dp"`` or a
:class:`~chainpipe.plan.Plan`; off by default, recorded in the statistics when used),
``max_rounds`` (int, default 3).
"""

from __future__ import annotations

import math
import threading
import time

from ..deadline import Deadline
from ..formulations.common import candidate_stages, max_stages
from ..formulations.cpsat import CpsatModel, greedy_plans
from ..numeric import OPTIMALITY_RTOL
from ..plan import Plan, evaluate
from ..result import OptionError, Outcome
from ..tables import CostTables


def run(instance, *, deadline=None, seed=0, threads=1, log=None, log_search_progress=False,
        hint=None, max_rounds=3, **options) -> Outcome:
    """Solve ``instance`` with CP-SAT; see the module docstring for the guarantees."""

    if options:
        raise OptionError(f"cpsat: unknown option(s) {', '.join(sorted(options))}")
    t0 = time.perf_counter()
    deadline = Deadline.of(deadline)
    time_limit = None if deadline.unlimited else deadline.remaining()
    deadline = None if time_limit is None else t0 + float(time_limit)
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason:
        return Outcome("infeasible", message=reason)
    stats: dict = {"num_workers": int(threads), "seed": int(seed), "rounds": [], "trace": []}
    cheap_bound = float(tables.lower_bound)

    # ---- an upper bound that sets the time unit (and prunes hopeless arcs)
    scale_plan, scale_T = None, math.inf
    for tuples in greedy_plans(tables):
        plan = Plan.from_tuples(instance, tuples)
        ev = evaluate(instance, plan)
        if ev.feasible and ev.iteration_time_s < scale_T:
            scale_plan, scale_T = plan, ev.iteration_time_s
    ub_source = "greedy" if scale_plan is not None else None
    hint_plan = None
    if hint is not None:
        hint_plan, hint_info = _hint_plan(instance, hint, deadline)
        stats["hint"] = hint_info
        if hint_plan is not None and hint_info["iteration_time_s"] < scale_T:
            scale_plan, scale_T, ub_source = hint_plan, hint_info["iteration_time_s"], "hint"
    if scale_plan is not None and scale_T <= 0.0:  # T >= 0 for every plan
        stats["upper_bound_source"] = ub_source
        return Outcome("optimal", plan=scale_plan, lower_bound=0.0, stats=stats,
                       message="a plan with zero iteration time is optimal")
    if scale_plan is None:
        upper, prune, ub_source = _objective_range(tables), False, "coefficient range"
    else:
        upper, prune = scale_T, True
    stats["upper_bound_source"] = ub_source
    stats["scaling_plan_time_s"] = None if scale_plan is None else scale_T

    lock = threading.Lock()
    best = {"T": math.inf, "plan": None, "bound": cheap_bound}
    trace = stats["trace"]

    def record():
        inc = best["T"] if best["plan"] is not None else None
        trace.append([time.perf_counter() - t0, inc, best["bound"]])

    record()
    status_note = None
    for rnd in range(max(1, int(max_rounds))):
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            break
        tb = time.perf_counter()
        built = CpsatModel.build(tables, upper, prune)
        hinted = None
        if rnd == 0 and hint_plan is not None:
            hinted = built.hint(hint_plan)
            stats["hint"]["accepted"] = hinted
        elif rnd > 0 and best["plan"] is not None:
            hinted = built.hint(best["plan"])  # refinement round: start from the incumbent
        info = {
            "upper_bound_s": upper, "unit_s": built.unit, "stage_arcs": len(built.x_vars),
            "boundary_arcs": len(built.y_vars), "candidate_stages": built.candidates_total,
            "constraints": len(built.model.proto.constraints),
            "rounded_terms": built.rounded_terms,
            "max_rounding_error_s": built.rounded_terms * built.unit,
            "build_time_s": time.perf_counter() - tb, "hinted": hinted,
        }
        stats["rounds"].append(info)
        if deadline is not None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
        status, solver = _solve(built, remaining, seed, threads, log_search_progress,
                                best, lock, record)
        info.update(status=solver.status_name(status), wall_time_s=solver.wall_time,
                    conflicts=solver.num_conflicts, branches=solver.num_branches)
        name = solver.status_name(status)
        if name in ("OPTIMAL", "FEASIBLE"):
            info["objective"] = solver.objective_value
            info["scaled_bound"] = solver.best_objective_bound
            values = list(solver.response_proto.solution)
            with lock:
                _offer(built, values, best, instance)
                best["bound"] = max(best["bound"], built.true_bound(solver.best_objective_bound))
                record()
        if name == "MODEL_INVALID":
            return Outcome("error", message="CP-SAT rejected the model: "
                           + solver.solution_info(), stats=stats)
        if name == "INFEASIBLE":
            if prune:  # the scaling plan is a path of the model: this cannot be
                return Outcome("error", stats=stats,
                               message="CP-SAT called the model infeasible although it holds "
                                       "a known plan")
            return Outcome("infeasible", stats=stats,
                           message="no chain-ordered plan satisfies the memory limits and "
                                   "device counts (CP-SAT proved the exact model infeasible)")
        if name != "OPTIMAL":
            break  # time limit: the bound stands as it is
        T = best["T"]
        if T - best["bound"] <= OPTIMALITY_RTOL * T:
            break
        # the scaled model is solved but rounding hides the last bit: refine the unit
        if upper * (1 - 1e-12) <= T:
            status_note = "scaled optimum proven, rounding gap above tolerance"
            break
        upper, prune = T, True

    stats["solve_time_s"] = time.perf_counter() - t0
    plan, T, bound = best["plan"], best["T"], best["bound"]
    if plan is None:
        if scale_plan is not None:
            stats["plan_source"] = ub_source
            return Outcome("feasible", plan=scale_plan, lower_bound=min(bound, scale_T),
                           stats=stats,
                           message="CP-SAT found no plan in the limit; the plan is the "
                                   f"{ub_source} plan that set the time unit")
        return Outcome("no_solution", lower_bound=bound, stats=stats,
                       message="time limit reached before CP-SAT found a plan")
    stats["plan_source"] = "cpsat"
    if T - bound <= OPTIMALITY_RTOL * T:
        return Outcome("optimal", plan=plan, lower_bound=min(bound, T), stats=stats)
    return Outcome("feasible", plan=plan, lower_bound=bound, stats=stats,
                   message=status_note or "time limit reached before optimality was proven")


def _solve(built: CpsatModel, remaining, seed, threads, log, best, lock, record):
    from ortools.sat.python import cp_model

    instance = built.tables.instance

    class _Incumbents(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            values = list(self.response_proto.solution)
            with lock:
                _offer(built, values, best, instance)
                record()

    def on_bound(scaled):
        b = built.true_bound(scaled)
        with lock:
            if b > best["bound"]:
                best["bound"] = b
                record()

    solver = cp_model.CpSolver()
    p = solver.parameters
    if remaining is not None:
        p.max_time_in_seconds = max(remaining, 1e-3)
    p.num_workers = max(1, int(threads))
    p.random_seed = int(seed)
    p.log_search_progress = bool(log)
    # google/or-tools#5293 (9.15): an int accumulator in the linear+AMO inclusion presolve
    # can wrap on coefficient sums above 2^31; our objective rows exceed that, so skip it
    p.presolve_inclusion_work_limit = 0
    solver.best_bound_callback = on_bound
    status = solver.solve(built.model, _Incumbents())
    return status, solver


def _offer(built: CpsatModel, values, best, instance) -> None:
    """Decode a solution; keep it if its exact time beats the incumbent (caller holds lock)."""
    plan = built.decode(values)
    ev = evaluate(instance, plan)
    if not ev.feasible:
        raise RuntimeError(f"cpsat decoded an infeasible plan: {ev.violations[0]}")
    if ev.iteration_time_s < best["T"]:
        best["T"], best["plan"] = ev.iteration_time_s, plan


def _objective_range(tables: CostTables) -> float:
    """An upper bound on the time of every plan the model holds (no plan known)."""
    cand = candidate_stages(tables)
    if not len(cand):
        return 1.0
    c_max = float(cand.compute_time.max())
    u_max = q_max = 0.0
    for b in range(1, tables.L):
        for k1 in range(tables.K):
            for k2 in range(k1, tables.K):
                u_max = max(u_max, tables.occupancy(b, k1, k2))
                q_max = max(q_max, tables.traversal(b, k1, k2))
    s = max(1, max_stages(tables))
    total = s * c_max + (s - 1) * q_max + (tables.M - 1) * max(c_max, u_max)
    return total if total > 0 else 1.0


def _hint_plan(instance, hint, deadline):
    """The hint plan and what to record about it."""
    if isinstance(hint, Plan):
        plan, source = hint, "plan"
    elif hint == "dp":
        from .dp import run as dp_run

        limit = None if deadline is None else max(deadline - time.perf_counter(), 1e-3)
        out = dp_run(instance, deadline=limit)
        plan, source = out.plan, "dp"
    else:
        raise ValueError(f"cpsat: hint must be None, 'dp' or a Plan, not {hint!r}")
    if plan is None:
        return None, {"source": source, "iteration_time_s": None}
    ev = evaluate(instance, plan)
    if not ev.feasible:
        raise ValueError(f"cpsat: the hint plan is infeasible: {ev.violations[0]}")
    return plan, {"source": source, "iteration_time_s": ev.iteration_time_s}

