"""Run the two ILP formulations with HiGHS (default) or CBC.

``run_assign`` / ``run_path`` have the registry signature ``run(instance, *,
deadline, seed, threads, log, **options) -> Outcome``. Options:

- ``backend``: ``"highs"`` (default; in-process, :mod:`chainpipe.solvers.highs`, so the
  MIP status and dual bound are read from HiGHS itself) or ``"cbc"`` (the CBC binary
  PuLP bundles, run as a child process by :mod:`chainpipe.solvers.cbc`; its status and
  bound are parsed from its log);
- ``relax``: solve the LP relaxation only and report its value as ``lower_bound``
  (status ``no_solution``; the formulation study's LP bound);
- ``msg``: send the backend's log to standard error when no ``log`` is given;
- ``bottleneck`` (``ilp-path`` only): ``"auto"``, ``"layer"`` or ``"node"`` rows;
- ``dominance`` (``ilp-path`` only, default on): drop stage options another option of the
  same stage dominates (no more devices, no larger ``C`` nor ``R``);
- ``start`` (``ilp-path`` only, default on; HiGHS): a MIP start from the best plan of the
  cheap heuristics (:mod:`chainpipe.solvers.incumbent`, never the DP);
- ``prune`` (``ilp-path`` only, default on): drop the stage and boundary arcs no plan as
  fast as that heuristic plan can use;
- ``device_states`` (``ilp-path`` only, default off): the arc-flow network of
  :mod:`chainpipe.formulations.ilp_flow`, whose nodes carry the devices used in the
  current datacenter, pruned by whole-path bounds from the heuristic plan; every
  period (classic, GPipe's two phases, 1F1B's loops by node potentials) and, through
  the outer enumeration below, several pipelines; no ``write_model``; ``start`` maps
  the heuristic plan onto the network's columns (not under 1F1B's period);
  ``bottleneck`` and ``dominance`` do not apply; a one-DC 1F1B model of 2000 stage
  columns or more whose root LP is over 5 % below the upper bound is solved by windows
  of its period, best first (:mod:`chainpipe.formulations.flow_windows`), and so is
  such a network of a level of the joint model of several pipelines
  (:func:`_level_windows`; its root LP gets 2 CPU s);
- ``cutoff`` (``ilp-path`` only, seconds): what the caller needs to know is a plan
  faster than this or a proof that there is none; the network is pruned with it as the
  upper bound (below the heuristic plan's time), and the reported bound is at most it
  (the outer enumeration of several pipelines passes ``incumbent - R_X / H``);
- ``write_model``: a file to write the built MIP to, as CPLEX LP (``.lp``) or MPS
  (``.mps``) by its suffix, with PuLP's named variables, atomically (before the solve, so
  it is there even when the solve runs out of time); another solver (Gurobi, SCIP,
  HiGHS) can read it. Its objective is ``T`` divided by ``stats["time_scale_s"]``.

Several pipelines (contract version 3, ``pipelines`` other than ``[1]``): the outer
choice -- DC blocks and microbatch shares ``M_p`` -- is enumerated around one-pipeline
models of the same formulation (:mod:`chainpipe.formulations.pipelines`): each block and
``M_p`` is solved alone, and a joint model of the entry's pipelines (``T_max >= T_p``,
``R_max >= R_p``) only when the blocks' optimal plans do not meet the entry's bound. The
whole enumeration counts against the time limit; the bound is the least over entries of
what is proven of each, ``optimal`` only when it meets the plan's ``T``. ``relax`` and
``write_model`` apply to one pipeline only.

The time limit covers the whole solve: the formulation checks the deadline while it
builds the model and while it is turned into arrays; the backend gets what is left
(never 0). A run that runs out while building returns the best greedy plan
(``feasible``) or ``no_solution``, with a message saying so.

Status honesty: ``optimal`` only when the solver itself reports the gap closed
(``mip_rel_gap = 0``, absolute gap 1e-6 on an objective of at least 1e3); a run stopped by
its time limit with an incumbent is ``feasible`` with the solver's bound; without
an incumbent ``no_solution`` with that bound. Every bound is the solver's dual
bound times the time scale, lowered by ``BOUND_RTOL`` (1e-7 relative) to cover
floating-point tolerances, and clamped to ``[0, T]``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..deadline import Deadline, TimeUp
from ..formulations.common import (
    OBJECTIVE_MAGNITUDE,
    CoefficientOverflow,
    safe_bound,
)
from ..formulations.ilp_flow import ModelTooLarge
from ..formulations.pipelines import (
    EARLY_SHARE,
    OuterSearch,
    heuristic_plan,
    merge_models,
    several,
    share,
)
from ..instance import Instance
from ..io import atomic_write
from ..numeric import OPTIMALITY_RTOL
from ..plan import Plan, evaluate
from ..progress import report
from ..result import OptionError, Outcome
from ..tables import CostTables
from .highs import solve_lp_bound
from .logs import stderr_log

BACKENDS = ("highs", "cbc")
#: largest coefficient magnitude handed to a backend (HiGHS refuses 1e15 and above)
MAX_COEFFICIENT = 1e15


#: model file formats ``write_model`` writes, by suffix
MODEL_SUFFIXES = (".lp", ".mps")
#: ``device_states``: seconds per LP probe of the bottleneck floor, and the share of the
#: time left all probes may take
PROBE_S = 2.0
PROBE_SHARE = 0.25
#: the flow-weighted loop LP (:func:`_loop_lp_first`) is solved for 1F1B models over this
#: many datacenters or more, with at least :data:`LOOP_LP_COLUMNS` stage columns, in at
#: most :data:`LOOP_LP_SHARE` of the time left
LOOP_LP_DCS = 3
LOOP_LP_COLUMNS = 2000
LOOP_LP_SHARE = 0.8
#: the interior point method's optimality tolerance for the loop LP (no crossover; the
#: bound is the Lagrangian one of its duals, valid at any tolerance)
LOOP_LP_TOLERANCE = 1e-6
#: HiGHS options of the arc-flow MIPs the outer enumeration of several pipelines solves
#: against its incumbent (the sub-solves under a cutoff, the levels of
#: :func:`_joint_by_sync`): their answer is mostly a proof that nothing is faster, so the
#: primal heuristics that search for plans at the root are off (branching still finds
#: them). ``v3-medium-03``'s one-pipeline entry: 23.6 CPU s with them, 13.4 without;
#: its DCs 1-3 with 47 microbatches 14.8 and 10.7; the whole of ``-02`` 76 and 62, of
#: ``-03`` 77 and 49 (``docs/formulations.md``, "Seventh round")
PROOF_OPTIONS = {"mip_heuristic_run_feasibility_jump": False, "mip_heuristic_run_rins": False,
                 "mip_heuristic_run_rens": False, "mip_heuristic_run_root_reduced_cost": False}
#: a twin pipeline's plan (:meth:`_SyncBlock._from_twin`) within this relative margin of
#: the proven bound is taken as this pipeline's optimum under the cap (the joint model's
#: value is then at most this much above the optimum, well inside ``OPTIMALITY_RTOL``)
TWIN_RTOL = 1e-7
#: :func:`_joint_by_sync` builds each level's model afresh, pruned by what the level must
#: beat (``True``), instead of fixing the shared model's columns above the cap to 0
LEVEL_MODELS = True
#: a level's network that the route would solve by windows of its period as a
#: one-pipeline model (one DC, 1F1B, 2 000 stage columns or more, root LP gap over 5 %)
#: is solved by them (:func:`_level_windows`): fresh ``v3-medium-02``-like seed 4's
#: two-type DC 0, first level, whole MIP 57 CPU s unproven (``docs/formulations.md``,
#: "Thirteenth round")
LEVEL_WINDOWS = True
#: CPU seconds of a level's root LP, which decides whether its windows are taken (a
#: level's network is pruned by ``T_p - max R`` alone, so it is larger than its block's
#: sub-solve's: seed 4's DC 0, 24 084 stage columns, LP unsolved after 10 CPU s, where the
#: windows then took 2 s)
LEVEL_ROOT_LP_S = 2.0
#: :func:`_joint_by_sync` searches the next cap by bisection (:func:`_cap_search`) when
#: one pipeline alone holds the largest ``R`` and is faster than the others' bound, with
#: at least :data:`CAP_SEARCH_MIN` of its option values between the others' ``R`` and the cap
CAP_SEARCH = True
CAP_SEARCH_MIN = 3
#: the strengthenings of the path ILP, each an on/off option (all on by default)
PATH_SWITCHES = ("dominance", "start", "prune")


def run_assign(instance: Instance, *, deadline: Deadline | None = None, seed: int = 0, log=None,
               threads: int = 1, write_model=None, **options) -> Outcome:
    """The assignment ILP (layers -> stage slots -> device groups)."""
    return _run("ilp-assign", instance, Deadline.of(deadline), seed, threads, log,
                dict(options, write_model=write_model))


def run_path(instance: Instance, *, deadline: Deadline | None = None, seed: int = 0, log=None,
             threads: int = 1, write_model=None, **options) -> Outcome:
    """The path ILP (candidate stages as arcs of a layered network)."""
    return _run("ilp-path", instance, Deadline.of(deadline), seed, threads, log,
                dict(options, write_model=write_model))


@dataclass(frozen=True)
class _Options:
    backend: str
    relax: bool
    msg: bool
    bottleneck: str
    write_model: Path | None
    dominance: bool = True
    start: bool = True
    prune: bool = True
    device_states: bool = False
    cutoff: float | None = None


def _options(name: str, options: dict) -> _Options:
    options = dict(options)
    backend = str(options.pop("backend", "highs")).lower()
    relax = _flag(options.pop("relax", False))
    msg = _flag(options.pop("msg", False))
    bottleneck = options.pop("bottleneck", "auto")
    write_model = _model_path(name, options.pop("write_model", None))
    switches = {key: _flag(options.pop(key, True)) for key in PATH_SWITCHES}
    states = _flag(options.pop("device_states", False))
    cutoff = options.pop("cutoff", None)
    cutoff = None if cutoff is None else float(cutoff)
    if cutoff is not None and (name != "ilp-path" or relax or math.isnan(cutoff)):
        raise OptionError(f"{name}: option 'cutoff' applies to the ilp-path MIP only")
    if backend not in BACKENDS:
        raise OptionError(f"{name}: unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if name == "ilp-assign" and bottleneck != "auto":
        raise OptionError(f"{name}: option 'bottleneck' applies to ilp-path only")
    if name == "ilp-assign" and not all(switches.values()):
        raise OptionError(f"{name}: options {', '.join(PATH_SWITCHES)} apply to ilp-path only")
    if name == "ilp-assign" and states:
        raise OptionError(f"{name}: option 'device_states' applies to ilp-path only")
    if states and write_model is not None:
        raise OptionError(f"{name}: option 'write_model' is not offered with device_states")
    if options:
        raise OptionError(f"{name}: unknown option(s) {', '.join(sorted(options))}")
    return _Options(backend, relax, msg, bottleneck, write_model, **switches,
                    device_states=states, cutoff=cutoff)


def _model_path(name: str, value) -> Path | None:
    """The ``write_model`` file, its suffix checked (``None``: no file)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise OptionError(f"{name}: option 'write_model' takes a file name ending in "
                          f"{' or '.join(MODEL_SUFFIXES)}, got {value!r}")
    path = Path(value)
    if path.suffix.lower() not in MODEL_SUFFIXES:
        raise OptionError(f"{name}: option 'write_model' writes {' or '.join(MODEL_SUFFIXES)} "
                          f"files (by the suffix); {value!r} has neither")
    if path.is_dir():
        raise OptionError(f"{name}: option 'write_model': {value!r} is a directory; "
                          "give a file name")
    return path


def write_model_file(problem, path: Path) -> Path:
    """Write a built PuLP ``problem`` to ``path`` as LP or MPS (by the suffix), atomically."""
    if path.suffix.lower() == ".mps":
        return atomic_write(path, lambda tmp: problem.writeMPS(str(tmp)))
    return atomic_write(path, lambda tmp: problem.writeLP(str(tmp)))


def _flag(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _run(name: str, instance: Instance, deadline: Deadline, seed, threads, log, options,
         resume: dict | None = None, hint=None) -> Outcome:
    opts = _options(name, options)
    if log is None and opts.msg:
        log = stderr_log
    if several(instance):
        return _run_pipelines(name, instance, deadline, seed, threads, log, options, opts)
    out = _run_one(name, instance, deadline, seed, threads, log, opts, resume, hint)
    return out if opts.cutoff is None else _cut(instance, out, opts.cutoff)


def _cut(instance: Instance, out: Outcome, cutoff: float) -> Outcome:
    """The outcome of a run with a ``cutoff``: the model held every plan no slower than
    it (and maybe others), so its bound holds for those plans alone. The optimum is then
    at least ``min(bound, cutoff)``; a model without a plan proves it at least
    ``cutoff``; ``optimal`` stands only for a plan no slower than the cutoff."""
    T = math.inf
    if out.plan is not None:
        T = float(evaluate(instance, out.plan).iteration_time_s)
    status = out.status.value
    if not out.stats.get("cutoff_applied") or status == "error" or (
            status == "optimal" and T <= cutoff * (1 + OPTIMALITY_RTOL)):
        return out
    stats = dict(out.stats, cutoff_s=cutoff)
    if status in ("infeasible", "optimal"):
        bound = cutoff  # no plan up to the cutoff (or the best one above it)
    else:
        bound = 0.0 if out.lower_bound is None else min(out.lower_bound, cutoff)
    bound = min(bound, T)
    if out.plan is None:
        return Outcome("no_solution", lower_bound=bound or None, stats=stats, message=(
            f"no plan faster than the cutoff ({cutoff:.6g} s)"
            if bound >= cutoff else out.message))
    status = "optimal" if T - bound <= OPTIMALITY_RTOL * T else "feasible"
    return Outcome(status, plan=out.plan, lower_bound=bound, stats=stats,
                   message=out.message)


def _objective_bound(model, form, opts: _Options, stats: dict) -> None:
    """Under a cutoff that pruned the model, HiGHS is told it as its ``objective_bound``
    (scaled, a relative 1e-7 above): nodes whose bound reaches it are pruned from the
    start, as an incumbent that fast would; if none is below it, HiGHS ends infeasible,
    which :func:`_cut` reads as no plan faster than the cutoff. The arc-flow model's
    sub-solves (any cutoff) run without HiGHS's root heuristics (:data:`PROOF_OPTIONS`)."""
    if stats.get("cutoff_applied") and opts.backend == "highs" and not model.offset:
        bound = opts.cutoff / form.scale * (1 + 1e-7)
        model.highs_options = dict(getattr(model, "highs_options", {}), objective_bound=bound)
    if opts.cutoff is not None and opts.device_states and opts.backend == "highs":
        model.highs_options = dict(getattr(model, "highs_options", {}), **PROOF_OPTIONS)


def _cut_bound(opts: _Options, stats: dict) -> float | None:
    """The bound an empty or infeasible pruned model proves: the cutoff when it pruned
    the model (no plan is as fast), else nothing (the heuristic plan's arcs stay)."""
    return opts.cutoff if stats.get("cutoff_applied") else None


def _run_one(name: str, instance: Instance, deadline: Deadline, seed, threads, log,
             opts: _Options, resume: dict | None = None, hint=None) -> Outcome:
    """One pipeline: the formulation built, pruned, solved and read back (``resume``:
    :func:`_run_windows`; ``hint``: :func:`_incumbent`'s)."""
    stats = {"formulation": name, "backend": opts.backend, "relax": opts.relax,
             "threads": threads, "seed": seed}
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason is not None:
        return Outcome("infeasible", message=reason, stats=stats)
    incumbent = _incumbent(name, instance, opts, deadline, stats, hint)
    t0 = deadline.elapsed()
    state = _resumable(resume, instance, opts, stats, incumbent)
    if state is not None:
        return _run_windows(state.form, opts, deadline, seed, threads, log, stats,
                            incumbent, resume, state)
    try:
        # coefficients that overflow become inf and are refused below, never a warning
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            form = _formulation(name, tables, opts, deadline, stats, incumbent)
            if form is None:  # nothing to solve: a model of size 0
                stats["build_time_s"] = deadline.elapsed() - t0
                return _empty_model(tables, opts, stats, incumbent)
            early = _before_the_mip(form, opts, deadline, seed, threads, log, stats,
                                    incumbent, resume, t0)
            if early is not None:
                return early
            if "root_lp" not in stats:  # else built by _root_gap_wide
                form.build()
            model = form.matrix()
            if incumbent is not None and opts.start:
                model.start = form.start(incumbent[0])
                stats["mip_start"] = model.start is not None
            _objective_bound(model, form, opts, stats)
        deadline.check()
    except TimeUp:
        stats["build_time_s"] = deadline.elapsed() - t0
        return _out_of_time_building(tables, deadline, stats, incumbent)
    except CoefficientOverflow as exc:
        stats["build_time_s"] = deadline.elapsed() - t0
        return _out_of_range(name, stats, str(exc))
    except ModelTooLarge as exc:
        stats["build_time_s"] = deadline.elapsed() - t0
        return Outcome("error", stats=stats, message=f"{name}: {exc}; run without it")
    stats["build_time_s"] = deadline.elapsed() - t0
    stats.update(model.stats())
    problem = model.out_of_range(MAX_COEFFICIENT)
    if problem is not None:
        return _out_of_range(name, stats, problem)
    stats["time_scale_s"] = form.scale
    if opts.write_model is not None:
        try:
            write_model_file(form.problem, opts.write_model)
        except OSError as exc:
            return Outcome("error", stats=stats, message=(
                f"{name}: cannot write the model to {str(opts.write_model)!r}: "
                f"{exc.strerror or exc}"))
        stats["model_file"] = str(opts.write_model)

    t1 = deadline.elapsed()
    try:
        if opts.device_states and not opts.relax:
            _floors_first(form, opts, deadline, seed, threads, log, stats)
        answer = _backend(opts.backend)(model, relax=opts.relax, deadline=deadline, seed=seed,
                                        threads=threads, log=log,
                                        on_bounds=_progress_in_seconds(form.scale))
    except TimeUp:  # CBC: writing the model file used up the limit
        stats["solve_time_s"] = deadline.elapsed() - t1
        return _out_of_time_building(tables, deadline, stats, incumbent)
    except RuntimeError as exc:  # the backend would not start, or refused the model
        stats["solve_time_s"] = deadline.elapsed() - t1
        return Outcome("error", message=f"{name} ({opts.backend}): {exc}".splitlines()[0],
                       stats=stats)
    stats["solve_time_s"] = deadline.elapsed() - t1
    stats["solver_status"] = answer.text
    if answer.values is not None:
        model.assign(answer.values)
    out = _raised(_outcome(form, answer, opts, stats, incumbent),
                  stats.get("loop_lp_bound_s"), instance)
    return _with_windows(out, form, stats, instance)


def _empty_model(tables: CostTables, opts: _Options, stats: dict, incumbent) -> Outcome:
    """The outcome when the pruned network is empty (a model of size 0)."""
    stats.update(variables=0, constraints=0, nonzeros=0)
    if incumbent is not None:  # only under a cutoff: the heuristic plan's arcs stay
        return _fallback(tables, _cut_bound(opts, stats), stats,
                         "the pruned network is empty", incumbent)
    return Outcome("infeasible", stats=stats, message=(
        "no chain of stages satisfies memory and device counts "
        "(every candidate stage arc was pre-filtered)"))


def _before_the_mip(form, opts: _Options, deadline: Deadline, seed, threads, log,
                    stats: dict, incumbent, resume, t0: float) -> Outcome | None:
    """``device_states``, before the whole model's MIP: the windows of the period when
    the model takes them (:func:`_windowed`, :func:`_root_gap_wide`; ``resume``: the
    outer enumeration's open windows per block and ``M_p``, which a later solve of the
    same block goes on with); on a model of several datacenters whose windows are pruned
    by their loop-feasible least paths (:func:`~chainpipe.formulations.flow_windows.
    excess_first`), the windows first for a share of the time when they close; the
    flow-weighted loop LP (:func:`_loop_lp_first`) when it settles the model; on a model
    of several datacenters whose root gap is wide (not windowed before), then the
    windows for a share of the time (:func:`_windows_first`) when they close; ``None``:
    the MIP is solved as before."""
    from ..formulations import flow_windows

    if _windowed(form, opts) and _root_gap_wide(form, opts, deadline, seed, threads, log,
                                                stats):
        stats["build_time_s"] = deadline.elapsed() - t0
        return _run_windows(form, opts, deadline, seed, threads, log, stats, incumbent,
                            resume)
    several = (max(flow_windows.FIRST_WINDOW_DCS, flow_windows.WINDOW_DCS + 1), math.inf)
    excess = _windowed(form, opts, several) and flow_windows.excess_first(form)
    if excess:
        out = _windows_first(form, opts, deadline, seed, threads, log, stats, incumbent, t0,
                             resume, flow_windows.EXCESS_WINDOW_SHARE)
        if out is not None:
            return out
    loop_lp = _loop_lp_first(form.tables, form, opts, deadline, seed, threads, log, stats)
    if loop_lp is not None and loop_lp >= form.upper_bound:
        stats["build_time_s"] = deadline.elapsed() - t0
        return _lp_settles(form.tables, form, opts, stats, incumbent)
    if not excess and "root_lp" not in stats and _windowed(form, opts, several) and \
            _root_gap_wide(form, opts, deadline, seed, threads, log, stats):
        return _windows_first(form, opts, deadline, seed, threads, log, stats, incumbent, t0,
                              resume)
    return None


def _windows_first(form, opts: _Options, deadline: Deadline, seed, threads, log,
                   stats: dict, incumbent, t0: float, resume: dict | None = None,
                   portion: float | None = None) -> Outcome | None:
    """A model of :data:`~chainpipe.formulations.flow_windows.FIRST_WINDOW_DCS`
    datacenters or more whose root gap is wide: the windows of its period for at most
    :data:`~chainpipe.formulations.flow_windows.FIRST_WINDOW_SHARE` of the time left
    (``portion``, when given, instead; CPU seconds under a CPU-time deadline,
    :func:`~chainpipe.formulations.pipelines.share`).
    Their outcome when every window closed (a proof); else ``None``, and the whole MIP
    runs as before, its outcome then raised by the windows' bound
    (``stats["windows_first"]``) and given their plan (``form.windows_plan``) when faster
    (:func:`_with_windows`; both bound every plan the model holds). Open windows are kept
    in ``resume`` (the outer enumeration's, as :func:`_run_windows` keeps them): a later
    solve of the same block and ``M_p`` goes on with them instead of stopping where this
    one did (fresh ``v3-medium-02``-like seed 8's four-DC entry: the enumeration's
    rounds ended with 56 of 120 CPU s left, ``docs/formulations.md``, "Seventeenth
    round")."""
    from ..formulations import flow_windows

    stats["build_time_s"] = deadline.elapsed() - t0
    if portion is None:
        portion = flow_windows.FIRST_WINDOW_SHARE
    part = share(deadline, deadline.remaining() * portion)
    try:
        out = _run_windows(form, opts, part, seed, threads, log, stats, incumbent, resume)
    except TimeUp:  # the part's end while a window's network was built
        deadline.check()
        stats["windows_first"] = {"bound_s": None}
        return None
    windows = stats["period_windows"]
    if windows["closed"] or deadline.expired():  # proven, or nothing left for the MIP
        return out
    stats.pop("plan_source", None)  # the MIP's outcome says its own
    stats["windows_first"] = {"bound_s": out.lower_bound}
    form.windows_plan = out.plan if windows["found_plan"] else None
    return None


def _with_windows(out: Outcome, form, stats: dict, instance) -> Outcome:
    """``out`` (the whole MIP's, after :func:`_windows_first` stopped) with the windows'
    plan when it is faster and their bound when higher."""
    first = stats.get("windows_first")
    if not first:
        return out
    plan = getattr(form, "windows_plan", None)
    if plan is not None:
        T = float(evaluate(instance, plan).iteration_time_s)
        mine = math.inf if out.plan is None else \
            float(evaluate(instance, out.plan).iteration_time_s)
        if T < mine:
            bound = out.lower_bound
            out = Outcome("feasible", plan=plan, stats=out.stats, message=out.message,
                          lower_bound=None if bound is None else min(bound, T))
    return _raised(out, first.get("bound_s"), instance)


def _windowed(form, opts: _Options, dcs: tuple | None = None) -> bool:
    """Whether the run takes the decomposition on the period
    (:mod:`~chainpipe.formulations.flow_windows`): ``device_states``, a MIP (not
    ``relax``), 1F1B's period with ``M > 1``, an upper bound (the heuristic plan's ``T``
    or a cutoff), a number of datacenters in ``dcs`` (``(least, most)``; default at most
    :data:`~chainpipe.formulations.flow_windows.WINDOW_DCS`) and
    :data:`~chainpipe.formulations.flow_windows.WINDOW_COLUMNS` stage columns or more
    (smaller models are solved whole)."""
    from ..formulations import flow_windows

    least, most = (0, flow_windows.WINDOW_DCS) if dcs is None else dcs
    return (opts.device_states and not opts.relax and form.upper_bound is not None
            and form.mode == "1f1b" and form.tables.M > 1
            and least <= form.tables.K <= most
            and form.n_arcs >= flow_windows.WINDOW_COLUMNS)


def _window_key(instance: Instance) -> tuple:
    """A block and ``M_p`` of the outer enumeration: its DCs' names and microbatches."""
    return tuple(dc.name for dc in instance.datacenters), instance.microbatches


def _resumable(resume: dict | None, instance: Instance, opts: _Options, stats: dict,
               incumbent):
    """The windows of the period a former solve of this block left open, when this
    solve's upper bound (the heuristic plan's ``T`` or the cutoff below it, as
    :func:`_formulation` takes it) is at most theirs; else ``None``."""
    if resume is None or not opts.device_states or opts.relax or incumbent is None:
        return None
    state = resume.get(_window_key(instance))
    upper = incumbent[1] if opts.prune else None
    if opts.cutoff is not None and (upper is None or opts.cutoff < upper):
        upper = opts.cutoff
    if state is None or upper is None or upper > state.form.upper_bound:
        return None
    if upper < incumbent[1]:
        stats["cutoff_applied"] = True
    stats["upper_bound_s"] = upper
    return state


def _run_windows(form, opts: _Options, deadline: Deadline, seed, threads, log, stats: dict,
                 incumbent, resume: dict | None = None, state=None) -> Outcome:
    """The arc-flow model solved by windows of its period, best first
    (:class:`~chainpipe.formulations.flow_windows.PeriodWindows`; ``state``: the windows
    a former solve left, gone on with): each window's MIP told the incumbent (HiGHS's
    ``objective_bound``, without root heuristics); ``optimal`` only when every window is
    closed. Under a cutoff, no plan found and every window closed proves none faster
    than the cutoff (:func:`_cut` reads the outcome). Open windows are kept in
    ``resume`` (``stats["resumable"]``)."""
    from ..formulations.flow_windows import PeriodWindows

    def solve(model, g, best, dl):
        if opts.backend == "highs":
            model.highs_options = dict(model.highs_options, **PROOF_OPTIONS,
                                       objective_bound=best / g.scale * (1 + 1e-7))
        return _backend(opts.backend)(model, relax=False, deadline=dl, seed=seed,
                                      threads=threads, log=log)

    t1 = deadline.elapsed()
    if state is None:
        root = stats.get("root_lp", {}).get("bound_s")  # none before the excess windows
        state = PeriodWindows(form, solve, deadline, floor=root or 0.0)
    else:
        state.resume(solve, deadline, stats.get("upper_bound_s", form.upper_bound))
    res = state.run()
    stats.update(time_scale_s=form.scale, period_windows=dict(
                     res.stats, closed=res.closed, found_plan=res.plan is not None),
                 solve_time_s=deadline.elapsed() - t1, stage_columns=int(form.n_arcs))
    stats.update(res.stats.get("largest_model", {}))
    if resume is not None:
        key = _window_key(form.tables.instance)
        resume.pop(key, None)
        if not res.closed:
            resume[key] = state
            stats["resumable"] = True
    if res.plan is not None:
        T = res.T
        return Outcome("optimal" if res.closed else "feasible", plan=res.plan,
                       lower_bound=min(res.bound, T), stats=stats, message=None if res.closed
                       else "stopped before every window of the period was closed")
    if res.closed and incumbent is not None and not stats.get("cutoff_applied"):
        plan, T, source = incumbent
        stats["plan_source"] = source
        return Outcome("optimal", plan=plan, lower_bound=min(res.bound, T), stats=stats,
                       message="every window of the period proves the heuristic plan "
                               "optimal")
    if res.closed and incumbent is None:
        return Outcome("infeasible", stats=stats, message=(
            "no window of the period holds a plan"))
    return _fallback(form.tables, res.bound, stats, "every window of the period closed "
                     "above the cutoff" if res.closed else "stopped before every window "
                     "of the period was closed", incumbent)


def _root_gap_wide(form, opts: _Options, deadline: Deadline, seed, threads, log,
                   stats: dict, limit_s: float | None = None) -> bool:
    """Whether a model :func:`_windowed` allows is solved by windows of its period: its
    LP relaxation (the whole model's, in at most ``limit_s`` CPU seconds, default
    :data:`~chainpipe.formulations.flow_windows.ROOT_LP_S`) is not solved,
    or is more than :data:`~chainpipe.formulations.flow_windows.WINDOW_GAP` below the
    model's upper bound (the 1F1B loops' potentials relaxed by a fractional flow, the
    windows' case). The model stays built (``form.model``); ``stats["root_lp"]``."""
    from ..formulations import flow_windows
    from ..formulations.pipelines import CpuPhase

    t0 = deadline.elapsed()
    model = form.build()
    limit_s = flow_windows.ROOT_LP_S if limit_s is None else limit_s
    share = limit_s if deadline.unlimited else min(limit_s, deadline.remaining() / 4)
    answer = _backend(opts.backend)(model, relax=True, deadline=CpuPhase(deadline, share),
                                    seed=seed, threads=threads, log=log)
    bound = safe_bound(answer.bound, form.scale) if answer.status == "relaxed" else None
    wide = answer.status != "infeasible" and (
        bound is None or bound < form.upper_bound * (1 - flow_windows.WINDOW_GAP))
    stats["root_lp"] = {"status": answer.status, "bound_s": bound, "windows": wide,
                        "time_s": deadline.elapsed() - t0}
    return wide


def _loop_lp_first(tables: CostTables, form, opts: _Options, deadline: Deadline, seed,
                   threads, log, stats: dict) -> float | None:
    """``device_states`` under 1F1B's period, HiGHS, a model over :data:`LOOP_LP_DCS`
    datacenters or more with :data:`LOOP_LP_COLUMNS` stage columns and an upper bound:
    the LP relaxation of the model with the flow-weighted loop rows
    (:meth:`~chainpipe.formulations.ilp_flow.FlowFormulation._flow_loop_rows`; the
    network without the exit copies, which the rows make redundant), solved by HiGHS's
    interior point method (the dual simplex stalls on it), in at most
    :data:`LOOP_LP_SHARE` of the time left. Its value (seconds) bounds every plan the
    model holds, i.e. every plan no slower than ``form.upper_bound``; ``None`` when not
    solved. The MIP itself runs on the model without these rows."""
    if not (opts.device_states and opts.backend == "highs" and not opts.relax
            and form.upper_bound is not None and tables.K >= LOOP_LP_DCS
            and form.n_arcs >= LOOP_LP_COLUMNS and form.flow_loops_apply()):
        return None
    from ..formulations.ilp_flow import FlowFormulation

    t0 = deadline.elapsed()
    lean = FlowFormulation(tables, check=deadline.check, upper_bound=form.upper_bound,
                           exits=False)
    if not lean.n_arcs:
        return None
    model = lean.build(flow_loops=True)
    budget = share(deadline, deadline.remaining() * LOOP_LP_SHARE)
    # given up once the interior point method shows the LP below the upper bound: then
    # its bound cannot settle the solve, and the MIP has the time
    give_up = form.upper_bound / lean.scale if not getattr(model, "offset", 0.0) else None
    scaled, text = solve_lp_bound(model, deadline=budget, seed=seed, threads=threads,
                                  log=log, tolerance=LOOP_LP_TOLERANCE, give_up_below=give_up)
    bound = None
    if scaled is not None:
        bound = math.inf if math.isinf(scaled) else \
            max(0.0, safe_bound(scaled, lean.scale) or 0.0)
    stats["loop_lp"] = {"time_s": deadline.elapsed() - t0, "bound_s": bound,
                        "stage_columns": int(lean.n_arcs), "status": text,
                        "size": model.stats()}
    if bound is not None and math.isfinite(bound):
        stats["loop_lp_bound_s"] = bound
    return bound


def _lp_settles(tables: CostTables, form, opts: _Options, stats: dict, incumbent) -> Outcome:
    """The loop LP reached the model's upper bound: no plan is faster than it. Under a
    cutoff that is the answer (:func:`_run` reads it); else the upper bound is the
    heuristic plan's ``T``, which is then optimal. The size reported is the loop LP's
    (the only model solved)."""
    stats.update(stats["loop_lp"]["size"])
    if stats.get("cutoff_applied") or incumbent is None:
        return _fallback(tables, _cut_bound(opts, stats), stats,
                         "the flow-weighted loop LP proves no plan faster than the cutoff",
                         incumbent)
    plan, T, source = incumbent
    stats["plan_source"] = source
    return Outcome("optimal", plan=plan, lower_bound=float(T), stats=stats,
                   message="the flow-weighted loop LP proves the heuristic plan optimal")


def _raised(out: Outcome, bound: float | None, instance) -> Outcome:
    """``out`` with its lower bound raised to ``bound`` (a proven one, the loop LP's) and
    clamped to the plan's ``T``; ``optimal`` when it then meets ``T``."""
    if not bound or out.status.value not in ("feasible", "optimal", "no_solution"):
        return out
    if out.lower_bound is not None and out.lower_bound >= bound:
        return out
    if out.plan is None:
        return dataclasses.replace(out, lower_bound=bound)
    T = float(evaluate(instance, out.plan).iteration_time_s)
    bound = min(bound, T)
    status = "optimal" if T - bound <= OPTIMALITY_RTOL * T else out.status.value
    return dataclasses.replace(out, status=status, lower_bound=bound)


def _incumbent(name: str, instance: Instance, opts: _Options, deadline: Deadline,
               stats: dict, hint=None):
    """The path ILP's heuristic plan ``(plan, T, source)`` when ``start`` or ``prune`` is
    on (:func:`~chainpipe.formulations.pipelines.heuristic_plan`: the cheap heuristics,
    their share in CPU seconds under a CPU-time limit), else ``None``; ``hint`` (a
    ``(plan, T)`` of this instance, :func:`_earlier_plan`) instead when it is faster."""
    if name != "ilp-path" or not (opts.start or opts.prune):
        return None
    t0 = deadline.elapsed()
    incumbent = heuristic_plan(instance, deadline)
    stats["heuristic_time_s"] = deadline.elapsed() - t0
    if hint is not None and hint[1] < incumbent[1]:
        stats["hint_T_s"] = hint[1]
        incumbent = (hint[0], hint[1], "an earlier sub-solve's plan")
    if incumbent[0] is None:
        return None
    stats["heuristic"], stats["heuristic_T_s"] = incumbent[2], incumbent[1]
    report(incumbent[1], None)
    return incumbent


def _floors_first(form, opts: _Options, deadline: Deadline, seed, threads, log,
                  stats: dict) -> None:
    """``device_states``, before the MIP: floors on the bottleneck ``B`` and the
    synchronisation ``S`` from LP probes (:func:`_probe_floor`), together at most
    :data:`PROBE_SHARE` of the time left. Not under a cutoff (the outer enumeration's
    sub-solves): there the probes took half of a single-DC sub-solve's time
    (``v3-medium-02``'s DC 1 with 17 microbatches: 3.31 CPU s with them, 1.58 without,
    both proven) and did not speed up the larger ones."""
    if opts.cutoff is not None:
        return
    budget = None if deadline.unlimited else share(deadline, deadline.remaining() * PROBE_SHARE)
    phase = {}
    for which in form.maxima():
        t0 = deadline.elapsed()
        floor, probes = _probe_floor(form, which, opts, budget, seed, threads, log)
        if floor is not None:
            form.floor_max(which, floor)
        phase[which] = {"probes": probes, "time_s": deadline.elapsed() - t0, "floor_s": floor}
    stats["floor_phase"] = phase


def _probe_floor(form, which: str, opts: _Options, budget: Deadline | None, seed, threads,
                 log) -> tuple[float | None, int]:
    """A proven floor on the maximum ``which`` (``"B"`` or ``"S"``) and the probes made.

    Every plan's ``B`` (``S``) is one of ``form.max_values(which)``. The LP relaxation of
    the model without the columns above a cap ``v`` (``form.capped_model``) holds every
    plan whose maximum is ``<= v``; when the backend proves it infeasible no plan has one,
    nor one below ``v`` (a restriction of an infeasible LP is infeasible). Galloping up
    from the least value, then bisecting, finds the largest such probed ``v``; the floor
    is the next value. A probe gets at most :data:`PROBE_S` seconds (and what is left of
    ``budget``); a probe not proven infeasible counts as feasible: the floor rests on
    proofs only.
    """
    values = form.max_values(which)
    probes = []

    def infeasible(k: int) -> bool:
        left = PROBE_S if budget is None else min(PROBE_S, budget.remaining())
        if left <= 0.01:
            return False
        probe = share(budget, left) if budget is not None else Deadline(left)
        answer = _backend(opts.backend)(form.capped_model(which, float(values[k])),
                                        relax=True, deadline=probe, seed=seed,
                                        threads=threads, log=log)
        probes.append(answer.status)
        return answer.status == "infeasible"

    bad, good, step = -1, len(values), 1
    while bad + step < good and infeasible(bad + step):
        bad, step = bad + step, step * 2
    good = min(good, bad + step)
    while good - bad > 1:
        mid = (bad + good) // 2
        bad, good = (mid, good) if infeasible(mid) else (bad, mid)
    floor = float(values[bad + 1]) if 0 <= bad < len(values) - 1 else None
    return floor, len(probes)


def _run_pipelines(name: str, instance: Instance, deadline: Deadline, seed, threads, log,
                   options: dict, opts: _Options) -> Outcome:
    """Several pipelines: the outer enumeration around this formulation's one-pipeline
    models (:class:`~chainpipe.formulations.pipelines.OuterSearch`)."""
    if opts.relax or opts.write_model is not None:
        raise OptionError(f"{name}: options 'relax' and 'write_model' apply to instances of "
                          "one pipeline ('pipelines': [1]); this one allows "
                          f"{list(instance.parallelism.pipelines)}")

    resume = {}  # the arc-flow route's open windows of the period per block and M_p
    earlier = {}  # the plans of the sub-solves so far, per block (its DCs' names)
    dcs = {dc.name: dc for dc in instance.datacenters}

    def single(sub, dl, cutoff=None):
        sub_options = options if cutoff is None or name != "ilp-path" else \
            dict(options, cutoff=cutoff)
        hint = _earlier_plan(sub, earlier, dcs) if name == "ilp-path" else None
        out = _run(name, sub, dl, seed, threads, log, sub_options, resume, hint)
        if out.plan is not None:
            earlier.setdefault(_window_key(sub)[0], []).append(out.plan)
        return out

    levels = _SyncCache(earlier=earlier, dcs=dcs)

    def joint(entry, subs, upper, dl):
        return _joint(name, subs, upper, dl, opts, seed, threads, log, levels)

    search = OuterSearch(instance, deadline, single, joint, log,
                         early_share=EARLY_SHARE if opts.device_states else 0.0)
    out = search.run()
    out.stats.update(formulation=name, backend=opts.backend, threads=threads, seed=seed,
                     solve_time_s=deadline.elapsed())
    return out


def _earlier_plan(sub: Instance, earlier: dict, dcs: dict) -> tuple | None:
    """The fastest plan of ``sub`` among the outer enumeration's earlier sub-solves'
    plans (``earlier``: per block's DC names; ``dcs``: the instance's DCs by name): those
    of the same block with another
    ``M_p``, and for one DC those of every other single DC with the same device groups
    (up to their order), renamed (:func:`_renamed`); each costed by :func:`evaluate` on
    ``sub`` (a plan of another ``M_p`` or DC may not fit: then it is not offered).
    ``(plan, T)`` or ``None``. A plan near the block's optimum prunes its network far
    more than the cheap heuristics' (fresh ``v3-medium-02``-like seed 4's DC 0 with
    ``M_p = 15``: 14.5 CPU s under the cutoff 0.7194 s, 1.2 CPU s pruned at its twin DC
    2's 0.70515 s, ``docs/formulations.md``, "Twenty-third round")."""
    names = _window_key(sub)[0]
    candidates = list(earlier.get(names, ()))
    if len(names) == 1:
        dc = sub.datacenters[0]
        for other, plans in earlier.items():
            if len(other) == 1 and other != names and _same_groups(dcs[other[0]].devices,
                                                                   dc.devices):
                candidates += [_renamed(p, other[0], dc.name) for p in plans]
    best, best_T = None, math.inf
    for plan in candidates:
        ev = evaluate(sub, plan)
        if ev.feasible and float(ev.iteration_time_s) < best_T:
            best, best_T = plan, float(ev.iteration_time_s)
    return None if best is None else (best, best_T)


def _joint(name: str, subs: list, upper: float, deadline: Deadline, opts: _Options, seed,
           threads, log, levels=None, by_sync: bool = True):
    """One model of several pipelines (:func:`~chainpipe.formulations.pipelines.merge_models`):
    ``(plans or None, bound)`` on ``max T_p + max R`` (``upper`` when no plan is below it).
    The arc-flow model solves it by levels of the synchronisation instead
    (:func:`_joint_by_sync`; ``by_sync=False`` keeps the merged model, for tests)."""
    if opts.device_states and name == "ilp-path" and by_sync:
        return _joint_by_sync(subs, upper, deadline, opts, seed, threads, log,
                              levels if levels is not None else _SyncCache())
    forms, models, syncs = [], [], []
    scale = upper / OBJECTIVE_MAGNITUDE
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        for sub in subs:
            tables = CostTables(sub)
            form = _formulation(name, tables, opts, deadline, {}, (None, upper, "incumbent"))
            if form is None:  # no arc of this block fits a plan below upper
                return None, upper
            form.scale = scale
            form.build()
            model = form.matrix()
            syncs.append(_sync_column(form, model))
            forms.append(form)
            models.append(model)
    merged, offsets = merge_models(models, syncs)
    if merged.out_of_range(MAX_COEFFICIENT) is not None:
        return None, 0.0
    if opts.backend == "highs":  # the blocks' own HiGHS options; nothing above ``upper``
        merged.highs_options = dict(getattr(models[0], "highs_options", {}),
                                    objective_bound=upper / scale * (1 + 1e-7))
    answer = _backend(opts.backend)(merged, relax=False, deadline=deadline, seed=seed,
                                    threads=threads, log=log)
    if answer.status == "infeasible":
        return None, upper  # none below upper (an infeasible model is no better)
    bound = max(0.0, safe_bound(answer.bound, scale) or 0.0)
    if answer.values is None:
        return None, bound
    plans = []
    for form, model, off in zip(forms, models, offsets):
        model.assign(answer.values[off:off + model.num_cols])
        plans.append(form.decode())
    return plans, bound


@dataclass
class _Level:
    """One solve of a pipeline under a cap on ``R`` (:meth:`_SyncBlock.solve`)."""

    cap: float
    strict: bool
    below: float
    plan: object
    T: float
    R: float
    sync: float
    lb: float
    optimal: bool

    def covers(self, cap: float, strict: bool) -> bool:
        """Whether this cap allows every plan the cap ``cap`` (``strict``) allows."""
        return self.cap > cap or (self.cap == cap and (strict or not self.strict))


@dataclass
class _SyncCache:
    """Per pipeline (its DCs and ``M_p``) of the outer enumeration: the arc-flow model
    built once (pruned with the first upper bound; later ones are lower, so it holds every
    plan they need) and its solves under caps, shared by every joint model it is in."""

    forms: dict = field(default_factory=dict)
    levels: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)
    #: per pipeline: its sub-instance, and its twin (:func:`_twin`) once looked up
    instances: dict = field(default_factory=dict)
    twins: dict = field(default_factory=dict)
    siblings: dict = field(default_factory=dict)
    #: the outer enumeration's sub-solves' plans per block (its DCs' names;
    #: :func:`_earlier_plan`'s): candidates for the levels (:meth:`_SyncBlock._candidates`)
    earlier: dict = field(default_factory=dict)
    #: the instance's DCs by name (``earlier``'s siblings: the same device groups)
    dcs: dict = field(default_factory=dict)
    #: another route's solve of a level (CP-SAT's, :mod:`chainpipe.solvers.cpsat`):
    #: ``level(block, form, cap, below, target, deadline) -> _Level`` on the level's
    #: network ``form``; ``None``: the arc-flow MIP (or its windows)
    level: object = None


@dataclass
class _SyncBlock:
    """One pipeline of :func:`_joint_by_sync`: its model and its last answer under a cap."""

    form: object
    instance: Instance
    key: tuple
    cache: _SyncCache
    plan: object = None
    T: float = math.inf  # T_p - max R of :attr:`plan` (evaluate's)
    R: float = math.inf  # max R of :attr:`plan` (the model's option values)
    sync: float = math.inf  # max R of :attr:`plan` (evaluate's)
    lb: float = 0.0  # proven: every plan under the current cap has T_p - max R >= lb
    #: ``(key, its DC's name, this DC's name)`` of a twin pipeline (:func:`_twin`)
    twin: tuple | None = None
    #: the fastest candidate plan under the last cap asked (:meth:`_from_twin`) that did
    #: not answer it alone: ``(plan, T_p - max R, max R)`` or ``None``
    hint: tuple | None = None

    def needs(self, cap: float, strict: bool) -> bool:
        """Whether the last plan is not one of the plans under the cap (or there is none)."""
        return self.plan is None or self.R > cap or (strict and self.R >= cap)

    def _take(self, level: _Level) -> None:
        self.plan, self.T, self.R, self.sync = level.plan, level.T, level.R, level.sync
        self.lb = max(self.lb, level.lb)

    def _known(self, cap: float, strict: bool, below: float, target: float) -> bool:
        """Answer from an earlier solve when one settles it: an optimal plan under a cap
        at least as wide that this cap allows (it stays optimal), a plan this cap allows
        no slower than ``target`` and below ``below`` (what a solve stopped at the target
        would give: ``target`` is what the other pipelines are proven to need), or no
        plan below ``below`` or more under such a cap. Every wider cap's bound holds here
        too (each solve's bound holds for the plans below its own ``below``, and its plan
        or ``below`` is above the bound)."""
        for lv in self.cache.levels.get(self.key, ()):
            if not lv.covers(cap, strict):
                continue
            self.lb = max(self.lb, lv.lb)
            fits = lv.plan is not None and (lv.R < cap if strict else lv.R <= cap)
            if (lv.optimal and fits) or (fits and lv.T <= target and lv.T < below) or (
                    lv.plan is None and lv.optimal and lv.below >= below):
                self._take(lv)
                return True
        return False

    def _store(self, level: _Level) -> None:
        self.cache.levels.setdefault(self.key, []).append(level)
        self.plan = None
        self._take(level)

    def _from_twin(self, cap: float, strict: bool, below: float, target: float) -> bool:
        """Answer from the levels of a twin pipeline (:func:`_twin`: the same DC but for a
        lower or equal own-link latency; every plan costs it no more ``T_p - max R`` and
        no more ``R``), or from a plan already found. A twin's bound under a cap at
        least as wide bounds this pipeline (its plans under the cap are the twin's,
        renamed, each no cheaper there; the cap read in the twin's option values, which
        the same plans' options hold). With that bound at least ``below`` there is no
        plan below ``below``. Else a plan of this pipeline's levels under any cap, or of
        a sibling's (:func:`_siblings`: the same DC but for its own link), renamed and
        costed here by ``evaluate``, answers when it fits the cap, is below ``below``
        and no slower than ``target`` (what a solve stopped at the target gives), or
        within :data:`TWIN_RTOL` of the bound (taken as optimal)."""
        if self.twin is not None:
            key = self.twin[0]
            form = self.cache.forms[key]
            values = form.arcs.sync[np.unique(form.col_arc)]
            values = values[values <= cap]
            theirs_cap = float(values.max()) if len(values) else -math.inf
            for lv in self.cache.levels.get(key, ()):
                if lv.covers(theirs_cap, False):
                    self.lb = max(self.lb, lv.lb)
            if self.lb >= below:
                self._store(_Level(cap, strict, below, None, math.inf, math.inf, math.inf,
                                   below, True))
                return True
        self.hint = None
        for plan in self._candidates():
            ev = evaluate(self.instance, plan)
            if not ev.feasible:
                continue
            sync = float(ev.sync_s)
            T = float(ev.iteration_time_s) - sync
            exact = T <= self.lb * (1 + TWIN_RTOL)
            if not ((sync < cap if strict else sync <= cap) and T < below):
                continue
            if T <= target or exact:
                self._store(_Level(cap, strict, below, plan, T, sync, sync, self.lb, exact))
                return True
            if self.hint is None or T < self.hint[1]:
                self.hint = (plan, T, sync)
        return False

    def _candidates(self):
        """The plans of this pipeline's levels, then of its siblings' (renamed), then the
        outer enumeration's sub-solves' of this block (:attr:`_SyncCache.earlier`, any
        ``M_p``; for one DC also of its siblings' DCs), each once."""
        seen = set()
        sources = [(self.key, None)] + [(k, (theirs, mine)) for k, theirs, mine
                                        in _siblings(self.cache, self.key)]
        for key, names in sources:
            for lv in self.cache.levels.get(key, ()):
                if lv.plan is None or id(lv.plan) in seen:
                    continue
                seen.add(id(lv.plan))
                yield lv.plan if names is None else _renamed(lv.plan, *names)
        names, dcs = self.key[0], self.cache.dcs
        for other, plans in self.cache.earlier.items():
            if other != names and not (len(names) == len(other) == 1 and _same_groups(
                    dcs[other[0]].devices, dcs[names[0]].devices)):
                continue
            for plan in plans:
                if id(plan) not in seen:
                    seen.add(id(plan))
                    yield plan if other == names else _renamed(plan, other[0], names[0])

    def _level_network(self, cap: float, below: float, deadline: Deadline):
        """The arc-flow network of the plans with every ``R <= cap``, minimising ``T_p -
        max R`` (``sync_cap``, ``count_sync=False``; :attr:`LEVEL_MODELS`), pruned by
        ``below`` (the plans it must beat: every plan it drops has ``T_p - max R >
        below``); ``None`` when it is empty. Not built into a model here: :meth:`solve`
        builds it, or takes it by windows."""
        from ..formulations.ilp_flow import FlowFormulation

        if self.cache.tables.get(self.key) is None:
            self.cache.tables[self.key] = CostTables(self.instance)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
            form = FlowFormulation(self.cache.tables[self.key], check=deadline.check,
                                   upper_bound=below if math.isfinite(below) else None,
                                   sync_cap=cap, count_sync=False)
        return form if form.n_arcs else None

    def solve(self, cap: float, strict: bool, below: float, target: float,
              deadline: Deadline, opts: _Options, seed, threads, log) -> None:
        """Least ``T_p - max R`` over the plans with every ``R <= cap`` (``< cap`` when
        ``strict``), only below ``below`` (HiGHS's objective bound: an infeasible answer
        proves every such plan at least ``below``). HiGHS stops at a plan no slower than
        ``target`` (what the other pipelines are proven to need under this cap: a faster
        plan here would not lower the joint value), with its bound. A level's network
        that the route would solve by windows of its period (:func:`_windowed`,
        :func:`_root_gap_wide`: one DC, 1F1B, 2 000 stage columns or more, a root LP
        over 5 % below ``below``) is (:func:`_level_windows`)."""
        form = self.form
        values = form.arcs.sync[np.unique(form.col_arc)]
        values = values[values < cap] if strict else values[values <= cap]
        if not len(values):  # every plan has a stage above the cap
            self.plan, self.lb = None, math.inf
            return
        # the same plans as the largest option value under the cap: solves are shared
        # between entries and the caps they reach
        cap, strict = float(values.max()), False
        if self._known(cap, strict, below, target) or self._from_twin(cap, strict, below,
                                                                      target):
            return
        hint, asked = self.hint, below
        if hint is not None:  # a plan under the cap at T' = hint[1]: none slower is needed
            below = min(below, hint[1])
        if not LEVEL_MODELS:  # the shared model with the columns above the cap fixed to 0
            form, model = self.form, self.form.sync_capped(cap, False)
        else:
            form = self._level_network(cap, below, deadline)
            if form is None:  # no plan under the cap has T_p - max R below ``below``
                self._store(_hinted(_Level(cap, strict, below, None, math.inf, math.inf,
                                          math.inf, below, True), hint, asked))
                return
            if self.cache.level is not None:
                self._store(_hinted(self.cache.level(self, form, cap, below, target, deadline),
                                    hint, asked))
                return
            stats = {}
            with np.errstate(over="ignore", divide="ignore", invalid="ignore",
                             under="ignore"):
                if LEVEL_WINDOWS and _windowed(form, opts) and _root_gap_wide(
                        form, opts, deadline, seed, threads, log, stats, LEVEL_ROOT_LP_S):
                    self._store(_hinted(_level_windows(
                        self.instance, form, cap, below, target,
                        stats["root_lp"]["bound_s"] or 0.0, deadline, opts, seed, threads,
                        log), hint, asked))
                    return
                model = form.model if "root_lp" in stats else form.build()
        self._store(_hinted(self._level_mip(form, model, cap, strict, below, target, deadline,
                                            opts, seed, threads, log), hint, asked))

    def _level_mip(self, form, model, cap: float, strict: bool, below: float,
                   target: float, deadline: Deadline, opts: _Options, seed, threads,
                   log) -> _Level:
        """The level's whole MIP (:meth:`solve`)."""
        if opts.backend == "highs":
            model.highs_options = dict(model.highs_options, **PROOF_OPTIONS,
                                       objective_bound=below / form.scale * (1 + 1e-7))
            if target > 0:
                model.highs_options["objective_target"] = target / form.scale
        answer = _backend(opts.backend)(model, relax=False, deadline=deadline, seed=seed,
                                        threads=threads, log=log)
        level = _Level(cap, strict, below, None, math.inf, math.inf, math.inf,
                       safe_bound(answer.bound, form.scale) or 0.0,
                       answer.status in ("optimal", "infeasible"))
        if answer.status == "infeasible":
            level.lb = below
        elif answer.values is not None:
            model.assign(answer.values)
            level.plan = form.decode()
            ev = evaluate(self.instance, level.plan)
            level.sync = float(ev.sync_s)
            level.T, level.R = float(ev.iteration_time_s) - level.sync, form.chosen_sync()
        return level


def _hinted(level: _Level, hint: tuple | None, below: float) -> _Level:
    """``level`` (solved only below the hint's ``T_p - max R``, :meth:`_SyncBlock.solve`)
    with the hint's plan ``(plan, T', max R)`` when it found none as fast: every plan it
    left out is no faster than the hint, so a proof below it (``level.optimal``) makes
    the hint optimal under the cap; its bound is at most the hint's ``T'``. ``below``:
    the level's own (the plans it was asked about)."""
    if hint is None or (level.plan is not None and level.T <= hint[1]):
        return level
    plan, T, sync = hint
    return _Level(level.cap, level.strict, below, plan, T, sync, sync, min(level.lb, T),
                  level.optimal)


def _level_windows(instance: Instance, form, cap: float, below: float, target: float,
                   floor: float, deadline: Deadline, opts: _Options, seed, threads,
                   log) -> _Level:
    """A level of :func:`_joint_by_sync` (``form``: its network, ``count_sync=False``,
    pruned by ``below``) solved by windows of its period
    (:class:`~chainpipe.formulations.flow_windows.PeriodWindows`, valued by ``T_p - max
    R``, stopped at a plan no slower than ``target``), as :meth:`_SyncBlock._level_mip`
    solves it whole: the best plan found below ``below``, the windows' bound (every
    plan under the cap with ``T_p - max R`` below ``below`` is at least it) and
    ``optimal`` when every window is closed. ``floor``: the level's root LP bound."""
    from ..formulations.flow_windows import PeriodWindows

    sync = {}

    def value(g, plan):
        ev = evaluate(instance, plan)
        sync[id(plan)] = (float(ev.sync_s), g.chosen_sync())
        return float(ev.iteration_time_s) - float(ev.sync_s)

    def solve(model, g, best, dl):
        if opts.backend == "highs":
            model.highs_options = dict(model.highs_options, **PROOF_OPTIONS,
                                       objective_bound=best / g.scale * (1 + 1e-7))
            if target > 0:
                model.highs_options["objective_target"] = target / g.scale
        return _backend(opts.backend)(model, relax=False, deadline=dl, seed=seed,
                                      threads=threads, log=log)

    res = PeriodWindows(form, solve, deadline, floor=floor, value=value,
                        target=target).run()
    level = _Level(cap, False, below, None, math.inf, math.inf, math.inf,
                   min(res.bound, below), res.closed)
    if res.plan is not None:
        level.plan, level.T = res.plan, res.T
        level.sync, level.R = sync[id(res.plan)]
    return level


def _renamed(plan: Plan, theirs: str, mine: str) -> Plan:
    """``plan`` with the devices of datacenter ``theirs`` named as those of ``mine``."""
    head = f"{theirs}/"
    return Plan([dataclasses.replace(st, devices=tuple(
        f"{mine}/{d[len(head):]}" if d.startswith(head) else d for d in st.devices))
        for st in plan.stages])


def _twin(cache: _SyncCache, key: tuple) -> tuple | None:
    """A pipeline of the cache whose answers bound this one's: both one DC with the same
    ``M_p`` and the same instance but for the DC's name and its own link, whose bandwidth
    is the same and whose latency is at most this one's (``v3-medium-02``'s and ``-03``'s
    DCs 2 and 4). Every cost of a plan (``Q``, the loops, ``R``) only grows with that
    latency, so a plan of this DC costs the twin no more. ``(key, its DC's name, this
    DC's name)`` or ``None``; looked up once per key."""
    if key in cache.twins:
        return cache.twins[key]
    found = None
    for other_key, theirs, mine in _siblings(cache, key):  # (same DC but its own link)
        mine_link = cache.instances[key].datacenters[0].link
        link = cache.instances[other_key].datacenters[0].link
        if (link.latency_s <= mine_link.latency_s
                and link.bandwidth_bytes_per_s == mine_link.bandwidth_bytes_per_s):
            found = (other_key, theirs, mine)
            break
    cache.twins[key] = found
    return found


def _siblings(cache: _SyncCache, key: tuple) -> list:
    """The other pipelines of the cache on one DC with the same ``M_p`` and the same
    instance but for the DC's name, own link and the order of its device groups: a plan
    of one, renamed, is a plan of the other (the same devices and memory; a device is
    named by its DC, its group's type, unique within the DC, and its index, and the
    stages of a DC may use its groups in any order), costed there by ``evaluate``.
    ``(key, its DC's name, this DC's name)`` each; looked up again as the cache grows.
    Fresh ``v3-medium-02``-like seed 4's DCs 0 and 2 list A100 and H100 in the two
    orders (``docs/formulations.md``, "Thirteenth round")."""
    inst, out = cache.instances[key], []
    if len(inst.datacenters) != 1:
        return out
    dc = inst.datacenters[0]
    for other_key, other in cache.instances.items():
        if other_key == key or len(other.datacenters) != 1:
            continue
        pair = (key, other_key)
        if pair not in cache.siblings:
            o = other.datacenters[0]
            cache.siblings[pair] = _same_groups(o.devices, dc.devices) and \
                dataclasses.replace(other, datacenters=inst.datacenters) == inst
        if cache.siblings[pair]:
            out.append((other_key, other.datacenters[0].name, dc.name))
    return out


def _same_groups(mine, theirs) -> bool:
    """Whether two datacenters' device groups are the same up to their order."""
    return len(mine) == len(theirs) and sorted(mine, key=repr) == sorted(theirs, key=repr)


def _sync_blocks(subs: list, upper: float, deadline: Deadline, opts: _Options,
                 cache: _SyncCache) -> list | None:
    """The pipelines' blocks of :func:`_joint_by_sync`, each model built once per DCs and
    ``M_p`` (``None`` when some block has no arc below ``upper``)."""
    blocks = []
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        for sub in subs:
            key = (tuple(dc.name for dc in sub.datacenters), sub.microbatches)
            if key not in cache.forms:
                form = _formulation("ilp-path", CostTables(sub), opts, deadline, {},
                                    (None, upper, "incumbent"))
                if form is not None:
                    form.build()
                cache.forms[key] = form
            if cache.forms[key] is None:  # no arc of this block fits a plan below upper
                return None
            cache.instances.setdefault(key, sub)
            blocks.append(_SyncBlock(cache.forms[key], sub, key, cache))
    for b in blocks:
        b.twin = _twin(cache, b.key)
    return blocks


def _joint_by_sync(subs: list, upper: float, deadline: Deadline, opts: _Options, seed,
                   threads, log, cache: _SyncCache):
    """The joint model of several pipelines (``min max_p T'_p + max_p R_p``, ``T'_p = T_p -
    R_p`` of pipeline ``p``) solved exactly by levels of the synchronisation, each level
    one arc-flow MIP per pipeline.

    With ``g_p(r)`` the least ``T'_p`` of the pipeline's plans whose every stage has ``R <=
    r``, the joint optimum is ``min_r [r + max_p g_p(r)]``. Start with no cap; solve each
    pipeline for its least ``T'_p``; with ``G = max_p g_p(cap)`` and ``rho`` the largest
    ``R`` of the plans found, ``G + rho`` is a joint plan's value, and every joint plan
    with ``max R`` in ``[rho, cap]`` has ``T >= G + max R >= G + rho``. Plans with ``max R``
    in ``(best - G, cap]`` are no faster than ``best`` either. So the next cap is ``best -
    G`` when that is below ``rho``, else ``R < rho`` (strict), and only the pipelines whose
    plan breaks it are solved again (the others keep their plan and optimum: their
    feasible set shrank around it). It stops when ``G + floor >= best`` (``floor`` the
    largest of the pipelines' path floors on ``R``: every joint plan has ``max R >=
    floor``). Each step's ``G`` only rises as the cap falls, so the proven bound is the
    least of the bounds of the levels passed and ``G + floor`` of the rest, valid at
    any stop (a stopped MIP's bound is used where it is not optimal). Returns ``(plans or
    None, bound)`` as :func:`_joint` does. On ``v3-medium-02`` a merged model of four
    single-DC pipelines took 10-33 s (``docs/formulations.md``)."""
    blocks = _sync_blocks(subs, upper, deadline, opts, cache)
    if blocks is None:
        return None, upper
    floor = max(b.form.floor_S if b.form.has_S else 0.0 for b in blocks)
    best, plans, passed = upper, None, math.inf
    cap, strict = math.inf, False
    try:
        while cap > floor or (cap == floor and not strict):
            for b in blocks:
                if b.needs(cap, strict):
                    target = max((o.lb for o in blocks if o is not b), default=0.0)
                    b.solve(cap, strict, best - floor, target, deadline, opts, seed,
                            threads, log)
            G = max(b.lb for b in blocks)
            if G + floor >= best or any(b.plan is None for b in blocks):
                break
            rho = max(b.R for b in blocks)
            value = max(b.T for b in blocks) + max(b.sync for b in blocks)
            if value < best:
                best, plans = value, [b.plan for b in blocks]
            if best - G < rho:
                cap, strict = best - G, False  # (best - G, cap]: T > best
            else:
                passed = min(passed, G + rho)  # [rho, cap]: T >= G + rho (>= best if proven)
                cap, strict = rho, True
            if CAP_SEARCH:
                jump = _cap_search(blocks, cap, strict, deadline, opts, seed, threads, log)
                if jump is not None:  # (c, cap]: T > c + G_o
                    passed, cap, strict = min(passed, jump[1] + jump[0]), jump[0], False
        else:  # every plan has max R >= floor > cap: none is left
            return plans, min(passed, best)
    except TimeUp:
        pass
    rest = max(b.lb for b in blocks) + floor
    return plans, min(passed, rest, best)


def _cap_search(blocks: list, cap: float, strict: bool, deadline: Deadline, opts: _Options,
                seed, threads, log) -> tuple | None:
    """The next cap of :func:`_joint_by_sync` when one pipeline ``q`` alone holds the
    largest ``R`` and is faster than the others' bound ``G_o`` (the largest of their
    ``lb``; their plans have ``R <= R_2``): every joint plan whose ``max R = r`` lies in
    ``[R_2, cap]`` has ``T >= r + G_o``, so among those caps the least ``c`` at which
    ``q`` has a plan with ``T'_q <= G_o`` is the only one to try; caps above ``c`` give
    ``T > c + G_o``, and that bound is all the skip claims (it holds for any ``c``). The
    least ``c`` is searched by bisection over ``q``'s option values in ``[R_2, cap]``,
    each probe a level below ``G_o`` stopped at a plan no slower than it (the level
    network pruned by it: small). ``(c, G_o)``, ``q`` left with its plan under ``c``;
    ``None`` when it does not apply or finds none (``q`` then solved under ``cap`` as
    before). Without it the descent lowers ``q``'s cap one plan at a time while its
    ``T'_q`` stays below ``G_o``: fresh ``v3-medium-02``-like seed 4's DC 3, 17 levels and
    48 CPU s in one joint model (``docs/formulations.md``, "Twentieth round")."""
    holders = [b for b in blocks if not b.needs(cap, strict)]
    q = [b for b in blocks if b.needs(cap, strict)]
    if len(q) != 1 or not holders or q[0].plan is None:
        return None
    q = q[0]
    g_o = max(o.lb for o in holders)
    r_2 = max(o.R for o in holders)
    if not q.T < g_o:
        return None
    values = np.unique(q.form.arcs.sync[np.unique(q.form.col_arc)])
    values = values[(values >= r_2) & ((values < cap) if strict else (values <= cap))]
    if len(values) < CAP_SEARCH_MIN:
        return None
    below = g_o * (1 + 1e-9)
    saved, lo, hi = q.lb, 0, len(values)
    try:
        while lo < hi:
            mid = (lo + hi) // 2
            q.lb = saved  # each probe's bound holds under its own cap only
            q.solve(float(values[mid]), False, below, g_o, deadline, opts, seed, threads, log)
            if q.plan is not None and q.T <= below:
                hi = min(mid, max(0, int(np.searchsorted(values, q.R, side="right")) - 1))
            else:
                lo = mid + 1
    finally:
        q.lb, q.plan = saved, None
    if hi == len(values):  # none: q is solved under ``cap`` as before
        return None
    c = float(values[hi])
    q.solve(c, False, below, g_o, deadline, opts, seed, threads, log)  # the probe's plan
    if log is not None:
        log(f"joint by sync: cap {c:.6g} s (searched; was {cap:.6g} s), G_o {g_o:.6g} s")
    return c, g_o


def _sync_column(form, model) -> int | None:
    """The column of a one-pipeline model's synchronisation maximum (``None``: none)."""
    if hasattr(form, "iS"):  # the arc-flow model's columns are indices already
        return form.iS if form.has_S else None
    column = {id(v): n for n, v in enumerate(model.variables)}
    return None if form.R is None else column[id(form.R)]


def _formulation(name: str, tables: CostTables, opts: _Options, deadline: Deadline, stats: dict,
                 incumbent=None):
    """The formulation object (``None`` when the path network is empty)."""
    if name == "ilp-assign":
        from ..formulations.ilp_assign import AssignFormulation

        form = AssignFormulation(tables, check=deadline.check)
        stats.update(form.model_stats)
        return form
    from ..formulations.ilp_path import PathFormulation

    upper = incumbent[1] if (incumbent is not None and opts.prune) else None
    if opts.cutoff is not None and (upper is None or opts.cutoff < upper):
        upper = opts.cutoff
        stats["cutoff_applied"] = True
    if opts.device_states:
        from ..formulations.ilp_flow import FlowFormulation

        form = FlowFormulation(tables, check=deadline.check, upper_bound=upper)
        stats.update(form.network_stats)
        return form if form.n_arcs else None
    form = PathFormulation(tables, bottleneck=opts.bottleneck, check=deadline.check,
                           dominance=opts.dominance, upper_bound=upper)
    stats.update(form.network_stats)
    return form if form.n_arcs else None


def _out_of_range(name: str, stats: dict, problem: str) -> Outcome:
    """``error``: the model's numbers are beyond what a MIP backend represents."""
    return Outcome("error", stats=stats, message=(
        f"{name}: the instance's numbers are out of range for a MIP backend ({problem}; "
        f"times in the model differ by more than the backends represent); dp and cpsat "
        "take them"))


def _progress_in_seconds(scale: float):
    """``on_bounds`` for a backend: its objective (``T / scale``) reported in seconds."""
    def on_bounds(incumbent, bound):
        report(None if incumbent is None else incumbent * scale,
               None if bound is None else bound * scale)

    return on_bounds


def _backend(backend: str):
    if backend == "highs":
        from .highs import solve_highs

        return solve_highs
    from .cbc import solve_cbc

    return solve_cbc


def _out_of_time_building(tables: CostTables, deadline: Deadline, stats: dict,
                          incumbent=None) -> Outcome:
    """The outcome of a run whose limit passed before the backend could search."""
    bound = float(tables.lower_bound)
    bound = max(0.0, bound) if math.isfinite(bound) else None
    return _fallback(tables, bound, stats, (
        f"time limit ({deadline.limit:g} s) reached while building the model "
        f"(after {deadline.elapsed():.2f} s)"), incumbent)


def _fallback(tables: CostTables, bound: float | None, stats: dict, message: str,
              incumbent=None) -> Outcome:
    """``feasible`` with the heuristic plan (``incumbent``: ``(plan, T, name)``; else the
    greedy heuristic's), or ``no_solution`` (no search left)."""
    from ..formulations.greedy import best_greedy_plan

    if incumbent is not None:
        plan, T, source = incumbent
    else:
        (plan, T), source = best_greedy_plan(tables), "greedy"
    if plan is None:
        return Outcome("no_solution", lower_bound=bound, stats=stats, message=message)
    stats["plan_source"] = source
    return Outcome("feasible", plan=plan, stats=stats,
                   lower_bound=None if bound is None else min(bound, T),
                   message=message + f"; the plan is the {source} heuristic's")


def _outcome(form, answer, opts: _Options, stats: dict, incumbent=None) -> Outcome:
    """The outcome of a backend's answer (plan decoded, bound clamped to ``[0, T]``)."""
    bound = safe_bound(answer.bound, form.scale)
    if bound is not None:
        bound = max(0.0, bound)
    if opts.relax:
        stats["lp_bound_s"] = bound
        if answer.status == "infeasible":
            return Outcome("infeasible", lower_bound=None, stats=stats,
                           message="the LP relaxation is infeasible, so is the problem")
        return Outcome("no_solution", lower_bound=bound, stats=stats,
                       message="LP relaxation only (relax=True)")
    if answer.status == "infeasible":
        if incumbent is not None:  # only under a cutoff: the heuristic plan's arcs stay
            return _fallback(form.tables, _cut_bound(opts, stats), stats,
                             f"{opts.backend} found the pruned "
                             "model infeasible", incumbent)
        return Outcome("infeasible", stats=stats, message=(
            f"{opts.backend} proved that no plan satisfies memory, device counts and chain "
            "order"))
    plan = form.decode() if answer.values is not None else None
    T = evaluate(form.tables.instance, plan).iteration_time_s if plan is not None else math.inf
    if plan is not None and bound is not None:
        bound = min(bound, T)
    if answer.status == "optimal" and plan is not None:
        return Outcome("optimal", plan=plan, lower_bound=bound, stats=stats)
    if incumbent is not None and incumbent[1] < T:
        return _fallback(form.tables, bound, stats, f"{opts.backend} stopped before proving "
                         f"optimality ({answer.text})", incumbent)
    if plan is not None:
        return Outcome("feasible", plan=plan, lower_bound=bound, stats=stats,
                       message=f"stopped before proving optimality ({answer.text})")
    return _fallback(form.tables, bound, stats, f"{opts.backend} found no plan "
                     f"({answer.text})")


#: the options of each formulation, for ``chainpipe.solve.solver_options``
run_assign.options = ("backend", "relax", "msg")
run_path.options = ("backend", "relax", "msg", "bottleneck", "device_states",
                    "cutoff") + PATH_SWITCHES
