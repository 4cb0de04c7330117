"""The owner's plan and its cost, from what the agents report of their own stages.

Each agent reports its stages in the plan file's shape and what they cost
(:func:`chainpipe.plan.evaluate_part`: compute, memory and synchronisation of
each stage, the boundaries between its own consecutive stages). An owner that
holds only the public part of the instance (a run across hosts) computes the
chain boundaries from the public links and combines everything with
:func:`chainpipe.plan.pipeline_cost` and :func:`chainpipe.plan.assemble`, the
functions :func:`chainpipe.plan.evaluate` ends with, into the same ``T`` (under either
objective, GPipe's period from the phase times each agent reports). A report is data
from another host: every field is checked, and one that does not fit names its DC.
"""

from __future__ import annotations

import math

from ... import cost
from ...instance import InstanceError
from ...plan import (
    BoundaryCost,
    Evaluation,
    Plan,
    StageCost,
    assemble,
    boundary_cost,
    pipeline_cost,
)
from .public import PublicInstance
from .runner import AgentFailure

_STAGE_NUMBERS = ("compute_time_s", "memory_bytes", "memory_limit_bytes", "sync_time_s",
                  "forward_time_s", "backward_time_s")
_BOUNDARY_NUMBERS = ("bytes", "bandwidth_bytes_per_s", "latency_s", "occupancy_s",
                     "traversal_s")


def plan_of(reports: list[dict]) -> Plan | None:
    """The plan made of every agent's stages, in chain order (``None``: no stage at all).

    Raises
    ------
    AgentFailure
        An agent's stages are not in the plan file's shape.
    """
    stages = []
    for report in reports:
        if not report["stages"]:
            continue
        try:
            stages.extend(Plan.from_dict({"stages": report["stages"]}).stages)
        except InstanceError as exc:
            raise AgentFailure(f"DC {report['datacenter']!r} reported stages that are not a "
                               f"plan: {exc.problems[0]}", report["datacenter"]) from None
    return Plan(tuple(stages)) if stages else None


def evaluation_of(public: PublicInstance, plan: Plan, reports: list[dict]) -> Evaluation:
    """The :class:`Evaluation` of ``plan`` from the agents' reported costs and the public
    chain links, under the public objective and schedule (GPipe's period from the phase
    times the agents report); the rules the owner can check itself are checked too.

    Raises
    ------
    AgentFailure
        A report's costs are missing, malformed, or not those of its stages.
    """
    names = list(public.datacenter_names)
    stage_costs: list[StageCost] = []
    inner: dict[int, dict] = {}  # global index of a stage -> the boundary after it, reported
    dc_of: list[int] = []
    for k, report in enumerate(reports):
        own = plan.stages[len(stage_costs):len(stage_costs) + len(report["stages"])]
        costs = _costs(report, len(own))
        for j, (st, c) in enumerate(zip(own, costs["stages"])):
            s = len(stage_costs)
            if j < len(own) - 1:
                inner[s] = costs["boundaries"][j]
            stage_costs.append(StageCost(s, st.start, st.end, st.devices, names[k],
                                         st.data_parallel, st.tensor_parallel,
                                         *(c[f] for f in ("compute_time_s", "in_flight",
                                                          "memory_bytes", "memory_limit_bytes",
                                                          "sync_time_s", "forward_time_s",
                                                          "backward_time_s"))))
            dc_of.append(k)
    bounds: list[BoundaryCost] = []
    for s in range(len(stage_costs) - 1):
        last = plan.stages[s].end - 1
        if dc_of[s] == dc_of[s + 1]:
            b = inner[s]
            bounds.append(BoundaryCost(s, last, b["bytes"], (names[dc_of[s]],),
                                       b["bandwidth_bytes_per_s"], b["latency_s"],
                                       b["occupancy_s"], b["traversal_s"]))
        else:
            lo, hi = dc_of[s], dc_of[s + 1]
            bounds.append(boundary_cost(public.model, s, last, tuple(names[lo:hi + 1]),
                                        *cost.chain_path(public.links, lo, hi)))
    violations = _public_rules(public, plan, stage_costs, reports)
    tr = public.training
    return assemble([pipeline_cost(0, public.microbatches, stage_costs, bounds, tr.objective,
                                   tr.schedule)], violations, objective=tr.objective)


def _costs(report: dict, n: int) -> dict:
    """A report's ``costs``, checked: ``n`` stages and ``n - 1`` boundaries of numbers."""
    dc = report["datacenter"]
    c = report.get("costs")
    try:
        stages, bounds = c["stages"], c["boundaries"]
        ok = (isinstance(stages, list) and isinstance(bounds, list) and len(stages) == n
              and len(bounds) == max(n - 1, 0)
              and all(_numbers(s, _STAGE_NUMBERS) and _count(s.get("in_flight"))
                      for s in stages)
              and all(_numbers(b, _BOUNDARY_NUMBERS) for b in bounds)
              and isinstance(c.get("violations"), list))
    except (TypeError, KeyError):
        ok = False
    if not ok:
        raise AgentFailure(f"DC {dc!r} reported no valid costs for its {n} stage(s)", dc)
    return c


def _numbers(obj, keys) -> bool:
    return isinstance(obj, dict) and all(
        isinstance(obj.get(k), (int, float)) and not isinstance(obj.get(k), bool)
        and obj[k] >= 0 and (math.isfinite(obj[k]) or k == "bandwidth_bytes_per_s")
        for k in keys)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _public_rules(public: PublicInstance, plan: Plan, stage_costs, reports) -> list[str]:
    """The rules of the model the owner can check without private data: layers covered
    in order, allowed widths, ``d t`` devices of the stage's own DC, each device once,
    memory within what the DC reports; plus what each DC says its stages break."""
    out, expect, seen = [], 0, set()
    par = public.training.parallelism
    for s, (st, c) in enumerate(zip(plan.stages, stage_costs)):
        if st.start != expect or not st.start < st.end <= public.num_layers:
            out.append(f"stages[{s}].layers: [{st.start}, {st.end}) does not continue the "
                       f"plan at layer {expect}")
        expect = st.end
        if st.data_parallel not in par.data_parallel or \
                st.tensor_parallel not in par.tensor_parallel or len(st.devices) != st.width:
            out.append(f"stages[{s}]: d = {st.data_parallel}, t = {st.tensor_parallel} on "
                       f"{len(st.devices)} device(s) is not an allowed shape")
        if any(not name.startswith(f"{c.datacenter}/") or name in seen for name in st.devices):
            out.append(f"stages[{s}].devices: not {len(st.devices)} distinct devices of "
                       f"{c.datacenter}")
        seen.update(st.devices)
        if not cost.memory_fits(c.memory_bytes, c.memory_limit_bytes):
            out.append(f"stages[{s}]: needs {c.memory_bytes:.6g} bytes per device, which "
                       f"have {c.memory_limit_bytes:.6g}")
    if expect != public.num_layers:
        out.append(f"stages: cover layers up to {expect}, the model has {public.num_layers}")
    for report in reports:
        out.extend(f"{report['datacenter']}: {v}" for v in report["costs"]["violations"])
    return out
