"""The committed instance sets: ``small``, ``medium``, ``large``, ``hybrid/{small,medium,large}``
and ``v3/{small,medium,large}``.

    python -m chainpipe.instances.sets             # (re)write every set and its manifest.json
    python -m chainpipe.instances.sets --check     # regenerate in memory, compare byte for byte
    python -m chainpipe.instances.sets --sets hybrid/small   # one set
    python -m chainpipe.instances.sets --solve dp  # also solve each instance and print T
    python -m chainpipe.instances.sets --sets v3/small --findings   # measure a v3 set's optima

Each instance is ``generate(preset, seed, **overrides)`` renamed to its file
stem; a set named ``hybrid/small`` lives in ``instances/hybrid/small``.
Feasibility is certified when the sets are written: a feasible instance gets a
witness plan that :func:`chainpipe.plan.evaluate` accepts (for an instance
with hybrid parallelism the manifest records it, see
:mod:`chainpipe.instances.witness`); the one deliberately infeasible instance
gets the reason :meth:`chainpipe.tables.CostTables.infeasibility_reason` proves.
A file that already holds its instance is not rewritten (the version-1 sets
keep their ``chainpipe-instance/1`` text).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..instance import Instance
from ..io import instance_to_dict, read
from ..plan import Plan, evaluate
from ..tables import CostTables
from .generator import generate
from .witness import hybrid_witness, plan_tuples

MANIFEST_FORMAT = "chainpipe-instance-set/1"
ROOT = Path(__file__).resolve().parents[2] / "instances"
#: the command that rebuilds the sets written before the hybrid ones (it rebuilds all)
GENERATOR = "python -m chainpipe.instances.sets"
#: significant digits of a witness's T in a manifest (stable under last-bit rounding)
WITNESS_DIGITS = 6


@dataclass(frozen=True)
class Entry:
    stem: str
    preset: str
    seed: int
    overrides: dict = field(default_factory=dict)
    purpose: str = ""
    feasible: bool = True
    version: int = 2

    def instance(self) -> Instance:
        """The set's instance. The sets of version 2 predate ``training.microbatch_size``:
        their layers are costed for one sequence per microbatch and they do not state it
        (so no width rule applies and their optima stay). A ``version=3`` entry is
        ``generate(..., version=3)`` as drawn, ``microbatch_size`` included."""
        return self.drawn(self.seed, self.stem)

    def drawn(self, seed: int, name: str | None = None) -> Instance:
        """The entry drawn again at ``seed`` (as :meth:`instance` draws it at its own): an
        instance of its class no solver was tuned on, named ``name`` (default
        ``<stem>-like-s<seed>``)."""
        name = f"{self.stem}-like-s{seed}" if name is None else name
        if self.version == 3:
            inst = generate(self.preset, seed, version=3, **self.overrides)
            return dataclasses.replace(inst, name=name)
        inst = generate(self.preset, seed, **{"microbatch_size": 1, **self.overrides})
        training = dataclasses.replace(inst.training, microbatch_size=None)
        return dataclasses.replace(inst, name=name, training=training)


def entry(stem: str) -> Entry | None:
    """The committed entry named ``stem`` (``None`` if no set holds one)."""
    return next((e for group in SETS.values() for e in group if e.stem == stem), None)


SETS: dict[str, tuple[Entry, ...]] = {
    "small": (
        Entry("small-01-tiny", "tiny", 0, {},
              "GPT-3 125M over 3 DCs and 6 GPUs of 3 types; memory never binds"),
        Entry("small-02-gpipe", "tiny", 1, {"schedule": "gpipe", "microbatches": 8},
              "GPipe: every stage stashes all M microbatches"),
        Entry("small-03-mem-1f1b", "tiny", 10, {"model": "llama2-70b", "blocks": 14,
                                                 "microbatches": 16},
              "Llama-2 70B slice (14 blocks) on 32-80 GB cards: 1F1B position decides what fits"),
        Entry("small-04-mem-gpipe", "tiny", 4, {"model": "llama2-13b", "blocks": 14,
                                                 "schedule": "gpipe", "microbatches": 16},
              "Llama-2 13B slice with GPipe: every stage stashes 16 microbatches, memory binds"),
        Entry("small-05-slow-man", "tiny", 5, {"model": "gpt3-1.3b", "degrade": 0.05},
              "GPT-3 1.3B slice, metro links degraded 20x: links pace the pipeline"),
        Entry("small-06-one-dc", "tiny", 6, {"model": "gpt3-2.7b", "datacenters": 1,
                                              "gpus_per_dc": 6, "blocks": 8},
              "a single DC of 6 GPUs (no metro link)"),
        Entry("small-07-eight-gpus", "tiny", 7, {"model": "gpt3-6.7b", "gpus_per_dc": 4,
                                                  "datacenters": 2, "blocks": 12,
                                                  "microbatches": 16},
              "GPT-3 6.7B slice over 2 DCs x 4 GPUs"),
        Entry("small-08-three-dc", "tiny", 8, {"model": "llama2-7b", "datacenters": 3,
                                                "gpus_per_dc": 2, "blocks": 6},
              "Llama-2 7B slice over 3 DCs x 2 GPUs"),
        Entry("small-infeasible", "tiny", 13, {"model": "llama2-70b", "blocks": 4,
                                               "schedule": "gpipe", "microbatches": 32},
              "deliberately infeasible: a Llama-2 70B block with 32 microbatches stashed "
              "fits no device", feasible=False),
    ),
    "medium": (
        Entry("medium-01-metro", "metro", 0, {}, "the metro preset as drawn"),
        Entry("medium-02-llama70b", "metro", 0, {"model": "llama2-70b", "datacenters": 4,
                                                  "gpus_per_dc": 16, "microbatches": 16},
              "Llama-2 70B on 64 mixed cards: memory binds (with M = 32 no plan fits)"),
        Entry("medium-03-gpipe", "metro", 3, {"model": "gpt3-13b", "schedule": "gpipe",
                                              "microbatches": 16},
              "GPT-3 13B with GPipe"),
        Entry("medium-04-degraded", "metro", 4, {"model": "llama2-13b", "degrade": 0.1},
              "Llama-2 13B, metro links degraded 10x"),
        Entry("medium-05-pool-2dc", "pool", 0, {"datacenters": 2},
              "the 32-GPU pool split over 2 DCs"),
        Entry("medium-06-pool-4dc", "pool", 0, {"datacenters": 4},
              "the same pool split over 4 DCs"),
    ),
    "large": (
        Entry("large-01", "metro-large", 0, {}, "metro-large as drawn"),
        Entry("large-02", "metro-large", 1, {}, "metro-large as drawn"),
        Entry("large-03", "metro-large", 2, {"degrade": 0.25},
              "metro-large, metro links degraded 4x"),
    ),
    "hybrid/small": (
        Entry("hybrid-small-01", "hybrid-small", 2, {},
              "Llama-2 13B slice (6 layers) over 2 DCs x 4 GPUs in nodes of 2, a 10 Gbit/s "
              "metro link, ZeRO-1, 1F1B"),
        Entry("hybrid-small-02-gpipe-nozero", "hybrid-small", 3,
              {"blocks": 6, "schedule": "gpipe", "zero": False},
              "GPT-3 6.7B slice (8 layers), 2 DCs x 4 GPUs of 3 types, GPipe, ZeRO off"),
        Entry("hybrid-small-03-one-dc", "hybrid-small", 1, {"blocks": 2},
              "one DC of 8 GPUs in two nodes of 4 (A100 and V100), 4 layers"),
        Entry("hybrid-small-04-three-dc", "hybrid-small", 11, {"schedule": "gpipe"},
              "3 DCs x 2 GPUs of 4 types (nodes of 1 and 2), GPipe, ZeRO-1"),
        Entry("hybrid-small-05-mem", "hybrid-small", 27,
              {"model": "llama2-70b", "blocks": 6, "schedule": "gpipe", "zero": False,
               "microbatches": 8},
              "Llama-2 70B slice with GPipe and ZeRO off on 32-80 GB cards: memory binds "
              "(the optimum is 5% above the one with unlimited memory)"),
    ),
    "hybrid/medium": (
        Entry("hybrid-medium-01", "hybrid", 0, {},
              "GPT-3 13B on A100-80/40 and L40S, 4 DCs x 16 GPUs, metro 200-400 Gbit/s"),
        Entry("hybrid-medium-02-man100", "hybrid", 2, {"model": "llama2-13b", "man_gbit": 100},
              "Llama-2 13B on H100, A100 and L40S, every metro link 100 Gbit/s"),
        Entry("hybrid-medium-03-man400", "hybrid", 2, {"model": "llama2-13b", "man_gbit": 400},
              "the same cluster and model with every metro link at 400 Gbit/s"),
        Entry("hybrid-medium-04-degraded", "hybrid", 3, {"degrade": 0.1},
              "GPT-3 13B on H100, A100-80 and L40S, metro links degraded 10x (10 Gbit/s)"),
        Entry("hybrid-medium-05-mem", "hybrid", 0,
              {"model": "llama2-70b", "blocks": 48, "zero": False,
               "gpu_types": ["A100-40GB", "L40S"]},
              "Llama-2 70B slice (50 layers) on 40-48 GB cards, ZeRO off: memory binds"),
    ),
    "hybrid/large": (
        Entry("hybrid-large-01", "hybrid-large", 0, {},
              "GPT-3 175B (98 layers) on 256 GPUs of 6 types, ZeRO-1"),
        Entry("hybrid-large-02-nozero", "hybrid-large", 1, {"zero": False},
              "GPT-3 175B with ZeRO off: memory binds"),
        Entry("hybrid-large-03-degraded", "hybrid-large", 2, {"degrade": 0.25},
              "GPT-3 175B, metro links degraded 4x"),
    ),
}

#: the sets of contract version 3 (``generate(..., version=3)``), with :data:`FINDINGS`
V3_SETS: dict[str, tuple[Entry, ...]] = {
    "v3/small": (
        Entry("v3-small-01-period", "hybrid-small", 4, {},
              "Llama-2 7B slice over 2 DCs x 4 GPUs, 1F1B, M = 8: round trips over the MAN "
              "pace the classic optimum; the period's optimum is another plan", version=3),
        Entry("v3-small-02-two-pipelines", "hybrid-small", 8, {},
              "Llama-2 13B slice over 3 DCs x 2 GPUs: two pipelines beat one", version=3),
        Entry("v3-small-03-long-seq-slow", "hybrid-small", 11, {"seq_len": 8192, "degrade": 0.1},
              "GPT-3 6.7B slice, 8192-token sequences, metro links degraded 10x: activations "
              "load the MAN; the period changes the optimum and two pipelines win", version=3),
        Entry("v3-small-04-sync4", "hybrid-small", 11, {"sync_period": 4},
              "GPT-3 6.7B slice over 3 DCs, averaging every 4 iterations: two pipelines win "
              "(with H = 1 one pipeline does)", version=3),
        Entry("v3-small-05-gpipe", "hybrid-small", 9, {"schedule": "gpipe"},
              "GPT-3 1.3B slice (a small model) over 2 DCs x 2 GPUs, GPipe: a pipeline per DC "
              "wins", version=3),
    ),
    "v3/medium": (
        Entry("v3-medium-01", "hybrid", 0, {},
              "GPT-3 13B on A100-80/40 and L40S, 4 DCs x 16 GPUs, metro 200-400 Gbit/s",
              version=3),
        Entry("v3-medium-02-small-model", "hybrid", 0,
              {"model": "gpt3-1.3b", "granularity": "sublayer"},
              "GPT-3 1.3B in attention and MLP halves (50 layers) on the same cluster: a "
              "small model, whose activations weigh more than its gradients", version=3),
        Entry("v3-medium-03-slow-sync8", "hybrid", 0, {"degrade": 0.1, "sync_period": 8},
              "GPT-3 13B, metro links degraded 10x, averaging across pipelines every 8 "
              "iterations", version=3),
        Entry("v3-medium-04-gpipe", "hybrid", 0,
              {"schedule": "gpipe", "model": "gpt3-1.3b", "granularity": "sublayer"},
              "GPT-3 1.3B (50 layers) with GPipe: every stage stashes its pipeline's "
              "microbatches", version=3),
    ),
    "v3/large": (
        Entry("v3-large-01", "hybrid-large", 0, {"model": "gpt3-13b", "granularity": "sublayer"},
              "GPT-3 13B in attention and MLP halves (82 layers) on 256 GPUs of 6 types, 8 DCs, "
              "ZeRO-1 (GPT-3 175B with 8-sequence microbatches has no regular witness plan)",
              version=3),
        Entry("v3-large-02-long-seq", "hybrid-large", 1,
              {"model": "gpt3-6.7b", "granularity": "sublayer", "seq_len": 8192},
              "GPT-3 6.7B in halves (66 layers), 8192-token sequences: activations load the "
              "MAN", version=3),
        Entry("v3-large-03-slow-sync8", "hybrid-large", 1,
              {"model": "llama2-13b", "granularity": "sublayer", "degrade": 0.25,
               "sync_period": 8},
              "Llama-2 13B in halves (82 layers), metro links degraded 4x, averaging across "
              "pipelines every 8 iterations", version=3),
    ),
}
SETS.update(V3_SETS)

#: what the exact DP found on each v3 instance (:func:`findings`, measured once with
#: ``--findings``; the manifests carry it): stem -> record
FINDINGS: dict[str, dict] = {
    # v3-small-01-period: 0.1 s
    'v3-small-01-period': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 2.42818, 'pipelines': 1, 'stages': [2]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 2.42818, 'pipelines': 1, 'stages': [2]},
        'classic': {'status': 'optimal', 'iteration_time_s': 1.93036, 'plan_under_objective_s': 2.91652},
        'period_changes_optimum': True, 'several_pipelines_win': False},
    # v3-small-02-two-pipelines: 0.3 s
    'v3-small-02-two-pipelines': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 4.74093, 'pipelines': 2, 'stages': [3, 1], 'microbatches': [3, 5]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 5.67792, 'pipelines': 1, 'stages': [2]},
        'classic': {'status': 'optimal', 'iteration_time_s': 5.67792, 'plan_under_objective_s': 5.67792},
        'period_changes_optimum': False, 'several_pipelines_win': True},
    # v3-small-03-long-seq-slow: 0.2 s
    'v3-small-03-long-seq-slow': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 3.19057, 'pipelines': 2, 'stages': [1, 1], 'microbatches': [1, 3]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 3.30846, 'pipelines': 1, 'stages': [2]},
        'classic': {'status': 'optimal', 'iteration_time_s': 3.27511, 'plan_under_objective_s': 4.18549},
        'period_changes_optimum': True, 'several_pipelines_win': True},
    # v3-small-04-sync4: 0.1 s
    'v3-small-04-sync4': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 0.578547, 'pipelines': 2, 'stages': [1, 1], 'microbatches': [1, 3]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 0.591453, 'pipelines': 1, 'stages': [2]},
        'classic': {'status': 'optimal', 'iteration_time_s': 0.571603, 'plan_under_objective_s': 0.591453},
        'period_changes_optimum': False, 'several_pipelines_win': True},
    # v3-small-05-gpipe: 0.1 s
    'v3-small-05-gpipe': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 0.731465, 'pipelines': 2, 'stages': [2, 2], 'microbatches': [4, 4]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 0.802481, 'pipelines': 1, 'stages': [4]},
        'classic': {'status': 'optimal', 'iteration_time_s': 0.802481, 'plan_under_objective_s': 0.802481},
        'period_changes_optimum': False, 'several_pipelines_win': True},
    # v3-medium-01: 1.8 s (dp, --time-limit 120)
    'v3-medium-01': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 11.0867, 'pipelines': 1, 'stages': [6]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 11.0867, 'pipelines': 1, 'stages': [6]},
        'classic': {'status': 'optimal', 'iteration_time_s': 10.9322, 'plan_under_objective_s': 11.0867},
        'period_changes_optimum': False, 'several_pipelines_win': False},
    # v3-medium-02-small-model: 96.4 s (dp, --time-limit 300, idle machine)
    'v3-medium-02-small-model': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 1.38921, 'pipelines': 4, 'stages': [1, 4, 1, 4], 'microbatches': [17, 15, 17, 15]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 1.44143, 'pipelines': 1, 'stages': [5]},
        'classic': {'status': 'optimal', 'iteration_time_s': 1.19485, 'plan_under_objective_s': 1.52031},
        'period_changes_optimum': True, 'several_pipelines_win': True},
    # v3-medium-03-slow-sync8: 111.4 s (dp, --time-limit 120)
    'v3-medium-03-slow-sync8': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 12.7146, 'pipelines': 4, 'stages': [1, 3, 1, 2], 'microbatches': [17, 16, 16, 15]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 13.0782, 'pipelines': 1, 'stages': [9]},
        'classic': {'status': 'optimal', 'iteration_time_s': 11.1907, 'plan_under_objective_s': 14.8942},
        'period_changes_optimum': True, 'several_pipelines_win': True},
    # v3-medium-04-gpipe: 5.7 s (dp, --time-limit 120)
    'v3-medium-04-gpipe': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 1.19485, 'pipelines': 1, 'stages': [6]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 1.19485, 'pipelines': 1, 'stages': [6]},
        'classic': {'status': 'optimal', 'iteration_time_s': 1.19485, 'plan_under_objective_s': 1.19485},
        'period_changes_optimum': False, 'several_pipelines_win': False},
    # v3-large-01: 32.3 s (dp, --time-limit 120)
    'v3-large-01': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 6.86797, 'pipelines': 1, 'stages': [22]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 6.86797, 'pipelines': 1, 'stages': [22]},
        'classic': {'status': 'optimal', 'iteration_time_s': 5.51097, 'plan_under_objective_s': 9.49534},
        'period_changes_optimum': True, 'several_pipelines_win': False},
    # v3-large-02-long-seq: 64.1 s (dp, --time-limit 120)
    'v3-large-02-long-seq': {
        'optimum': {'status': 'optimal', 'iteration_time_s': 17.5163, 'pipelines': 8, 'stages': [2, 3, 2, 3, 2, 2, 2, 3], 'microbatches': [11, 16, 12, 16, 33, 12, 12, 16]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 21.4673, 'pipelines': 1, 'stages': [18]},
        'classic': {'status': 'optimal', 'iteration_time_s': 16.4457, 'plan_under_objective_s': 28.7654},
        'period_changes_optimum': True, 'several_pipelines_win': True},
    # v3-large-03-slow-sync8: 162.7 s (dp, --time-limit 120)
    'v3-large-03-slow-sync8': {
        'optimum': {'status': 'feasible', 'iteration_time_s': 15.2849, 'lower_bound_s': None, 'pipelines': 8, 'stages': [2, 3, 2, 2, 2, 2, 2, 2], 'microbatches': [11, 17, 12, 15, 33, 12, 12, 16]},
        'one_pipeline': {'status': 'optimal', 'iteration_time_s': 22.0696, 'pipelines': 1, 'stages': [16]},
        'classic': {'status': 'optimal', 'iteration_time_s': 17.8851, 'plan_under_objective_s': 31.3075},
        'period_changes_optimum': True, 'several_pipelines_win': True},
}


# --------------------------------------------------------------------------- feasibility
def witness_plan(instance: Instance, tables: CostTables | None = None) -> Plan | None:
    """A feasible plan built greedily from the last layer backwards, or ``None``.

    Each stage takes, among the unused devices of the current DC or an earlier
    one, the device that holds the most layers at its position (fewer stages
    keep 1F1B positions low); ties go to the latest DC, then the fastest
    device. A plan found is a certificate of feasibility; ``None`` proves nothing.
    """
    t = tables or CostTables(instance)
    left = t.count.copy()
    stages = []
    j, dc, p = t.L, t.K - 1, 1
    while j > 0:
        best = None
        for g in range(t.G):
            if left[g] == 0 or t.group_dc[g] > dc:
                continue
            n = 0
            while n < j and t.fits(g, j - n - 1, j, p):
                n += 1
            if n and (best is None or (n, t.group_dc[g], t.rate[g]) > best[0]):
                best = ((n, t.group_dc[g], t.rate[g]), g)
        if best is None:
            return None
        (n, _, _), g = best
        left[g] -= 1
        dc = int(t.group_dc[g])
        stages.append((j - n, j, dc, t.groups[g].index))
        j, p = j - n, p + 1
    plan = Plan.from_tuples(instance, stages[::-1])
    return plan if evaluate(instance, plan).feasible else None


def certify(entry: Entry, instance: Instance) -> str:
    """Check the entry's feasibility claim; returns a one-line certificate."""
    if not instance.parallelism.single_device:
        plan = hybrid_witness(instance)
        if plan is None or not entry.feasible:
            raise RuntimeError(f"{entry.stem}: an instance with parallelism must be feasible "
                               f"and have a witness plan")
        ev = evaluate(instance, plan)
        return (f"feasible: witness plan of {plan.num_stages} stages on "
                f"{sum(st.width for st in plan.stages)} devices, T = {ev.iteration_time_s:.4g} s")
    t = CostTables(instance)
    if entry.feasible:
        plan, how = witness_plan(instance, t), "greedy witness"
        if plan is None:
            from ..solvers import dp  # the exact DP: finds a plan whenever one exists

            plan, how = dp.run(instance, deadline=600).plan, "dp"
        if plan is None or not evaluate(instance, plan).feasible:
            raise RuntimeError(f"{entry.stem}: no feasible plan found for an instance meant feasible")
        return (f"feasible: {how} plan of {plan.num_stages} stages, "
                f"T = {evaluate(instance, plan).iteration_time_s:.4g} s")
    reason = t.infeasibility_reason()
    if reason is None:
        raise RuntimeError(f"{entry.stem}: meant infeasible but no proof of infeasibility")
    return f"infeasible: {reason}"


# --------------------------------------------------------------------------- v3 findings
def _one_pipeline(instance: Instance) -> Instance:
    """``instance`` with one pipeline only (its objective kept)."""
    par = dataclasses.replace(instance.training.parallelism, pipelines=(1,))
    return dataclasses.replace(instance, training=dataclasses.replace(instance.training,
                                                                      parallelism=par))


def _rounded(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.{WITNESS_DIGITS}g}")


def _solved(instance: Instance, time_limit: float) -> tuple[dict, Plan | None]:
    """The exact DP on ``instance``: its status, ``T``, bound and plan's shape."""
    from ..solve import solve

    res = solve(instance, solver="dp", time_limit=time_limit)
    out = {"status": str(res.status), "iteration_time_s": _rounded(res.iteration_time)}
    if res.status != "optimal":
        out["lower_bound_s"] = _rounded(res.lower_bound)
    if res.plan is not None:
        out["pipelines"] = res.plan.num_pipelines
        out["stages"] = [len(p.stages) for p in res.plan.pipelines]
        if res.plan.num_pipelines > 1:
            out["microbatches"] = [p.microbatches for p in res.plan.pipelines]
    return out, res.plan


def findings(instance: Instance, time_limit: float = 300.0) -> dict:
    """What the exact DP finds on a version-3 instance, for its manifest.

    ``optimum``: the DP under the instance's objective and pipelines; ``one_pipeline``:
    the same with ``pipelines = [1]`` (solved only when the optimum runs several);
    ``classic``: the classic twin's optimum
    (:func:`chainpipe.solvers.dp_pipelines.classic_instance`) and its plan costed
    under the instance's objective with one pipeline; then the two verdicts of
    :func:`verdicts`. Times are rounded to
    :data:`WITNESS_DIGITS` significant digits; a search that ran out of ``time_limit``
    says ``feasible`` and gives its lower bound.
    """
    from ..solvers.dp_pipelines import classic_instance

    best, plan = _solved(instance, time_limit)
    one = best
    if plan is not None and plan.num_pipelines > 1:
        one, _ = _solved(_one_pipeline(instance), time_limit)
    twin, twin_plan = _solved(classic_instance(instance), time_limit)
    out = {"optimum": best, "one_pipeline": one,
           "classic": {"status": twin["status"], "iteration_time_s": twin["iteration_time_s"]}}
    if twin_plan is not None:
        under = evaluate(_one_pipeline(instance), twin_plan).iteration_time_s
        out["classic"]["plan_under_objective_s"] = _rounded(under)
    return {**out, **verdicts(out)}


def verdicts(record: dict) -> dict:
    """``period_changes_optimum`` and ``several_pipelines_win`` of a :func:`findings`
    record: ``True`` or ``False`` where the searches prove it, ``None`` where a search
    that ran out of time leaves it open.

    The period changes the optimum when the classic optimum's plan costs more than some
    plan of one pipeline (proven by that plan); it does not when it costs the proven
    optimum of one pipeline. Several pipelines win when the optimum runs several and
    beats the best plan of one (proven when either search is exact, or when the plan
    found beats the one-pipeline search's lower bound); they do not when the optimum,
    proven, runs one (or ties).
    """
    best, one, classic = record["optimum"], record["one_pipeline"], record["classic"]
    t, t1 = best["iteration_time_s"], one["iteration_time_s"]
    under = classic.get("plan_under_objective_s")
    change = None
    if under is not None and t1 is not None:
        change = True if under > t1 else (False if one["status"] == "optimal" else None)
    several = None
    if best.get("pipelines", 1) > 1 and t1 is not None and t < t1:
        bound = one.get("lower_bound_s")
        if "optimal" in (best["status"], one["status"]) or (bound is not None and t < bound):
            several = True
    elif best["status"] == "optimal":
        several = False
    return {"period_changes_optimum": change, "several_pipelines_win": several}


# --------------------------------------------------------------------------- files
def instance_text(instance: Instance) -> str:
    """The exact text :func:`chainpipe.io.write` produces."""
    return json.dumps(instance_to_dict(instance), indent=1, allow_nan=False) + "\n"


def witness_record(instance: Instance) -> dict:
    """A manifest's certificate of an instance with parallelism: its witness plan and T.

    ``stages`` lists ``[start, end, dc, group, d, t]``, as
    :meth:`chainpipe.plan.Plan.from_tuples` reads them; ``iteration_time_s`` is
    rounded to :data:`WITNESS_DIGITS` significant digits.
    """
    plan = hybrid_witness(instance)
    if plan is None:
        raise RuntimeError(f"{instance.name}: no witness plan for an instance meant feasible")
    ev = evaluate(instance, plan)
    return {"stages": plan_tuples(instance, plan),
            "devices": sum(st.width for st in plan.stages),
            "iteration_time_s": float(f"{ev.iteration_time_s:.{WITNESS_DIGITS}g}")}


def generator_command(set_name: str) -> str:
    """The command that rebuilds a set."""
    return GENERATOR if "/" not in set_name else f"{GENERATOR} --sets {set_name}"


def _summary(e: Entry, inst: Instance) -> dict:
    item = {
        "file": f"{e.stem}.json",
        "name": inst.name,
        "preset": e.preset,
        "seed": e.seed,
        "overrides": e.overrides,
        "purpose": e.purpose,
        "feasible": e.feasible,
        "model": inst.model.name,
        "layers": inst.num_layers,
        "datacenters": inst.num_datacenters,
        "devices": inst.num_devices,
        "device_types": sorted({g.type for dc in inst.datacenters for g in dc.devices}),
        "microbatches": inst.microbatches,
        "schedule": inst.training.schedule,
    }
    if e.version == 3:
        item["version"] = 3
        item["microbatch_size"] = inst.training.microbatch_size
        item["objective"] = inst.training.objective
        item["pipeline_sync_period"] = inst.training.pipeline_sync_period
    if not inst.parallelism.single_device:
        par = inst.parallelism
        item["parallelism"] = {"data_parallel": list(par.data_parallel),
                               "tensor_parallel": list(par.tensor_parallel), "zero": par.zero}
        if e.version == 3:
            item["parallelism"]["pipelines"] = list(par.pipelines)
        item["witness"] = witness_record(inst)
    if e.stem in FINDINGS:
        item["dp"] = FINDINGS[e.stem]
    return item


def manifest(set_name: str, entries: tuple[Entry, ...], instances: list[Instance]) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "set": set_name,
        "generator": generator_command(set_name),
        "instances": [_summary(e, inst) for e, inst in zip(entries, instances)],
    }


def manifest_text(data: dict) -> str:
    return json.dumps(data, indent=1) + "\n"


def build(set_name: str) -> dict[str, str]:
    """File name -> exact text of every file of a set (instances and manifest)."""
    entries = SETS[set_name]
    instances = [e.instance() for e in entries]
    files = {f"{e.stem}.json": instance_text(inst) for e, inst in zip(entries, instances)}
    files["manifest.json"] = manifest_text(manifest(set_name, entries, instances))
    return files


def entry_from_manifest(item: dict) -> Entry:
    return Entry(Path(item["file"]).stem, item["preset"], item["seed"], dict(item["overrides"]),
                 item.get("purpose", ""), item.get("feasible", True), item.get("version", 2))


def check_against_manifest(directory: Path) -> list[str]:
    """Regenerate every file a manifest lists; one line per file that differs.

    A file differs when it does not hold the regenerated instance, value for value.
    Files written before version 2 of the format (``chainpipe-instance/1``) keep
    their text: a version-1 file and its version-2 rewrite hold the same instance.
    """
    data = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    problems = []
    for item in data["instances"]:
        instance = entry_from_manifest(item).instance()
        path = directory / item["file"]
        if not path.exists():
            problems.append(f"{path}: missing")
        elif read(path) != instance:
            version = f", version={item['version']}" if "version" in item else ""
            problems.append(f"{path}: differs from generate({item['preset']!r}, {item['seed']}, "
                            f"**{item['overrides']}{version})")
        elif "witness" in item:
            plan = Plan.from_tuples(instance, item["witness"]["stages"])
            if not evaluate(instance, plan).feasible:
                problems.append(f"{directory / 'manifest.json'}: the witness of {item['file']} "
                                f"is not a feasible plan")
    return problems


def write_set(directory: Path, set_name: str, files: dict[str, str]) -> int:
    """Write a set's files; one that already holds its text, or its instance, is left as it is.

    Returns the number of files written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    instances = {f"{e.stem}.json": e for e in SETS[set_name]}
    written = 0
    for n, text in files.items():
        path = directory / n
        if path.exists() and (path.read_text(encoding="utf-8") == text or (
                n in instances and read(path) == instances[n].instance())):
            continue
        path.write_text(text, encoding="utf-8")
        written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chainpipe.instances.sets", description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="where the set folders go")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated set names")
    ap.add_argument("--check", action="store_true",
                    help="verify the committed files instead of writing them")
    ap.add_argument("--solve", metavar="SOLVER", help="also solve every instance and print T")
    ap.add_argument("--findings", action="store_true",
                    help="measure what the exact DP finds on each v3 instance and print it as "
                         "FINDINGS entries (one search at a time, --time-limit each)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    args = ap.parse_args(argv)
    names = args.sets.split(",")
    if unknown := [n for n in names if n not in SETS]:
        ap.error(f"--sets: unknown set {unknown[0]!r}; known: {', '.join(SETS)}")
    failed = False
    for set_name in names:
        directory = args.root / set_name
        files = build(set_name)
        for e in SETS[set_name]:
            print(f"{set_name}/{e.stem}: {certify(e, e.instance())}")
        if args.check:
            listed = directory / "manifest.json"
            problems = [f"{listed}: differs from the generator"
                        for _ in [0] if not listed.exists()
                        or listed.read_text(encoding="utf-8") != files["manifest.json"]]
            if problems:
                for p in problems:
                    print(p, file=sys.stderr)
                failed = True
                continue
            problems += check_against_manifest(directory)
            for p in problems:
                print(p, file=sys.stderr)
            failed |= bool(problems)
        else:
            print(f"wrote {write_set(directory, set_name, files)} files to {directory}")
        if args.solve:
            from ..solve import solve

            for e in SETS[set_name]:
                res = solve(e.instance(), solver=args.solve, time_limit=args.time_limit)
                print(f"  {e.stem}: {res.status} T={res.iteration_time} "
                      f"({res.solve_time:.2f} s)")
        if args.findings:
            print_findings(set_name, args.time_limit)
    return 1 if failed else 0


def print_findings(set_name: str, time_limit: float) -> None:
    """``--findings``: each v3 instance's :func:`findings` as a :data:`FINDINGS` entry (a
    Python literal to paste), after a comment with the wall time it took."""
    import time

    for e in SETS[set_name]:
        if e.version != 3:
            continue
        start = time.perf_counter()
        found = findings(e.instance(), time_limit)
        print(f"    # {e.stem}: {time.perf_counter() - start:.1f} s (dp, --time-limit "
              f"{time_limit:g})\n    {e.stem!r}: {{")
        keys = list(found)
        for k in keys[:3]:
            print(f"        {k!r}: {found[k]!r},")
        print("        " + ", ".join(f"{k!r}: {found[k]!r}" for k in keys[3:]) + "},",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
