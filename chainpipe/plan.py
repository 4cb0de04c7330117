"""Plans and their evaluation by the cost model (``docs/model.md``).

:func:`evaluate` computes the iteration time ``T`` of a plan, and every
reported time is recomputed here from the plan. The terms it adds up are
those of :mod:`chainpipe.cost`, the one home of each formula.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import cost
from .instance import Instance, InstanceError
from .strict_json import quote, shorten


@dataclass(frozen=True)
class Stage:
    """One stage of a plan: layers ``[start, end)`` on ``d * t`` named devices.

    Attributes
    ----------
    start, end : int
        The layer range, 0-based, half-open.
    devices : tuple of str
        ``d * t`` device names ``"dc/type/i"``: the ``d`` tensor-parallel groups one
        after another, ``t`` names each. A single name may be given as a string.
    data_parallel : int
        ``d``, the data-parallel width; default 1.
    tensor_parallel : int
        ``t``, the tensor-parallel degree; default 1.
    """

    start: int
    end: int
    devices: tuple[str, ...]
    data_parallel: int = 1
    tensor_parallel: int = 1

    def __post_init__(self) -> None:
        devices = (self.devices,) if isinstance(self.devices, str) else tuple(self.devices)
        object.__setattr__(self, "devices", devices)

    @property
    def device(self) -> str:
        """The first device: the stage's only one when ``d = t = 1``."""
        return self.devices[0]

    @property
    def width(self) -> int:
        """``d * t``, the devices the stage asks for."""
        return self.data_parallel * self.tensor_parallel

    def tp_groups(self) -> list[tuple[str, ...]]:
        """The devices cut into tensor-parallel groups of ``t`` names."""
        t = max(self.tensor_parallel, 1)
        return [self.devices[i:i + t] for i in range(0, len(self.devices), t)]

    def to_dict(self) -> dict:
        return {"layers": [self.start, self.end], "data_parallel": self.data_parallel,
                "tensor_parallel": self.tensor_parallel, "devices": list(self.devices)}


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def to_dict(self) -> dict:
        return {"stages": [s.to_dict() for s in self.stages]}

    @classmethod
    def from_dict(cls, data: object, path: str = "") -> Plan:
        """Build a plan from its JSON shape; raises :class:`InstanceError` naming paths."""
        pre = f"{path}." if path else ""
        if not isinstance(data, dict):
            raise InstanceError([f"{path or '(plan)'}: must be an object"])
        stages = data.get("stages")
        if not isinstance(stages, list) or not stages:
            raise InstanceError([f"{pre}stages: must be a non-empty list"])
        problems, out = [], []
        for s, st in enumerate(stages):
            stage = _stage_from_dict(st, f"{pre}stages[{s}]", problems)
            if stage is not None:
                out.append(stage)
        if problems:
            raise InstanceError(problems)
        return cls(tuple(out))

    @classmethod
    def from_tuples(cls, instance: Instance, stages) -> Plan:
        """Plan from ``(start, end, dc, group[, d, t])`` tuples, devices allocated by
        :func:`pack_devices` in each datacenter."""
        stages = [tuple(int(x) for x in st) + (1, 1)[len(st) - 4:] for st in stages]
        names: list[tuple[str, ...]] = [()] * len(stages)
        for k, dc in enumerate(instance.datacenters):
            mine = [s for s, st in enumerate(stages) if st[2] == k]
            packed = pack_devices(dc, [stages[s][3:] for s in mine])
            for s, devices in zip(mine, packed):
                names[s] = devices
        return cls(tuple(Stage(a, b, names[s], d, t)
                         for s, (a, b, _k, _g, d, t) in enumerate(stages)))


def pack_devices(datacenter, stages) -> list[tuple[str, ...]]:
    """Device names for stages of one datacenter given as ``(group, d, t)``, in order.

    Per group, the stages' tensor-parallel groups are packed into whole nodes:
    largest ``t`` first, each block at the next free index, which is then a
    multiple of its size, so no block spans two nodes (every ``t`` and every node
    size is a power of two). With one device per stage, devices are numbered in
    stage order. The CDynP agents name their own stages with it, so a DC's
    devices are named without anyone else's data.
    """
    blocks: dict[int, list[tuple[int, int, int]]] = {}
    for s, (g, d, t) in enumerate(stages):
        blocks.setdefault(g, []).extend((-t, s, r) for r in range(d))
    names: list[list[str]] = [[] for _ in stages]
    for g, group_blocks in blocks.items():
        nxt = 0
        for neg_t, s, _r in sorted(group_blocks):
            names[s].extend(Instance.device_name(datacenter, datacenter.devices[g], nxt + i)
                            for i in range(-neg_t))
            nxt += -neg_t
    return [tuple(n) for n in names]


def _int_field(st: dict, key: str, path: str, problems: list[str]) -> int | None:
    """``st[key]`` as a width (an integer >= 1), default 1; a problem noted otherwise."""
    v = st.get(key, 1)
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 2**31 - 1:
        return v
    problems.append(f"{path}.{key}: must be an integer from 1 to 2**31 - 1, "
                    f"got {quote(v) if isinstance(v, str) else shorten(str(v))}")
    return None


def _stage_from_dict(st: object, p: str, problems: list[str]) -> Stage | None:
    """One stage of a plan file: the version-2 shape, or a version-1 ``device``."""
    if not isinstance(st, dict):
        problems.append(f"{p}: must be an object")
        return None
    before = len(problems)
    for key in st:
        if key not in ("layers", "device", "devices", "data_parallel", "tensor_parallel"):
            problems.append(f"{p}.{key if isinstance(key, str) else '?'}: unknown field")
    lay = st.get("layers")
    if not (isinstance(lay, list) and len(lay) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in lay)):
        problems.append(f"{p}.layers: must be a list [start, end] of two integers")
    d = _int_field(st, "data_parallel", p, problems)
    t = _int_field(st, "tensor_parallel", p, problems)
    devices = None
    if "device" in st and "devices" in st:
        problems.append(f"{p}: give 'devices' (a list) or 'device' (one name), not both")
    elif "devices" in st:
        devices = st["devices"]
        if not (isinstance(devices, list) and devices
                and all(isinstance(x, str) for x in devices)):
            problems.append(f"{p}.devices: must be a non-empty list of device names 'dc/type/i'")
    elif isinstance(st.get("device"), str):
        devices = [st["device"]]
    else:
        problems.append(f"{p}.device: must be a device name 'dc/type/i'")
    if len(problems) != before:
        return None
    return Stage(lay[0], lay[1], tuple(devices), d, t)


@dataclass(frozen=True)
class StageCost:
    index: int
    start: int
    end: int
    devices: tuple[str, ...]
    datacenter: str
    data_parallel: int  # d_s
    tensor_parallel: int  # t_s
    compute_time_s: float  # C_s, forward + backward per microbatch, TP all-reduces included
    in_flight: int  # n_s, microbatches whose activations are stashed
    memory_bytes: float  # per device: ((beta - zeta) + zeta / d) P_s / t + n_s A_s / (d t)
    memory_limit_bytes: float
    sync_time_s: float  # R_s, the gradient all-reduce once per iteration (0 when d = 1)

    @property
    def device(self) -> str:
        """The first device (the only one when ``d = t = 1``)."""
        return self.devices[0]


@dataclass(frozen=True)
class BoundaryCost:
    after_stage: int  # boundary between stage s and s+1 (0-based s)
    layer: int  # the last layer of stage s; its output crosses
    bytes: float  # X_s
    path: tuple[str, ...]  # datacenters the path spans (one name: a DC's own link)
    bandwidth_bytes_per_s: float
    latency_s: float
    occupancy_s: float  # U_s = X_s / bandwidth, per microbatch and direction
    traversal_s: float  # Q_s = 2 * (latency + U_s)


@dataclass(frozen=True)
class Evaluation:
    """The iteration time of a plan and everything it is made of."""

    iteration_time_s: float
    fill_drain_s: float  # sum C_s + sum Q_s
    steady_s: float  # (M - 1) * bottleneck
    bottleneck_s: float
    bottleneck: str  # what paces the steady state: a stage's devices or a link
    stages: tuple[StageCost, ...]
    boundaries: tuple[BoundaryCost, ...]
    violations: tuple[str, ...]
    sync_s: float = 0.0  # max_s R_s
    sync: str = "none"  # which stage's synchronisation sets sync_s ("none" when every d = 1)

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def paced_by(self) -> str:
        """The largest of the three parts of ``T`` after the fill: ``"device"``, ``"link"``
        or ``"synchronisation"``."""
        if self.sync_s > self.steady_s:
            return "synchronisation"
        return "link" if self.bottleneck.startswith("link") else "device"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["feasible"] = self.feasible
        d["paced_by"] = self.paced_by
        return d


def _check_stage_shape(instance: Instance, s: int, st: Stage, refs: list) -> list[str]:
    """The rules of one stage's devices: count ``d * t``, allowed widths, one group, node
    size and tensor-parallel groups inside one node."""
    par = instance.parallelism
    out = []
    if msg := instance.training.width_problem(st.data_parallel):
        out.append(f"stages[{s}].data_parallel: {shorten(str(st.data_parallel))} {msg}")
    if st.tensor_parallel not in par.tensor_parallel:
        out.append(f"stages[{s}].tensor_parallel: {shorten(str(st.tensor_parallel))} is not an "
                   f"allowed degree {list(par.tensor_parallel)}")
    if len(st.devices) != st.width:
        out.append(f"stages[{s}].devices: lists {len(st.devices)} device(s), data_parallel x "
                   f"tensor_parallel = {shorten(str(st.width))}")
    known = [r for r in refs if r is not None]
    if not known:
        return out
    first = known[0]
    if any((r.dc, r.group) != (first.dc, first.group) for r in known):
        groups = sorted({f"{instance.datacenters[r.dc].name}/"
                         f"{instance.group(r).type}" for r in known})
        out.append(f"stages[{s}].devices: mixes device groups {', '.join(groups)}; a stage "
                   f"runs on one group")
        return out
    group = instance.group(first)
    node = group.devices_per_node
    if st.tensor_parallel > node:
        out.append(f"stages[{s}].tensor_parallel: {st.tensor_parallel} exceeds the "
                   f"{node} device(s) per node of {instance.datacenters[first.dc].name}/"
                   f"{group.type}")
    elif len(st.devices) == st.width:
        t = st.tensor_parallel
        for j in range(0, len(refs), t):
            block = refs[j:j + t]
            if all(r is not None for r in block) and len({r.index // node for r in block}) > 1:
                out.append(f"stages[{s}].devices[{j}:{j + t}]: tensor-parallel group spans "
                           f"nodes (devices {', '.join(str(r.index) for r in block)}, "
                           f"{node} per node)")
    return out


#: unknown device names listed one per line up to this many; more are counted in one line
UNKNOWN_LISTED = 3


def _unknown_devices(unknown: list[tuple[str, str]]) -> list[str]:
    """The lines for device names the instance does not have: one each, or one for all."""
    if len(unknown) <= UNKNOWN_LISTED:
        return [f"{where}: no device named {quote(name)}" for where, name in unknown]
    where, name = unknown[0]
    return [f"{len(unknown)} devices are not in this instance, e.g. {quote(name)} ({where}): "
            f"is the plan for another instance?"]


def idle_devices(instance: Instance, plan: Plan) -> list[tuple[str, str, int, int]]:
    """``(dc, type, idle, count)`` for each device group ``plan`` leaves (partly) unused."""
    used: dict[tuple[str, str], int] = {}
    for st in plan.stages:
        for name in st.devices:
            dc, kind, _ = name.split("/", 2) if name.count("/") >= 2 else (name, "", "")
            used[dc, kind] = used.get((dc, kind), 0) + 1
    return [(dc.name, g.type, g.count - used.get((dc.name, g.type), 0), g.count)
            for dc in instance.datacenters for g in dc.devices
            if used.get((dc.name, g.type), 0) < g.count]


def _check_structure(instance: Instance, plan: Plan) -> tuple[list, list[str]]:
    """Each stage's device references (``None`` for an unknown name) and the structural
    violations.

    Ranges contiguous and covering, devices real and distinct, each stage on ``d * t``
    devices of one group with its tensor-parallel groups inside nodes, datacenters in
    chain order.
    """
    L = instance.num_layers
    violations: list[str] = []
    unknown: list[tuple[str, str]] = []
    expect = 0
    refs: list[list] = []
    for s, st in enumerate(plan.stages):
        if st.start != expect:
            violations.append(f"stages[{s}].layers: starts at {shorten(str(st.start))}, "
                              f"expected {expect}")
        if not (0 <= st.start < st.end <= L):
            violations.append(
                f"stages[{s}].layers: [{shorten(str(st.start))}, {shorten(str(st.end))}) is not a "
                f"non-empty range of the model's layers 0..{L - 1} ([start, end) with "
                f"0 <= start < end <= {L})"
            )
        expect = st.end
        stage_refs = []
        for j, name in enumerate(st.devices):
            try:
                stage_refs.append(instance.locate(name))
            except KeyError:
                where = f"stages[{s}].device" if len(st.devices) == 1 else f"stages[{s}].devices[{j}]"
                unknown.append((where, name))
                stage_refs.append(None)
        refs.append(stage_refs)
        violations.extend(_check_stage_shape(instance, s, st, stage_refs))
    violations[:0] = _unknown_devices(unknown)
    if expect != L:
        violations.append(f"stages: cover layers up to {shorten(str(expect))}, the model has {L}")
    seen: dict[str, int] = {}
    for s, st in enumerate(plan.stages):
        for name, ref in zip(st.devices, refs[s]):
            if name in seen:
                violations.append(
                    f"stages[{s}].device: {name if ref is not None else quote(name)} "
                    f"already runs stage {seen[name]}" if seen[name] != s else
                    f"stages[{s}].devices: {name if ref is not None else quote(name)} "
                    f"is listed twice"
                )
            seen.setdefault(name, s)
    dcs = [next((r.dc for r in stage_refs if r is not None), None) for stage_refs in refs]
    for s in range(1, len(dcs)):
        if dcs[s] is not None and dcs[s - 1] is not None and dcs[s] < dcs[s - 1]:
            violations.append(
                f"stages[{s}].device: datacenter {instance.datacenters[dcs[s]].name} "
                f"comes before {instance.datacenters[dcs[s - 1]].name} in the chain"
            )
    return [r[0] if r and all(x is not None for x in r) else None for r in refs], violations


def _stage_costs(instance: Instance, plan: Plan, refs, sums: cost.LayerSums,
                 violations: list[str], downstream: int = 0) -> list[StageCost]:
    """Compute time, memory per device and synchronisation of every stage; memory
    violations appended. ``downstream``: stages that follow the plan's last one (a part
    of a plan, as a CDynP agent evaluates its own stages)."""
    training, S = instance.training, plan.num_stages + downstream
    out = []
    for s, (st, ref) in enumerate(zip(plan.stages, refs)):
        group = instance.group(ref)
        option = cost.StageOption(st.start, st.end, ref.dc, ref.group, st.data_parallel,
                                  st.tensor_parallel)
        n = cost.in_flight(training.schedule, instance.microbatches, S - s)
        mem = sums.option_memory_need(option, n)
        if not cost.memory_fits(mem, group.memory_bytes):
            where = st.devices[0] if st.width == 1 else \
                f"each of its {st.width} {instance.datacenters[ref.dc].name}/{group.type} devices"
            violations.append(
                f"stages[{s}]: needs {mem:.6g} bytes ({n} microbatches in flight) "
                f"on {where}, which has {group.memory_bytes:.6g} bytes"
            )
        out.append(StageCost(s, st.start, st.end, st.devices, instance.datacenters[ref.dc].name,
                             st.data_parallel, st.tensor_parallel,
                             sums.option_compute_time(option), n, mem, group.memory_bytes,
                             sums.option_sync_time(option)))
    return out


def _boundary_costs(instance: Instance, plan: Plan, refs) -> list[BoundaryCost]:
    """Path, occupancy and traversal of every boundary between consecutive stages."""
    out = []
    for s in range(plan.num_stages - 1):
        k1, k2 = refs[s].dc, refs[s + 1].dc
        lo, hi = min(k1, k2), max(k1, k2)
        names = tuple(dc.name for dc in instance.datacenters[lo : hi + 1])
        out.append(boundary_cost(instance.model, s, plan.stages[s].end - 1, names,
                                 *cost.path(instance, lo, hi)))
    return out


def boundary_cost(model, after_stage: int, last_layer: int, path: tuple[str, ...],
                  bandwidth: float, latency: float) -> BoundaryCost:
    """The cost of the boundary after stage ``after_stage``, whose last layer's output
    crosses ``path`` (one DC name: that DC's own link) of that bandwidth and latency."""
    x = model.layers[last_layer].output_bytes
    u = cost.occupancy(x, bandwidth)
    return BoundaryCost(after_stage, last_layer, x, path, bandwidth, latency, u,
                        cost.traversal(latency, u))


def evaluate_part(instance: Instance, stages, downstream: int) -> tuple[list, list, list]:
    """The costs of a run of consecutive stages on one DC's devices, before ``downstream``
    more stages elsewhere: what a CDynP agent tells the owner of its part of a plan.

    Parameters
    ----------
    instance : Instance
        The DC's own view: the public model and training with its datacenter alone.
    stages : sequence of Stage
        Its stages, in plan order (layer ranges as in the whole plan).
    downstream : int
        How many stages follow them (capped where the in-flight count stops growing).

    Returns
    -------
    tuple of (list of StageCost, list of BoundaryCost, list of str)
        The stages' costs (``index`` counted from 0 here), the boundaries between them
        (over the DC's own link) and the rules broken (memory and stage shape).
    """
    part = Plan(tuple(stages))
    violations, refs = [], []
    for s, st in enumerate(part.stages):
        try:
            stage_refs = [instance.locate(name) for name in st.devices]
        except KeyError as exc:
            raise InstanceError([f"stages[{s}]: no device named {exc.args[0]!r}"]) from None
        violations.extend(_check_stage_shape(instance, s, st, stage_refs))
        refs.append(stage_refs[0])
    costs = _stage_costs(instance, part, refs, cost.LayerSums(instance), violations, downstream)
    name = instance.datacenters[0].name
    bounds = [boundary_cost(instance.model, s, part.stages[s].end - 1, (name,),
                            *cost.path(instance, 0, 0)) for s in range(part.num_stages - 1)]
    return costs, bounds, violations


def evaluate(instance: Instance, plan: Plan) -> Evaluation:
    """Iteration time and breakdown of ``plan``; every violated rule is listed.

    The time is computed even for an infeasible plan whenever its stages name real
    devices and valid layer ranges, so a user can see what the plan would cost.

    Parameters
    ----------
    instance : Instance
        The instance the plan is for.
    plan : Plan
        Stages in chain order.

    Returns
    -------
    Evaluation
        ``iteration_time_s`` (``inf`` when stages name unknown devices or empty
        ranges), the fill/drain and steady-state parts, what paces the steady
        state, per-stage and per-boundary costs, and ``violations`` (empty iff
        the plan is feasible).

    Raises
    ------
    InstanceError
        For a plan without stages.
    """
    if plan.num_stages == 0:
        raise InstanceError(["stages: a plan needs at least one stage"])
    refs, violations = _check_structure(instance, plan)
    L = instance.num_layers
    if any(r is None for r in refs) or any(
        not (0 <= st.start < st.end <= L) or st.tensor_parallel <= 0 or st.data_parallel <= 0
        for st in plan.stages
    ):
        # the time cannot be computed for a plan whose stages do not exist
        return Evaluation(
            float("inf"), float("inf"), float("inf"), float("inf"), "undefined", (), (),
            tuple(violations),
        )
    stages = _stage_costs(instance, plan, refs, cost.LayerSums(instance), violations)
    boundaries = _boundary_costs(instance, plan, refs)
    return combine(stages, boundaries, instance.microbatches, violations)


def combine(stages, boundaries, microbatches: int, violations=()) -> Evaluation:
    """The :class:`Evaluation` of a plan from the costs of its stages and boundaries.

    :func:`evaluate` computes those costs from the instance; the owner of a CDynP run
    across hosts, who holds only the public part, gets each DC's from its agent and the
    chain boundaries' from the public links (:func:`chain_boundary`), and combines them
    here, into the same ``T``.

    Parameters
    ----------
    stages : sequence of StageCost
        Every stage, in plan order.
    boundaries : sequence of BoundaryCost
        The boundary after each stage but the last.
    microbatches : int
        ``M``.
    violations : sequence of str
        The rules the plan breaks (empty: feasible).
    """
    stages, boundaries = tuple(stages), tuple(boundaries)
    fill, bottleneck_s = cost.fill_and_bottleneck(
        [c.compute_time_s for c in stages], [b.occupancy_s for b in boundaries],
        [b.traversal_s for b in boundaries])
    # what paces it: the first stage at the maximum, unless a link is strictly slower
    worst = max(stages, key=lambda c: c.compute_time_s)
    bottleneck = f"stage {worst.index} on {_where(worst)}"
    if worst.compute_time_s < bottleneck_s:
        b = next(b for b in boundaries if b.occupancy_s == bottleneck_s)
        bottleneck = f"link {'-'.join(b.path)} after stage {b.after_stage}"
    slowest_sync = max(stages, key=lambda c: c.sync_time_s)
    sync_s = slowest_sync.sync_time_s
    sync = f"stage {slowest_sync.index} on {_where(slowest_sync)}" if sync_s > 0 else "none"
    M = microbatches
    return Evaluation(
        cost.iteration_time(fill, bottleneck_s, M, sync_s), fill,
        cost.steady_state(M, bottleneck_s), bottleneck_s, bottleneck, stages,
        boundaries, tuple(violations), sync_s, sync,
    )


def _where(stage: StageCost) -> str:
    """A stage's devices in a line: the device, or ``d x t devices a/g/0..7``."""
    if len(stage.devices) == 1:
        return stage.devices[0]
    return (f"{stage.data_parallel} x {stage.tensor_parallel} devices "
            f"{devices_label(stage.devices)}")


def devices_label(devices) -> str:
    """A stage's devices in a few characters: ``a/g/0`` alone, ``a/g/0..7`` for a run of
    consecutive indices of one group, ``a/g/0,1,4,5`` otherwise (up to four), else
    ``a/g/0,1,...,9 (6)`` with the count.
    """
    devices = list(devices)
    if len(devices) == 1:
        return devices[0]
    prefixes = {d.rpartition("/")[0] for d in devices}
    indices = [d.rpartition("/")[2] for d in devices]
    if len(prefixes) > 1 or not all(i.isdigit() for i in indices):
        return f"{devices[0]}..{devices[-1]} ({len(devices)})"
    prefix, numbers = devices[0].rpartition("/")[0] + "/", [int(i) for i in indices]
    if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"{prefix}{numbers[0]}..{numbers[-1]}"
    if len(numbers) <= 4:
        return prefix + ",".join(indices)
    return f"{prefix}{indices[0]},{indices[1]},...,{indices[-1]} ({len(numbers)})"
