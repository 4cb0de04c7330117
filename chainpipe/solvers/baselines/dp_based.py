"""Baselines built on the exact DP: ``comm-unaware`` and ``single-dc`` (see
:mod:`chainpipe.solvers.baselines`).

They call :func:`chainpipe.solvers.dp.run` on a modified instance, so they plan with
whatever widths and degrees the DP plans with.
"""

from __future__ import annotations

import dataclasses
import math

from ...deadline import Deadline
from ...instance import Instance, Link
from ...plan import evaluate
from ...result import Outcome
from .. import dp
from .common import infeasible_or
from .stage_costs import StageCosts

#: bandwidth given to every link of the communication-unaware copy (finite: the format needs it)
FREE_BANDWIDTH = 1e300


def _dp(instance: Instance, deadline: Deadline) -> tuple[Outcome, float | None]:
    """The exact DP's outcome on ``instance`` and its plan's time (evaluated)."""
    out = dp.run(instance, deadline=deadline)
    T = evaluate(instance, out.plan).iteration_time_s if out.plan is not None else None
    return out, T


def comm_unaware(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """The DP optimum with every link free, returned for honest evaluation with links."""
    free = Link(FREE_BANDWIDTH, 0.0)
    blind = dataclasses.replace(
        instance,
        datacenters=tuple(dataclasses.replace(dc, link=free) for dc in instance.datacenters),
        links=tuple(free for _ in instance.links),
    )
    res, T = _dp(blind, deadline)
    stats = {"strategy": "comm-unaware", "link_free_status": res.status.value,
             "link_free_time_s": T}
    if res.status in ("optimal", "feasible"):
        # same datacenter names and device types: the device names carry over
        return Outcome("feasible", res.plan, stats=stats)
    if res.status == "infeasible":
        # the copy has the same devices and memory, and feasibility ignores links
        return Outcome("infeasible", message=res.message, stats=stats)
    return Outcome("no_solution", message=f"the link-free DP returned {res.status}: {res.message}",
                   stats=stats)


def single_dc(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """The best DP optimum over the datacenters taken one at a time."""
    deadline = Deadline.of(deadline)
    c = StageCosts(instance)
    best_T, best, per_dc = math.inf, None, {}
    reasons = []
    for _k, dc in enumerate(instance.datacenters):
        sub = Instance(f"{instance.name}[{dc.name}]", instance.model, instance.training, (dc,), ())
        res, T = _dp(sub, deadline)
        per_dc[dc.name] = T
        found = res.plan is not None
        if found and T < best_T:
            best_T, best = T, res.plan
        elif not found:
            reasons.append(f"{dc.name}: {res.status}" + (f" ({res.message})" if res.message else ""))
    stats = {"strategy": "single-dc", "per_datacenter_time_s": per_dc}
    if best is None:
        return infeasible_or(c, "no datacenter can host the model alone: " + "; ".join(reasons),
                             stats)
    stats["datacenter"] = instance.locate(best.stages[0].devices[0]).dc
    return Outcome("feasible", best, stats=stats)
