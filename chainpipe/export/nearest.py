"""Which plans Megatron-Core and TorchTitan can run, and the best of them for an instance.

Both frameworks give every pipeline stage the same data-parallel size and the
same tensor-parallel degree (a device mesh ``pp x dp x tp``), and place whole
transformer layers on stages. A plan is expressible when its stages share one
``(d, t)`` and no cut falls between the attention and MLP halves of a block
(layers ``blockN.attn``, ``blockN.mlp`` of an instance at sublayer
granularity). :func:`nearest_plan` finds the best expressible plan exactly:
for each pair ``(d, t)`` of the instance's lists, the exact DP solves the
instance with every stage forced to that pair (and, at sublayer granularity,
each block's halves merged into one layer, so that cuts fall between blocks);
the best pair's plan is the answer, its ``T`` from the one cost model.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..instance import Instance, Layer, Model, Parallelism
from ..plan import Evaluation, Plan, Stage, evaluate
from ..solve import solve

_HALF = re.compile(r"(block\d+)\.(attn|mlp)\Z")


@dataclass(frozen=True)
class Unit:
    """One layer of a framework's model: ``kind`` ``E`` (embedding), ``t`` (a transformer
    layer) or ``L`` (final norm, output layer and loss), over instance layers
    ``[start, end)``."""

    kind: str
    start: int
    end: int
    name: str


def framework_units(instance: Instance) -> list[Unit]:
    """The instance's layers grouped into the layers a framework places on stages.

    The first layer named ``embedding`` is the embedding, a last layer named
    ``head`` the output layer; ``blockN.attn`` followed by ``blockN.mlp`` is one
    transformer layer; any other layer is a transformer layer of its own.
    """
    layers = instance.model.layers
    units: list[Unit] = []
    for i, layer in enumerate(layers):
        half = _HALF.match(layer.name)
        if i == 0 and layer.name == "embedding":
            units.append(Unit("E", i, i + 1, layer.name))
        elif i == len(layers) - 1 and layer.name == "head" and i > 0:
            units.append(Unit("L", i, i + 1, layer.name))
        elif half and half[2] == "mlp" and units and units[-1].name == half[1] \
                and layers[i - 1].name == f"{half[1]}.attn":
            units[-1] = dataclasses.replace(units[-1], end=i + 1)
        else:
            units.append(Unit("t", i, i + 1, half[1] if half else layer.name))
    return units


def expressible_problem(instance: Instance, plan: Plan) -> str | None:
    """Why Megatron-Core and TorchTitan cannot run ``plan`` as it is, or ``None``."""
    pairs = [(st.data_parallel, st.tensor_parallel) for st in plan.stages]
    if len(set(pairs)) > 1:
        shown = ", ".join(f"{d}x{t}" for d, t in dict.fromkeys(pairs))
        return (f"its stages use different data-parallel widths or tensor-parallel degrees "
                f"(d x t: {shown}), and these frameworks give every stage the same pair")
    starts = {u.start for u in framework_units(instance)}
    for s, st in enumerate(plan.stages):
        if st.start not in starts:
            name = instance.model.layers[st.start].name
            return (f"stage {s} starts at layer {st.start} ({name}), inside a transformer "
                    f"block; these frameworks place whole blocks")
    return None


@dataclass(frozen=True)
class Nearest:
    """The best plan a framework can express, with its evaluation."""

    plan: Plan
    evaluation: Evaluation
    data_parallel: int
    tensor_parallel: int

    def describe(self) -> str:
        cuts = "|".join(f"{st.start}-{st.end}" for st in self.plan.stages)
        return (f"{self.plan.num_stages} stage{'s' if self.plan.num_stages > 1 else ''} of "
                f"d = {self.data_parallel}, t = {self.tensor_parallel} (layers {cuts}), "
                f"T = {self.evaluation.iteration_time_s:.6g} s")


class Inexpressible(RuntimeError):
    """A format cannot express a plan; ``nearest`` is the best plan it can (or ``None``)."""

    def __init__(self, fmt: str, why: str, nearest: Nearest | None, t_plan: float) -> None:
        self.fmt, self.why, self.nearest = fmt, why, nearest
        tail = (f"the nearest plan it can express: {nearest.describe()} "
                f"(this plan: T = {t_plan:.6g} s)" if nearest else
                "no plan whose stages share one data-parallel width and one tensor-parallel "
                "degree is feasible for this instance")
        super().__init__(f"{fmt} cannot express this plan: {why}; {tail}")


def _merged(instance: Instance, units: list[Unit]) -> Instance:
    """``instance`` with each unit's layers merged into one (the same cost for any plan
    that cuts between units)."""
    layers = instance.model.layers
    merged = []
    for u in units:
        part = layers[u.start:u.end]
        if len(part) == 1:
            merged.append(part[0])
            continue
        merged.append(Layer(
            name=u.name, fwd_flop=sum(x.fwd_flop for x in part),
            bwd_flop=sum(x.bwd_flop for x in part), params=sum(x.params for x in part),
            activation_bytes=sum(x.activation_bytes for x in part),
            output_bytes=part[-1].output_bytes,
            tp_allreduce_bytes=sum(x.tp_allreduce_bytes for x in part)))
    return dataclasses.replace(instance, model=Model(instance.model.name, tuple(merged)))


def nearest_plan(instance: Instance) -> Nearest | None:
    """The best plan whose stages share one ``(d, t)`` and cut between whole blocks.

    Exact: the DP solves the instance once per pair ``(d, t)`` of its lists, every
    stage forced to the pair; the pair with the smallest ``T`` wins (the first of
    equals, in list order). ``None`` when no pair has a feasible plan.
    """
    units = framework_units(instance)
    coarse = _merged(instance, units)
    par = instance.training.parallelism
    best: Nearest | None = None
    for d in instance.training.data_parallel_widths:
        for t in par.tensor_parallel:
            forced = dataclasses.replace(coarse, training=dataclasses.replace(
                coarse.training, parallelism=Parallelism((d,), (t,), par.zero)))
            res = solve(forced, "dp")
            if res.plan is None:
                continue
            plan = Plan(tuple(Stage(units[st.start].start, units[st.end - 1].end, st.devices,
                                    d, t) for st in res.plan.stages))
            ev = evaluate(instance, plan)
            if ev.feasible and (best is None
                                or ev.iteration_time_s < best.evaluation.iteration_time_s):
                best = Nearest(plan, ev, d, t)
    return best
