"""The pipeline schedule of one training iteration, simulated block by block.

:func:`simulate_pipeline` runs a plan's 1F1B or GPipe schedule (the instance's, or
as a what-if any of :data:`SCHEDULES`, the zero-bubble ZB-H1 and ZB-H2 included:
their backward split into ``B`` and a deferred ``W``, :func:`stage_order`; or
interleaved 1F1B, ``interleaved:V``, on the plan re-cut into ``V`` chunks per stage,
:func:`interleaved_layout`, :func:`interleaved_order`) as an event
simulation on the resources and times of the cost model
(:func:`chainpipe.plan.evaluate`): one device per stage, which runs one block
at a time (a microbatch's forward block of the stage's ``f_s`` or backward block
of its ``b_s``, :func:`chainpipe.cost.phase_time`), and one link per stage
boundary, full duplex, which carries one activation (forward) and one gradient
(backward) at a time, each occupying it ``U_s`` and arriving ``latency`` later.
After its last backward block each stage of data-parallel width ``d > 1``
all-reduces its gradients: one synchronisation block of the cost model's ``R_s``
on its row, so a stage's synchronisation overlaps the drain of the stages before
it (the cost model's ``T`` adds ``max_s R_s`` after the whole drain instead).

A plan of several pipelines (contract version 3) runs them side by side, each on
its own devices with its own ``M_p`` microbatches; when every pipeline has
synchronised inside its DCs, the gradients are averaged across DCs: one block of
``R_X / H`` on a row of each chain link of the pipelines' span. The makespan is
the end of the last block; its length is the cost model's ``T`` counted block by
block. ``docs/schedule.md`` explains where and why the two differ. Each replay also
reports every stage's peak memory under its schedule (:func:`stage_memory`) and a lower
bound on its makespan (:func:`makespan_lower_bound`).

Nothing here draws: :mod:`chainpipe.gantt` draws a :class:`PipelineSchedule`.
"""

from __future__ import annotations

import abc
import bisect
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from . import cost
from .cost import one_f_one_b_period
from .instance import Instance, InstanceError
from .plan import Evaluation, PipelineCost, Plan, StageCost, devices_label, evaluate

#: a simulation with more blocks than this reports progress (see ``progress``)
PROGRESS_BLOCKS = 200_000
#: the most device blocks (``2 M S`` summed over pipelines) a simulation runs (some 10 s, 300 MB)
MAX_BLOCKS = 1_000_000
#: ``Block.op`` of a stage's gradient synchronisation (its ``microbatch`` is -1)
SYNC = "S"
#: ``Block.op`` of the averaging of gradients across DCs, ``R_X / H`` (its ``microbatch`` is -1)
CROSS_SYNC = "X"
#: ``Block.op`` of a zero-bubble schedule's weight-gradient block ``W`` (its ``B`` is then the
#: input-gradient part of the backward only)
WEIGHT = "W"
#: every schedule the simulation replays; the instance's ``training.schedule`` is one of the
#: first two, the zero-bubble ones are what-ifs on any plan (``docs/schedule.md``)
SCHEDULES = ("1f1b", "gpipe", "zb-h1", "zb-h2")
#: the zero-bubble schedules (Qi et al., ICLR 2024), whose backward is split into ``B`` and ``W``
ZERO_BUBBLE = ("zb-h1", "zb-h2")
#: interleaved 1F1B (Narayanan et al., SC 2021; Megatron-LM), a what-if named
#: ``interleaved:V`` with ``V`` virtual stages per device (:func:`parse_schedule`); not in
#: :data:`SCHEDULES` (``all``): it re-cuts the plan's layers (:func:`interleaved_layout`)
INTERLEAVED = "interleaved"
#: the most virtual stages per device ``interleaved:V`` accepts
MAX_VIRTUAL = 64
#: default share of a layer's backward time that is the weight gradient ``W``, for a layer
#: whose file states no ``weight_grad_share``: a matmul's backward is two matmuls of its
#: forward's size, one for the input gradient and one for the weight gradient, so ``B = W``
#: (the paper's ``T_B = T_W``), attention scores aside. The generator writes each layer's
#: own share, derived from the model's shape, into version-3 instances
#: (:attr:`chainpipe.instances.models.Figures.weight_grad_share`, ``docs/schedule.md``)
DEFAULT_WEIGHT_SHARE = 0.5
#: default memory a microbatch holds between its ``B`` and its ``W``, as a share of what it
#: stashes between ``F`` and ``B``: ``M_W / M_B = 32 sbh / sb(34h + 5as)`` (the paper's
#: Table 1) with the attention scores not stashed (flash attention): ``32 / 34``
DEFAULT_WEIGHT_MEMORY_SHARE = 32 / 34


@dataclass(frozen=True, slots=True)
class Block:
    """One busy interval of a device or of one direction of a link.

    Attributes
    ----------
    start, duration : float
        Seconds from the start of the iteration.
    op : str
        ``"F"`` (forward: compute, or an activation on a link), ``"B"``
        (backward: compute, or a gradient on a link), ``"S"`` (:data:`SYNC`: the
        stage's gradient synchronisation ``R_s``, once per iteration) or ``"X"``
        (:data:`CROSS_SYNC`: the averaging across DCs, ``R_X / H``, on a chain link).
    microbatch : int
        0-based microbatch index within its pipeline; -1 for a synchronisation block
        (every microbatch's gradients at once).
    chunk : int
        Interleaved 1F1B: on a stage row the model chunk ``k`` (virtual stage ``k S + s``),
        on a link row the virtual boundary ``c`` the transfer crosses (between virtual
        stages ``c`` and ``c + 1``); 0 otherwise.
    """

    start: float
    duration: float
    op: str
    microbatch: int
    chunk: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class StageMemory:
    """A stage's peak memory per device under one schedule.

    Attributes
    ----------
    pipeline, stage : int
        The stage's pipeline and 0-based index in it.
    peak_in_flight : float
        The most microbatches' activations held at once, in units of the stage's
        stash per microbatch ``A_s`` (between ``F`` and ``B``); a zero-bubble schedule
        counts a microbatch between its ``B`` and its ``W`` as ``M_W / M_B`` of one.
    memory_bytes : float
        Per device: the cost model's memory need with that many microbatches in flight
        (:func:`chainpipe.cost.memory_need`).
    memory_limit_bytes : float
        The device's memory.
    fits : bool
        :func:`chainpipe.cost.memory_fits` of the two.
    """

    pipeline: int
    stage: int
    peak_in_flight: float
    memory_bytes: float
    memory_limit_bytes: float
    fits: bool


@dataclass
class PipelineRow:
    """The blocks of one resource: a stage's device, a boundary's link, or a chain link
    of the averaging across DCs.

    ``kind`` is ``"stage"``, ``"link"`` or ``"cross"`` (a chain link carrying
    ``R_X / H``); ``inter_dc`` marks a link whose path spans datacenters; ``pipeline``
    is the row's pipeline (-1 for a ``"cross"`` row).
    """

    label: str
    kind: str
    inter_dc: bool = False
    blocks: list[Block] = field(default_factory=list)
    pipeline: int = 0


@dataclass
class PipelineSchedule:
    """A simulated iteration and the cost model's numbers for the same plan.

    Attributes
    ----------
    instance, schedule : str
        Instance name and ``"1f1b"`` or ``"gpipe"``.
    microbatches : int
        ``M``, all pipelines together.
    iteration_time_s : float
        ``T`` of the cost model (:func:`chainpipe.plan.evaluate`), under the
        instance's objective.
    makespan_s : float
        End of the last block of the simulated schedule, synchronisation included.
    feasible : bool
        Whether the plan keeps every rule (a memory limit may be broken).
    rows : list of PipelineRow
        Pipeline by pipeline, stage rows and link rows in chain order (stage 0,
        link 0-1, stage 1, ...); then, with several pipelines, one ``"cross"`` row per
        chain link of the averaging across DCs.
    sync_s : float
        ``max_s R_s``, the cost model's synchronisation term (0 when every ``d = 1``).
    pipeline_makespans_s : tuple of float
        Each pipeline's own makespan: the end of its last block, its stages'
        synchronisation included.
    pipeline_microbatches : tuple of int
        ``M_p`` of each pipeline.
    cross_sync_s : float
        ``R_X / H``, the averaging across DCs per iteration (0 for one pipeline).
    objective : str
        The objective ``T`` is computed under.
    memory : tuple of StageMemory
        Each stage's peak memory per device under this schedule, pipeline by pipeline.
    weight_share : float or None
        Zero-bubble schedules: the one share of every layer's backward FLOP that is
        ``W``, or ``None``: each layer's ``weight_grad_share`` (0.5 where not stated).
    weight_memory_share : float
        Zero-bubble schedules: ``M_W / M_B``.
    lower_bound_s : float
        :func:`makespan_lower_bound` of the plan under this schedule (never above
        ``makespan_s``).
    """

    instance: str
    schedule: str
    microbatches: int
    iteration_time_s: float
    makespan_s: float
    feasible: bool
    rows: list[PipelineRow]
    sync_s: float = 0.0
    pipeline_makespans_s: tuple[float, ...] = ()
    pipeline_microbatches: tuple[int, ...] = ()
    cross_sync_s: float = 0.0
    objective: str = "classic"
    memory: tuple[StageMemory, ...] = ()
    weight_share: float | None = None
    weight_memory_share: float = DEFAULT_WEIGHT_MEMORY_SHARE
    lower_bound_s: float = 0.0

    @property
    def fits(self) -> bool:
        """Whether every stage's peak memory under this schedule fits its devices."""
        return all(m.fits for m in self.memory)

    @property
    def num_pipelines(self) -> int:
        """``P``."""
        return max(len(self.pipeline_makespans_s), 1)

    @property
    def num_stages(self) -> int:
        """Stages of every pipeline together."""
        return sum(1 for r in self.rows if r.kind == "stage")

    @property
    def ratio(self) -> float:
        """``T / makespan``: above 1 the formula is pessimistic, below 1 optimistic."""
        return self.iteration_time_s / self.makespan_s if self.makespan_s > 0 else math.nan

    def to_dict(self) -> dict:
        """The schedule as JSON-ready data (``chainpipe plot --data FILE.json``); each block
        of an interleaved schedule also gives its ``chunk``."""
        chunked = is_interleaved(self.schedule)
        return {
            "instance": self.instance, "schedule": self.schedule, "objective": self.objective,
            "microbatches": self.microbatches, "iteration_time_s": self.iteration_time_s,
            "makespan_s": self.makespan_s, "sync_s": self.sync_s,
            "cross_sync_s": self.cross_sync_s, "feasible": self.feasible,
            "lower_bound_s": self.lower_bound_s, "fits": self.fits,
            **({"weight_share": self.weight_share,
                "weight_memory_share": self.weight_memory_share}
               if self.schedule in ZERO_BUBBLE else {}),
            "memory": [dataclasses.asdict(m) for m in self.memory],
            "pipelines": [{"microbatches": m, "makespan_s": t} for m, t in
                          zip(self.pipeline_microbatches, self.pipeline_makespans_s)],
            "rows": [{"label": r.label, "kind": r.kind, "inter_dc": r.inter_dc,
                      "pipeline": r.pipeline,
                      "blocks": [{"start": b.start, "duration": b.duration, "op": b.op,
                                  "microbatch": b.microbatch,
                                  **({"chunk": b.chunk} if chunked else {})}
                                 for b in r.blocks]}
                     for r in self.rows],
        }

    def summary(self) -> dict:
        """The schedule without its blocks: makespan, lower bound, and memory per stage
        (``chainpipe evaluate --schedules``)."""
        data = self.to_dict()
        del data["rows"]
        return data

    def csv_rows(self) -> tuple[list[str], list[list]]:
        """Header and one row per block (``chainpipe plot --data FILE.csv``)."""
        header = ["row", "resource", "kind", "op", "microbatch", "start_s", "duration_s",
                  "pipeline"]
        rows = [[i, r.label, r.kind, b.op, b.microbatch, f"{b.start:.9g}", f"{b.duration:.9g}",
                 r.pipeline] for i, r in enumerate(self.rows) for b in r.blocks]
        return header, rows


def stage_order(schedule: str, num_stages: int, s: int, M: int) -> list[tuple[str, int]]:
    """The order in which stage ``s`` runs its blocks.

    Parameters
    ----------
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"}
        GPipe: every forward, then every backward in reverse microbatch order.
        1F1B (PipeDream-Flush): ``min(S - s - 1, M)`` warm-up forwards, then one
        forward and one backward alternately, then the remaining backwards, so
        that at most ``min(M, S - s)`` microbatches are stashed at once (the
        in-flight count of the memory rule). ZB-H1 (Qi et al., *Zero Bubble
        Pipeline Parallelism*, ICLR 2024): the backward split into ``B`` (input
        gradient) and ``W`` (weight gradient); ``min(S - 1 - s, M)`` warm-up
        forwards, then for ``i = 0..M-1`` one ``F`` while any remain, ``B_i``, and
        a ``W`` (the oldest pending) only if ``i >= s``; then the ``s`` held-back
        ``W``. ZB-H2: ``2 (S - 1 - s)`` warm-up forwards and ``2 s`` held-back ``W``.
    num_stages : int
        ``S``.
    s : int
        0-based stage index.
    M : int
        Number of microbatches (of the stage's pipeline).

    Returns
    -------
    list of (str, int)
        ``("F", "B" or "W", microbatch)`` in execution order, each block once (``W``
        only under a zero-bubble schedule).
    """
    if schedule == "gpipe":
        return [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
    if schedule in ZERO_BUBBLE:
        k = 1 if schedule == "zb-h1" else 2
        warm, hold = min(k * (num_stages - 1 - s), M), min(k * s, M)
        order = [("F", m) for m in range(warm)]
        forwards, weights = warm, 0
        for i in range(M):
            if forwards < M:
                order.append(("F", forwards))
                forwards += 1
            order.append(("B", i))
            if i >= hold:
                order.append((WEIGHT, weights))
                weights += 1
        return order + [(WEIGHT, m) for m in range(weights, M)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}: one of {', '.join(SCHEDULES)}")
    warm = min(num_stages - s - 1, M)
    order = [("F", m) for m in range(warm)]
    for i in range(M - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", m) for m in range(M - warm, M)]
    return order


def activation_peak(order: list[tuple[str, int]], weight_memory_share: float = 1.0) -> float:
    """The most microbatches' activations a stage holds at once while running ``order``.

    A microbatch holds one unit (the stage's stash ``A_s``) from its ``F`` to its ``B``;
    when the order has ``W`` blocks it then holds ``weight_memory_share`` of a unit
    (``M_W / M_B``: the inputs and output gradients the weight gradient needs) until its
    ``W``. Without ``W`` blocks the ``B`` frees everything: the peak of 1F1B is
    ``min(M, S - s)`` and of GPipe ``M``, the memory rule's in-flight counts.

    Parameters
    ----------
    order : list of (str, int)
        :func:`stage_order` of one stage.
    weight_memory_share : float
        ``M_W / M_B``, used only when the order has ``W`` blocks.

    Returns
    -------
    float
        Units of ``A_s``.
    """
    split = any(op == WEIGHT for op, _ in order)
    held = weight_memory_share if split else 0.0
    now = peak = 0.0
    for op, _m in order:
        if op == "F":
            now += 1.0
            peak = max(peak, now)
        elif op == "B":
            now -= 1.0 - held
        else:
            now -= held
    return peak


def block_durations(stages: list[StageCost]) -> tuple[list[float], list[float]]:
    """Forward and backward block lengths of each stage, seconds: the cost model's ``f_s``
    and ``b_s`` (``forward_time_s``, ``backward_time_s`` of :func:`chainpipe.plan.evaluate`).

    Parameters
    ----------
    stages : sequence of StageCost
        One pipeline's stages (``evaluate(...).pipelines[p].stages``).

    Returns
    -------
    tuple of (list of float, list of float)
        ``f_s`` and ``b_s`` per stage.
    """
    return [st.forward_time_s for st in stages], [st.backward_time_s for st in stages]


def weight_blocks(instance: Instance, pipe: PipelineCost,
                  weight_share: float | None = None) -> tuple[list[float], list[float]]:
    """A zero-bubble schedule's ``B`` and ``W`` block lengths of each stage of one pipeline.

    ``W_s`` is the cost model's compute time (:func:`chainpipe.cost.compute_time`, on the
    stage's ``d x t`` devices, no all-reduce) of the weight-gradient FLOP of its layers,
    ``sum_l share_l x bwd_flop_l``, with ``share_l`` the layer's ``weight_grad_share``
    (:data:`DEFAULT_WEIGHT_SHARE` where the instance does not state it) or, when
    ``weight_share`` is given, that share for every layer. ``B_s = b_s - W_s`` keeps the
    rest of the backward, its tensor-parallel all-reduces included, so ``f_s + B_s + W_s
    = C_s`` as in every other schedule: the split moves work, it adds none.

    Parameters
    ----------
    instance : Instance
    pipe : PipelineCost
        One pipeline's costs (``evaluate(...).pipelines[p]``).
    weight_share : float, optional
        One share for every layer, in ``[0, 1]``, instead of the layers' own.

    Returns
    -------
    tuple of (list of float, list of float)
        ``B_s`` and ``W_s`` per stage.
    """
    _f, backward = block_durations(pipe.stages)
    inputs, weights = [], []
    for st, b in zip(pipe.stages, backward):
        group = instance.group(instance.locate(st.devices[0]))
        flop = 0.0
        for ly in instance.layers[st.start:st.end]:
            share = weight_share if weight_share is not None else (
                DEFAULT_WEIGHT_SHARE if ly.weight_grad_share is None else ly.weight_grad_share)
            flop += share * ly.bwd_flop
        w = min(float(cost.compute_time(flop, group.flop_per_s, st.data_parallel,
                                        st.tensor_parallel)), b)
        weights.append(w)
        inputs.append(b - w)
    return inputs, weights


def stage_label(s: int, stage, pipeline: int | None = None) -> str:
    """A stage row's label: ``s0 a/g/0 [0,3)``, with ``2x4`` after the devices unless
    ``d = t = 1``, and ``p1 `` before it when ``pipeline`` is given (several pipelines)."""
    width = "" if stage.data_parallel == stage.tensor_parallel == 1 else \
        f" {stage.data_parallel}x{stage.tensor_parallel}"
    prefix = "" if pipeline is None else f"p{pipeline} "
    return f"{prefix}s{s} {devices_label(stage.devices)}{width} [{stage.start},{stage.end})"


def _rows(pipe: PipelineCost, several: bool) -> tuple[list[PipelineRow], list[PipelineRow]]:
    p = pipe.index
    prefix = f"p{p} " if several else ""
    stage_rows = [PipelineRow(stage_label(s, st, p if several else None), "stage", pipeline=p)
                  for s, st in enumerate(pipe.stages)]
    link_rows = []
    for b in pipe.boundaries:
        inter = len(b.path) > 1
        name = "-".join(b.path) if inter else f"{b.path[0]} internal"
        link_rows.append(PipelineRow(f"{prefix}link {name} (s{b.after_stage}->"
                                     f"s{b.after_stage + 1})", "link", inter, pipeline=p))
    return stage_rows, link_rows


class _Sweep(abc.ABC):
    """What the event simulations of one pipeline share (:class:`_Pipeline`,
    :class:`_Interleaved`): the sweep over the devices' orders, each run as far as its
    inputs allow, until every block is placed; then each stage's synchronisation. A
    subclass sets ``S``, ``orders``, ``blocks``, ``pos``, ``device_free``, ``sync`` and
    ``stage_rows`` and defines :meth:`advance`."""

    @abc.abstractmethod
    def advance(self, s: int, entry: tuple) -> bool:
        """Run device ``s``'s next block ``entry`` if its inputs are there; whether it ran."""

    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Sweep the devices, each running its order as far as its inputs allow, until done."""
        remaining = self.blocks
        while remaining:
            progressed = 0
            for s in range(self.S):
                order = self.orders[s]
                while self.pos[s] < len(order) and self.advance(s, order[self.pos[s]]):
                    self.pos[s] += 1
                    progressed += 1
            if not progressed:  # cannot happen for the orders of stage_order, interleaved_order
                raise RuntimeError("pipeline simulation deadlocked")
            remaining -= progressed
            if progress is not None:
                progress(progressed)
        self.synchronise()

    def synchronise(self) -> None:
        """Each stage's gradient synchronisation, from the end of its last backward."""
        for s, r in enumerate(self.sync):
            if r > 0:
                self.stage_rows[s].blocks.append(Block(self.device_free[s], r, SYNC, -1))
                self.device_free[s] += r

    @property
    def makespan(self) -> float:
        """The end of the pipeline's last block, synchronisation included."""
        return max(self.device_free, default=0.0)


class _Pipeline(_Sweep):
    """The state of the event simulation of one pipeline: what each device and link has
    done so far."""

    def __init__(self, schedule: str, pipe: PipelineCost, several: bool = False,
                 instance: Instance | None = None, weight_share: float | None = None):
        S, M = len(pipe.stages), pipe.microbatches
        self.S, self.M = S, M
        self.fwd, self.bwd = block_durations(pipe.stages)
        self.wgt = [0.0] * S
        if schedule in ZERO_BUBBLE:
            self.bwd, self.wgt = weight_blocks(instance, pipe, weight_share)
        self.sync = [st.sync_time_s for st in pipe.stages]
        self.U = [b.occupancy_s for b in pipe.boundaries]
        self.lat = [b.latency_s for b in pipe.boundaries]
        self.orders = [stage_order(schedule, S, s, M) for s in range(S)]
        self.blocks = sum(len(order) for order in self.orders)
        self.pos = [0] * S  # next block of each stage's order
        self.device_free = [0.0] * S
        self.f_done = [[False] * M for _ in range(S)]
        self.b_done = [[False] * M for _ in range(S)]
        self.arrive_f = [[math.nan] * M for _ in range(S)]  # activation of m at stage s
        self.arrive_b = [[math.nan] * M for _ in range(S)]  # gradient of m at stage s
        self.f_end_last = [math.nan] * M  # forward of m done on the last stage
        self.link_free = {"F": [0.0] * max(S - 1, 0), "B": [0.0] * max(S - 1, 0)}
        self.stage_rows, self.link_rows = _rows(pipe, several)

    def ready(self, s: int, op: str, m: int) -> float | None:
        """When block ``(op, m)`` of stage ``s`` has its input, or ``None`` if not yet known."""
        if op == "F":
            t = 0.0 if s == 0 else self.arrive_f[s][m]
        elif op == WEIGHT:  # after its own B, nothing else
            return 0.0 if self.b_done[s][m] else None
        elif not self.f_done[s][m]:
            return None
        else:  # the last stage turns its own forward around
            t = self.f_end_last[m] if s == self.S - 1 else self.arrive_b[s][m]
        return None if math.isnan(t) else t

    def run_block(self, s: int, op: str, m: int, ready: float) -> None:
        """Run the block on stage ``s``'s device, then send its output on."""
        dur = {"F": self.fwd, "B": self.bwd, WEIGHT: self.wgt}[op][s]
        start = max(self.device_free[s], ready)
        end = start + dur
        self.device_free[s] = end
        self.stage_rows[s].blocks.append(Block(start, dur, op, m))
        if op == WEIGHT:
            return
        if op == "B":
            self.b_done[s][m] = True
        if op == "F":
            self.f_done[s][m] = True
            if s == self.S - 1:
                self.f_end_last[m] = end
            else:
                self.arrive_f[s + 1][m] = self.send(s, "F", m, end)
        elif s > 0:
            self.arrive_b[s - 1][m] = self.send(s - 1, "B", m, end)

    def send(self, boundary: int, op: str, m: int, produced: float) -> float:
        """Put a transfer on one direction of a link (in the order produced); its arrival."""
        free = self.link_free[op]
        start = max(produced, free[boundary])
        free[boundary] = start + self.U[boundary]
        self.link_rows[boundary].blocks.append(Block(start, self.U[boundary], op, m))
        return start + self.U[boundary] + self.lat[boundary]

    def advance(self, s: int, entry: tuple) -> bool:
        op, m = entry
        ready = self.ready(s, op, m)
        if ready is None:
            return False
        self.run_block(s, op, m, ready)
        return True

    def rows(self) -> list[PipelineRow]:
        out = []
        for s in range(self.S):
            out.append(self.stage_rows[s])
            if s < self.S - 1:
                out.append(self.link_rows[s])
        return out


def _cross_rows(instance: Instance, plan: Plan, ev: Evaluation, start: float) -> list[PipelineRow]:
    """One ``"cross"`` row per chain link of the pipelines' span, each busy ``R_X / H`` from
    ``start`` (every pipeline synchronised inside its DCs); none for one pipeline."""
    if plan.num_pipelines == 1:
        return []
    dcs = [instance.locate(pipe.stages[i].devices[0]).dc for pipe in plan.pipelines
           for i in (0, -1)]
    names = [dc.name for dc in instance.datacenters]
    length = ev.cross_sync_s / ev.cross_sync_period
    return [PipelineRow(f"across DCs: link {names[k]}-{names[k + 1]} (R_X / H)", "cross", True,
                        [Block(start, length, CROSS_SYNC, -1)], -1)
            for k in range(min(dcs), max(dcs))]


def _check_size(plan: Plan, ev: Evaluation, per_microbatch: int = 2) -> int:
    """The device blocks of the schedule, ``sum_p k M_p S_p`` (``k = 2``, or 3 with ``W``
    blocks); ``ValueError`` above :data:`MAX_BLOCKS`."""
    blocks = sum(per_microbatch * p.microbatches * len(p.stages) for p in ev.pipelines)
    if blocks > MAX_BLOCKS:
        what = " + ".join(f"{per_microbatch} x {p.microbatches:,} microbatches x "
                          f"{len(p.stages)} stages" for p in ev.pipelines)
        raise ValueError(f"the schedule has {blocks:,} blocks ({what}); the simulation runs at "
                         f"most {MAX_BLOCKS:,}: simulate a copy of the instance with fewer "
                         f"microbatches")
    return blocks


def _run_all(sims: list[_Pipeline], total: int, progress: bool | None) -> None:
    """Run every pipeline's simulation, behind one progress bar when asked (or large)."""
    if progress is None:
        progress = total > PROGRESS_BLOCKS
    if not progress:
        for sim in sims:
            sim.run()
        return
    from tqdm import tqdm

    with tqdm(total=total, desc="simulating", unit="block", unit_scale=True, delay=1.0,
              leave=False) as bar:
        for sim in sims:
            sim.run(bar.update)


def _check_what_if(schedule: str, weight_share: float | None,
                   weight_memory_share: float) -> None:
    problems = []
    try:
        parse_schedule(schedule)
    except ValueError as exc:
        problems.append(str(exc))
    for name, value in (("weight_share", 0.0 if weight_share is None else weight_share),
                        ("weight_memory_share", weight_memory_share)):
        if not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
            problems.append(f"{name} must be a number in [0, 1], got {value!r}")
    if problems:
        raise ValueError("; ".join(problems))


def stage_memory(instance: Instance, ev: Evaluation, schedule: str,
                 weight_memory_share: float = DEFAULT_WEIGHT_MEMORY_SHARE
                 ) -> tuple[StageMemory, ...]:
    """Each stage's peak memory per device if the plan ran ``schedule``.

    The peak count of :func:`activation_peak` over the stage's :func:`stage_order`, priced
    by the cost model's memory rule (:func:`chainpipe.cost.memory_need`, linear in the
    count) and checked by :func:`chainpipe.cost.memory_fits`. Under the instance's own
    schedule this is exactly the plan's ``memory_bytes`` (1F1B ``min(M, S - s)``, GPipe
    ``M``); ZB-H1 holds ``(S - s) + s M_W / M_B`` units on stage ``s`` (``M >= S``) and
    ZB-H2 ``(2 (S - s) - 1) + 2 s M_W / M_B``, the paper's Table 1.

    Parameters
    ----------
    instance : Instance
    ev : Evaluation
        ``evaluate(instance, plan)`` of a plan whose stages exist.
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"}
    weight_memory_share : float
        ``M_W / M_B`` (zero-bubble schedules only).

    Returns
    -------
    tuple of StageMemory
        Pipeline by pipeline, stage by stage.
    """
    if is_interleaved(schedule):
        v = parse_schedule(schedule)[1]
        return tuple(m for pipe in ev.pipelines for m in
                     interleaved_memory(instance, pipe, _virtual_pipeline(instance, pipe, v)))
    sums = cost.LayerSums(instance)
    out = []
    for pipe in ev.pipelines:
        S = len(pipe.stages)
        for s, st in enumerate(pipe.stages):
            ref = instance.locate(st.devices[0])
            option = cost.StageOption(st.start, st.end, ref.dc, ref.group, st.data_parallel,
                                      st.tensor_parallel)
            peak = activation_peak(stage_order(schedule, S, s, pipe.microbatches),
                                   weight_memory_share)
            need = sums.option_memory_need(option, peak)
            limit = instance.group(ref).memory_bytes
            out.append(StageMemory(pipe.index, s, peak, need, limit,
                                   bool(cost.memory_fits(need, limit))))
    return tuple(out)


def stash_limits(schedule: str, num_stages: int, M: int) -> list[int]:
    """``n_s``: microbatches stage ``s`` runs forward before its first ``B`` frees one.

    GPipe ``M``; 1F1B and ZB-H1 ``min(M, S - s)``; ZB-H2 ``min(M, 2 (S - s) - 1)``. The
    forward of microbatch ``i + n_s`` on stage ``s`` follows the ``B`` of ``i`` in
    :func:`stage_order`.
    """
    if schedule == "gpipe":
        return [M] * num_stages
    k = 2 if schedule == "zb-h2" else 1
    return [min(M, k * (num_stages - s) - (k - 1)) for s in range(num_stages)]


def pipeline_lower_bound(instance: Instance, pipe: PipelineCost, schedule: str,
                         weight_share: float | None = None) -> float:
    """A lower bound on one pipeline's simulated makespan under ``schedule``.

    With ``B_s`` the backward block (its input-gradient part under a zero-bubble
    schedule, :func:`weight_blocks`), ``h_j = U_j + lat_j`` a hop, ``a_s = sum_{j<s}
    (f_j + h_j)`` the earliest a forward can start on stage ``s`` and ``tail(s) =
    sum_{j>=s} f_j + sum_{s<=j<S-1} h_j + sum_j B_j + sum_j h_j + W_0 + R_0`` the round
    trip of a microbatch from its forward on ``s`` to stage 0's synchronisation, the
    largest of:

    - every device's work, ``a_s + M C_s + R_s``;
    - every link's forward direction, ``a_j + f_j + M U_j + lat_j + tail(j + 1)``;
    - the period-style loops of the stash limits: stage ``s`` starts the forward of
      ``i + n_s`` only after the ``B`` of ``i`` (:func:`stash_limits`), closing a loop
      over stages ``s..t`` of length ``L = sum_{j=s..t} (f_j + B_j) + 2 sum_{s<=j<t} h_j``
      that lets ``k = n_s - n_t + 1`` microbatches through; ``c = floor((M - n_t) / k)``
      such loops run back to back before the last, so ``a_s + c L + tail(s)`` (no loop
      when ``n_s = M``).

    Each term follows a chain of blocks that the schedule runs one after the other, so
    none is above the replay (``tests/test_zero_bubble.py`` checks it on random plans).

    Parameters
    ----------
    instance : Instance
    pipe : PipelineCost
        One pipeline's costs (``evaluate(...).pipelines[p]``).
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"}
    weight_share : float, optional
        Zero-bubble schedules: one ``W`` share for every layer (default: the layers' own,
        :func:`weight_blocks`).

    Returns
    -------
    float
        Seconds.
    """
    f, b = block_durations(pipe.stages)
    w = [0.0] * len(f)
    if schedule in ZERO_BUBBLE:
        b, w = weight_blocks(instance, pipe, weight_share)
    S, M = len(f), pipe.microbatches
    hop = [x.occupancy_s + x.latency_s for x in pipe.boundaries]
    R = [st.sync_time_s for st in pipe.stages]
    arrive = [0.0]
    for j in range(S - 1):
        arrive.append(arrive[-1] + f[j] + hop[j])
    back = sum(b) + sum(hop) + w[0] + R[0]
    tail = [sum(f[s:]) + sum(hop[s:]) + back for s in range(S)]
    bound = max(arrive[s] + M * (f[s] + b[s] + w[s]) + R[s] for s in range(S))
    for j in range(S - 1):
        occupancy = pipe.boundaries[j].occupancy_s
        bound = max(bound, arrive[j] + f[j] + M * occupancy + pipe.boundaries[j].latency_s
                    + tail[j + 1])
    n = stash_limits(schedule, S, M)
    for s in range(S):
        length = f[s] + b[s]
        for t in range(s + 1, S):
            length += 2 * hop[t - 1] + f[t] + b[t]
            k = n[s] - n[t] + 1
            cycles = (M - n[t]) // k
            if cycles > 0:
                bound = max(bound, arrive[s] + cycles * length + tail[s])
    return bound


def makespan_lower_bound(instance: Instance, ev: Evaluation, schedule: str,
                         weight_share: float | None = None) -> float:
    """A lower bound on the plan's simulated makespan under ``schedule``: the slowest
    pipeline's :func:`pipeline_lower_bound`, then the averaging across DCs ``R_X / H``
    with several pipelines.

    Parameters
    ----------
    instance : Instance
    ev : Evaluation
        ``evaluate(instance, plan)`` of a plan whose stages exist.
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"}
    weight_share : float, optional
        Zero-bubble schedules: one ``W`` share for every layer (default: the layers' own).

    Returns
    -------
    float
        Seconds.
    """
    if is_interleaved(schedule):
        v = parse_schedule(schedule)[1]
        ends = [interleaved_lower_bound(_virtual_pipeline(instance, p, v)) for p in ev.pipelines]
    else:
        ends = [pipeline_lower_bound(instance, p, schedule, weight_share)
                for p in ev.pipelines]
    cross = ev.cross_sync_s / ev.cross_sync_period if len(ends) > 1 else 0.0
    return max(ends) + cross


def simulate_pipeline(instance: Instance, plan: Plan, *, schedule: str | None = None,
                      weight_share: float | None = None,
                      weight_memory_share: float = DEFAULT_WEIGHT_MEMORY_SHARE,
                      progress: bool | None = None) -> PipelineSchedule:
    """Simulate one iteration of ``plan`` block by block (see the module doc).

    Parameters
    ----------
    instance : Instance
        The instance; its ``training.schedule`` (1F1B or GPipe) is the default
        schedule, each pipeline's ``M_p`` its microbatches.
    plan : Plan
        A plan of one or several pipelines whose stages name real devices and layer
        ranges (it may break a rule such as a memory limit: the schedule is simulated
        anyway and marked infeasible).
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"} or "interleaved:V", optional
        Replay this schedule instead of the instance's: a what-if on the same plan, the
        same block times and links (``T`` stays the cost model's, for the instance's
        schedule). ``interleaved:V`` re-cuts the plan's layers into ``V`` chunks per
        stage (:func:`interleaved_layout`) and raises :class:`InapplicableSchedule` when
        it does not apply.
    weight_share : float, optional
        Zero-bubble schedules: the share of every layer's backward FLOP that is the
        weight gradient ``W``; default each layer's ``weight_grad_share``, else
        :data:`DEFAULT_WEIGHT_SHARE` (:func:`weight_blocks`).
    weight_memory_share : float
        Zero-bubble schedules: ``M_W / M_B``, what a microbatch holds between its ``B``
        and its ``W`` as a share of its stash (:data:`DEFAULT_WEIGHT_MEMORY_SHARE`).
    progress : bool, optional
        Show a progress bar on stderr (``tqdm``). By default it is shown for a
        simulation of more than :data:`PROGRESS_BLOCKS` blocks that runs longer
        than a second.

    Returns
    -------
    PipelineSchedule
        Every block of every device and link, the makespan (and each pipeline's), the
        cost model's ``T``, each stage's peak memory under the schedule and a lower
        bound on the makespan.

    Raises
    ------
    InstanceError
        If the plan's stages do not exist (the time of the plan is undefined).
    ValueError
        If the schedule has more than :data:`MAX_BLOCKS` device blocks, or for an
        unknown schedule or a share outside ``[0, 1]``.
    """
    schedule = instance.training.schedule if schedule is None else schedule
    _check_what_if(schedule, weight_share, weight_memory_share)
    ev = evaluate(instance, plan)
    if not math.isfinite(ev.iteration_time_s):
        raise InstanceError(list(ev.violations))
    if is_interleaved(schedule):
        return _simulate_interleaved(instance, plan, ev, schedule, parse_schedule(schedule)[1],
                                     progress)
    total = _check_size(plan, ev, 3 if schedule in ZERO_BUBBLE else 2)
    several = plan.num_pipelines > 1
    sims = [_Pipeline(schedule, pipe, several, instance, weight_share)
            for pipe in ev.pipelines]
    _run_all(sims, total, progress)
    ends = tuple(sim.makespan for sim in sims)
    cross = _cross_rows(instance, plan, ev, max(ends))
    length = ev.cross_sync_s / ev.cross_sync_period if several else 0.0
    rows = [row for sim in sims for row in sim.rows()] + cross
    return PipelineSchedule(instance.name, schedule, instance.microbatches,
                            ev.iteration_time_s, max(ends) + length, ev.feasible, rows,
                            ev.sync_s, ends, tuple(p.microbatches for p in ev.pipelines),
                            length, ev.objective,
                            stage_memory(instance, ev, schedule, weight_memory_share),
                            weight_share, weight_memory_share,
                            makespan_lower_bound(instance, ev, schedule, weight_share))


def simulate_schedules(instance: Instance, plan: Plan, schedules=SCHEDULES, *,
                       weight_share: float | None = None,
                       weight_memory_share: float = DEFAULT_WEIGHT_MEMORY_SHARE
                       ) -> list[PipelineSchedule]:
    """:func:`simulate_pipeline` of one plan under each of ``schedules`` (what-ifs).

    Parameters
    ----------
    instance, plan : Instance, Plan
    schedules : sequence of str
        Names from :data:`SCHEDULES` (default: all of them).
    weight_share, weight_memory_share : float
        See :func:`simulate_pipeline`.

    Returns
    -------
    list of PipelineSchedule or Inapplicable
        In the order of ``schedules``; an :class:`Inapplicable` (with its reason) where a
        what-if does not apply to the plan (``interleaved:V`` on a stage of fewer than
        ``V`` layers, or microbatches not a multiple of the stages).
    """
    out = []
    for name in schedules:
        try:
            out.append(simulate_pipeline(instance, plan, schedule=name,
                                         weight_share=weight_share,
                                         weight_memory_share=weight_memory_share,
                                         progress=False))
        except InapplicableSchedule as exc:
            out.append(Inapplicable(name, str(exc)))
    return out


@dataclass(frozen=True)
class Inapplicable:
    """A what-if schedule that does not apply to a plan, and why (one line)."""

    schedule: str
    reason: str

    def summary(self) -> dict:
        """``evaluate --schedules --format json``'s entry: the name, ``applicable: false``
        and the reason."""
        return {"schedule": self.schedule, "applicable": False, "reason": self.reason}


# --------------------------------------------------------------------------- closed forms
def gpipe_makespan(instance: Instance, plan: Plan, ev: Evaluation | None = None) -> float:
    """The exact makespan of the simulated GPipe schedule, in closed form.

    GPipe runs every forward, then every backward: two flow shops of identical
    jobs one after the other, each paced by its slowest resource. In a pipeline of
    ``M_p`` microbatches the last backward block of stage ``s`` ends at::

        E_s = sum f + sum (U + lat) + (M_p - 1) * max(f_max, U_max)        # forwards
              + sum_{j>=s} b_j + sum_{s<=j<S-1} (U_j + lat_j)
              + (M_p - 1) * max(max_{j>=s} b_j, max_{s<=j<S-1} U_j)         # backwards

    with ``f``/``b`` the cost model's forward/backward times of each stage (see
    :func:`block_durations`), and the pipeline ends at ``max_s (E_s + R_s)``, each
    stage synchronising after its last backward. Without synchronisation it is
    ``E_0 = fill + (M_p - 1) * (max(f_max, U_max) + max(b_max, U_max))``: the pipeline's
    ``T_p`` under the ``period`` objective. With several pipelines the averaging across
    DCs, ``R_X / H``, follows the slowest.

    Parameters
    ----------
    instance, plan : Instance, Plan
        The plan (whatever the instance's schedule: the formula is GPipe's).
    ev : Evaluation, optional
        ``evaluate(instance, plan)`` if already computed.

    Returns
    -------
    float
        Seconds.
    """
    ev = ev or evaluate(instance, plan)
    ends = [_gpipe_pipeline_end(pipe) for pipe in ev.pipelines]
    cross = ev.cross_sync_s / ev.cross_sync_period if len(ends) > 1 else 0.0
    return max(ends) + cross


def _gpipe_pipeline_end(pipe: PipelineCost) -> float:
    """``max_s (E_s + R_s)`` of one pipeline under GPipe (:func:`gpipe_makespan`)."""
    fwd, bwd = block_durations(pipe.stages)
    occupancy = [b.occupancy_s for b in pipe.boundaries]
    hops = [b.occupancy_s + b.latency_s for b in pipe.boundaries]
    M, S = pipe.microbatches, len(fwd)
    forwards = sum(fwd) + sum(hops) + (M - 1) * max(max(fwd), max(occupancy, default=0.0))
    makespan, path, pace = 0.0, 0.0, 0.0
    for s in reversed(range(S)):  # the backward flow shop from the last stage down to s
        path += bwd[s] + (hops[s] if s < S - 1 else 0.0)
        pace = max(pace, bwd[s], occupancy[s] if s < S - 1 else 0.0)
        end = forwards + path + (M - 1) * pace
        makespan = max(makespan, end + pipe.stages[s].sync_time_s)
    return makespan


def one_f_one_b_cycle(ev: Evaluation, microbatches: int) -> float:
    """The least steady-state cycle 1F1B allows, stash limit included.

    Stage ``s`` holds at most ``n_s = min(M, S - s)`` microbatches, so the
    forward of microbatch ``i + n_s`` waits for the backward of ``i``. Around
    stages ``s..t`` this closes a loop that takes ``W(s, t) = sum_{j=s..t} C_j
    + sum_{j=s..t-1} Q_j`` and lets ``n_s - n_t + 1`` microbatches through. The
    cycle is the largest of the busiest resource (``max C``, ``max U``: all
    that the classic objective counts) and every such loop's ``W(s, t) /
    (n_s - n_t + 1)``. Only stages that hold fewer than ``M`` microbatches
    count (the others never wait). This is the 1F1B period of the ``period``
    objective, computed by the cost model's one formula
    (:func:`chainpipe.cost.one_f_one_b_period`) on one pipeline's costs.

    Parameters
    ----------
    ev : Evaluation or PipelineCost
        ``evaluate(instance, plan)`` of a one-pipeline plan, or one pipeline's costs
        (``evaluate(...).pipelines[p]``) of a plan of several.
    microbatches : int
        ``M`` (``M_p`` of that pipeline).

    Returns
    -------
    float
        Seconds per microbatch.
    """
    return one_f_one_b_period([st.compute_time_s for st in ev.stages],
                              [b.occupancy_s for b in ev.boundaries],
                              [b.traversal_s for b in ev.boundaries], microbatches)


# --------------------------------------------------------------------------- interleaved 1F1B
class InapplicableSchedule(ValueError):
    """A what-if schedule that does not apply to this plan (one line saying why), such as
    ``interleaved:V`` on a stage of fewer than ``V`` layers."""


def parse_schedule(name: str) -> tuple[str, int]:
    """``(base, v)`` of a simulated schedule's name.

    Parameters
    ----------
    name : str
        One of :data:`SCHEDULES`, or ``interleaved:V`` (interleaved 1F1B with ``V`` virtual
        stages per device, ``2 <= V <=`` :data:`MAX_VIRTUAL`).

    Returns
    -------
    tuple of (str, int)
        ``(name, 1)`` for the four plain schedules, ``("interleaved", V)`` otherwise.

    Raises
    ------
    ValueError
        One line naming the problem: an unknown name, or a ``V`` that is not an integer in
        range.
    """
    if name in SCHEDULES:
        return name, 1
    base, sep, count = str(name).partition(":")
    if base == INTERLEAVED and sep:
        if count.isdigit() and 2 <= int(count) <= MAX_VIRTUAL:
            return INTERLEAVED, int(count)
        raise ValueError(f"schedule {name!r}: interleaved:V needs an integer V from 2 to "
                         f"{MAX_VIRTUAL} (virtual stages per device)")
    raise ValueError(f"unknown schedule {name!r}: one of {', '.join(SCHEDULES)} or "
                     f"interleaved:V (V from 2 to {MAX_VIRTUAL})")


def is_interleaved(schedule: str) -> bool:
    """Whether ``schedule`` names interleaved 1F1B (``interleaved:V``)."""
    return str(schedule).startswith(INTERLEAVED + ":")


@dataclass(frozen=True)
class VirtualStage:
    """One model chunk of the interleaved what-if: virtual stage ``index = chunk S + stage``
    holds layers ``[start, end)`` and runs on the devices of the plan's stage ``stage``."""

    index: int
    stage: int
    chunk: int
    start: int
    end: int


def interleaved_layout(sizes: list[int], v: int) -> list[VirtualStage]:
    """The model re-cut into ``v S`` chunks, dealt round-robin over the plan's ``S`` stages.

    Megatron-LM's interleaved layout: virtual stage ``c = k S + s`` (chunk ``k`` of stage
    ``s``) holds the ``c``-th run of consecutive layers, so stage ``s`` holds chunks
    ``s, S + s, ..., (v - 1) S + s`` of the model. Stage ``s`` keeps the plan's count
    ``n_s`` of layers, split into ``v`` chunks as evenly as possible by count (the first
    ``n_s mod v`` chunks one layer more); a plan with contiguous stages is therefore re-cut:
    its devices hold other layers than the plan's (same count).

    Parameters
    ----------
    sizes : list of int
        ``n_s``, the plan's layers per stage, in pipeline order.
    v : int
        Virtual stages per device.

    Returns
    -------
    list of VirtualStage
        In model order (``index`` 0 to ``v S - 1``).

    Raises
    ------
    InapplicableSchedule
        If a stage holds fewer than ``v`` layers.
    """
    S = len(sizes)
    for s, n in enumerate(sizes):
        if n < v:
            raise InapplicableSchedule(
                f"interleaved:{v} needs at least {v} layers per stage; stage {s} holds {n}")
    out, start = [], 0
    for c in range(v * S):
        k, s = divmod(c, S)
        size = sizes[s] // v + (1 if k < sizes[s] % v else 0)
        out.append(VirtualStage(c, s, k, start, start + size))
        start += size
    return out


def interleaved_order(num_stages: int, s: int, M: int, v: int) -> list[tuple[str, int, int]]:
    """The order in which stage ``s`` runs its blocks under interleaved 1F1B (Megatron-LM).

    ``v M`` microbatch-chunks each way. The ``k``-th forward is microbatch
    ``(k // (S v)) S + k mod S`` on chunk ``(k mod S v) // S`` (``S`` microbatches through
    chunk 0, then the same ``S`` through chunk 1, ...); the ``k``-th backward the same
    microbatch on chunk ``v - 1 - (k mod S v) // S``. Stage ``s`` runs
    ``min(2 (S - s - 1) + (v - 1) S, v M)`` warm-up forwards, then one forward and one
    backward alternately, then the remaining backwards. ``M`` must be a multiple of ``S``.

    Returns
    -------
    list of (str, int, int)
        ``(op, microbatch, chunk)`` with ``op`` ``"F"`` or ``"B"``, each once.
    """
    S, total = num_stages, v * M

    def ident(k: int, backward: bool) -> tuple[int, int]:
        group, within = divmod(k, S * v)
        chunk = within // S
        return group * S + within % S, (v - 1 - chunk) if backward else chunk

    warm = min(2 * (S - s - 1) + (v - 1) * S, total)
    order = [("F", *ident(k, False)) for k in range(warm)]
    for i in range(total - warm):
        order += [("F", *ident(warm + i, False)), ("B", *ident(i, True))]
    return order + [("B", *ident(k, True)) for k in range(total - warm, total)]


def interleaved_peak_formula(num_stages: int, s: int, M: int, v: int) -> float:
    """Megatron's count of stage ``s``'s peak stash under interleaved 1F1B, in units of a
    whole stage's stash per microbatch (``v`` equal chunks): ``(w + 1) / v`` microbatch-chunks
    with ``w = 2 (S - s - 1) + (v - 1) S`` the warm-up, ``M`` when ``w >= v M``. On stage 0
    that is ``S + (S - 1) / v``: Korthikanti et al. (2022), ``(1 + (p - 1) / (p v))`` times
    1F1B's ``p`` microbatches."""
    warm = 2 * (num_stages - s - 1) + (v - 1) * num_stages
    return float(M) if warm >= v * M else (warm + 1) / v


@dataclass
class _VirtualPipeline:
    """One pipeline's data for the interleaved replay: per virtual stage its device, block
    times and stash; per virtual boundary its occupancy, latency and link resources."""

    v: int
    M: int
    S: int
    stages: list[VirtualStage]
    fwd: list[float]
    bwd: list[float]
    activation: list[float]
    U: list[float]
    lat: list[float]
    keys: list[dict]  # per boundary c -> c + 1: {"F": resources, "B": resources}
    sync: list[float]
    params: list[float]


def _link_keys(instance: Instance, dcs: list[int], s: int, t: int) -> dict:
    """The resources a transfer from stage ``s`` to ``t`` occupies: each chain link of the
    path in its direction, or (inside one DC) the ordered pair of stages."""
    a, b = dcs[s], dcs[t]
    if a == b:
        return {"F": (("internal", a, s, t),), "B": (("internal", a, t, s),)}
    up = b > a
    span = range(min(a, b), max(a, b))
    return {"F": tuple(("chain", k, up) for k in span),
            "B": tuple(("chain", k, not up) for k in span)}


def _virtual_pipeline(instance: Instance, pipe: PipelineCost, v: int) -> _VirtualPipeline:
    """The interleaved what-if's re-cut of one pipeline (:func:`interleaved_layout`) priced by
    the cost model: each chunk's ``f`` and ``b`` on its stage's ``d x t`` devices
    (:meth:`chainpipe.cost.LayerSums.option_phase_times`), each virtual boundary's last
    layer's output over the path between the two stages' DCs (:func:`chainpipe.cost.path`),
    the wrap from the last stage back to the first included."""
    S, M = len(pipe.stages), pipe.microbatches
    if S < 2:
        raise InapplicableSchedule(f"interleaved:{v} needs at least 2 stages; the pipeline "
                                   f"has {S}")
    if M % S:
        raise InapplicableSchedule(f"interleaved:{v} needs the microbatches a multiple of the "
                                   f"stages (Megatron's order); {M} microbatches over {S} "
                                   f"stages")
    layout = interleaved_layout([st.end - st.start for st in pipe.stages], v)
    sums = cost.LayerSums(instance)
    refs = [instance.locate(st.devices[0]) for st in pipe.stages]
    fwd, bwd, act = [], [], []
    for vs in layout:
        st, ref = pipe.stages[vs.stage], refs[vs.stage]
        option = cost.StageOption(vs.start, vs.end, ref.dc, ref.group, st.data_parallel,
                                  st.tensor_parallel)
        f, b = sums.option_phase_times(option)
        fwd.append(f)
        bwd.append(b)
        act.append(float(sums.activation[vs.end] - sums.activation[vs.start]))
    dcs = [r.dc for r in refs]
    U, lat, keys = [], [], []
    for vs in layout[:-1]:
        s, t = vs.stage, (vs.stage + 1) % S
        bandwidth, latency = cost.path(instance, min(dcs[s], dcs[t]), max(dcs[s], dcs[t]))
        U.append(float(cost.occupancy(instance.layers[vs.end - 1].output_bytes, bandwidth)))
        lat.append(float(latency))
        keys.append(_link_keys(instance, dcs, s, t))
    params = [0.0] * S
    for vs in layout:
        params[vs.stage] += float(sums.params[vs.end] - sums.params[vs.start])
    training = instance.training
    sync = []
    for s, st in enumerate(pipe.stages):
        link = instance.datacenters[dcs[s]].link
        sync.append(float(cost.sync_time(params[s], st.data_parallel, st.tensor_parallel,
                                         training.gradient_bytes_per_param,
                                         link.bandwidth_bytes_per_s, link.latency_s)))
    return _VirtualPipeline(v, M, S, layout, fwd, bwd, act, U, lat, keys, sync, params)


class _Interleaved(_Sweep):
    """The event simulation of one pipeline under interleaved 1F1B: ``v S`` virtual stages
    on ``S`` devices, each device running :func:`interleaved_order`; a transfer between
    virtual stages books every resource of its path (:func:`_link_keys`) for its occupancy,
    at the earliest time from its production at which all are free (a link serves its
    transfers as early as it can, without delaying any already booked)."""

    def __init__(self, vp: _VirtualPipeline, pipe: PipelineCost, instance: Instance,
                 several: bool = False):
        self.vp, self.S, self.sync = vp, vp.S, vp.sync
        V, M = len(vp.stages), vp.M
        self.orders = [interleaved_order(vp.S, s, M, vp.v) for s in range(vp.S)]
        self.blocks = sum(len(order) for order in self.orders)
        self.pos = [0] * vp.S
        self.device_free = [0.0] * vp.S
        self.f_done = [[False] * M for _ in range(V)]
        self.arrive_f = [[math.nan] * M for _ in range(V)]
        self.arrive_b = [[math.nan] * M for _ in range(V)]
        self.f_end_last = [math.nan] * M
        self.busy: dict = {}  # resource -> (starts, ends), sorted, disjoint
        self.stage_rows, self.link_rows = _interleaved_rows(instance, pipe, vp, several)

    def ready(self, op: str, m: int, c: int) -> float | None:
        """When block ``(op, m)`` of virtual stage ``c`` has its input, or ``None``."""
        if op == "F":
            t = 0.0 if c == 0 else self.arrive_f[c][m]
        elif not self.f_done[c][m]:
            return None
        else:
            t = self.f_end_last[m] if c == len(self.vp.stages) - 1 else self.arrive_b[c][m]
        return None if math.isnan(t) else t

    def run_block(self, s: int, op: str, m: int, k: int, ready: float) -> None:
        """Run the block on stage ``s``'s device, then send its output on."""
        c = k * self.S + s
        dur = (self.vp.fwd if op == "F" else self.vp.bwd)[c]
        start = max(self.device_free[s], ready)
        self.device_free[s] = end = start + dur
        self.stage_rows[s].blocks.append(Block(start, dur, op, m, k))
        if op == "F":
            self.f_done[c][m] = True
            if c == len(self.vp.stages) - 1:
                self.f_end_last[m] = end
            else:
                self.arrive_f[c + 1][m] = self.send(c, "F", m, end)
        elif c > 0:
            self.arrive_b[c - 1][m] = self.send(c - 1, "B", m, end)

    def send(self, boundary: int, op: str, m: int, produced: float) -> float:
        """Book a transfer over virtual boundary ``boundary`` in direction ``op``; its
        arrival."""
        keys, U = self.vp.keys[boundary][op], self.vp.U[boundary]
        start = produced
        moved = True
        while moved and U > 0:
            moved = False
            for key in keys:
                starts, ends = self.busy.setdefault(key, ([], []))
                i = bisect.bisect_right(ends, start)
                if i < len(starts) and starts[i] < start + U:
                    start, moved = ends[i], True
        for key in keys if U > 0 else ():
            starts, ends = self.busy[key]
            i = bisect.bisect_left(starts, start)
            starts.insert(i, start)
            ends.insert(i, start + U)
        for key in keys:
            self.link_rows[_row_key(key)].blocks.append(Block(start, U, op, m, boundary))
        return start + U + self.vp.lat[boundary]

    def advance(self, s: int, entry: tuple) -> bool:
        op, m, k = entry
        ready = self.ready(op, m, k * self.S + s)
        if ready is None:
            return False
        self.run_block(s, op, m, k, ready)
        return True

    def rows(self) -> list[PipelineRow]:
        return self.stage_rows + list(self.link_rows.values())


def _row_key(key: tuple) -> tuple:
    """The chart row of a link resource: one per chain link, or per pair of stages inside a
    DC, both directions on it (as the plain schedules' link rows)."""
    if key[0] == "chain":
        return ("chain", key[1])
    return ("internal", key[1], min(key[2], key[3]), max(key[2], key[3]))


def _interleaved_rows(instance: Instance, pipe: PipelineCost, vp: _VirtualPipeline,
                      several: bool) -> tuple[list[PipelineRow], dict]:
    """Stage rows (labelled with their chunks' layers) and one row per link resource."""
    p = pipe.index
    prefix = f"p{p} " if several else ""
    stage_rows = []
    for s, st in enumerate(pipe.stages):
        width = "" if st.data_parallel == st.tensor_parallel == 1 else \
            f" {st.data_parallel}x{st.tensor_parallel}"
        chunks = " ".join(f"[{x.start},{x.end})" for x in vp.stages if x.stage == s)
        stage_rows.append(PipelineRow(f"{prefix}s{s} {devices_label(st.devices)}{width} "
                                      f"{chunks}", "stage", pipeline=p))
    names = [dc.name for dc in instance.datacenters]
    links: dict = {}
    for boundary in vp.keys:
        for key in boundary["F"]:
            row = _row_key(key)
            if row in links:
                continue
            label = (f"{prefix}link {names[row[1]]}-{names[row[1] + 1]}" if row[0] == "chain"
                     else f"{prefix}link {names[row[1]]} internal (s{row[2]}<->s{row[3]})")
            links[row] = PipelineRow(label, "link", row[0] == "chain", pipeline=p)
    return stage_rows, dict(sorted(links.items(), key=lambda kv: (kv[0][0] == "chain",
                                                                  kv[0][1:])))


def interleaved_memory(instance: Instance, pipe: PipelineCost, vp: _VirtualPipeline
                       ) -> list[StageMemory]:
    """Each stage's peak memory per device under interleaved 1F1B.

    Stage ``s`` holds the parameter state of all its chunks and, at each moment, the stash
    of every microbatch-chunk between its ``F`` and its ``B`` (each chunk its own layers'
    activation bytes, as the memory rule counts them per layer); the peak over the order is
    priced by :func:`chainpipe.cost.memory_need`. ``peak_in_flight`` is that peak over the
    stage's whole stash per microbatch (all its chunks): with equal chunks Megatron's
    :func:`interleaved_peak_formula`.
    """
    training, out = instance.training, []
    for s, st in enumerate(pipe.stages):
        held = peak = count = peak_count = 0.0
        for op, _m, k in interleaved_order(vp.S, s, vp.M, vp.v):
            a = vp.activation[k * vp.S + s]
            sign = 1.0 if op == "F" else -1.0
            held, count = held + sign * a, count + sign
            peak, peak_count = max(peak, held), max(peak_count, count)
        whole = sum(vp.activation[k * vp.S + s] for k in range(vp.v))
        units = peak / whole if whole > 0 else peak_count / vp.v
        need = float(cost.memory_need(vp.params[s], peak, 1, training.bytes_per_param,
                                      st.data_parallel, st.tensor_parallel,
                                      training.sharded_bytes_per_param))
        limit = instance.group(instance.locate(st.devices[0])).memory_bytes
        out.append(StageMemory(pipe.index, s, units, need, limit,
                               bool(cost.memory_fits(need, limit))))
    return out


def interleaved_lower_bound(vp: _VirtualPipeline) -> float:
    """A lower bound on one pipeline's interleaved replay: the larger of every device's work
    from its first possible forward, ``a_s + M sum_k (f + b) + R_s`` with ``a_s`` the first
    microbatch's forward path through virtual stages ``0..s-1`` (the device's first block is
    chunk 0 of microbatch 0), and the first microbatch's round trip through all ``v S``
    virtual stages and their hops, then stage 0's ``R_0``."""
    V = len(vp.stages)
    hop = [u + lat for u, lat in zip(vp.U, vp.lat)]
    arrive = [0.0]
    for c in range(V - 1):
        arrive.append(arrive[-1] + vp.fwd[c] + hop[c])
    bound = sum(vp.fwd) + sum(vp.bwd) + 2 * sum(hop) + vp.sync[0]
    for s in range(vp.S):
        work = sum(vp.fwd[c] + vp.bwd[c] for c in range(s, V, vp.S))
        bound = max(bound, arrive[s] + vp.M * work + vp.sync[s])
    return bound


def _simulate_interleaved(instance: Instance, plan: Plan, ev: Evaluation, schedule: str,
                          v: int, progress: bool | None) -> PipelineSchedule:
    """:func:`simulate_pipeline` of ``interleaved:V``: re-cut, replay, memory and bound."""
    vps = [_virtual_pipeline(instance, pipe, v) for pipe in ev.pipelines]
    total = _check_size(plan, ev, 2 * v)
    several = plan.num_pipelines > 1
    sims = [_Interleaved(vp, pipe, instance, several) for vp, pipe in zip(vps, ev.pipelines)]
    _run_all(sims, total, progress)
    ends = tuple(sim.makespan for sim in sims)
    length = ev.cross_sync_s / ev.cross_sync_period if several else 0.0
    rows = [row for sim in sims for row in sim.rows()] + \
        _cross_rows(instance, plan, ev, max(ends))
    memory = tuple(m for vp, pipe in zip(vps, ev.pipelines)
                   for m in interleaved_memory(instance, pipe, vp))
    bound = max(interleaved_lower_bound(vp) for vp in vps) + length
    return PipelineSchedule(instance.name, schedule, instance.microbatches,
                            ev.iteration_time_s, max(ends) + length, ev.feasible, rows,
                            max(max(vp.sync) for vp in vps), ends, tuple(p.microbatches for p in ev.pipelines),
                            length, ev.objective, memory, None, DEFAULT_WEIGHT_MEMORY_SHARE,
                            bound)


__all__ = ["CROSS_SYNC", "DEFAULT_WEIGHT_MEMORY_SHARE", "DEFAULT_WEIGHT_SHARE", "INTERLEAVED",
           "MAX_VIRTUAL", "SCHEDULES", "Inapplicable", "InapplicableSchedule", "VirtualStage",
           "interleaved_layout", "interleaved_lower_bound", "interleaved_memory",
           "interleaved_order", "interleaved_peak_formula", "is_interleaved", "parse_schedule",
           "SYNC", "WEIGHT", "ZERO_BUBBLE", "Block", "PipelineRow", "PipelineSchedule",
           "StageMemory", "activation_peak", "block_durations", "gpipe_makespan",
           "makespan_lower_bound", "one_f_one_b_cycle", "pipeline_lower_bound",
           "simulate_pipeline", "simulate_schedules", "stage_label",
           "stage_memory", "stage_order", "stash_limits", "weight_blocks"]
