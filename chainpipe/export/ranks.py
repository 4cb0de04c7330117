"""The framework-neutral rank layout of a plan: one entry per global rank.

Ranks are numbered pipeline by pipeline (a plan of several pipelines,
contract version 3), inside a pipeline stage by stage; inside a stage,
data-parallel replica by replica, the tensor-parallel rank varying fastest --
the order of Megatron-Core's default ``tp-cp-ep-dp-pp`` and of TorchTitan's
device mesh ``(pp, dp, tp)``. Global rank ``r`` of stage ``s`` is
``offset_s + dp x t_s + tp`` and runs on the plan's device
``devices[dp x t_s + tp]`` (a stage lists its ``d`` tensor-parallel groups one
after another).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass

from ..instance import Instance
from ..numeric import jsonable
from ..plan import Evaluation, Plan

#: the ``format`` of the JSON layout
RANKS_FORMAT = "chainpipe-ranks/1"


@dataclass(frozen=True)
class RankRow:
    """Where one global rank runs and what it holds."""

    rank: int
    device: str
    datacenter: str
    device_type: str
    node: int  # index of the node within its device group
    stage: int  # pipeline stage, from 0 in its pipeline
    data_parallel_rank: int
    tensor_parallel_rank: int
    data_parallel_size: int
    tensor_parallel_size: int
    layer_start: int  # layers [layer_start, layer_end) of the instance
    layer_end: int
    first_layer: str
    last_layer: str
    pipeline: int = 0  # the plan's pipeline, from 0 (v3)


def rank_rows(instance: Instance, plan: Plan) -> list[RankRow]:
    """One :class:`RankRow` per device of ``plan``, in global rank order (pipeline by
    pipeline)."""
    rows: list[RankRow] = []
    layers = instance.model.layers
    for p, s, st in _stages(plan):
        d, t = st.data_parallel, st.tensor_parallel
        for i, device in enumerate(st.devices):
            ref = instance.locate(device)
            dc = instance.datacenters[ref.dc]
            group = dc.devices[ref.group]
            rows.append(RankRow(
                rank=len(rows), device=device, datacenter=dc.name, device_type=group.type,
                node=ref.index // group.devices_per_node, stage=s, data_parallel_rank=i // t,
                tensor_parallel_rank=i % t, data_parallel_size=d, tensor_parallel_size=t,
                layer_start=st.start, layer_end=st.end, first_layer=layers[st.start].name,
                last_layer=layers[st.end - 1].name, pipeline=p))
    return rows


def _stages(plan: Plan) -> list[tuple[int, int, object]]:
    """``(pipeline, stage, Stage)`` of every stage of ``plan``, in rank order."""
    return [(p, s, st) for p, pipe in enumerate(plan.pipelines) for s, st in enumerate(pipe.stages)]


def ranks_json(instance: Instance, plan: Plan, ev: Evaluation, rows: list[RankRow]) -> str:
    """The layout as one JSON object: the plan's stages, then every rank."""
    stages = _stages(plan)
    offsets = [0]
    for _p, _s, st in stages:
        offsets.append(offsets[-1] + st.width)
    doc = {
        "format": RANKS_FORMAT,
        "instance": instance.name,
        "model": instance.model.name,
        "iteration_time_s": ev.iteration_time_s,
        "microbatches": instance.microbatches,
        "pipelines": [{"pipeline": p, "microbatches": pipe.microbatches or instance.microbatches,
                       "stages": len(pipe.stages)} for p, pipe in enumerate(plan.pipelines)],
        "world_size": len(rows),
        "stages": [{"pipeline": p, "stage": s, "layers": [st.start, st.end],
                    "data_parallel": st.data_parallel, "tensor_parallel": st.tensor_parallel,
                    "ranks": [offsets[i], offsets[i + 1]]}
                   for i, (p, s, st) in enumerate(stages)],
        "ranks": [asdict(r) for r in rows],
    }
    return json.dumps(jsonable(doc), indent=1, ensure_ascii=False) + "\n"


def ranks_csv(rows: list[RankRow]) -> str:
    """The layout as CSV: a header row, then one row per rank."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = list(RankRow.__dataclass_fields__)
    writer.writerow(fields)
    for r in rows:
        writer.writerow([getattr(r, f) for f in fields])
    return out.getvalue()
