"""Run the two ILP formulations through PuLP with HiGHS (default) or CBC.

``run_assign`` / ``run_path`` have the registry signature ``run(instance, *,
time_limit, seed, threads, **options) -> Outcome``. Options:

- ``backend``: ``"highs"`` (default; PuLP's highspy API solver, so the MIP status
  and dual bound are read from HiGHS itself) or ``"cbc"`` (PuLP's bundled CBC; its
  status and bound are parsed from its log);
- ``relax``: solve the LP relaxation only and report its value as ``lower_bound``
  (status ``no_solution``; the formulation study's LP bound);
- ``msg``: let the solver print its log;
- ``bottleneck`` (``ilp-path`` only): ``"auto"``, ``"layer"`` or ``"node"`` rows.

Status honesty: ``optimal`` only when the solver itself reports the gap closed
(``mip_rel_gap = 0``, absolute gap 1e-6 on an objective of at least 1e3); a run stopped by
its time limit with an incumbent is ``feasible`` with the solver's bound; without
an incumbent ``no_solution`` with that bound. Every bound is the solver's dual
bound times the time scale, lowered by ``BOUND_RTOL`` (1e-7 relative) to cover
floating-point tolerances: the models' objective is ``T`` exactly, so this is a
valid bound on the true optimum.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
import warnings

from ..deadline import Deadline
from ..formulations.common import safe_bound
from ..instance import Instance
from ..result import OptionError, Outcome
from ..tables import CostTables

BACKENDS = ("highs", "cbc")
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


def run_assign(instance: Instance, *, deadline: Deadline | None = None, seed: int = 0, log=None,
               threads: int = 1, **options) -> Outcome:
    """The assignment ILP (layers -> stage slots -> device groups)."""
    return _run("ilp-assign", instance, Deadline.of(deadline), seed, threads, options)


def run_path(instance: Instance, *, deadline: Deadline | None = None, seed: int = 0, log=None,
             threads: int = 1, **options) -> Outcome:
    """The path ILP (candidate stages as arcs of a layered network)."""
    return _run("ilp-path", instance, Deadline.of(deadline), seed, threads, options)


def _run(name: str, instance: Instance, deadline: Deadline, seed, threads, options) -> Outcome:
    time_limit = None if deadline.unlimited else deadline.remaining()
    options = dict(options)
    backend = str(options.pop("backend", "highs")).lower()
    relax = _flag(options.pop("relax", False))
    msg = _flag(options.pop("msg", False))
    bottleneck = options.pop("bottleneck", "auto")
    if backend not in BACKENDS:
        raise OptionError(f"{name}: unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if name == "ilp-assign" and bottleneck != "auto":
        raise OptionError(f"{name}: option 'bottleneck' applies to ilp-path only")
    if options:
        raise OptionError(f"{name}: unknown option(s) {', '.join(sorted(options))}")

    tables = CostTables(instance)
    stats = {"formulation": name, "backend": backend, "relax": relax, "threads": threads,
             "seed": seed}
    reason = tables.infeasibility_reason()
    if reason is not None:
        return Outcome("infeasible", message=reason, stats=stats)

    t0 = time.perf_counter()
    if name == "ilp-assign":
        from ..formulations.ilp_assign import AssignFormulation

        form = AssignFormulation(tables)
    else:
        from ..formulations.ilp_path import PathFormulation

        form = PathFormulation(tables, bottleneck=bottleneck)
        stats.update(form.network_stats)
        if form.n_arcs == 0:
            stats["build_time_s"] = time.perf_counter() - t0
            return Outcome("infeasible", stats=stats, message=(
                "no chain of stages satisfies memory and device counts "
                "(every candidate stage arc was pre-filtered)"))
    prob = form.build()
    stats["build_time_s"] = time.perf_counter() - t0
    if name == "ilp-assign":
        stats.update(form.model_stats)
    stats.update(_size(prob))
    stats["time_scale_s"] = form.scale

    remaining = None
    if time_limit is not None:
        remaining = max(0.0, float(time_limit) - stats["build_time_s"])
    t1 = time.perf_counter()
    if backend == "highs":
        answer = _solve_highs(prob, relax, remaining, seed, threads, msg)
    else:
        answer = _solve_cbc(prob, relax, remaining, seed, threads, msg)
    stats["solve_time_s"] = time.perf_counter() - t1
    status, scaled_bound, has_solution, text = answer
    stats["solver_status"] = text
    bound = safe_bound(scaled_bound, form.scale)

    if relax:
        stats["lp_bound_s"] = bound
        if status == "infeasible":
            return Outcome("infeasible", lower_bound=None, stats=stats,
                           message="the LP relaxation is infeasible, so is the problem")
        return Outcome("no_solution", lower_bound=bound, stats=stats,
                       message="LP relaxation only (relax=True)")
    if status == "infeasible":
        return Outcome("infeasible", stats=stats, message=(
            f"{backend} proved that no plan satisfies memory, device counts and chain order"))
    plan = form.decode() if has_solution else None
    if status == "optimal" and plan is not None:
        return Outcome("optimal", plan=plan, lower_bound=bound, stats=stats)
    if plan is not None:
        return Outcome("feasible", plan=plan, lower_bound=bound, stats=stats,
                       message=f"stopped before proving optimality ({text})")
    return Outcome("no_solution", lower_bound=bound, stats=stats,
                   message=f"no plan found ({text})")


def _flag(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _size(prob) -> dict:
    constraints = prob.constraints()  # the PuLP >= 3.3 list API
    return {"variables": len(prob.variables()), "constraints": len(constraints),
            "nonzeros": sum(len(c) for c in constraints),
            "integer_variables": sum(1 for v in prob.variables() if v.cat == "Integer")}


# ---------------------------------------------------------------------- HiGHS
def _solve_highs(prob, relax, time_limit, seed, threads, msg):
    """``(status, scaled bound, has solution, status text)`` from HiGHS itself."""
    import highspy
    import pulp

    params = {"random_seed": int(seed), "primal_feasibility_tolerance": PRIMAL_TOL}
    solver = pulp.HiGHS(mip=not relax, msg=msg, gapRel=0.0, gapAbs=ABS_GAP,
                        threads=int(threads), timeLimit=time_limit, **params)
    prob.solve(solver)
    h = prob.solverModel
    ms = h.getModelStatus()
    text = h.modelStatusToString(ms)
    info = h.getInfo()
    S = highspy.HighsModelStatus
    has_solution = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    if ms in (S.kInfeasible, S.kUnboundedOrInfeasible):
        return "infeasible", None, False, text
    objective = info.objective_function_value if has_solution else None
    if relax:
        bound = objective if ms == S.kOptimal else None
        return ("no_solution", bound, False, text)
    dual = info.mip_dual_bound
    bound = dual if dual is not None and math.isfinite(dual) else None
    if ms == S.kOptimal and has_solution:
        bound = objective if bound is None else min(bound, objective)
        return "optimal", bound, True, f"{text} (gap {info.mip_gap:.3g})"
    return "stopped", bound, has_solution, text


# ---------------------------------------------------------------------- CBC
_CBC_RESULT = re.compile(r"^Result - (.*)$", re.M)
_CBC_NUMBER = r"\s*:?\s*([-+0-9.eE]+|-?inf(?:inity)?)"


def _cbc_value(log: str, label: str) -> float | None:
    m = re.search(r"^" + re.escape(label) + _CBC_NUMBER, log, re.M | re.I)
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def _solve_cbc(prob, relax, time_limit, seed, threads, msg):
    """``(status, scaled bound, has solution, status text)`` parsed from CBC's log."""
    import pulp

    fd, log_path = tempfile.mkstemp(prefix="chainpipe_cbc_", suffix=".log")
    os.close(fd)
    try:
        # CBC seeds must be positive (0 means "from the clock"), hence seed + 1
        # preprocess off: CBC 2.10's preprocessing returns wrong "optimal" answers on
        # some of our models (seen on a one-slot assignment model; cf. coin-or/Cbc#283,
        # #724); the cross-check tests would fail with it on
        opts = ["preprocess off", f"randomCbcSeed {int(seed) + 1}", f"randomSeed {int(seed) + 1}",
                "increment 1e-12",
                f"primalTolerance {PRIMAL_TOL}"]
        with warnings.catch_warnings():  # PuLP 3.3 deprecates the bundled CBC's class name
            warnings.simplefilter("ignore", DeprecationWarning)
            solver = pulp.PULP_CBC_CMD(mip=not relax, msg=False, timeLimit=time_limit,
                                       gapRel=0.0, gapAbs=ABS_GAP, threads=int(threads),
                                       logPath=log_path, options=opts)
        prob.solve(solver)
        with open(log_path) as fh:
            log = fh.read()
    finally:
        os.unlink(log_path)
    if msg:
        print(log)
    result = _CBC_RESULT.findall(log)
    text = result[-1].strip() if result else pulp.LpStatus[prob.status]
    lowered = log.lower()
    if relax:
        if "infeasible" in text.lower() or prob.status == pulp.LpStatusInfeasible:
            return "infeasible", None, False, text
        m = re.search(r"Optimal - objective value\s+([-+0-9.eE]+)", log)
        if m is None or prob.status != pulp.LpStatusOptimal:
            return "no_solution", None, False, text
        return "no_solution", float(m.group(1)), False, "LP optimal"
    if ("infeasible" in text.lower() or "problem is infeasible" in lowered
            or prob.status == pulp.LpStatusInfeasible):
        return "infeasible", None, False, text
    objective = _cbc_value(log, "Objective value")
    no_solution = "no feasible solution found" in lowered or objective is None \
        or prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if text.startswith("Optimal solution found") and not no_solution:
        # CBC stops only when its bound >= objective - allowable gap; the log prints
        # 8 digits, the objective of the solution read back is exact
        exact = pulp.value(prob.objective)
        return "optimal", min(objective, exact) - ABS_GAP, True, text
    bound = _cbc_value(log, "Lower bound")
    if bound is not None and not math.isfinite(bound):
        bound = None
    return "stopped", bound, not no_solution, text


#: the options of each formulation, for ``chainpipe.solve.solver_options``
run_assign.options = ("backend", "relax", "msg")
run_path.options = ("backend", "relax", "msg", "bottleneck")
