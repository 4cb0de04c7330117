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

import math
import time
from pathlib import Path

from ...deadline import Deadline, TimeUp
from ...instance import Instance, InstanceError
from ...plan import Plan, evaluate
from ...result import OptionError, Outcome, number_option
from ...tables import CostTables
from .audit import check_claims
from .public import PublicInstance, split_documents, write_split
from .runner import MESSAGE_TIMEOUT_S, AgentFailure, Run, run_in_process, run_processes

__all__ = ["PROBE_BEAM", "PROBE_ENTRIES", "PROBE_FINE_ENTRIES", "PROBE_LAYERS_PER_PART",
           "guarantee_factor", "run", "split_instance"]

#: partial plans per DP state each DC keeps in the probe run (measured on hybrid/medium:
#: 1 finds the optimum or a plan within 1% of it, at a third of the cost of 2)
PROBE_BEAM = 1
#: points per summary entry in the probe run
PROBE_ENTRIES = 4
#: points per summary entry in the fine probe run (no grid, under the coarse probe's T;
#: measured on hybrid/large: 1.2%, 2.8% and 0.03% above the optimum where the coarse one
#: lands 7.7%, 7.5% and 10.6% above, in 1.5 to 2.4 s)
PROBE_FINE_ENTRIES = 1
#: the probe's stages start and end on a grid of parts of about this many layers
#: (measured on hybrid-large-02, 98 layers: parts of 6 layers put the probe 60% above the
#: optimum, of 3 layers 7.5% in 0.6 s, no grid 2.8% in 6 s)
PROBE_LAYERS_PER_PART = 3


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


def guarantee_factor(num_datacenters: int, epsilon: float = 0.0, quantum: float = 0.0,
                     digits: int = 0) -> float:
    """Proven ratio bound ``T_found / T_opt`` for epsilon/quantum/digits compression:
    each of the ``K - 1`` summaries loses at most one factor of each."""
    hops = max(num_datacenters - 1, 0)
    per_hop = (1.0 + epsilon) * (1.0 + quantum) * (1.0 + (10.0 ** (1 - digits) if digits else 0.0))
    return per_hop ** hops


def run(instance: Instance, *, deadline=None, seed=0, threads=1, log=None, epsilon=0.0,
        quantum=0.0, digits=0, max_entries=0, upper_bound=None, processes=False,
        message_timeout=MESSAGE_TIMEOUT_S, trace_dir=None, compare_dp=False,
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
    epsilon = number_option("cdynp", "epsilon", epsilon or 0.0)
    quantum = number_option("cdynp", "quantum", quantum or 0.0)
    max_entries = number_option("cdynp", "max_entries", max_entries or 0, integer=True)
    digits = number_option("cdynp", "digits", digits or 0, integer=True)
    message_timeout = number_option("cdynp", "message_timeout", message_timeout, strict=True)
    if upper_bound is not None:
        upper_bound = number_option("cdynp", "upper_bound", upper_bound, strict=True)
    if probe not in (None, True, False):
        raise OptionError(f"cdynp: option 'probe' must be true or false, got {probe!r}")
    deadline = Deadline.of(deadline)
    agent_opts = {"epsilon": epsilon, "quantum": quantum, "max_entries": max_entries,
                  "digits": digits, "upper_bound": upper_bound}
    exact = epsilon == 0 and quantum == 0 and max_entries == 0 and digits == 0
    public = PublicInstance.of(instance)
    t0 = time.perf_counter()

    def one_run(options: dict, trace) -> tuple[Run, Plan | None]:
        if processes:
            res = run_processes(*split_documents(instance), trace_dir=trace,
                                deadline=deadline, message_timeout=message_timeout, **options)
        else:
            res = run_in_process(public, list(instance.datacenters), trace_dir=trace,
                                 deadline=deadline, **options)
        return res, _assemble(instance, res, public.position_cap, exact and "beam" not in options)

    probes: list[tuple[str, Run]] = []  # each probe run and its trace subdirectory
    first, probe_T = None, None  # the best probe's (run, plan) and its T

    def probe_run(sub: str, options: dict) -> None:
        nonlocal first, probe_T
        got = one_run(options, None if trace_dir is None else Path(trace_dir, sub))
        probes.append((sub, got[0]))
        if got[1] is not None:  # a real plan: the main run need not look above it
            T = evaluate(instance, got[1]).iteration_time_s
            if probe_T is None or T < probe_T:
                first, probe_T = got, T

    try:
        if probe is None:
            probe = not instance.parallelism.single_device
        if probe and upper_bound is None and instance.num_datacenters > 1:
            parts = math.ceil(instance.num_layers / PROBE_LAYERS_PER_PART)
            probe_run("probe", {**agent_opts, "beam": PROBE_BEAM, "grid": parts,
                                "max_entries": PROBE_ENTRIES})
            if probe_T is not None:  # then without the grid, below the coarse probe's T
                probe_run("probe-fine", {**agent_opts, "beam": PROBE_BEAM,
                                         "max_entries": PROBE_FINE_ENTRIES,
                                         "upper_bound": probe_T * (1 + _PROBE_SLACK)})
            if probe_T is not None:
                agent_opts["upper_bound"] = probe_T * (1 + _PROBE_SLACK)
        res, plan = one_run(agent_opts, trace_dir)
        if exact and plan is None and probe_T is not None:
            # never expected (the probe's plan is within the bound); stay exact regardless
            res, plan = one_run({**agent_opts, "upper_bound": None}, trace_dir)
    except TimeUp as exc:
        return Outcome("no_solution", message=f"cdynp: {exc}",
                       stats={"protocol_s": time.perf_counter() - t0})
    except AgentFailure as exc:
        return Outcome("error", message=f"cdynp: {exc}",
                       stats={"protocol_s": time.perf_counter() - t0,
                              "failed_datacenter": exc.datacenter})
    found = res.estimate  # compressed: an over-estimate of the plan found, inf if none
    if probes:
        messages = [{**m, "file": f"{sub}/{m['file']}"} for sub, done in probes
                    for m in done.messages]
        res.messages = messages + res.messages
        if not exact and probe_T is not None and (
                plan is None or evaluate(instance, plan).iteration_time_s > probe_T):
            # the compressed run dropped what the probe had: the probe's plan is the answer
            first[0].messages, res, plan = res.messages, first[0], first[1]
    stats = _stats(instance, res, exact, epsilon, quantum, digits, max_entries,
                   "processes" if processes else "in-process", time.perf_counter() - t0)
    if probes:
        stats["probe"] = {"estimate_s": probe_T,
                          "labels": sum(a.get("labels", 0) for _sub, done in probes
                                        for a in done.agents),
                          "messages": len(messages)}
    if compare_dp:
        stats.update(_compare_dp(instance, plan, deadline))
    if plan is None:
        return _no_plan(instance, upper_bound, exact, max_entries, stats)
    if exact:
        return Outcome("optimal", plan, lower_bound=res.estimate, stats=stats)
    factor = guarantee_factor(instance.num_datacenters, epsilon, quantum, digits)
    # the compressed search's chain of kept points for the optimum either reaches DC 1
    # (estimate <= factor * optimum) or was cut by the probe's bound (then the probe's T
    # is below factor * optimum): either way the better of the two over factor bounds it
    best = min(found, probe_T if probe_T is not None else math.inf)
    bound = None if max_entries else best / factor
    return Outcome("feasible", plan, lower_bound=bound, stats=stats)


#: the exact run after a probe looks for plans up to the probe's ``T`` times ``1 +`` this,
#: so that the probe's own plan is found again whatever the rounding of the sums
_PROBE_SLACK = 1e-9


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _assemble(instance: Instance, res: Run, position_cap: int, exact: bool) -> Plan | None:
    """The plan from the agents' stages, once the summaries it was chosen by check out."""
    if not res.stages:
        return None
    stages = []
    for report in res.agents:  # each agent reports its own stages in the plan's shape
        if not report["stages"]:
            continue
        try:
            stages.extend(Plan.from_dict({"stages": report["stages"]}).stages)
        except InstanceError as exc:
            raise AgentFailure(f"DC {report['datacenter']!r} reported stages that are not a "
                               f"plan: {exc.problems[0]}", report["datacenter"]) from None
    plan = Plan(tuple(stages))
    check_claims(instance, evaluate(instance, plan), res.agents, position_cap, exact=exact)
    return plan


def _stats(instance, res: Run, exact, epsilon, quantum, digits, max_entries, mode,
           elapsed) -> dict:
    sizes = [m["bytes"] for m in res.messages]
    factor = guarantee_factor(instance.num_datacenters, epsilon, quantum, digits)
    return {
        "mode": mode,
        "exact": exact,
        "epsilon": epsilon, "quantum": quantum, "digits": digits, "max_entries": max_entries,
        "guarantee_factor": None if max_entries else factor,
        "estimate_s": _finite(res.estimate),
        "messages": res.messages,
        "message_bytes_total": sum(sizes),
        "message_bytes_max": max(sizes, default=0),
        "agents": res.agents,
        "protocol_s": elapsed,
    }


def _no_plan(instance, upper_bound, exact, max_entries, stats) -> Outcome:
    if upper_bound is not None:
        return Outcome("no_solution", lower_bound=float(upper_bound) if exact else None,
                       message=f"cdynp: no plan with T <= upper_bound {upper_bound}",
                       stats=stats)
    if max_entries:
        return Outcome("no_solution", message="cdynp: no plan survived the max_entries cap",
                       stats=stats)

    reason = CostTables(instance).infeasibility_reason() or (
        "no plan satisfies the memory and device limits (exhaustive chain DP)")
    return Outcome("infeasible", message=reason, stats=stats)


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
