"""The pipeline schedule of one training iteration, simulated block by block.

:func:`simulate_pipeline` runs a plan's 1F1B or GPipe schedule as an event
simulation on the resources and times of the cost model
(:func:`chainpipe.plan.evaluate`): one device per stage, which runs one block
at a time (a microbatch's forward or backward part of the stage's compute
time ``C_s``), and one link per stage boundary, full duplex, which carries one
activation (forward) and one gradient (backward) at a time, each occupying it
``U_s`` and arriving ``latency`` later. Its makespan is the length of that
concrete schedule; the cost model's ``T`` is a closed formula over the same
times. After its last backward block each stage of data-parallel width ``d > 1``
all-reduces its gradients: one synchronisation block of the cost model's ``R_s`` on
its row, so a stage's synchronisation overlaps the drain of the stages before it
(the cost model's ``T`` adds ``max_s R_s`` after the whole drain instead).
``docs/schedule.md`` explains where and why the two differ.

Nothing here draws: :mod:`chainpipe.gantt` draws a :class:`PipelineSchedule`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .cost import one_f_one_b_period
from .instance import Instance, InstanceError
from .plan import Evaluation, Plan, devices_label, evaluate

#: a simulation with more blocks than this reports progress (see ``progress``)
PROGRESS_BLOCKS = 200_000
#: the most device blocks (``2 M S``) a simulation runs (some 10 s and 300 MB)
MAX_BLOCKS = 1_000_000
#: ``Block.op`` of a stage's gradient synchronisation (its ``microbatch`` is -1)
SYNC = "S"


@dataclass(frozen=True, slots=True)
class Block:
    """One busy interval of a device or of one direction of a link.

    Attributes
    ----------
    start, duration : float
        Seconds from the start of the iteration.
    op : str
        ``"F"`` (forward: compute, or an activation on a link), ``"B"``
        (backward: compute, or a gradient on a link) or ``"S"`` (:data:`SYNC`: the
        stage's gradient synchronisation ``R_s``, once per iteration).
    microbatch : int
        0-based microbatch index; -1 for a synchronisation block (every microbatch's
        gradients at once).
    """

    start: float
    duration: float
    op: str
    microbatch: int

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass
class PipelineRow:
    """The blocks of one resource: a stage's device or a boundary's link.

    ``kind`` is ``"stage"`` or ``"link"``; ``inter_dc`` marks a link whose path
    spans datacenters.
    """

    label: str
    kind: str
    inter_dc: bool = False
    blocks: list[Block] = field(default_factory=list)


@dataclass
class PipelineSchedule:
    """A simulated iteration and the cost model's numbers for the same plan.

    Attributes
    ----------
    instance, schedule : str
        Instance name and ``"1f1b"`` or ``"gpipe"``.
    microbatches : int
        ``M``.
    iteration_time_s : float
        ``T`` of the cost model (:func:`chainpipe.plan.evaluate`).
    makespan_s : float
        End of the last block of the simulated schedule, synchronisation included.
    sync_s : float
        ``max_s R_s``, the cost model's synchronisation term (0 when every ``d = 1``).
    feasible : bool
        Whether the plan keeps every rule (a memory limit may be broken).
    rows : list of PipelineRow
        Stage rows and link rows in chain order (stage 0, link 0-1, stage 1, ...).
    """

    instance: str
    schedule: str
    microbatches: int
    iteration_time_s: float
    makespan_s: float
    feasible: bool
    rows: list[PipelineRow]
    sync_s: float = 0.0

    @property
    def ratio(self) -> float:
        """``T / makespan``: above 1 the formula is pessimistic, below 1 optimistic."""
        return self.iteration_time_s / self.makespan_s if self.makespan_s > 0 else math.nan

    def to_dict(self) -> dict:
        """The schedule as JSON-ready data (``chainpipe plot --data FILE.json``)."""
        return {
            "instance": self.instance, "schedule": self.schedule,
            "microbatches": self.microbatches, "iteration_time_s": self.iteration_time_s,
            "makespan_s": self.makespan_s, "sync_s": self.sync_s, "feasible": self.feasible,
            "rows": [{"label": r.label, "kind": r.kind, "inter_dc": r.inter_dc,
                      "blocks": [{"start": b.start, "duration": b.duration, "op": b.op,
                                  "microbatch": b.microbatch} for b in r.blocks]}
                     for r in self.rows],
        }

    def csv_rows(self) -> tuple[list[str], list[list]]:
        """Header and one row per block (``chainpipe plot --data FILE.csv``)."""
        header = ["row", "resource", "kind", "op", "microbatch", "start_s", "duration_s"]
        rows = [[i, r.label, r.kind, b.op, b.microbatch, f"{b.start:.9g}", f"{b.duration:.9g}"]
                for i, r in enumerate(self.rows) for b in r.blocks]
        return header, rows


def stage_order(schedule: str, num_stages: int, s: int, M: int) -> list[tuple[str, int]]:
    """The order in which stage ``s`` runs its forward and backward blocks.

    Parameters
    ----------
    schedule : {"1f1b", "gpipe"}
        GPipe: every forward, then every backward in reverse microbatch order.
        1F1B (PipeDream-Flush): ``min(S - s - 1, M)`` warm-up forwards, then one
        forward and one backward alternately, then the remaining backwards, so
        that at most ``min(M, S - s)`` microbatches are stashed at once (the
        in-flight count of the memory rule).
    num_stages : int
        ``S``.
    s : int
        0-based stage index.
    M : int
        Number of microbatches.

    Returns
    -------
    list of (str, int)
        ``("F" or "B", microbatch)`` in execution order, each block once.
    """
    if schedule == "gpipe":
        return [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
    warm = min(num_stages - s - 1, M)
    order = [("F", m) for m in range(warm)]
    for i in range(M - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", m) for m in range(M - warm, M)]
    return order


def block_durations(instance: Instance, plan: Plan,
                    ev: Evaluation) -> tuple[list[float], list[float]]:
    """Forward and backward block lengths of each stage, seconds.

    A stage's compute time ``C_s`` (from ``ev``) is split in the ratio of its
    layers' forward and backward FLOP (half and half for a stage of no FLOP).
    """
    fwd, bwd = [], []
    for st in ev.stages:
        part = instance.layers[st.start:st.end]
        f = sum(ly.fwd_flop for ly in part)
        total = f + sum(ly.bwd_flop for ly in part)
        share = f / total if total > 0 else 0.5
        fwd.append(st.compute_time_s * share)
        bwd.append(st.compute_time_s - fwd[-1])
    return fwd, bwd


def stage_label(s: int, stage) -> str:
    """A stage row's label: ``s0 a/g/0 [0,3)``, with ``2x4`` after the devices unless
    ``d = t = 1``."""
    width = "" if stage.data_parallel == stage.tensor_parallel == 1 else \
        f" {stage.data_parallel}x{stage.tensor_parallel}"
    return f"s{s} {devices_label(stage.devices)}{width} [{stage.start},{stage.end})"


def _rows(plan: Plan, ev: Evaluation) -> tuple[list[PipelineRow], list[PipelineRow]]:
    stage_rows = [PipelineRow(stage_label(s, st), "stage") for s, st in enumerate(plan.stages)]
    link_rows = []
    for b in ev.boundaries:
        inter = len(b.path) > 1
        name = "-".join(b.path) if inter else f"{b.path[0]} internal"
        link_rows.append(PipelineRow(f"link {name} (s{b.after_stage}->s{b.after_stage + 1})",
                                     "link", inter))
    return stage_rows, link_rows


class _Pipeline:
    """The state of the event simulation: what each device and link has done so far."""

    def __init__(self, instance: Instance, plan: Plan, ev: Evaluation):
        S, M = plan.num_stages, instance.microbatches
        self.S, self.M = S, M
        self.fwd, self.bwd = block_durations(instance, plan, ev)
        self.sync = [st.sync_time_s for st in ev.stages]
        self.U = [b.occupancy_s for b in ev.boundaries]
        self.lat = [b.latency_s for b in ev.boundaries]
        self.orders = [stage_order(instance.training.schedule, S, s, M) for s in range(S)]
        self.pos = [0] * S  # next block of each stage's order
        self.device_free = [0.0] * S
        self.f_done = [[False] * M for _ in range(S)]
        self.arrive_f = [[math.nan] * M for _ in range(S)]  # activation of m at stage s
        self.arrive_b = [[math.nan] * M for _ in range(S)]  # gradient of m at stage s
        self.f_end_last = [math.nan] * M  # forward of m done on the last stage
        self.link_free = {"F": [0.0] * max(S - 1, 0), "B": [0.0] * max(S - 1, 0)}
        self.stage_rows, self.link_rows = _rows(plan, ev)

    def ready(self, s: int, op: str, m: int) -> float | None:
        """When block ``(op, m)`` of stage ``s`` has its input, or ``None`` if not yet known."""
        if op == "F":
            t = 0.0 if s == 0 else self.arrive_f[s][m]
        elif not self.f_done[s][m]:
            return None
        else:  # the last stage turns its own forward around
            t = self.f_end_last[m] if s == self.S - 1 else self.arrive_b[s][m]
        return None if math.isnan(t) else t

    def run_block(self, s: int, op: str, m: int, ready: float) -> None:
        """Run the block on stage ``s``'s device, then send its output on."""
        dur = self.fwd[s] if op == "F" else self.bwd[s]
        start = max(self.device_free[s], ready)
        end = start + dur
        self.device_free[s] = end
        self.stage_rows[s].blocks.append(Block(start, dur, op, m))
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

    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Sweep the stages, each running its order as far as its inputs allow, until done."""
        remaining = 2 * self.M * self.S
        while remaining:
            progressed = 0
            for s in range(self.S):
                order = self.orders[s]
                while self.pos[s] < len(order):
                    op, m = order[self.pos[s]]
                    ready = self.ready(s, op, m)
                    if ready is None:
                        break
                    self.run_block(s, op, m, ready)
                    self.pos[s] += 1
                    progressed += 1
            if not progressed:  # cannot happen for the two schedules above
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

    def rows(self) -> list[PipelineRow]:
        out = []
        for s in range(self.S):
            out.append(self.stage_rows[s])
            if s < self.S - 1:
                out.append(self.link_rows[s])
        return out


def simulate_pipeline(instance: Instance, plan: Plan, *,
                      progress: bool | None = None) -> PipelineSchedule:
    """Simulate one iteration of ``plan`` block by block (see the module doc).

    Parameters
    ----------
    instance : Instance
        The instance; its ``training.schedule`` (1F1B or GPipe) and
        ``microbatches`` set the schedule.
    plan : Plan
        A plan whose stages name real devices and layer ranges (it may break a
        memory limit: the schedule is simulated anyway and marked infeasible).
    progress : bool, optional
        Show a progress bar on stderr (``tqdm``). By default it is shown for a
        simulation of more than :data:`PROGRESS_BLOCKS` blocks that runs longer
        than a second.

    Returns
    -------
    PipelineSchedule
        Every block of every device and link, the makespan and the cost
        model's ``T``.

    Raises
    ------
    InstanceError
        If the plan's stages do not exist (the time of the plan is undefined).
    ValueError
        If the schedule has more than :data:`MAX_BLOCKS` device blocks.
    """
    ev = evaluate(instance, plan)
    if not math.isfinite(ev.iteration_time_s):
        raise InstanceError(list(ev.violations))
    blocks = 2 * instance.microbatches * plan.num_stages
    if blocks > MAX_BLOCKS:
        raise ValueError(f"the schedule has {blocks:,} blocks (2 x {instance.microbatches:,} "
                         f"microbatches x {plan.num_stages} stages); the simulation runs at "
                         f"most {MAX_BLOCKS:,}: simulate a copy of the instance with fewer "
                         f"microbatches")
    sim = _Pipeline(instance, plan, ev)
    total = 2 * sim.M * sim.S
    if progress is None:
        progress = total > PROGRESS_BLOCKS
    if progress:
        from tqdm import tqdm

        with tqdm(total=total, desc="simulating", unit="block", unit_scale=True, delay=1.0,
                  leave=False) as bar:
            sim.run(bar.update)
    else:
        sim.run()
    makespan = max(sim.device_free) if sim.device_free else 0.0
    return PipelineSchedule(instance.name, instance.training.schedule, sim.M,
                            ev.iteration_time_s, makespan, ev.feasible, sim.rows(), ev.sync_s)


# --------------------------------------------------------------------------- closed forms
def gpipe_makespan(instance: Instance, plan: Plan, ev: Evaluation | None = None) -> float:
    """The exact makespan of the simulated GPipe schedule, in closed form.

    GPipe runs every forward, then every backward: two flow shops of identical
    jobs one after the other, each paced by its slowest resource. The last
    backward block of stage ``s`` ends at::

        E_s = sum F + sum (U + lat) + (M - 1) * max(F_max, U_max)          # forwards
              + sum_{j>=s} B_j + sum_{s<=j<S-1} (U_j + lat_j)
              + (M - 1) * max(max_{j>=s} B_j, max_{s<=j<S-1} U_j)           # backwards

    with ``F``/``B`` the forward/backward blocks of each stage (see
    :func:`block_durations`), and the makespan is ``max_s (E_s + R_s)``, each stage
    synchronising after its last backward. Without synchronisation it is ``E_0 =
    fill + (M - 1) * (max(F_max, U_max) + max(B_max, U_max))``, never below the cost
    model's ``T``.

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
    fwd, bwd = block_durations(instance, plan, ev)
    occupancy = [b.occupancy_s for b in ev.boundaries]
    hops = [b.occupancy_s + b.latency_s for b in ev.boundaries]
    M, S = instance.microbatches, len(fwd)
    forwards = sum(fwd) + sum(hops) + (M - 1) * max(max(fwd), max(occupancy, default=0.0))
    makespan, path, pace = 0.0, 0.0, 0.0
    for s in reversed(range(S)):  # the backward flow shop from the last stage down to s
        path += bwd[s] + (hops[s] if s < S - 1 else 0.0)
        pace = max(pace, bwd[s], occupancy[s] if s < S - 1 else 0.0)
        end = forwards + path + (M - 1) * pace
        makespan = max(makespan, end + ev.stages[s].sync_time_s)
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
    ev : Evaluation
        ``evaluate(instance, plan)``.
    microbatches : int
        ``M``.

    Returns
    -------
    float
        Seconds per microbatch.
    """
    return one_f_one_b_period([st.compute_time_s for st in ev.stages],
                              [b.occupancy_s for b in ev.boundaries],
                              [b.traversal_s for b in ev.boundaries], microbatches)


__all__ = ["SYNC", "Block", "PipelineRow", "PipelineSchedule", "block_durations",
           "gpipe_makespan", "one_f_one_b_cycle", "simulate_pipeline",
           "stage_label", "stage_order"]
