"""One CDynP solve from the owner's side, whatever carries the messages.

The job's owner starts the agents' runs, collects their reports and assembles
the plan: the optional probe run, the main run under the probe's bound, and the
choice between their plans under compression. What carries the messages is a
:class:`Backend`: the agents in this process or in child processes
(:mod:`.runner`, with the whole instance at hand), or agents on other hosts over
TLS (:mod:`.remote`, with the public part only). Both give the same answer.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Protocol

from ...deadline import Deadline, TimeUp
from ...plan import Plan
from ...result import OptionError, Outcome, number_option
from . import protocol
from .public import PublicInstance
from .runner import AgentFailure, Run

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

#: the exact run after a probe looks for plans up to the probe's ``T`` times ``1 +`` this,
#: so that the probe's own plan is found again whatever the rounding of the sums
_PROBE_SLACK = 1e-9


class Backend(Protocol):
    """What carries one CDynP run between the owner and the agents."""

    public: PublicInstance
    mode: str  # "in-process", "processes" or "tls"

    def one_run(self, options: dict, trace_dir, deadline: Deadline) -> Run:
        """Run the protocol once with these agent options; the agents' reports."""

    def assemble(self, res: Run, exact: bool) -> Plan | None:
        """The plan from the agents' reports, once its summaries check out."""

    def iteration_time(self, plan: Plan) -> float:
        """``T`` of a plan :meth:`assemble` returned, by the one cost model."""

    def infeasibility_reason(self) -> str:
        """One line on why no plan exists (after an exhaustive exact run found none)."""


def agent_options(epsilon=0.0, quantum=0.0, digits=0, max_entries=0,
                  upper_bound=None, prefix_bound=None) -> dict:
    """The agents' options, each checked (:class:`OptionError` names a bad one)."""
    if prefix_bound not in (None, True, False):
        raise OptionError(f"cdynp: option 'prefix_bound' must be true or false, "
                          f"got {prefix_bound!r}")
    opts = {"epsilon": number_option("cdynp", "epsilon", epsilon or 0.0),
            "quantum": number_option("cdynp", "quantum", quantum or 0.0),
            "max_entries": number_option("cdynp", "max_entries", max_entries or 0,
                                         integer=True),
            "digits": number_option("cdynp", "digits", digits or 0, integer=True),
            "upper_bound": None, "prefix_bound": prefix_bound is not False}
    if upper_bound is not None:
        opts["upper_bound"] = number_option("cdynp", "upper_bound", upper_bound, strict=True)
    for name in ("epsilon", "quantum", "max_entries", "digits", "upper_bound"):
        problem = opts[name] is not None and protocol.option_problem(name, opts[name])
        if problem:  # the range every agent checks too
            raise OptionError(f"option {name!r} of cdynp: {problem}, got {opts[name]!r}")
    return opts


def guarantee_factor(num_datacenters: int, epsilon: float = 0.0, quantum: float = 0.0,
                     digits: int = 0) -> float:
    """Proven ratio bound ``T_found / T_opt`` for epsilon/quantum/digits compression:
    each of the ``K - 1`` summaries loses at most one factor of each."""
    hops = max(num_datacenters - 1, 0)
    per_hop = (1.0 + epsilon) * (1.0 + quantum) * (1.0 + (10.0 ** (1 - digits) if digits else 0.0))
    try:
        return per_hop ** hops
    except OverflowError:  # a bound too loose to say anything
        return math.inf


def is_exact(options: dict) -> bool:
    return not (options["epsilon"] or options["quantum"] or options["max_entries"]
                or options["digits"])


def labels_kept(agents: list) -> int:
    """The labels a run's agents kept in all (the ``labels`` of their reports)."""
    return sum(a.get("labels", 0) for a in agents)


def drive(backend: Backend, options: dict, *, deadline: Deadline, probe=None,
          trace_dir=None, bound: float = math.inf) -> Outcome:
    """The solve: a probe run when asked, the main run, the plan and its status.

    Parameters
    ----------
    backend : Backend
        What carries the runs.
    options : dict
        The agents' options (:func:`agent_options`).
    deadline : Deadline
        The whole solve's deadline.
    probe : bool, optional
        ``None``: on when the instance allows data or tensor parallelism.
    trace_dir : path, optional
        Where every DC-to-DC message is written (the probe's under ``probe/``).
    bound : float, default inf
        Exact mode: a public bound on ``T`` besides ``upper_bound`` (an incumbent's, the
        owner's seed) that leaves the probe on: the main run goes under the lesser of it
        and the probe's ``T``, and one that finds nothing proves no plan at or below it.

    Returns
    -------
    Outcome
        See :func:`chainpipe.solvers.cdynp.run`.
    """
    if probe not in (None, True, False):
        raise OptionError(f"cdynp: option 'probe' must be true or false, got {probe!r}")
    public = backend.public
    options = dict(options)
    upper_bound = options["upper_bound"]
    exact = is_exact(options)
    t0 = time.perf_counter()

    def one_run(opts: dict, trace) -> tuple[Run, Plan | None]:
        res = backend.one_run(opts, trace, deadline)
        return res, backend.assemble(res, exact and "beam" not in opts)

    probes: list[tuple[str, Run]] = []  # each probe run and its trace subdirectory
    first, probe_T = None, None  # the best probe's (run, plan) and its T

    def probe_run(sub: str, opts: dict) -> None:
        nonlocal first, probe_T
        got = one_run(opts, None if trace_dir is None else Path(trace_dir, sub))
        probes.append((sub, got[0]))
        if got[1] is not None:  # a real plan: the main run need not look above it
            T = backend.iteration_time(got[1])
            if probe_T is None or T < probe_T:
                first, probe_T = got, T

    try:
        if probe is None:
            probe = not public.training.parallelism.single_device
        probe = probe and not public.period  # (the probe's beam and grid are classic only)
        if probe and upper_bound is None and public.num_datacenters > 1:
            parts = math.ceil(public.num_layers / PROBE_LAYERS_PER_PART)
            probe_run("probe", {**options, "beam": PROBE_BEAM, "grid": parts,
                                "max_entries": PROBE_ENTRIES})
            if probe_T is not None:  # then without the grid, below the coarse probe's T
                probe_run("probe-fine", {**options, "beam": PROBE_BEAM,
                                         "max_entries": PROBE_FINE_ENTRIES,
                                         "upper_bound": probe_T * (1 + _PROBE_SLACK)})
                options["upper_bound"] = probe_T * (1 + _PROBE_SLACK)  # (never above)
        if exact and bound < _or_inf(options["upper_bound"]):
            options["upper_bound"] = upper_bound = bound  # below the probe's: the owner's
        res, plan = one_run(options, trace_dir)
        if exact and plan is None and probe_T is not None and upper_bound != bound:
            # never expected (the probe's plan is within the bound); stay exact regardless
            res, plan = one_run({**options, "upper_bound": upper_bound}, trace_dir)
    except TimeUp as exc:
        return Outcome("no_solution", message=f"cdynp: {exc}",
                       stats={"protocol_s": time.perf_counter() - t0, "timed_out": True})
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
                plan is None or backend.iteration_time(plan) > probe_T):
            # the compressed run dropped what the probe had: the probe's plan is the answer
            first[0].messages, res, plan = res.messages, first[0], first[1]
    stats = _stats(public.num_datacenters, res, exact, options, backend.mode,
                   time.perf_counter() - t0)
    if probes:
        stats["probe"] = {"estimate_s": probe_T,
                          "labels": sum(a.get("labels", 0) for _sub, done in probes
                                        for a in done.agents),
                          "messages": len(messages)}
    if plan is None:
        return _no_plan(backend, upper_bound, exact, options["max_entries"], stats)
    if exact:
        return Outcome("optimal", plan, lower_bound=res.estimate, stats=stats)
    factor = guarantee_factor(public.num_datacenters, options["epsilon"], options["quantum"],
                              options["digits"])
    # the compressed search's chain of kept points for the optimum either reaches DC 1
    # (estimate <= factor * optimum) or was cut by the probe's bound (then the probe's T
    # is below factor * optimum): either way the better of the two over factor bounds it
    best = min(found, probe_T if probe_T is not None else math.inf)
    bound = None if options["max_entries"] else best / factor
    return Outcome("feasible", plan, lower_bound=bound, stats=stats)


def _or_inf(x: float | None) -> float:
    """A bound ``x``, ``inf`` for none."""
    return math.inf if x is None else float(x)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _stats(num_datacenters: int, res: Run, exact: bool, options: dict, mode: str,
           elapsed: float) -> dict:
    sizes = [m["bytes"] for m in res.messages]
    factor = guarantee_factor(num_datacenters, options["epsilon"], options["quantum"],
                              options["digits"])
    return {
        "mode": mode,
        "exact": exact,
        **{k: options[k] for k in ("epsilon", "quantum", "digits", "max_entries")},
        "guarantee_factor": None if options["max_entries"] else _finite(factor),
        "estimate_s": _finite(res.estimate),
        "messages": res.messages,
        "message_bytes_total": sum(sizes),
        "message_bytes_max": max(sizes, default=0),
        "agents": res.agents,
        "protocol_s": elapsed,
    }


def _no_plan(backend: Backend, upper_bound, exact, max_entries, stats) -> Outcome:
    if upper_bound is not None:
        return Outcome("no_solution", lower_bound=float(upper_bound) if exact else None,
                       message=f"cdynp: no plan with T <= upper_bound {upper_bound}",
                       stats=stats)
    if max_entries:
        return Outcome("no_solution", message="cdynp: no plan survived the max_entries cap",
                       stats=stats)
    return Outcome("infeasible", message=backend.infeasibility_reason(), stats=stats)
