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
reported lower bound; ``max_entries`` gives no guarantee.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

from ...deadline import Deadline, TimeUp
from ...instance import Instance
from ...plan import Plan, evaluate
from ...result import Outcome, number_option
from ...support import features, refusal
from ...tables import CostTables
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
)
from .public import PublicInstance, split_documents, write_split
from .runner import MESSAGE_TIMEOUT_S, AgentFailure, Run, run_in_process, run_processes

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
    if "period" in features(instance.training) and not is_exact(options):
        return Outcome("error", message="cdynp: under the period objective only the exact "
                       "search runs (no epsilon, quantum, digits or max_entries)")
    if "pipelines" in features(instance.training):
        return _several_pipelines(instance, options, deadline, processes, message_timeout,
                                  trace_dir, probe, compare_dp)
    outcome = solve_chain(instance, options, deadline, processes, message_timeout,
                          trace_dir=trace_dir, probe=probe)
    if compare_dp and "messages" in outcome.stats:  # the protocol ran to its end
        outcome.stats.update(_compare_dp(instance, outcome.plan, deadline))
    return outcome


def solve_chain(instance: Instance, options: dict, deadline: Deadline, processes: bool,
                message_timeout: float, *, trace_dir=None, probe=None,
                count_sync: bool = True) -> Outcome:
    """One pipeline over the whole chain of ``instance``, by the agents.

    Under ``classic`` (or ``M = 1``) one :func:`.drive.drive`. Under ``period`` as ``dp``
    does it (``docs/dp.md``, "One pipeline, the answer"): the classic solve first (the
    same agents on the same chain, under ``classic``: the version-2 protocol with its
    probe and compression), whose optimum ``T_c`` is a lower bound (no period is below the
    classic one) and whose plan's ``T`` under ``period``, ``T_e``, an upper bound; when
    they meet, that plan is optimal, otherwise the period run (:mod:`.period`) searches
    below ``T_e`` given as its ``upper_bound`` (public), which keeps it exact and bounds
    every DC's labels. Messages of the two runs go to ``trace_dir/classic`` and
    ``trace_dir/period``.

    Parameters
    ----------
    instance : Instance
        The chain (one pipeline).
    options : dict
        The agents' options (:func:`.drive.agent_options`, ``sync_cap`` besides).
    deadline : Deadline
    processes : bool
    message_timeout : float
    trace_dir : path, optional
    probe : bool, optional
        As for :func:`run` (the classic solve's).
    count_sync : bool, default True
        ``False`` under ``sync_cap``: the runs minimise ``T_p`` (points count no ``R``).

    Returns
    -------
    Outcome
    """
    backend = InstanceAgents(instance, processes, message_timeout, count_sync=count_sync)
    if not backend.public.period:
        return drive(backend, options, deadline=deadline, probe=probe, trace_dir=trace_dir)
    classic = dataclasses.replace(instance, training=dataclasses.replace(
        instance.training, objective="classic"))
    first = drive(InstanceAgents(classic, processes, message_timeout, count_sync=count_sync),
                  options, deadline=deadline, probe=probe,
                  trace_dir=None if trace_dir is None else Path(trace_dir, "classic"))
    if first.status != "optimal":  # infeasible under both (same memory rules), or failed
        return first

    def time_of(inst) -> float:
        ev = evaluate(inst, first.plan)
        return ev.iteration_time_s if count_sync else ev.pipelines[0].time_s

    T_c, T_e = time_of(classic), time_of(instance)
    stats = {"classic": {k: v for k, v in first.stats.items() if k not in ("agents",)},
             "classic_s": T_c, "classic_plan_s": T_e}
    if T_e <= T_c * (1 + 1e-12):
        return Outcome("optimal", first.plan, stats={**first.stats, **stats})
    user = options.get("upper_bound")
    bound = T_e * (1 + 1e-9) if user is None else min(float(user), T_e * (1 + 1e-9))
    # T_c (a hair below, for rounding) is public too: the agents' trials start there
    out = drive(backend, {**options, "upper_bound": bound, "lower_bound": T_c * (1 - 1e-9)},
                deadline=deadline, probe=False,
                trace_dir=None if trace_dir is None else Path(trace_dir, "period"))
    out.stats.update(stats)
    out.stats["messages"] = first.stats.get("messages", []) + out.stats.get("messages", [])
    out.stats["agents"] = first.stats.get("agents", []) + out.stats.get("agents", [])
    if out.status == "no_solution" and user is None and out.plan is None:
        # the search below T_e (1 + 1e-9) was exhaustive and found nothing: the classic
        # plan, at T_e, is optimal (never expected: it is itself below the bound)
        return Outcome("optimal", first.plan, stats=out.stats)
    return out


def _several_pipelines(instance: Instance, options: dict, deadline: Deadline, processes: bool,
                       message_timeout: float, trace_dir, probe, compare_dp) -> Outcome:
    """The exact search over the allowed pipeline counts (:mod:`.pipelines`): one
    pipeline over the whole chain by the usual solve, several by range runs."""
    from .pipelines import RangeRuns, chain_instance, several

    if not is_exact(options) or options["upper_bound"] is not None:
        return Outcome("error", message="cdynp: with several pipelines only the exact search "
                       "runs (no epsilon, quantum, digits, max_entries or upper_bound)")
    t0 = time.perf_counter()
    K, M = instance.num_datacenters, instance.microbatches
    allowed = instance.parallelism.pipelines
    best_T, best_plan, stats = math.inf, None, {"mode": "processes" if processes
                                                else "in-process", "exact": True}
    runs = RangeRuns(instance, processes, message_timeout, deadline,
                     None if trace_dir is None else Path(trace_dir))
    try:
        if 1 in allowed:
            whole = chain_instance(instance, 0, K - 1, M)
            one = solve_chain(whole, options, deadline, processes, message_timeout,
                              trace_dir=None if trace_dir is None else Path(trace_dir, "one"),
                              probe=probe)
            if one.status == "error":
                return one
            if one.status not in ("optimal", "infeasible"):
                raise TimeUp(one.message or "time limit reached")
            stats["one_pipeline"] = {k: v for k, v in one.stats.items() if k != "agents"}
            if one.plan is not None:
                best_plan = Plan(one.plan.stages)
                best_T = evaluate(instance, best_plan).iteration_time_s
        counts = [P for P in sorted(allowed) if 2 <= P <= min(M, K)]
        best_T, found = several(instance, counts, runs, best_T, deadline)
        best_plan = found or best_plan
    except TimeUp as exc:
        message = f"cdynp: {exc}"
        stats.update(_range_stats(runs, t0))
        if best_plan is None:
            return Outcome("no_solution", message=message, stats=stats)
        return Outcome("feasible", best_plan, message=message, stats=stats)
    except AgentFailure as exc:
        return Outcome("error", message=f"cdynp: {exc}",
                       stats={**_range_stats(runs, t0), "failed_datacenter": exc.datacenter})
    stats.update(_range_stats(runs, t0))
    if best_plan is None:
        return Outcome("infeasible", message=CostTables(instance).infeasibility_reason() or (
            "no plan of an allowed pipeline count satisfies the memory and device limits "
            "(exhaustive search)"), stats=stats)
    stats["objective_s"] = best_T
    if compare_dp:
        stats.update(_compare_dp(instance, best_plan, deadline))
    return Outcome("optimal", best_plan, stats=stats)


def _range_stats(runs, t0: float) -> dict:
    sizes = [m["bytes"] for m in runs.messages]
    return {"range_runs": runs.runs, "messages": runs.messages, "labels": runs.labels,
            "message_bytes_total": sum(sizes), "message_bytes_max": max(sizes, default=0),
            "protocol_s": time.perf_counter() - t0}


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

    def iteration_time(self, plan: Plan) -> float:
        return evaluate(self.instance, plan).iteration_time_s

    def infeasibility_reason(self) -> str:
        return CostTables(self.instance).infeasibility_reason() or (
            "no plan satisfies the memory and device limits (exhaustive chain DP)")


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
