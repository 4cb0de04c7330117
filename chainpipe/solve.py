"""``solve(instance, solver=...)`` and the registry of solvers.

A solver is a function ``run(instance, *, time_limit, seed, threads, **options)
-> Outcome`` in its own module, imported only when used. :func:`solve` times it,
re-evaluates its plan with the one cost model and builds the :class:`Result`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass

from .deadline import Deadline
from .gc_pace import fewer_collections
from .instance import Instance
from .names import unknown_name
from .plan import evaluate
from .result import InstanceRef, OptionError, Outcome, Result, Status, result_of
from .support import refusal


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
        SolverInfo("uniform", "chainpipe.solvers.baselines.equal_layers:uniform", False,
                   "baseline: equal layer counts per stage, DCs filled in chain order (Megatron)"),
        SolverInfo("greedy-fill", "chainpipe.solvers.baselines.equal_layers:greedy_fill", False,
                   "baseline: as many stages per DC as it holds, uniform layers (Atlas)"),
        SolverInfo("proportional", "chainpipe.solvers.baselines.balanced:proportional", False,
                   "baseline: layers in proportion to device rates, with memory repair (Metis)"),
        SolverInfo("comm-unaware", "chainpipe.solvers.baselines.dp_based:comm_unaware", False,
                   "baseline: exact DP with links ignored, then evaluated with links"),
        SolverInfo("uniform-chain", "chainpipe.solvers.baselines.chain_search:uniform_chain", False,
                   "baseline: uniform layer splits, search over stage count and DC segments (Sailor)"),
        SolverInfo("single-dc", "chainpipe.solvers.baselines.dp_based:single_dc", False,
                   "baseline: the best plan inside one datacenter"),
        SolverInfo("megatron", "chainpipe.solvers.baselines.equal_layers:megatron", False,
                   "baseline: Megatron-LM 3D parallelism: TP over a node, equal layers, widest DP"),
        SolverInfo("metis", "chainpipe.solvers.baselines.balanced:metis", False,
                   "baseline: Metis: per-GPU-type d x t shapes, layers balanced by throughput"),
        SolverInfo("sailor", "chainpipe.solvers.baselines.chain_search:sailor", False,
                   "baseline: Sailor: uniform layers, one d and t, search over DC range (B&B)"),
        SolverInfo("replicate-per-dc", "chainpipe.solvers.baselines.replicate:replicate_per_dc",
                   False, "baseline: one pipeline per DC (dp, classic), microbatches by speed"),
        SolverInfo("classic-optimum", "chainpipe.solvers.baselines.replicate:classic_optimum",
                   False, "baseline: the dp optimum under the classic objective, costed as asked"),
    )
}


def solver_function(name: str):
    """The ``run`` function of the registered solver ``name`` (its module imported now).

    Raises
    ------
    ValueError
        For a name that is not registered, with a suggestion when one is close.
    """
    try:
        info = SOLVERS[name]
    except KeyError:
        raise ValueError(unknown_name("solver", name, SOLVERS)) from None
    module, func = info.target.split(":")
    return getattr(importlib.import_module(module), func)


#: parameters every solver takes from the facade; not options
_COMMON = ("instance", "deadline", "seed", "threads", "log")


def solver_options(name: str, run=None) -> list[str]:
    """The option names solver ``name`` (or its function ``run``) takes, common ones aside."""
    run = solver_function(name) if run is None else run
    names = [p.name for p in inspect.signature(run).parameters.values()
             if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _COMMON]
    return names + list(getattr(run, "options", ()))


def check_options(name: str, options: dict, run=None) -> None:
    """Raise :class:`OptionError` for an option solver ``name`` does not take."""
    known = solver_options(name, run)
    for key in options:
        if key not in known:
            raise OptionError(unknown_name("option", key, known).replace(
                f"option {key!r}", f"option {key!r} for {name}", 1))


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
    log=None,
    **options,
) -> Result:
    """Solve ``instance`` with the named solver; the plan's time comes from :func:`evaluate`.

    Parameters
    ----------
    instance : Instance
        A valid instance (see :func:`chainpipe.read` and :func:`chainpipe.instance_from_dict`).
    solver : str, default "dp"
        A registered name: ``dp`` (exact chain DP, the reference), ``cdynp`` (decomposed
        privacy-preserving DP), ``ilp-assign`` and ``ilp-path`` (ILPs through PuLP, option
        ``backend="highs"`` or ``"cbc"``), ``cpsat`` (OR-Tools CP-SAT), or a baseline:
        ``uniform``, ``greedy-fill``, ``proportional``, ``comm-unaware``, ``uniform-chain``,
        ``single-dc``, and with hybrid parallelism ``megatron``, ``metis``, ``sailor``.
        :data:`SOLVERS` lists them with one line each.
    time_limit : float, optional
        Seconds for the whole solve, building tables and models included; ``None`` for
        no limit. Must be finite and ``>= 0``.
    seed : int, default 0
        Random seed for solvers that use one (CP-SAT, the MIP backends).
    threads : int, default 1
        Threads a backend may use, 1 to :data:`MAX_THREADS`.
    log : callable, optional
        Called with each line of progress (a backend's own log, the DP's trials);
        ``None`` keeps the solve silent.
    **options
        Solver-specific options; :func:`solver_options` lists a solver's names.

    Returns
    -------
    Result
        ``status`` is one of :class:`Status`: ``optimal`` (proven, to a relative
        :data:`~chainpipe.numeric.OPTIMALITY_RTOL`), ``feasible`` (a plan without proof),
        ``infeasible`` (proven: no plan exists), ``no_solution`` (neither by the limit) or
        ``error`` (one line, no plan). ``iteration_time`` is always recomputed from the plan
        by the cost model.

    Raises
    ------
    ValueError
        An unknown solver name, a bad time limit, or threads out of range.
    OptionError
        An option the solver does not take (a ``ValueError``), raised before any work.

    Examples
    --------
    >>> import chainpipe as cp
    >>> inst = cp.read("instances/small/small-01-tiny.json")  # doctest: +SKIP
    >>> cp.solve(inst, "dp").status  # doctest: +SKIP
    <Status.OPTIMAL: 'optimal'>
    """
    return run_solver(instance, solver, solver_function(solver), time_limit, seed, threads, log,
                      **options)


#: the most threads a solve may ask for: every backend accepts it (CP-SAT takes at most
#: 10,000 workers); more is refused, never passed on
MAX_THREADS = 1024


def unsupported(instance: Instance, solver: str) -> str | None:
    """Why ``solver`` cannot solve ``instance`` yet (one line), or ``None`` if it can.

    :func:`chainpipe.support.refusal` with the solver's registered kind (exact or a
    baseline); :func:`run_solver` returns it as status ``error`` before any work.
    """
    info = SOLVERS.get(solver)
    return refusal(instance.training, solver, exact=info is None or info.exact)


def run_solver(instance: Instance, name: str, run, time_limit=None, seed=0, threads=1, log=None,
               **options) -> Result:
    """:func:`solve` with the solver's function given (the harness's child processes use it)."""
    deadline = Deadline(time_limit)  # first: everything below counts against the limit
    if isinstance(threads, bool) or not isinstance(threads, int) \
            or not 1 <= threads <= MAX_THREADS:
        raise ValueError(f"threads must be an integer from 1 to {MAX_THREADS}, got {threads!r}")
    check_options(name, options, run)
    if reason := unsupported(instance, name):
        return finish(instance, name, Outcome(Status.ERROR, message=reason), deadline.elapsed())
    with fewer_collections():  # (many small long-lived objects: gc_pace)
        outcome: Outcome = run(instance, deadline=deadline, seed=seed, threads=threads,
                               log=log, **options)
    return finish(instance, name, outcome, deadline.elapsed())


def finish(instance: Instance, solver: str, outcome: Outcome, elapsed: float) -> Result:
    """Turn a solver's :class:`Outcome` into a :class:`Result`, re-evaluating its plan."""
    from .io import instance_digest

    ev = evaluate(instance, outcome.plan) if outcome.plan is not None else None
    ref = InstanceRef(instance.name, instance_digest(instance), instance.num_devices)
    return result_of(ref, solver, outcome, ev, elapsed)
