"""CDynP: the decomposed, privacy-preserving chain DP (``solver="cdynp"``).

Each datacenter is an agent with its own private data; the agents exchange
state summaries (Pareto frontiers of suffix plans) along the chain and then
assemble the plan so that each DC learns only its own stages. See
``docs/privacy.md`` for the protocol, the message schema and what leaks.

Options (``solve(inst, "cdynp", **options)`` or ``--option KEY=VALUE``):

* ``epsilon`` (float, 0): epsilon-dominance pruning of every summary;
* ``quantum`` (float, 0): round every emitted cost up to the grid ``(1+q)^n``;
* ``digits`` (int, 0 = off): round every emitted cost up to that many significant digits;
* ``max_entries`` (int, 0 = no cap): at most that many points per summary entry;
* ``upper_bound`` (float): a known feasible iteration time (public); every DC
  drops partial plans that cannot beat it. If nothing beats it the result is
  ``no_solution`` with that value as the proven lower bound;
* ``prefix_bound`` (bool, true): each DC first sends its downstream neighbour lower
  bounds, rounded down, on the cost of the whole model run on the DCs up to it (the
  ``prefix`` pass, ``docs/privacy.md``), with which every DC drops partial plans that
  no prefix upstream could complete within the bound (measured: 2.7x to 6.8x faster
  on ``hybrid/large``); ``false``: every DC sends ``null`` and learns nothing of the
  DCs upstream;
* ``probe`` (bool; default: on when the instance allows data or tensor parallelism):
  on two or more DCs without ``upper_bound``, first run the same protocol as a quick
  probe (each DC keeps :data:`PROBE_BEAM` partial plans per state, its stages start
  and end on a public grid of parts of about :data:`PROBE_LAYERS_PER_PART` layers, and
  it sends at
  most :data:`PROBE_ENTRIES` points per summary entry), then, if it found a plan, a
  fine probe under that plan's ``T`` (no grid, :data:`PROBE_FINE_ENTRIES` point per
  entry). Each probe's plan, audited like any, is a real plan; the better one's ``T``
  becomes the ``upper_bound`` of the main run, which then prunes far more (measured:
  2x to 5x faster on ``hybrid/medium``; 1.5x to 3x slower on the one-device
  ``medium/``, where the DCs' own trials suffice). With compression the answer is the
  better of the probes' and the compressed run's plans, and the guarantee holds;
* ``processes`` (bool): one OS process per DC, given only its own split documents
  through its own pipe (nothing is written to disk);
* ``message_timeout`` (float, 60): with ``processes``, the seconds an agent may stay
  silent while it works before it is declared hung (with a time limit, an agent
  silent 2 s past the limit is);
* ``trace_dir`` (path): write every DC-to-DC message there, exactly as sent (the
  probes' in the subdirectories ``probe/`` and ``probe-fine/``);
* ``compare_dp`` (bool): also run ``dp`` and report the gap in ``stats``.

With ``epsilon``, ``quantum`` and ``digits`` only, the plan's time is at most
``((1+epsilon)(1+quantum)(1+10^(1-digits)))^(K-1)`` times the optimum, and that factor gives the
reported lower bound; ``max_entries`` gives no guarantee. The same holds under contract
version 3, under ``period`` and with several pipelines (``docs/privacy.md``, "Compression
under version 3"); ``upper_bound`` is refused with several pipelines.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

from ...deadline import Deadline
from ...instance import Instance
from ...plan import Plan, evaluate
from ...result import Outcome, number_option
from ...support import features, refusal
from ...tables import CostTables
from ..dp_pipelines import STEPS as DP_STEPS
from ..dp_ranges import CLOSE, CLOSE_STEP, RangeTimes, close_step
from . import alone
from .assemble import plan_of
from .audit import check_claims
from .drive import (
    PROBE_BEAM,
    PROBE_ENTRIES,
    PROBE_FINE_ENTRIES,
    PROBE_LAYERS_PER_PART,
    agent_options,
    drive,
    guarantee_factor,
    is_exact,
    labels_kept,
)
from .public import CHAINS_KEPT, PublicInstance, kept, split_documents, write_split
from .runner import MESSAGE_TIMEOUT_S, Run, run_in_process, run_processes

__all__ = ["PROBE_BEAM", "PROBE_ENTRIES", "PROBE_FINE_ENTRIES", "PROBE_LAYERS_PER_PART",
           "guarantee_factor", "run", "split_instance"]


def split_instance(instance: Instance, outdir) -> list[Path]:
    """Write ``public.json`` and one ``private-NN-<dc>.json`` per DC; returns the paths.

    Parameters
    ----------
    instance : Instance
        The instance to split.
    outdir : path
        The directory (made if missing); each file is written atomically.

    Returns
    -------
    list of Path
        ``public.json`` first, then the private files in chain order.
    """
    return write_split(instance, outdir)


def run(instance: Instance, *, deadline=None, seed=0, threads=1, log=None, epsilon=0.0,
        quantum=0.0, digits=0, max_entries=0, upper_bound=None, prefix_bound=None,
        processes=False, message_timeout=MESSAGE_TIMEOUT_S, trace_dir=None, compare_dp=False,
        probe=None) -> Outcome:
    """Solve with one agent per DC (the options are described in the module's docstring).

    Returns
    -------
    Outcome
        ``optimal`` in exact mode, ``feasible`` with compression, ``infeasible``,
        ``no_solution`` (the time limit, or nothing beats ``upper_bound``), or ``error``
        with one line naming the DC whose agent died, hung, broke the protocol or sent
        a forged summary.
    """
    options = agent_options(epsilon, quantum, digits, max_entries, upper_bound, prefix_bound)
    message_timeout = number_option("cdynp", "message_timeout", message_timeout, strict=True)
    deadline = Deadline.of(deadline)
    if reason := refusal(instance.training, "cdynp"):
        return Outcome("error", message=reason)
    owner = LocalOwner(instance, processes, message_timeout)
    if "pipelines" in features(instance.training):
        from .pipelines import solve_several

        outcome = solve_several(owner, options, deadline, trace_dir, probe)
        if compare_dp and "range_runs" in outcome.stats and outcome.plan is not None:
            outcome.stats.update(_compare_dp(instance, outcome.plan, deadline))
        return outcome
    outcome = solve_chain(owner.whole(), options, deadline, trace_dir=trace_dir, probe=probe)
    if compare_dp and "messages" in outcome.stats:  # the protocol ran to its end
        outcome.stats.update(_compare_dp(instance, outcome.plan, deadline))
    return outcome


def solve_chain(backend, options: dict, deadline: Deadline, *, trace_dir=None,
                probe=None, period_bound: float = math.inf, floor: float = 0.0,
                classic_bound: float = math.inf, limit: float = math.inf) -> Outcome:
    """One pipeline over the chain of ``backend``, by its agents.

    Under ``classic`` (or ``M = 1``) one :func:`.drive.drive`. Under ``period`` as ``dp``
    does it (``docs/dp.md``, "One pipeline, the answer"): the classic solve first (the
    same agents under ``classic``, with its probe and compression), whose optimum ``T_c``
    is a lower bound and whose plan's ``T`` under ``period``, ``T_e``, an upper bound; when
    they meet, that plan is optimal, else the period run(s) (:func:`_period_runs`) search
    below ``T_e``, the public ``upper_bound``. Messages go to ``trace_dir/classic`` and
    ``trace_dir/period``. Compressed (:func:`_compressed_period`): the lower bound is the
    classic run's proven one (none under ``max_entries``), the answer the better of the
    two runs' plans. A chain of one DC sends no summary: under ``period`` and in a range
    run its solve is exact whatever the options.

    Parameters
    ----------
    backend : Backend
        The chain's agents (:class:`InstanceAgents`, or :class:`.remote.RemoteAgents`);
        ``count_sync`` ``False`` under ``sync_cap`` (a range run: ``T_p`` is minimised).
    options : dict
        The agents' options (:func:`.drive.agent_options`, ``sync_cap`` besides).
    deadline : Deadline
    trace_dir : path, optional
    probe : bool, optional
        As for :func:`run` (the classic solve's).
    period_bound : float or callable, default inf
        An incumbent's ``T`` (public: the owner's seed, :func:`.pipelines._seed`) bounding
        the period run only (a bound would turn the classic run's probe off); if nothing
        is below it and ``T_e``, the answer is the classic plan, ``feasible``. A callable
        is called with ``T_e`` after the classic solve (when a period run follows) and
        gives the incumbent then (:func:`.pipelines._spread_first`).
    floor : float, default 0
        Exact: a floor under every plan's ``T_p`` that the owner's earlier runs proved (a
        range run's: none at or below it); the period runs start above it (their public
        ``lower_bound``, and a range run's ladder, :func:`_range_ladder`), the classic run
        does not (a plan's classic ``T`` may lie below it).
    classic_bound : float, default inf
        Exact: an incumbent's ``T`` (the owner's seed) bounding the classic run too (its
        probe still on: :func:`.drive.drive`'s ``bound``): a classic run that finds nothing
        below it proves that no plan's ``T`` is (no period lies under the classic
        optimum), and the answer is ``no_solution`` with the run's messages
        (:data:`.pipelines.CLASSIC_SEED`).
    limit : float, default inf
        Exact, a range run: only plans with ``T_p + max R`` below it are asked for (the
        owner's search limit, ``dp``'s :meth:`~chainpipe.solvers.dp_ranges.RangeTimes.
        within`). Each period run above a public floor ``lb`` under ``T_p`` is made under
        the cap ``min(sync_cap, limit - lb)`` (:func:`_within_cap`): every such plan has
        ``R`` below it. The plan found is the least ``T_p`` of a set that holds every plan
        within the limit, and may lie above it; "none" proves none within it.

    Returns
    -------
    Outcome
    """
    if backend.public.num_datacenters == 1 and (backend.public.period
                                                  or not backend.count_sync):
        # no summary is sent (a version-2 solve keeps its status feasible, as it had)
        options = {**options, "epsilon": 0.0, "quantum": 0.0, "digits": 0, "max_entries": 0}
    if not backend.public.period:
        return drive(backend, options, deadline=deadline, probe=probe, trace_dir=trace_dir)
    if not backend.count_sync and alone.usable(backend.public, options.get("sync_cap"),
                                               None, not is_exact(options)):
        return _one_dc_range(backend, options, deadline, trace_dir)
    if _near_floor(backend, options, floor):
        return _floor_run(backend, options, floor, deadline, trace_dir, limit)
    classic = backend.with_objective("classic")
    first = drive(classic, options, deadline=deadline, probe=probe,
                  trace_dir=None if trace_dir is None else Path(trace_dir, "classic"),
                  bound=classic_bound * (1 + 1e-9))
    exact = is_exact(options)
    # messages named as the trace files are: under classic/ and period/
    first.stats["messages"] = [{**m, "file": f"classic/{m['file']}"}
                               for m in first.stats.get("messages", [])]
    if first.status not in ("optimal", "feasible"):  # infeasible under both, or failed
        return first

    T_c, T_e, low, anchor = _classic_bounds(backend, classic, first, options)
    stats = {"classic": {k: v for k, v in first.stats.items() if k not in ("agents",)},
             "classic_s": T_c, "classic_plan_s": T_e}
    if low is not None and T_e <= low * (1 + 1e-12):
        return Outcome(first.status, first.plan, lower_bound=None if exact else T_e,
                       stats={**first.stats, **stats})
    user = options.get("upper_bound")
    bound = T_e * (1 + 1e-9) if user is None else min(float(user), T_e * (1 + 1e-9))
    if callable(period_bound):  # the owner's incumbent, given the classic plan's T
        period_bound = period_bound(T_e)
    bound = min(bound, period_bound * (1 + 1e-9))
    # the lower bound (a hair below, for rounding) is public too: the agents' trials start there
    period_options = {**options, "upper_bound": bound}
    if exact and low is not None and floor > low:  # the owner proved none up to floor
        low = floor
    if low is not None:
        period_options["lower_bound"] = low * (1 - 1e-9)
    if exact and low is not None and low * (1 - 1e-9) >= bound:
        out = _empty_period(bound)  # nothing between the floor and the bound to search
    else:
        out = _period_runs(backend, options, period_options, bound, anchor, deadline,
                           trace_dir, limit)
    timed_out = out.stats.get("timed_out", False)  # the time limit ended the run
    out.stats.update(stats)
    out.stats["messages"] = first.stats["messages"] + [
        {**m, "file": f"period/{m['file']}"} for m in out.stats.get("messages", [])]
    out.stats["agents"] = first.stats.get("agents", []) + out.stats.get("agents", [])
    if "message_bytes_max" in out.stats:  # of both runs' messages
        sizes = [m["bytes"] for m in out.stats["messages"]]
        out.stats["message_bytes_total"] = sum(sizes)
        out.stats["message_bytes_max"] = max(sizes, default=0)
    if not exact:
        return _compressed_period(backend, first, out, T_e, min(T_e, bound), low, options)
    return _exact_period(first, out, T_e, bound, user, timed_out)


def _empty_period(bound: float) -> Outcome:
    """What an exact period run under ``bound`` returns when its floor (the classic optimum,
    or a floor the owner's runs proved) is not below ``bound``: no plan, exhaustively,
    without a run (no plan's ``T`` lies under the classic optimum). It happens when the
    incumbent bounding the one-pipeline run lies under the classic optimum (``dp`` then
    makes no trial either, ``dp_pipelines._one_pipeline``): ``v3-large-03``, whose best
    plan of 8 pipelines (15.28 s) beats the classic optimum of one (17.89 s), ran 37,000
    labels for nothing (1.0 CPU s)."""
    return Outcome("no_solution", lower_bound=float(bound),
                   message=f"cdynp: no plan with T <= upper_bound {bound}",
                   stats={"messages": [], "agents": [], "protocol_s": 0.0, "skipped": True})


def _near_floor(backend, options: dict, floor: float) -> bool:
    """Whether an exact range run skips its classic solve: the owner's proven ``floor``
    under ``g`` lies so close under the run's bound that a ladder from it would climb at
    most :data:`NEAR_FLOOR_RUNGS` steps below the bound (:func:`_range_ladder`)."""
    if not (NEAR_FLOOR and is_exact(options) and floor > 0 and not backend.count_sync
            and options.get("upper_bound") is not None and options.get("sync_cap") is not None):
        return False
    bound = float(options["upper_bound"])
    steps = [d for d in RANGE_LADDER_STEPS if floor * (1 + d) < bound * (1 - RANGE_LADDER_NEAR)]
    return len(steps) <= NEAR_FLOOR_RUNGS


def _floor_run(backend, options: dict, floor: float, deadline: Deadline, trace_dir,
               limit: float = math.inf) -> Outcome:
    """An exact range run's period run without the classic solve (:func:`_near_floor`):
    the ladder from the owner's proven ``floor`` to the run's bound, the floor the prefix-
    curve pass's grid starts from (in place of the classic optimum, which only sets where
    the caps lie): :func:`_period_runs` with the floor as its anchor. Exact as the ladder
    is: no plan lies at or below ``floor``, and each run keeps every plan within its
    bound."""
    period_options = {**options, "lower_bound": floor * (1 - 1e-9)}
    out = _period_runs(backend, options, period_options, float(options["upper_bound"]),
                       floor, deadline, trace_dir, limit)
    if out.stats.get("timed_out"):  # never "none below the bound" (as _exact_period)
        return Outcome("no_solution", message=out.message,
                       stats={"protocol_s": out.stats.get("protocol_s")})
    out.stats["messages"] = [{**m, "file": f"period/{m['file']}"}
                             for m in out.stats.get("messages", [])]
    return out


def _one_dc_range(backend, options: dict, deadline: Deadline, trace_dir) -> Outcome:
    """A range run of one DC: its agent answers by ``dp``'s search (:mod:`.alone`), which
    needs no classic bound."""
    out = drive(backend, options, deadline=deadline, probe=False,
                trace_dir=None if trace_dir is None else Path(trace_dir, "period"))
    out.stats["messages"] = [{**m, "file": f"period/{m['file']}"}
                             for m in out.stats.get("messages", [])]
    return out


def _classic_bounds(backend, classic, first: Outcome, options: dict) -> tuple:
    """``(T_c, T_e, low, anchor)`` from the classic solve's plan: its ``T`` under
    ``classic`` and under the period objective, the period run's proven floor (the classic
    optimum, exact; the classic run's lower bound, compressed: ``None`` under the cap), and
    where the prefix-curve pass's caps start (the classic optimum, or compressed the classic
    plan's ``T`` over the rounding factor: a floor with ``epsilon``, ``quantum`` and
    ``digits``, a guess under ``max_entries``; the caps' span only makes the pass's floor
    stronger or weaker, never wrong)."""
    exact = is_exact(options)

    def time_of(agents) -> float:
        ev = agents.evaluation(first.plan)
        return ev.iteration_time_s if backend.count_sync else ev.pipelines[0].time_s

    T_c, T_e = time_of(classic), time_of(backend)
    low = T_c if exact else first.lower_bound  # no period is below the classic optimum
    anchor = low if exact else T_c / guarantee_factor(
        backend.public.num_datacenters, options["epsilon"], options["quantum"],
        options["digits"])
    return T_c, T_e, low, anchor


def _period_runs(backend, options: dict, period_options: dict, bound: float, anchor,
                 deadline: Deadline, trace_dir, limit: float = math.inf) -> Outcome:
    """The period run of a one-pipeline solve after its classic solve: the owner's ladder
    with the prefix-curve pass (:func:`_curve_ladder`) over the whole chain, else one run
    (a range run's with the pass, where usable; under ``limit``, :func:`_within_cap`)."""
    curves = is_exact(options) or COMPRESSED_CURVE
    if curves and LADDER and _ladder_usable(backend, options, anchor):
        period_options.setdefault("lower_bound", anchor * (1 - 1e-9))
        return _curve_ladder(backend, period_options, bound, deadline, trace_dir)
    if curves and anchor and RANGE_CURVE and _curve_usable(backend):  # a range run: the pass
        low = CURVE_LOW if is_exact(options) else 1.0  # compressed: at most 16 caps
        period_options["curve_low"] = anchor * low * (1 - 1e-9)
    if (RANGE_LADDER and is_exact(options) and options.get("upper_bound") is not None
            and not backend.count_sync and anchor and math.isfinite(bound)):
        low = max(anchor, period_options.get("lower_bound", 0.0) / (1 - 1e-9))
        return _range_ladder(backend, period_options, bound, low, deadline, trace_dir, limit)
    one = _within_cap(period_options, limit)
    if one is None:
        return _empty_period(bound)
    out = drive(backend, one, deadline=deadline, probe=False,
                trace_dir=None if trace_dir is None else Path(trace_dir, "period"))
    return _floors_dropped(out, one, period_options)


def _range_ladder(backend, period_options: dict, bound: float, low: float,
                  deadline: Deadline, trace_dir, limit: float = math.inf) -> Outcome:
    """An exact range run's period run under the owner's public ``bound`` as a ladder of
    public bounds ``low (1 + d)`` for :data:`RANGE_LADDER_STEPS` below ``bound (1 -``
    :data:`RANGE_LADDER_NEAR` ``)``, then ``bound``; ``low`` is the classic optimum of the
    range (no period lies below it). Each run keeps every plan within its bound (exact), so
    the first that finds a plan finds the least ``T_p``; each that finds nothing proves
    none at or below its bound, which becomes the next run's public ``lower_bound``. A run
    under a bound far above the least ``T_p`` keeps many times the labels of one just
    above it (``v3-large-03``'s DCs 2..3 at ``M_p = 23``, least ``T_p`` 11.874 s: 15 CPU s
    under 12.68 s, 2.2 s under 11.9 s). Returns the last run's outcome, its stats holding
    every run's messages and agents and ``ladder`` (per run: bound, plan found). After a
    miss the ladder climbs by ``dp``'s strides (:data:`RANGE_STRIDES`) and puts its next
    bound close above a dear one (:data:`RANGE_CLOSE`). Under ``limit`` each rung runs
    under :func:`_within_cap` of its lower bound; a rung whose lower bound reaches the
    limit ends the ladder: none within it."""
    bounds = [low * (1 + d) for d in RANGE_LADDER_STEPS
              if low * (1 + d) < bound * (1 - RANGE_LADDER_NEAR)] + [bound]
    opts = dict(period_options)
    messages, agents, steps = [], [], []
    i, before, stride = 0, None, 1
    while i < len(bounds):
        ub = bounds[i]
        sub = None if trace_dir is None else Path(trace_dir, "period", f"ladder-{i:02d}")
        rung = _within_cap({**opts, "upper_bound": ub}, limit)
        if rung is None:  # every plan from here on has T_p at or above the limit
            out = _empty_period(ub)
            break
        out = _floors_dropped(drive(backend, rung, deadline=deadline, probe=False,
                                    trace_dir=sub), rung, opts)
        messages += [{**m, "file": f"ladder-{i:02d}/{m['file']}"}
                     for m in out.stats.get("messages", [])]
        agents += out.stats.get("agents", [])
        steps.append({"upper_bound": ub, "found": out.plan is not None})
        if out.plan is not None or out.status != "no_solution" or "messages" not in out.stats:
            break  # a plan (the least), an error, or the time limit
        opts["lower_bound"] = ub  # none at or below it: the next run's trials start there
        labels = labels_kept(out.stats.get("agents", []))
        if RANGE_CLOSE:  # a dear miss: the least T_p lies close above it (dp's rule)
            close_step(bounds, i, labels)
        if RANGE_STRIDES:
            stride, before = _climb(bounds, i, labels, before, stride), labels
        i += 1
    if "messages" in out.stats:
        out.stats["messages"], out.stats["agents"] = messages, agents
    out.stats["ladder"] = steps
    return out


def _within_cap(options: dict, limit: float) -> dict | None:
    """A period run's ``options`` under the owner's ``limit`` on ``T_p + max R``: every
    plan within it whose ``T_p`` lies above the run's public ``lower_bound`` ``lb`` has
    ``R`` below ``limit - lb``, so the run's ``sync_cap`` falls to it (a hair above, for
    rounding: a larger cap only keeps more plans). ``None``: ``lb`` at or above the limit,
    no such plan. Unchanged without a limit or a lower bound."""
    lb = options.get("lower_bound")
    if not WITHIN_CAP or math.isinf(limit) or lb is None or options.get("sync_cap") is None:
        return options
    room = limit - float(lb)
    if room <= 0.0:
        return None
    cap = room * (1 + 1e-9)
    return {**options, "sync_cap": cap} if cap < float(options["sync_cap"]) else options


def _floors_dropped(out: Outcome, run: dict, options: dict) -> Outcome:
    """``out``, of a period run under ``run`` (:func:`_within_cap` of ``options``), with
    its last DC's ``period_floor_s`` left out of its agents' reports where the cap fell:
    with a knapsack per cap class (:data:`.agent.FLOORS_PER_CAP`) that floor counts only
    the options the run's cap keeps, so it bounds only the plans within the limit, and
    the owner reads it as a floor under every plan's period at the question's ``theta``
    (:meth:`.questions.OwnerRangeTimes._period_line`). With one knapsack per DC (the
    default) it counts every option and would hold; kept or dropped, the same range runs
    on ``v3/medium`` and fresh seeds 44 and 52 (session 48)."""
    if run.get("sync_cap") == options.get("sync_cap") or "agents" not in out.stats:
        return out
    out.stats["agents"] = [{k: v for k, v in a.items() if k != "period_floor_s"}
                           for a in out.stats["agents"]]
    return out


def _close_rungs(bounds: list, i: int, labels: int) -> None:
    """After rung ``i`` of a one-pipeline ladder's ``bounds`` found nothing and its agents
    kept ``labels`` labels: past :data:`.dp_ranges.CLOSE` (a dear miss: each rung above
    keeps about twice the labels of the one below, so a rung far past the optimum costs
    most) the rungs above it go :data:`.dp_ranges.CLOSE_STEP` apart, up to the last (the
    owner's bound), where they were wider."""
    if labels <= CLOSE or i + 2 >= len(bounds):
        return
    step = bounds[i] * (1 + CLOSE_STEP)
    if bounds[i + 1] <= step:
        return
    top, rungs = bounds[-1], []
    while step < top * (1 - 1e-9):
        rungs.append(step)
        step *= 1 + CLOSE_STEP
    bounds[i + 1:] = rungs + [top]


def _climb(bounds: list, i: int, labels: int, before: int | None, stride: int) -> int:
    """After rung ``i`` of a ladder's ``bounds`` found nothing, its DCs keeping ``labels``
    labels (``before``: the last miss's, ``stride`` rungs below it), ``dp``'s stride
    (:meth:`chainpipe.solvers.dp_ranges.RangeTimes._stride`); the rungs it leaves out are
    taken out of ``bounds``, never the last (the owner's bound). Returns the stride."""
    stride = RangeTimes._stride(labels, before, stride)
    for _ in range(stride - 1):
        if i + 2 < len(bounds):
            del bounds[i + 1]
    return stride


def _exact_period(first: Outcome, out: Outcome, T_e: float, bound: float, user,
                  timed_out: bool) -> Outcome:
    """The answer of an exact period solve from its classic and period runs."""
    if timed_out:  # never "optimal" (nor, in a range run, "none below the bound") below
        if user is not None:  # what a range run the time limit ended returns (no messages)
            return Outcome("no_solution", message=out.message,
                           stats={"protocol_s": out.stats.get("protocol_s")})
        return Outcome("feasible", first.plan, message=out.message, stats=out.stats)
    if out.status == "no_solution" and user is None and out.plan is None:
        # the search below min(T_e, period_bound) (1 + 1e-9) was exhaustive and found
        # nothing: the classic plan, at T_e, is optimal (T_e below the bound: never
        # expected, it is itself below it), else no one-pipeline plan beats the incumbent
        status = "optimal" if T_e * (1 + 1e-9) <= bound else "feasible"
        return Outcome(status, first.plan, stats=out.stats)
    return out


#: whether the one-pipeline period run goes by the owner's ladder with the prefix-curve pass
#: (:func:`_curve_ladder`); ``False``: one run under the classic plan's ``T``, as before
LADDER = True

#: whether a range run (several pipelines) makes the prefix-curve pass too (one run under
#: the owner's bound, no ladder)
RANGE_CURVE = True

#: where an exact run's grid of caps starts, a range run's and the one-pipeline ladder's
#: (:func:`_curve_ladder`): this times the classic optimum over ``M_p - 1``
#: (``docs/privacy.md``, "The prefix-curve pass", *A range run's grid*). A plan's period
#: may lie well below ``T_c / (M_p - 1)`` (the fill is part of ``T_c``), and the paired floor
#: of a label whose completions' period lies under the grid's lowest cap
#: is that cap's fill with no steady part (``E_0 + (M_p - 1) 0``): a finer grid further down
#: raises it. ``v3-large-02``'s DCs 2..3 at ``M_p = 23`` under 14.758 s (least ``T_p``
#: 13.227 s): DC 3 kept 115,322 labels with the grid from ``T_c`` and 22,482 from ``0.8 T_c``
#: (the range run 12.0 -> 4.2 CPU s); the whole solve 51 -> 41 CPU s (0.9: 42 s, 0.5 with
#: a ladder of runs: 48 s). Compressed runs keep ``T_c`` (their grid holds 16 caps at most).
CURVE_LOW = 0.8

#: whether an exact range run under the owner's limit on ``T_p + max R`` makes each period
#: run under the cap the limit leaves above the run's floor (:func:`_within_cap`); ``False``:
#: under the question's cap, the owner's loop alone honouring the limit
#: (:meth:`.questions.OwnerRangeTimes._search`). ``v3-medium-04-gpipe``-like seed 44: 23
#: range runs of several DCs -> 17
WITHIN_CAP = True

#: whether an exact range run under a public bound makes its period run a ladder of bounds
#: from the range's classic optimum (:func:`_range_ladder`); ``False``: one run under it
RANGE_LADDER = True

#: whether an exact range run's ladder puts its next step close above a dear miss, as
#: ``dp``'s range ladder does (:func:`chainpipe.solvers.dp_ranges.close_step`: more than
#: ``CLOSE`` labels kept by the range's DCs, the next bound ``CLOSE_STEP`` above)
RANGE_CLOSE = True

#: whether an exact range run's ladder climbs with ``dp``'s strides
#: (:meth:`chainpipe.solvers.dp_ranges.RangeTimes._stride`): a rung left out after a miss
#: that kept few labels (``FAR``, far below the least ``T_p``), two or four while the
#: labels grow slowly a rung (``SLOW``). Drives (labels): ``v3-medium-02`` 97 -> 91 (9,101
#: -> 9,951; CPU 1.50 -> 1.43 s, least of 5), ``-03`` 89 -> 86 (6,023 -> 5,980),
#: ``v3-large-03`` 303 -> 295 (454,409 -> 453,077), ``v3-large-02`` 166 -> 163
RANGE_STRIDES = True

#: whether an exact range run whose owner's proven floor lies close under its bound skips
#: its classic solve (:func:`_near_floor`, :func:`_floor_run`)
NEAR_FLOOR = True

#: the most ladder steps below the bound a range run skipping its classic solve climbs
NEAR_FLOOR_RUNGS = 1

#: the range ladder's steps above the classic optimum (``dp``'s range ladder,
#: :data:`chainpipe.solvers.dp_ranges.LADDER`: 3 % apart)
RANGE_LADDER_STEPS = tuple(1.03 ** k - 1 for k in range(1, 40))

#: a range ladder's step less than this (relative) below the owner's bound is left out
RANGE_LADDER_NEAR = 0.015

#: whether an exact one-pipeline ladder (:func:`_curve_ladder`) climbs by ``dp``'s strides
#: after a miss, as an exact range run's does (:data:`RANGE_STRIDES`): a rung left out after a
#: miss whose agents kept few labels (:data:`.dp_ranges.FAR`), two or four while they grow
#: slowly a rung (:data:`.dp_ranges.SLOW`). Each run over the whole chain has fixed costs
#: (a prefix pass, summaries and the plan's assembly; ``v3-medium-02``'s rungs kept 0 to 22
#: labels and took 40 ms each) that the first rungs' few labels do not repay
CURVE_STRIDES = True

#: whether an exact one-pipeline ladder puts its next rung close above a dear miss, as a
#: range run's ladder does (:data:`RANGE_CLOSE`, ``dp``'s
#: :func:`~chainpipe.solvers.dp_ranges.close_step`)
CURVE_CLOSE = True

#: whether compressed period runs make the prefix-curve pass too (its table sent coarse:
#: caps ``2^(n / COMPRESSED_CAP_STEPS)`` apart and one excess bucket, :mod:`.curve`), and
#: the one-pipeline run goes by the owner's ladder
COMPRESSED_CURVE = True

#: the owner's ladder of bounds above the prefix-curve floor: ``F0 (1 + d)``, ``dp``'s steps
#: up to 0.1 (``docs/dp.md``, "One pipeline, the answer"), then 2% apart up to 0.3. The
#: pass's floor lies further below the optimum than ``dp``'s curve floor (a fresh
#: ``v3-large-01``-like draw, seed 42: 5.461 s against ``dp``'s 5.607 s, the optimum 5.931
#: s), so the optimum often lies past 10% above it, where ``dp``'s steps are 5% apart: on
#: seed 44 (optimum 5.639 s) the rung after a miss at 5.629 s was 5.885 s (211,685 labels,
#: 9.3 s). Far below the optimum the strides (:data:`CURVE_STRIDES`) leave the fine rungs out
LADDER_STEPS = tuple(d for d in DP_STEPS if d <= 0.1) + tuple(
    round(0.1 + 0.02 * i, 12) for i in range(1, 11))


def _curve_usable(backend) -> bool:
    """Whether a period run of ``backend``'s chain can make the prefix-curve pass: 1F1B,
    several microbatches."""
    public = backend.public
    return public.training.schedule == "1f1b" and public.microbatches > 1


def _ladder_usable(backend, options: dict, low) -> bool:
    """Whether the one-pipeline period run goes by the owner's ladder (:func:`_curve_ladder`):
    an exact run of one pipeline over the whole chain (no ``sync_cap``) under 1F1B, of
    several microbatches, with a proven floor ``low`` (the classic optimum)."""
    return (low is not None and low > 0 and backend.count_sync
            and options.get("sync_cap") is None and _curve_usable(backend))


def _curve_ladder(backend, period_options: dict, bound: float, deadline: Deadline,
                  trace_dir) -> Outcome:
    """The one-pipeline period run as the owner's ladder of public bounds (``docs/privacy.md``,
    "The prefix-curve pass"). Every run makes the prefix-curve pass on one grid of caps
    (``curve_low``: :data:`CURVE_LOW` times the classic optimum in exact mode, so that the
    lowest caps lie under every plan's period and the floor stands on them; ``curve_top``:
    ``bound``); the first runs under a hair above the classic optimum, and its last DC
    reports the pass's floor ``F0`` (``curve_floor_s``); then runs under ``T_0 (1 + d)``
    for :data:`LADDER_STEPS` below ``bound``, ``T_0`` the larger of ``F0`` and the classic
    optimum (as ``dp``'s trials start from the larger of its floor and the classic
    optimum), and last under ``bound`` (none when ``F0`` is not below ``bound``: no plan's
    ``T`` lies under ``F0``, so that run would find nothing; ``v3-large-02``, whose
    incumbent of 8 pipelines, 17.516 s, lies under ``F0`` = 17.686 s), each with the last failed bound as its public
    ``lower_bound`` (in exact mode, after a miss whose agents kept few labels, or whose labels
    grew slowly from the last miss's, the next rungs are left out: :data:`CURVE_STRIDES`),
    until one finds a plan (the optimum: an exact run under ``U`` keeps every
    plan with ``T <= U``, and the runs before proved none below their bounds) or the time
    limit ends one. Returns the last run's outcome, its stats holding every run's messages
    and agents, ``ladder`` (per run: bound, plan found, wall seconds) and
    ``curve_floor_s``."""
    low = period_options["lower_bound"]
    grid_low = low * (CURVE_LOW if is_exact(period_options) else 1.0)
    opts = {**period_options, "curve_low": grid_low, "curve_top": bound}
    bounds = [min(low * (1 + 2e-9), bound)]
    messages, agents, steps, floor = [], [], [], None
    i, before, stride = 0, None, 1
    while True:
        ub = bounds[i]
        sub = "period" if trace_dir is None else Path(trace_dir, "period", f"ladder-{i:02d}")
        t0 = time.perf_counter()
        out = drive(backend, {**opts, "upper_bound": ub}, deadline=deadline, probe=False,
                    trace_dir=None if trace_dir is None else sub)
        messages += [{**m, "file": f"ladder-{i:02d}/{m['file']}"}
                     for m in out.stats.get("messages", [])]
        agents += out.stats.get("agents", [])
        steps.append({"upper_bound": ub, "found": out.plan is not None,
                      "protocol_s": time.perf_counter() - t0})
        if i == 0:
            got = [a["curve_floor_s"] for a in out.stats.get("agents", [])
                   if "curve_floor_s" in a]
            floor = max(got) if got else None
            # the steps from the pass's floor, or from the classic optimum (the first
            # bound) when the floor lies below it, as dp's trials go from T_0
            anchor = ub if floor is None else max(floor, ub)
            ladder = COMPRESSED_STEPS if not is_exact(opts) else LADDER_STEPS
            bounds += [anchor * (1 + d) for d in ladder if anchor * (1 + d) < bound]
            if bounds[-1] < bound and (floor is None or floor < bound):
                bounds.append(bound)  # (F0 at or above bound: nothing left to search)
        if out.plan is not None or out.stats.get("timed_out") or i + 1 == len(bounds):
            break
        opts["lower_bound"] = ub  # no plan at or below it: the next run's trials start there
        labels = labels_kept(out.stats.get("agents", []))
        if CURVE_CLOSE and is_exact(opts):  # a dear miss: the optimum lies close above
            _close_rungs(bounds, i, labels)
        if CURVE_STRIDES and is_exact(opts):  # dp's strides: few labels, far below
            stride, before = _climb(bounds, i, labels, before, stride), labels
        i += 1
    if out.plan is not None and opts.get("max_entries"):
        out = _descend(backend, opts, out, deadline, trace_dir, i, (messages, agents, steps),
                       bounds[i - 1] if i > 0 else None)
    out.stats["messages"], out.stats["agents"] = messages, agents
    out.stats["ladder"], out.stats["curve_floor_s"] = steps, floor
    return out


def _descend(backend, opts: dict, out: Outcome, deadline: Deadline, trace_dir, i: int,
             seen: tuple, failed: float | None) -> Outcome:
    """Under the ``max_entries`` cap, after the ladder's run that found a plan: runs under
    bounds :data:`REFINE_STEPS` above the last bound that found nothing (``failed``) while
    they lie below the best plan's ``T`` (each of them, a better plan found or not), then
    under a hair below the ``T`` of the best plan found and, when that finds nothing better,
    under :data:`BELOW_STEPS` below that ``T``, starting again from each better plan found,
    until all of them find nothing better (or the time limit). A compressed run keeps per summary entry a selection of the
    points below its bound, which need not hold the optimum's, and which points are left
    to select from depends on the bound, not monotonically (``v3-large-01``, covers of 8
    points per entry: nothing under 7.00 s, 6.996 s under 7.02 to 7.08 s, 7.001 s under
    7.10 to 7.20 s, 7.044 s under 7.26 s; the optimum is 6.868 s); a run under a bound
    near the last failed one costs 3 to 5 CPU s there.
    Returns the outcome of the best plan's run; ``seen`` (messages, agents, ladder steps)
    is extended in place."""
    messages, agents, steps = seen

    def T_of(plan) -> float:
        ev = backend.evaluation(plan)
        return ev.iteration_time_s if backend.count_sync else ev.pipelines[0].time_s

    best, T = out, T_of(out.plan)
    ups = [] if failed is None else [failed * (1 + d) for d in REFINE_STEPS]
    downs, hair = list(BELOW_STEPS), True
    while DESCENT and not deadline.expired():
        ups = [u for u in ups if u < T * (1 - 1e-6)]
        if ups:
            ub = ups.pop(0)
        elif hair:  # the run under a hair below the best T
            ub, hair = T * (1 - 1e-6), False
        elif downs:  # then tighter targets: smaller reaches (cdynp.reach), finer selections
            ub = T * (1 - downs.pop(0))
        else:
            break
        i += 1
        sub = None if trace_dir is None else Path(trace_dir, "period", f"ladder-{i:02d}")
        t0 = time.perf_counter()
        got = drive(backend, {**opts, "upper_bound": ub}, deadline=deadline, probe=False,
                    trace_dir=sub)
        messages += [{**m, "file": f"ladder-{i:02d}/{m['file']}"}
                     for m in got.stats.get("messages", [])]
        agents += got.stats.get("agents", [])
        steps.append({"upper_bound": ub, "found": got.plan is not None,
                      "protocol_s": time.perf_counter() - t0})
        T2 = math.inf if got.plan is None else T_of(got.plan)
        if T2 < T:
            best, T = got, T2
            downs, hair = list(BELOW_STEPS), True
    return best


#: a compressed ladder's bounds above the last that found nothing (:func:`_descend`;
#: 1.5% alone before session 34)
REFINE_STEPS = (0.005, 0.01, 0.015, 0.02, 0.03)

#: a compressed run's ladder: its coarse table's floor lies further below the optimum
#: (``v3-large-01``: 5.80 s against the exact 6.57 s, the optimum 6.87 s), and a run under
#: a loose bound both costs most (7.54 s: 54 CPU s against 15 s under 6.96 s) and keeps per
#: entry points that need not be the optimum's, so the steps past 10% are 2.5% apart
COMPRESSED_STEPS = LADDER_STEPS[:LADDER_STEPS.index(0.1) + 1] + tuple(
    0.1 + 0.025 * i for i in range(1, 9))

#: after the run under a hair below the best plan's ``T`` finds nothing better, runs under
#: ``T (1 - d)`` (:func:`_descend`): a run under a tighter bound selects points nearer it
#: (:mod:`.reach`), so it may find a plan a looser run missed (session 35)
BELOW_STEPS = (0.0025, 0.005, 0.01)

#: whether a compressed ladder descends from the plan it found (:func:`_descend`)
DESCENT = True


def _compressed_period(backend, first: Outcome, out: Outcome, T_e: float, cut: float, low,
                       options) -> Outcome:
    """The answer of a compressed period solve: the better of the classic run's plan (at
    ``T_e`` under ``period``) and the compressed period run's, if it found one below
    ``T_e``. The optimum's chain of kept points in the (last) period run either reached DC
    1 (its estimate is then at most the guarantee factor ``F`` times the optimum) or was cut
    by that run's bound ``cut`` (at most ``T_e``; then ``cut`` is below ``F`` times it), so
    ``min(estimate, cut) / F`` is a lower bound on every one-pipeline plan, as is the
    classic run's."""
    if out.status not in ("feasible", "optimal", "no_solution") or "messages" not in out.stats:
        return out  # an error or the time limit
    plan, T = first.plan, T_e
    if out.plan is not None:
        ev = backend.evaluation(out.plan)
        T2 = ev.iteration_time_s if backend.count_sync else ev.pipelines[0].time_s
        if T2 < T:
            plan, T = out.plan, T2
    bound = None
    if not options["max_entries"]:
        factor = guarantee_factor(backend.public.num_datacenters, options["epsilon"],
                                  options["quantum"], options["digits"])
        estimate = out.stats.get("estimate_s")
        bound = min(cut, math.inf if estimate is None else estimate) / factor
        bound = max(bound, low) if low is not None else bound
    return Outcome("feasible", plan, lower_bound=bound, stats=out.stats)


class InstanceAgents:
    """The agents of a whole instance, in this process or one child process each; the
    owner checks their plan with the instance itself (``count_sync=False``: a range run
    under ``sync_cap``, whose points count no synchronisation)."""

    def __init__(self, instance: Instance, processes: bool, message_timeout: float,
                 count_sync: bool = True):
        self.count_sync = count_sync
        self.instance = instance
        self.public = PublicInstance.of(instance)
        self.processes = bool(processes)
        self.mode = "processes" if self.processes else "in-process"
        self.message_timeout = message_timeout

    def with_objective(self, objective: str) -> InstanceAgents:
        """The same agents on the same chain under ``objective`` (kept: every range run of
        this chain asks for its classic twin)."""
        return kept(self, "_objectives", objective, lambda: InstanceAgents(
            dataclasses.replace(self.instance, training=dataclasses.replace(
                self.instance.training, objective=objective)),
            self.processes, self.message_timeout, self.count_sync))

    def one_run(self, options: dict, trace_dir, deadline: Deadline) -> Run:
        if self.processes:
            return run_processes(*split_documents(self.instance), trace_dir=trace_dir,
                                 deadline=deadline, message_timeout=self.message_timeout,
                                 **options)
        return run_in_process(self.public, list(self.instance.datacenters),
                              trace_dir=trace_dir, deadline=deadline, **options)

    def assemble(self, res: Run, exact: bool) -> Plan | None:
        """The plan from the agents' stages, once the summaries it was chosen by check out."""
        plan = plan_of(res.agents) if res.stages else None
        if plan is None:
            return None
        check_claims(self.public, evaluate(self.instance, plan), res.agents, exact=exact,
                     count_sync=self.count_sync)
        return plan

    def evaluation(self, plan: Plan):
        """The plan's :class:`~chainpipe.plan.Evaluation` on this chain."""
        return evaluate(self.instance, plan)

    def iteration_time(self, plan: Plan) -> float:
        return evaluate(self.instance, plan).iteration_time_s

    def infeasibility_reason(self) -> str:
        return CostTables(self.instance).infeasibility_reason() or (
            "no plan satisfies the memory and device limits (exhaustive chain DP)")


class LocalOwner:
    """The job's owner with the whole instance at hand: its agents run in this process or
    in one child process each (:class:`InstanceAgents`), and it evaluates plans itself.

    Parameters
    ----------
    instance : Instance
    processes : bool
    message_timeout : float
    """

    def __init__(self, instance: Instance, processes: bool, message_timeout: float):
        self.instance, self.processes = instance, bool(processes)
        self.message_timeout = message_timeout
        self.public = PublicInstance.of(instance)
        self.mode = "processes" if self.processes else "in-process"

    def whole(self) -> InstanceAgents:
        """The agents of the whole chain, on the instance as it is."""
        return InstanceAgents(self.instance, self.processes, self.message_timeout)

    def chain(self, first: int, last: int, microbatches: int,
              count_sync: bool = True) -> InstanceAgents:
        """The agents of DCs ``first..last`` planning one pipeline of ``microbatches``
        (kept per range and count, as an agent server keeps its views,
        :meth:`.public.PublicInstance.chain`: the range's instance and the DCs' one-DC
        instances are built and checked once, not for every run)."""
        from .pipelines import chain_instance

        return kept(self, "_chains", (first, last, int(microbatches), bool(count_sync)),
                    lambda: InstanceAgents(
                        chain_instance(self.instance, first, last, microbatches),
                        self.processes, self.message_timeout, count_sync),
                    CHAINS_KEPT)

    def evaluation(self, plan: Plan, pipelines=None):
        """The plan's evaluation on the whole instance (``pipelines``, each pipeline's cost
        from its range run, are not needed here: the owner holds the instance)."""
        return evaluate(self.instance, plan)

    def infeasibility_reason(self) -> str:
        return CostTables(self.instance).infeasibility_reason() or (
            "no plan of an allowed pipeline count satisfies the memory and device limits "
            "(exhaustive search)")


def _compare_dp(instance: Instance, plan: Plan | None, deadline: Deadline) -> dict:
    """dp's answer on the same instance, under what is left of the same time limit."""
    from ..dp import run as dp_run

    t0 = time.perf_counter()
    ref = dp_run(instance, deadline=deadline)
    T_ref = evaluate(instance, ref.plan).iteration_time_s if ref.plan is not None else None
    out = {"dp_iteration_time_s": T_ref, "dp_solve_time_s": time.perf_counter() - t0,
           "dp_status": ref.status}
    if plan is not None and T_ref:
        T = evaluate(instance, plan).iteration_time_s
        out["gap_vs_dp"] = (T - T_ref) / T_ref
    out["compare_dp_s"] = time.perf_counter() - t0
    return out
