"""``cpsat``: the OR-Tools CP-SAT model of :mod:`chainpipe.formulations.cpsat`.

Integer scaling with a valid bound: every time coefficient is rounded *down* in a unit
``UB / 2^30`` (``UB`` the time of a cheap heuristic plan, or of the hint), so CP-SAT's
best bound times the unit never exceeds the true optimum. Every plan CP-SAT finds is
decoded and its exact time computed by :func:`chainpipe.plan.evaluate`. The status is
``optimal`` only when that exact time is within :data:`chainpipe.numeric.OPTIMALITY_RTOL`
of the derived bound; when the scaled optimum is proven but the rounding leaves a
larger gap, the model is rebuilt with the better plan's time as ``UB`` (a finer unit)
and solved again, up to ``max_rounds`` times.

The time limit covers the whole solve: the deadline is checked while the model is
built, CP-SAT gets what is left, and a run that runs out while building returns the
plan that set the time unit (``feasible``) or ``no_solution``. CP-SAT's search log goes
to ``log`` (never to standard output); ``log_search_progress`` sends it to standard
error when no ``log`` is given.

Options: ``log_search_progress`` (bool), ``hint`` (``None``, ``"dp"`` or a
:class:`~chainpipe.plan.Plan`; off by default, recorded in the statistics when used),
``max_rounds`` (int, default 3), ``features`` (the strengthenings, :data:`ALL_FEATURES`;
default :data:`FEATURES`), ``write_model`` (a ``.pbtxt``/``.txt`` file for the first
round's model as protobuf text, ``.pb`` for binary; written atomically). The outer
enumeration also passes its sub-solves a ``cutoff`` (:func:`run`).

The scaling plan is the best of two cheap heuristics (:func:`heuristic_plan`), never the
DP's: the solve proves on its own.

One pipeline of two datacenters or more under 1F1B's period (feature ``windows``, on by
default) is solved by an enumeration of windows of the period (:class:`_Windows`): each
window pruned and keyed by the arc-flow network's whole-path and loop bounds for its
period, the open window of least key solved by a CP-SAT model with the period in the
window; the bound is the least key of the open windows, and the whole enumeration counts
against the time limit.

Several pipelines (contract version 3, ``pipelines`` other than ``[1]``): the outer
choice -- DC blocks and microbatch shares ``M_p`` -- is enumerated around one-pipeline
CP-SAT solves (:mod:`chainpipe.formulations.pipelines`); when the blocks' optimal plans do
not meet an entry's bound, one CP-SAT model holds the entry's pipelines together
(``T_max >= T_p``, ``R_max >= R_p``, each pipeline's products ``(M_p - 1) lambda_p`` with
its ``M_p`` a constant of its sub-model). The whole enumeration counts against the time
limit; the bound is the least over entries of what is proven of each. ``hint`` and
``write_model`` apply to one pipeline only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from pathlib import Path

import numpy as np

from ..deadline import Deadline, TimeUp
from ..formulations.common import period_mode
from ..formulations.cpsat import DEFAULT_FEATURES as DEFAULT_MODEL_FEATURES
from ..formulations.cpsat import FEATURES as MODEL_FEATURES
from ..formulations.cpsat import CpsatModel
from ..formulations.flow_windows import PeriodWindows, Window
from ..formulations.greedy import best_greedy_plan
from ..formulations.pipelines import CpuPhase, OuterSearch, several
from ..io import atomic_write
from ..numeric import OPTIMALITY_RTOL
from ..plan import Plan, evaluate
from ..progress import report
from ..result import OptionError, Outcome, number_option
from ..tables import CostTables
from .interrupt import run_stoppable
from .logs import line_logger, stderr_log
from .mip import backend_seconds


def run(instance, *, deadline=None, seed=0, threads=1, log=None, log_search_progress=False,
        hint=None, max_rounds=3, write_model=None, features=None, **options) -> Outcome:
    """Solve ``instance`` with CP-SAT; see the module docstring for the guarantees.

    ``cutoff`` (a keyword the outer enumeration passes, not a command-line option;
    seconds, one pipeline): what the caller needs to know is a plan faster
    than it or a proof that there is none; the model then holds only the plans no slower
    than ``min(cutoff, T_h)`` (``T_h`` the heuristic plan's), and its bound holds for
    those alone: the bound reported is ``min(model bound, cutoff)`` or the tables' own
    bound, whichever is higher (``docs/cpsat.md``, "Cutoffs").

    ``resume`` (a dict the outer enumeration passes, not a command-line option): the
    open windows of the period a former solve of the same block and ``M_p`` left
    (:class:`_Windows`), gone on with when this solve's upper bound is at most theirs;
    the statistics then say ``resumable``.
    """
    cutoff = options.pop("cutoff", None)
    resume = options.pop("resume", None)
    if options:
        raise OptionError(f"cpsat: unknown option(s) {', '.join(sorted(options))}")
    if cutoff is not None:
        cutoff = number_option("cpsat", "cutoff", cutoff, minimum=0.0)
    max_rounds = number_option("cpsat", "max_rounds", max_rounds, minimum=1, integer=True)
    if hint is not None and hint != "dp" and not isinstance(hint, Plan):
        raise OptionError(f"option 'hint' of cpsat: must be 'dp' or a Plan, got {hint!r:.40}")
    model_file = model_path(write_model)
    features = feature_option(features)
    deadline = Deadline.of(deadline)
    if log is None and log_search_progress:
        log = stderr_log
    if several(instance):
        if hint is not None or model_file is not None:
            raise OptionError("cpsat: options 'hint' and 'write_model' apply to instances of "
                              "one pipeline ('pipelines': [1]); this one allows "
                              f"{list(instance.parallelism.pipelines)}")
        return _pipelines(instance, deadline, int(seed), int(threads), log, max_rounds,
                          features)
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason:
        return Outcome("infeasible", message=reason + _not_written(model_file))
    search = _Search(tables, deadline, int(seed), int(threads), log, model_file, features)
    search.cutoff, search.resume = cutoff, resume
    try:
        search.set_scale(hint)
        if search.prune and not math.isfinite(search.upper):
            return Outcome("error", stats=search.stats, message=(
                "cpsat: the instance's numbers are out of range (every plan's time "
                "overflows a float)"))
        if search.scale_T <= 0.0:  # T >= 0 for every plan
            return Outcome("optimal", plan=search.scale_plan, lower_bound=0.0,
                           stats=search.stats,
                           message="a plan with zero iteration time is optimal")
        search.rounds(max_rounds)
    except TimeUp:
        search.note = (f"time limit ({deadline.limit:g} s) reached while building the model "
                       f"(after {deadline.elapsed():.2f} s)")
    except _Stop as stop:
        return stop.outcome
    return search.outcome()


#: at most this many seconds for one sub-solve in the enumeration's first pass, doubled
#: in each later round (``None``: half the time left, :data:`~chainpipe.formulations.pipelines.SUB_SHARE`)
SUB_LIMIT_S = None


def _pipelines(instance, deadline: Deadline, seed: int, threads: int, log, max_rounds: int,
               features: frozenset) -> Outcome:
    """Several pipelines: :class:`~chainpipe.formulations.pipelines.OuterSearch` around
    one-pipeline CP-SAT solves and joint models (:func:`_joint`)."""
    resume: dict = {}  # the open windows of the period per block and M_p

    def single(sub, dl, cutoff=None):
        return run(sub, deadline=dl, seed=seed, threads=threads, log=log,
                   max_rounds=max_rounds, features=sorted(features), cutoff=cutoff,
                   resume=resume)

    levels = None
    if "sync_levels" in features:
        from .ilp import _SyncCache

        levels = _SyncCache(level=_level_solver(seed, threads, log, features))

    def joint(entry, subs, upper, dl):
        if levels is not None:
            return _joint_by_levels(subs, upper, dl, levels)
        return _joint(subs, upper, dl, seed, threads, log, features)

    # no first pass over single-DC entries: CP-SAT's sub-solves are slower than the ILP's,
    # and with it the gaps on v3/medium widened (docs/cpsat.md, "Version 3")
    out = OuterSearch(instance, deadline, single, joint, log, local_share=0.0,
                      sub_limit=SUB_LIMIT_S).run()
    out.stats.update(num_workers=threads, seed=seed, features=sorted(features),
                     solve_time_s=deadline.elapsed())
    return out


def _joint(subs, upper: float, deadline: Deadline, seed: int, threads: int, log, features):
    """One CP-SAT model of several pipelines, each a :class:`CpsatModel` built into it
    with one unit ``upper / 2^30``: ``(plans or None, bound)`` on ``max T_p + max R``
    (``upper`` when no plan is below it). Coefficients are rounded down, so the bound is
    valid as in one pipeline."""
    from ortools.sat.python import cp_model

    from ..formulations.cpsat import SCALE_UNITS, UB_RTOL

    model = cp_model.CpModel()
    unit = upper / SCALE_UNITS
    parts = []
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        for sub in subs:
            parts.append(CpsatModel.build(CostTables(sub), upper, check=deadline.check,
                                          features=features & set(MODEL_FEATURES),
                                          model=model, unit=unit))
    proto = model.proto
    cap = int(math.floor(upper * (1 + UB_RTOL) / unit))
    t_max, r_max = len(proto.variables), len(proto.variables) + 1
    for _ in range(2):
        proto.variables.add().domain.extend([0, cap])
    for part in parts:
        ct = proto.constraints.add().linear
        ct.vars.extend([t_max] + [int(v) for v, _ in part.time_pairs])
        ct.coeffs.extend([1] + [-int(c) for _, c in part.time_pairs])
        ct.domain.extend([0, 2**62])
        if part.sync is not None:
            ct = proto.constraints.add().linear
            ct.vars.extend([r_max, int(part.sync)])
            ct.coeffs.extend([1, -1])
            ct.domain.extend([0, 2**62])
    proto.objective.vars.extend([t_max, r_max])
    proto.objective.coeffs.extend([1, 1])
    proto.objective.domain.extend([0, cap])
    solver = cp_solver(deadline, seed, threads, log, features)
    stop_at = None if deadline.unlimited else deadline.at
    status = run_stoppable(lambda: solver.solve(model), solver.stop_search, name="cpsat",
                           stop_at=stop_at)
    name = solver.status_name(status)
    if name == "INFEASIBLE":
        return None, upper
    if name not in ("OPTIMAL", "FEASIBLE"):
        return None, 0.0
    values = list(solver.response_proto.solution)
    bound = parts[0].true_bound(solver.best_objective_bound)
    return [part.decode(values) for part in parts], bound


def _joint_by_levels(subs, upper: float, deadline: Deadline, cache):
    """The joint model of several pipelines solved exactly by levels of the
    synchronisation (:func:`chainpipe.solvers.ilp._joint_by_sync`: per level and
    pipeline the least ``T_p - max R`` of its plans under an ``R`` cap; pipelines that
    differ only in their DC's name or own link's latency answered from each other), each
    level a CP-SAT model of one pipeline (:func:`_level_solver`) on the options of the
    level's arc-flow network (the pruning ``loop_prune`` already uses; no MIP is
    solved). ``(plans or None, bound)`` as :func:`_joint`."""
    from .ilp import _joint_by_sync, _Options

    opts = _Options("highs", False, False, "auto", None, device_states=True)
    return _joint_by_sync(subs, upper, deadline, opts, 0, 1, None, cache)


def _level_solver(seed: int, threads: int, log, features):
    """``level(block, form, cap, below, target, deadline)`` for
    :class:`~chainpipe.solvers.ilp._SyncCache`: the least ``T_p - max R`` of the block's
    plans on the options of the level's network ``form`` (every plan under the cap ``cap``
    with ``T_p - max R`` below ``below``, ``count_sync=False``) by CP-SAT, stopped at a
    plan of at most ``target`` (scaled). Its objective is the pipeline's time terms
    (:attr:`CpsatModel.time_pairs`, each rounded down) capped at ``below``: ``INFEASIBLE``
    proves every such plan at least ``below``; a stopped search's bound holds for the
    plans below ``below``. The model is pruned by ``below + cap`` (such a plan has ``T <
    below + cap``)."""
    from ortools.sat.python import cp_model

    from ..formulations.cpsat import SCALE_UNITS, UB_RTOL
    from .ilp import _Level

    def level(block, form, cap: float, below: float, target: float, deadline: Deadline):
        model = cp_model.CpModel()
        upper = below + cap
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            part = CpsatModel.build(form.tables, upper, check=deadline.check,
                                    features=features & set(MODEL_FEATURES), model=model,
                                    unit=below / SCALE_UNITS, window=form)
        out = _Level(cap, False, below, None, math.inf, math.inf, math.inf, 0.0, False)
        top = int(math.floor(below * (1 + UB_RTOL) / part.unit))
        proto = model.proto
        proto.objective.vars.extend([int(v) for v, _ in part.time_pairs])
        proto.objective.coeffs.extend([int(c) for _, c in part.time_pairs])
        proto.objective.domain.extend([0, top])
        name, values, bound = _solve_level(model, target / part.unit, deadline, seed,
                                           threads, log, features)
        if name == "INFEASIBLE":
            out.lb, out.optimal = below, True
            return out
        out.lb = min(part.true_bound(bound), below) if values is not None else 0.0
        out.optimal = name == "OPTIMAL"
        if values is not None:
            out.plan = part.decode(values)
            ev = evaluate(block.instance, out.plan)
            out.sync = out.R = float(ev.sync_s)
            out.T = float(ev.iteration_time_s) - out.sync
        return out

    return level


def cp_solver(deadline: Deadline, seed: int, threads: int, log, features):
    """A CP-SAT solver with the route's parameters: ``deadline``'s time left, ``threads``
    workers, ``seed``, the ``linearization2`` feature, and ``log`` (one call per line of
    CP-SAT's own log) when given."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    p = solver.parameters
    limit = backend_seconds(deadline)
    if limit is not None:
        p.max_time_in_seconds = limit
    p.num_workers, p.random_seed = max(1, threads), seed
    # google/or-tools#5293 (9.15): an int accumulator in the linear+AMO inclusion presolve
    # can wrap on coefficient sums above 2^31; our objective rows exceed that, so skip it
    p.presolve_inclusion_work_limit = 0
    if "linearization2" in features:
        p.linearization_level = 2
    if log is not None:
        p.log_search_progress, p.log_to_stdout = True, False
        solver.log_callback = line_logger(log)
    return solver


def _solve_level(model, target: float, deadline: Deadline, seed: int, threads: int, log,
                 features):
    """CP-SAT on a level's model: ``(status name, solution values or None, best bound)``,
    the search stopped once a solution's objective is at most ``target`` (scaled)."""
    from ortools.sat.python import cp_model

    class Target(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self):
            if self.objective_value <= target:
                self.stop_search()

    solver = cp_solver(deadline, seed, threads, log, features)
    stop_at = None if deadline.unlimited else deadline.at
    callback = Target() if target > 0 else None
    status = run_stoppable(lambda: solver.solve(model, callback), solver.stop_search,
                           name="cpsat", stop_at=stop_at)
    name = solver.status_name(status)
    values = list(solver.response_proto.solution) if name in ("OPTIMAL", "FEASIBLE") else None
    bound = solver.best_objective_bound if values is not None else 0.0
    return name, values, bound


#: every strengthening ``features`` may name: the model's, ``heuristic_hint`` (the plan
#: that set the unit is given to CP-SAT as a hint) and ``linearization2`` (CP-SAT's
#: ``linearization_level = 2``: more of the model, and its cuts, in the LP relaxation)
#: and ``windows`` (one pipeline under 1F1B's period: the model solved by windows of the
#: period, :class:`_Windows`) and ``sync_levels`` (several pipelines: each joint model
#: solved by levels of the synchronisation, :func:`_joint_by_levels`; off by default:
#: ``docs/cpsat.md``, "Sixteenth round")
ALL_FEATURES = MODEL_FEATURES + ("heuristic_hint", "linearization2", "windows", "sync_levels")
#: the strengthenings on by default (``docs/cpsat.md`` measures each)
FEATURES = DEFAULT_MODEL_FEATURES | {"heuristic_hint", "linearization2", "windows"}


def feature_option(value) -> frozenset:
    """The ``features`` option: ``None`` (the defaults), a list of names or a comma-separated
    string (``""`` or ``[]`` for none)."""
    if value is None:
        return FEATURES
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple, set, frozenset)) or \
            not all(isinstance(n, str) for n in names):
        raise OptionError(f"option 'features' of cpsat: must be a list of names, got {value!r:.40}")
    names = {n.strip() for n in names if n.strip()}
    if unknown := sorted(names - set(ALL_FEATURES)):
        raise OptionError(f"option 'features' of cpsat: unknown feature {unknown[0]!r}; "
                          f"known: {', '.join(ALL_FEATURES)}")
    return frozenset(names)


#: suffixes ``write_model`` accepts: protobuf text, or binary with ``.pb``
MODEL_SUFFIXES = {".pbtxt": "text", ".txt": "text", ".pb": "binary"}


def model_path(value) -> Path | None:
    """The ``write_model`` option as a path (``None`` stays ``None``), else OptionError."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(value):
        raise OptionError(f"option 'write_model' of cpsat: must be a file name, got {value!r:.40}")
    path = Path(value)
    if path.suffix.lower() not in MODEL_SUFFIXES:
        raise OptionError(
            f"option 'write_model' of cpsat: {str(value)!r:.80} must end in "
            f"{', '.join(MODEL_SUFFIXES)} (CP-SAT protobuf text, or binary for .pb); "
            f"the ILPs write .lp and .mps")
    if path.is_dir():
        raise OptionError(f"option 'write_model' of cpsat: {str(value)!r:.80} is a directory")
    return path


def _not_written(path: Path | None) -> str:
    """What a message adds when ``write_model`` was asked but no model was built."""
    return "" if path is None else f"; no model was built, {str(path)!r} not written"


def write_model_file(model, path: Path) -> None:
    """``model`` as a ``CpModelProto`` in ``path`` (text, or binary for ``.pb``), atomically.

    OR-Tools writes text when the file name ends in ``txt``: the model goes to a
    temporary name with the target's kind of suffix, then :func:`~chainpipe.io.atomic_write`
    renames it into place.
    """
    suffix = ".pbtxt" if MODEL_SUFFIXES[path.suffix.lower()] == "text" else ".pb"

    def write(tmp):
        staged = Path(f"{tmp}{suffix}")
        try:
            if not model.export_to_file(str(staged)):
                raise OSError(f"cannot write {path}")
            os.replace(staged, tmp)
        finally:
            staged.unlink(missing_ok=True)

    atomic_write(path, write)


class _Stop(Exception):
    """A final outcome found in the middle of the search (infeasible, invalid model)."""

    def __init__(self, outcome: Outcome):
        self.outcome = outcome


class _Search:
    """One CP-SAT solve: the scaling plan, the rounds, the best plan and bound so far."""

    def __init__(self, tables: CostTables, deadline: Deadline, seed: int, threads: int, log,
                 model_file: Path | None = None, features=FEATURES):
        self.tables, self.instance = tables, tables.instance
        self.model_file, self.features = model_file, features
        self.deadline, self.seed, self.threads, self.log = deadline, seed, threads, log
        self.stats: dict = {"num_workers": threads, "seed": seed, "features": sorted(features),
                            "rounds": [], "trace": []}
        self.lock = threading.Lock()
        self.best_T, self.best_plan = math.inf, None
        self.bound = max(0.0, float(tables.lower_bound))
        self.scale_plan, self.scale_T, self.ub_source = None, math.inf, None
        self.hint_plan = None
        self.note = None
        #: ``run``'s ``cutoff``; :attr:`cut` once it pruned the model below the scale plan
        self.cutoff, self.cut = None, False
        #: the outer enumeration's open windows per block and ``M_p`` (``None``: not kept)
        self.resume = None
        self.record()

    # ------------------------------------------------------------------ bookkeeping
    def record(self) -> None:
        """Append ``[seconds, incumbent, bound]`` to the trace (caller holds the lock)."""
        inc = self.best_T if self.best_plan is not None else None
        self.stats["trace"].append([self.deadline.elapsed(), inc, self.bound])
        report(inc, self.bound)

    def offer(self, built: CpsatModel, values) -> None:
        """Decode a solution; keep it if its exact time beats the incumbent (holds lock)."""
        plan = built.decode(values)
        ev = evaluate(self.instance, plan)
        if not ev.feasible:
            raise RuntimeError(f"cpsat decoded an infeasible plan: {ev.violations[0]}")
        if ev.iteration_time_s < self.best_T:
            self.best_T, self.best_plan = ev.iteration_time_s, plan
        self.record()

    def raise_bound(self, bound: float) -> None:
        if self.cut:  # the model holds the plans up to the cutoff only
            bound = min(bound, self.cutoff)
        with self.lock:
            if bound > self.bound:
                self.bound = bound
                self.record()

    # ------------------------------------------------------------------ scaling
    def set_scale(self, hint) -> None:
        """The plan (heuristic or hint) whose time sets the unit, or a bound on every plan."""
        self.scale_plan, self.scale_T, self.ub_source = heuristic_plan(self.tables, self.deadline)
        if hint is not None:
            self.hint_plan, info = _hint_plan(self.instance, hint, self.deadline)
            self.stats["hint"] = info
            if self.hint_plan is not None and info["iteration_time_s"] < self.scale_T:
                self.scale_plan, self.scale_T = self.hint_plan, info["iteration_time_s"]
                self.ub_source = "hint"
        if self.scale_plan is None:
            self.upper, self.prune = math.inf, False
            self.ub_source = "coefficient range"
        else:
            self.upper, self.prune = self.scale_T, True
        if self.cutoff is not None and self.cutoff < self.upper:
            self.upper, self.prune, self.cut = self.cutoff, True, True
            self.stats["cutoff_s"] = self.cutoff
        self.stats["upper_bound_source"] = self.ub_source
        self.stats["scaling_plan_time_s"] = None if self.scale_plan is None else self.scale_T
        if self.scale_plan is not None:
            report(self.scale_T, None)  # a plan the result falls back to: the first incumbent

    # ------------------------------------------------------------------ rounds
    def rounds(self, max_rounds: int) -> None:
        """Solve, refining the unit while rounding hides the last bit of the gap (or by
        windows of the period, :meth:`windowed`)."""
        if self.windowed() and self.by_windows():
            return
        for rnd in range(max_rounds):
            if self.deadline.expired():
                return
            built = self.build(rnd)
            self.deadline.check()
            if not self.solve(built):
                return  # stopped by the limit: the bound stands as it is
            T = self.best_T
            if T - self.bound <= OPTIMALITY_RTOL * T:
                return
            if self.upper * (1 - 1e-12) <= T:
                self.note = "scaled optimum proven, rounding gap above tolerance"
                return
            self.upper, self.prune = T, True

    def build(self, rnd: int) -> CpsatModel:
        """The model of round ``rnd``, hinted with the hint or the incumbent."""
        start = self.deadline.elapsed()
        # overflowing times are +inf (their arcs are dropped), never a warning
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            built = CpsatModel.build(self.tables, self.upper if self.prune else None,
                                     check=self.deadline.check,
                                     features=self.features & set(MODEL_FEATURES))
        if not self.prune:
            self.upper = built.upper_bound
            if not math.isfinite(self.upper):
                raise _Stop(Outcome("error", stats=self.stats, message=(
                    "cpsat: the instance's numbers are out of range (every plan's time "
                    "overflows a float)")))
        hinted = None
        if rnd == 0 and self.hint_plan is not None:
            hinted = built.hint(self.hint_plan)
            self.stats["hint"]["accepted"] = hinted
        elif rnd == 0 and self.prune and not self.cut and "heuristic_hint" in self.features:
            hinted = built.hint(self.scale_plan)
        elif rnd > 0 and self.best_plan is not None:
            hinted = built.hint(self.best_plan)  # refinement round: start from the incumbent
        self.stats["rounds"].append({
            "upper_bound_s": self.upper, "unit_s": built.unit, "stage_arcs": len(built.x_vars),
            "boundary_arcs": len(built.y_vars), "candidate_stages": built.arcs.total,
            "constraints": len(built.model.proto.constraints),
            "rounded_terms": built.rounded_terms,
            "max_rounding_error_s": built.rounded_terms * built.unit,
            "build_time_s": self.deadline.elapsed() - start, "hinted": hinted,
        })
        proto = built.model.proto  # the model's size (the benchmark's vars / cons)
        self.stats.update(variables=len(proto.variables), constraints=len(proto.constraints))
        if rnd == 0 and self.model_file is not None:
            write_model_file(built.model, self.model_file)
            self.stats["model_file"] = str(self.model_file)
        return built

    def solve(self, built: CpsatModel) -> bool:
        """Run CP-SAT on ``built``; ``True`` when it proved the scaled optimum."""
        solver = self._solver(built)
        stop_at = None if self.deadline.unlimited else self.deadline.at
        status = run_stoppable(lambda: solver.solve(built.model, self._incumbents(built)),
                               solver.stop_search, name="cpsat", stop_at=stop_at)
        name = solver.status_name(status)
        self.stats["rounds"][-1].update(status=name, wall_time_s=solver.wall_time,
                                        conflicts=solver.num_conflicts,
                                        branches=solver.num_branches)
        if name in ("OPTIMAL", "FEASIBLE"):
            self.stats["rounds"][-1].update(objective=solver.objective_value,
                                            scaled_bound=solver.best_objective_bound)
            with self.lock:
                self.offer(built, list(solver.response_proto.solution))
            self.raise_bound(built.true_bound(solver.best_objective_bound))
        if name == "MODEL_INVALID":
            raise _Stop(Outcome("error", stats=self.stats,
                                message="CP-SAT rejected the model: " + solver.solution_info()))
        if name == "INFEASIBLE" and self.cut:  # no plan up to the cutoff
            self.raise_bound(self.cutoff)
            self.note = f"no plan faster than the cutoff ({self.cutoff:.6g} s)"
            return False
        if name == "INFEASIBLE":
            if self.prune:  # the scaling plan is a path of the model: this cannot be
                raise _Stop(Outcome("error", stats=self.stats, message=(
                    "CP-SAT called the model infeasible although it holds a known plan")))
            raise _Stop(Outcome("infeasible", stats=self.stats, message=(
                "no chain-ordered plan satisfies the memory limits and device counts "
                "(CP-SAT proved the exact model infeasible)")))
        return name == "OPTIMAL"

    def _solver(self, built: CpsatModel, deadline: Deadline | None = None, whole=True):
        """A CP-SAT solver with this search's parameters and ``deadline`` (default the
        search's); ``whole``: its bound is the model's, fed to :meth:`raise_bound` as it
        rises (not for a window of the period, whose bound holds for its plans only)."""
        solver = cp_solver(deadline or self.deadline, self.seed, self.threads, self.log,
                           self.features)
        if whole:
            solver.best_bound_callback = \
                lambda scaled: self.raise_bound(built.true_bound(scaled))
        return solver

    # ------------------------------------------------------------------ windows
    def windowed(self) -> bool:
        """Whether the model is solved by windows of the period (:class:`_Windows`):
        ``windows`` on, 1F1B's period with ``M > 1``, an upper bound (the heuristic plan
        or a cutoff), at least :data:`WINDOW_DCS` datacenters."""
        t = self.tables
        return ("windows" in self.features and self.prune and t.M > 1
                and period_mode(t) == "1f1b" and t.K >= WINDOW_DCS)

    def by_windows(self) -> bool:
        """Solve by windows of the period; ``False`` (nothing done) when the arc-flow
        network that prunes them is too large. The bound holds for the plans no slower
        than the upper bound (the heuristic plan's ``T``, or the cutoff)."""
        from ..formulations.ilp_flow import FlowFormulation, ModelTooLarge

        key = (tuple(dc.name for dc in self.instance.datacenters), self.tables.M)
        state = None if self.resume is None else self.resume.pop(key, None)
        if state is not None and self.upper <= state.form.upper_bound * (1 + 1e-12):
            state.search = self  # a former solve's open windows, gone on with
            state.resume(None, self.deadline, self.upper)
        else:
            state = None
            try:
                form = FlowFormulation(self.tables, check=self.deadline.check,
                                       upper_bound=self.upper, exits=False,
                                       max_columns=WINDOW_COLUMNS)
            except ModelTooLarge:
                return False
        if not self.cut:  # the heuristic plan is the incumbent the windows must beat
            with self.lock:
                self.best_T, self.best_plan = self.scale_T, self.scale_plan
                self.record()
        if state is None and not form.n_arcs:  # no plan no slower than the upper bound
            self.raise_bound(self.upper)
            return True
        state = state or _Windows(self, form)
        res = state.run()
        self.stats["period_windows"] = dict(res.stats)
        if not res.closed and self.resume is not None:
            self.resume[key] = state
            self.stats["resumable"] = True
        if res.plan is not None:
            with self.lock:
                self.offer_plan(res.plan)
        self.raise_bound(res.bound)
        if res.closed and self.cut and self.best_T > self.cutoff:
            self.note = f"no plan faster than the cutoff ({self.cutoff:.6g} s)"
        return True

    def solve_window(self, g, upper: float, deadline: Deadline):
        """CP-SAT on the window ``g`` (a period window of the arc-flow network) with the
        upper bound ``upper``: ``(plan or None, bound, closed)``, ``bound`` (seconds) on
        the window's plans no slower than ``upper`` (``upper`` itself when it has none),
        ``closed`` when CP-SAT proved the window (optimal or infeasible)."""
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            built = CpsatModel.build(self.tables, upper, check=deadline.check,
                                     features=self.features & set(MODEL_FEATURES), window=g)
        if not len(built.x_vars):
            return None, upper, True
        solver = self._solver(built, deadline, whole=False)
        status = run_stoppable(lambda: solver.solve(built.model, self._incumbents(built)),
                               solver.stop_search, name="cpsat",
                               stop_at=None if deadline.unlimited else deadline.at)
        name = solver.status_name(status)
        if name == "INFEASIBLE":
            return None, upper, True
        if name == "MODEL_INVALID":
            raise _Stop(Outcome("error", stats=self.stats,
                                message="CP-SAT rejected the model: " + solver.solution_info()))
        plan = None
        if name in ("OPTIMAL", "FEASIBLE"):
            plan = built.decode(list(solver.response_proto.solution))
        return plan, built.true_bound(solver.best_objective_bound), name == "OPTIMAL"

    def offer_plan(self, plan: Plan) -> None:
        """Keep ``plan`` if its exact time beats the incumbent (caller holds the lock)."""
        ev = evaluate(self.instance, plan)
        if ev.feasible and ev.iteration_time_s < self.best_T:
            self.best_T, self.best_plan = ev.iteration_time_s, plan
            self.record()

    def _incumbents(self, built: CpsatModel):
        from ortools.sat.python import cp_model

        search = self

        class Incumbents(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self):
                values = list(self.response_proto.solution)
                with search.lock:
                    search.offer(built, values)

        return Incumbents()

    # ------------------------------------------------------------------ answer
    def outcome(self) -> Outcome:
        """The outcome: CP-SAT's best plan, else the scaling plan, else none (its message
        says so when ``write_model`` was asked and no model was built)."""
        out = self._outcome()
        if self.model_file is not None and "model_file" not in self.stats:
            out = dataclasses.replace(out, message=(out.message or "the model was not built")
                                      + _not_written(self.model_file))
        return out

    def _outcome(self) -> Outcome:
        stats, bound = self.stats, self.bound
        stats["solve_time_s"] = self.deadline.elapsed()
        plan, T = self.best_plan, self.best_T
        if plan is None:
            if self.scale_plan is not None:
                stats["plan_source"] = self.ub_source
                return Outcome("feasible", plan=self.scale_plan, stats=stats,
                               lower_bound=min(bound, self.scale_T), message=(
                                   (self.note or "CP-SAT found no plan in the limit")
                                   + f"; the plan is the {self.ub_source} plan that set the "
                                   "time unit"))
            return Outcome("no_solution", lower_bound=bound, stats=stats,
                           message=self.note or "time limit reached before CP-SAT found a plan")
        stats["plan_source"] = "cpsat"
        if T - bound <= OPTIMALITY_RTOL * T:
            return Outcome("optimal", plan=plan, lower_bound=min(bound, T), stats=stats)
        return Outcome("feasible", plan=plan, lower_bound=min(bound, T), stats=stats,
                       message=self.note or "time limit reached before optimality was proven")


#: windows of the period (``windows``) for one-pipeline models of at least this many DCs
WINDOW_DCS = 2
#: ... and an arc-flow network of at most this many stage columns (else the whole model)
WINDOW_COLUMNS = 200_000
#: a window is solved by CP-SAT once at most this wide (relative, in ``lambda``)
WINDOW_WIDTH = 0.01
#: the first CPU seconds of a window's CP-SAT solve (doubled when it is taken again)
WINDOW_SLICE_S = 2.0


class _Windows(PeriodWindows):
    """The decomposition on the period of :mod:`chainpipe.formulations.flow_windows`,
    each window a CP-SAT model (:meth:`_Search.solve_window`) instead of a MIP.

    The period's range is cut into windows, each pruned and keyed by the arc-flow
    network's whole-path and loop bounds for its period (no solve); the open window of
    least key is taken next, split while wider than :data:`WINDOW_WIDTH`, then solved by
    CP-SAT with ``z`` in the window and only the options the window's network keeps.
    The bound is the least key of the open windows (and of those closed by key or by
    CP-SAT's proof), so ``bound <= optimum <= T`` at any stop."""

    def __init__(self, search: _Search, form):
        super().__init__(form, None, search.deadline, width=WINDOW_WIDTH,
                         slice_s=WINDOW_SLICE_S, floor=form.cheap_bound,
                         plan=search.best_plan, plan_T=search.best_T)
        self.search = search
        self.stats.update(cpsat_solves=0, cpsat_cpu_s=0.0, proven=0)

    def _solve(self, w: Window, g) -> None:
        """Solve ``w`` (its network ``g`` keyed and narrow enough) with CP-SAT; a proven
        window closes with its bound, an unproven one goes back (:meth:`_requeue`)."""
        self.deadline.check()
        t0 = time.process_time()
        plan, bound, proven = self.search.solve_window(g, self.best_T,
                                                       CpuPhase(self.deadline, w.slice_s))
        self.stats["cpsat_solves"] += 1
        self.stats["cpsat_cpu_s"] += time.process_time() - t0
        if plan is not None:
            T = float(evaluate(self.form.tables.instance, plan).iteration_time_s)
            if T < self.best_T:
                self.best_T, self.best_plan = T, plan
        key = max(w.key, g.cheap_bound, bound)
        if proven:  # CP-SAT proved the window: its bound holds, nothing is left in it
            self.stats["proven"] += 1
            self.closed_key = min(self.closed_key, key)
            return
        self._requeue(w, key)

def heuristic_plan(tables: CostTables, deadline: Deadline):
    """The best plan of the cheap heuristics, its time and its source.

    The backward greedy (``d = t = 1`` stages; skipped when the instance does not allow
    them) and the ``metis`` baseline (per-type ``d x t`` shapes, layers balanced by
    throughput). Neither knows the optimum; ``(None, inf, None)`` if neither finds a plan.
    """
    from .baselines.balanced import metis

    best, best_T, source = None, math.inf, None
    par = tables.parallelism
    if 1 in tables.instance.training.data_parallel_widths and 1 in par.tensor_parallel:
        best, best_T = best_greedy_plan(tables)
        source = "greedy" if best is not None else None
    out = metis(tables.instance, deadline=deadline)
    if out.plan is not None:
        ev = evaluate(tables.instance, out.plan)
        if ev.feasible and ev.iteration_time_s < best_T:
            best, best_T, source = out.plan, ev.iteration_time_s, "metis"
    return best, best_T, source


def _hint_plan(instance, hint, deadline: Deadline):
    """The hint plan and what to record about it."""
    if isinstance(hint, Plan):
        plan, source = hint, "plan"
    elif hint == "dp":
        from .dp import run as dp_run

        plan, source = dp_run(instance, deadline=deadline).plan, "dp"
    else:
        raise ValueError(f"cpsat: hint must be None, 'dp' or a Plan, not {hint!r}")
    if plan is None:
        return None, {"source": source, "iteration_time_s": None}
    ev = evaluate(instance, plan)
    if not ev.feasible:
        raise ValueError(f"cpsat: the hint plan is infeasible: {ev.violations[0]}")
    return plan, {"source": source, "iteration_time_s": ev.iteration_time_s}
