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
* ``processes`` (bool): one spawned OS process per DC, fed only its split files;
* ``trace_dir`` (path): write every DC-to-DC message there, exactly as sent;
* ``compare_dp`` (bool): also run ``dp`` and report the gap in ``stats``.

With ``epsilon``, ``quantum`` and ``digits`` only, the plan's time is at most
``((1+epsilon)(1+quantum)(1+10^(1-digits)))^(K-1)`` times the optimum, and that factor gives the
reported lower bound; ``max_entries`` gives no guarantee.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

from ...deadline import Deadline
from ...instance import Instance
from ...plan import Plan, Stage
from ...result import OptionError, Outcome
from .local import Deadline as AgentTimeUp
from .public import PublicInstance
from .runner import run_in_process, run_processes, write_split

__all__ = ["guarantee_factor", "run", "split_instance"]

_OPTIONS = {"epsilon", "quantum", "digits", "max_entries", "upper_bound", "processes", "trace_dir", "compare_dp"}


def split_instance(instance: Instance, outdir) -> list[Path]:
    """Write ``public.json`` and one ``private-NN-<dc>.json`` per DC; returns the paths."""
    return write_split(PublicInstance.of(instance), list(instance.datacenters), outdir)


def guarantee_factor(num_datacenters: int, epsilon: float = 0.0, quantum: float = 0.0,
                     digits: int = 0) -> float:
    """Proven ratio bound ``T_found / T_opt`` for epsilon/quantum/digits compression:
    each of the ``K - 1`` summaries loses at most one factor of each."""
    hops = max(num_datacenters - 1, 0)
    per_hop = (1.0 + epsilon) * (1.0 + quantum) * (1.0 + (10.0 ** (1 - digits) if digits else 0.0))
    return per_hop ** hops


def run(instance: Instance, *, deadline=None, seed=0, threads=1, log=None,
        **options) -> Outcome:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise OptionError(f"cdynp: unknown option(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(sorted(_OPTIONS))}")
    epsilon = float(options.get("epsilon", 0.0) or 0.0)
    quantum = float(options.get("quantum", 0.0) or 0.0)
    max_entries = int(options.get("max_entries", 0) or 0)
    digits = int(options.get("digits", 0) or 0)
    if epsilon < 0 or quantum < 0 or max_entries < 0 or digits < 0:
        raise ValueError("cdynp: epsilon, quantum, digits and max_entries must be >= 0")
    trace_dir = options.get("trace_dir")
    limit = Deadline.of(deadline)
    deadline = None if limit.unlimited else limit.at
    upper_bound = options.get("upper_bound")
    agent_opts = {"epsilon": epsilon, "quantum": quantum, "max_entries": max_entries,
                  "digits": digits, "upper_bound": upper_bound}
    t0 = time.perf_counter()
    try:
        if options.get("processes"):
            with tempfile.TemporaryDirectory(prefix="cdynp-split-") as tmp:
                split_instance(instance, tmp)
                res = run_processes(tmp, trace_dir=trace_dir, deadline=deadline, **agent_opts)
        else:
            res = run_in_process(PublicInstance.of(instance), list(instance.datacenters),
                                 trace_dir=trace_dir, deadline=deadline, **agent_opts)
    except AgentTimeUp as exc:
        return Outcome("no_solution", message=f"cdynp: {exc}",
                       stats={"protocol_s": time.perf_counter() - t0})
    elapsed = time.perf_counter() - t0
    sizes = [m["bytes"] for m in res.messages]
    exact = epsilon == 0 and quantum == 0 and max_entries == 0 and digits == 0
    factor = guarantee_factor(instance.num_datacenters, epsilon, quantum, digits)
    stats = {
        "mode": "processes" if options.get("processes") else "in-process",
        "exact": exact,
        "epsilon": epsilon, "quantum": quantum, "digits": digits, "max_entries": max_entries,
        "guarantee_factor": None if max_entries else factor,
        "estimate_s": res.estimate if math.isfinite(res.estimate) else None,
        "messages": res.messages,
        "message_bytes_total": sum(sizes),
        "message_bytes_max": max(sizes, default=0),
        "agents": res.agents,
        "protocol_s": elapsed,
    }
    plan = None
    if res.stages:
        plan = Plan(tuple(Stage(a, b, d) for a, b, d in res.stages))
    if options.get("compare_dp"):
        stats.update(_compare_dp(instance, plan))
    if plan is None:
        if upper_bound is not None:
            return Outcome("no_solution", lower_bound=float(upper_bound) if exact else None,
                           message=f"cdynp: no plan with T <= upper_bound {upper_bound}",
                           stats=stats)
        if max_entries:
            return Outcome("no_solution", message="cdynp: no plan survived the max_entries cap",
                           stats=stats)
        from ...tables import CostTables

        reason = CostTables(instance).infeasibility_reason() or (
            "no plan satisfies the memory and device limits (exhaustive chain DP)")
        return Outcome("infeasible", message=reason, stats=stats)
    if exact:
        return Outcome("optimal", plan, lower_bound=res.estimate, stats=stats)
    bound = None if max_entries else res.estimate / factor
    return Outcome("feasible", plan, lower_bound=bound, stats=stats)


#: the options ``run`` takes, for ``chainpipe.solve.solver_options``
run.options = tuple(sorted(_OPTIONS))


def _compare_dp(instance: Instance, plan: Plan | None) -> dict:
    from ...plan import evaluate
    from ...solve import solve

    t0 = time.perf_counter()
    ref = solve(instance, "dp")
    out = {"dp_iteration_time_s": ref.iteration_time, "dp_solve_time_s": ref.solve_time,
           "dp_status": ref.status}
    if plan is not None and ref.iteration_time:
        T = evaluate(instance, plan).iteration_time_s
        out["gap_vs_dp"] = (T - ref.iteration_time) / ref.iteration_time
    out["compare_dp_s"] = time.perf_counter() - t0
    return out
