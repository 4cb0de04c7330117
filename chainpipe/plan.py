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
class Pipeline:
    """One pipeline of a plan: the whole model cut into stages, on its own range of DCs.

    Attributes
    ----------
    stages : tuple of Stage
        The stages in chain order.
    microbatches : int or None
        ``M_p``, the iteration's microbatches this pipeline processes; ``None`` in a
        plan's first form (``{"stages": [...]}``, one pipeline taking all ``M``).
    """

    stages: tuple[Stage, ...]
    microbatches: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))


@dataclass(frozen=True, init=False)
class Plan:
    """A plan: ``P >= 1`` pipelines (contract section 3), most often one.

    ``Plan(stages)`` is the first form, one pipeline taking all ``M`` microbatches
    (what every solver returns today); ``Plan(pipelines=[Pipeline(stages, M_p), ...])``
    the second. :attr:`stages` is the one pipeline's stages; a plan of several
    pipelines has no single list of stages and raises :class:`ValueError` there, so
    that code written for one pipeline cannot silently read only part of a plan
    (:attr:`all_stages` lists every stage of every pipeline).

    Parameters
    ----------
    stages : sequence of Stage, optional
        The stages of a one-pipeline plan (first form).
    pipelines : sequence of Pipeline, optional
        The pipelines, in chain order (second form); exactly one of the two is given.
    """

    pipelines: tuple[Pipeline, ...]

    def __init__(self, stages=None, *, pipelines=None) -> None:
        if (stages is None) == (pipelines is None):
            raise TypeError("Plan takes stages (one pipeline) or pipelines, not both or neither")
        if stages is not None:
            pipelines = (Pipeline(tuple(stages)),)
        pipelines = tuple(pipelines)
        if len(pipelines) > 1 and any(p.microbatches is None for p in pipelines):
            raise TypeError("a plan of several pipelines states each one's microbatches")
        object.__setattr__(self, "pipelines", pipelines)

    @property
    def single(self) -> bool:
        """Whether the plan is in the first form: one pipeline of all ``M`` microbatches."""
        return len(self.pipelines) == 1 and self.pipelines[0].microbatches is None

    @property
    def num_pipelines(self) -> int:
        """``P``."""
        return len(self.pipelines)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages of the plan's one pipeline.

        Raises
        ------
        ValueError
            For a plan of several pipelines (use :attr:`pipelines` or :attr:`all_stages`).
        """
        if len(self.pipelines) != 1:
            raise ValueError(f"a plan of {len(self.pipelines)} pipelines has no single list "
                             f"of stages; this step handles one pipeline only")
        return self.pipelines[0].stages

    @property
    def all_stages(self) -> tuple[Stage, ...]:
        """Every stage of every pipeline, pipeline after pipeline."""
        return tuple(st for pipe in self.pipelines for st in pipe.stages)

    @property
    def num_stages(self) -> int:
        """Stages of the one pipeline (:attr:`stages`)."""
        return len(self.stages)

    def to_dict(self) -> dict:
        """The plan's JSON: ``{"stages": [...]}`` in the first form, else
        ``{"pipelines": [{"microbatches": M_p, "stages": [...]}, ...]}``."""
        if self.single:
            return {"stages": [s.to_dict() for s in self.stages]}
        return {"pipelines": [{"microbatches": p.microbatches,
                               "stages": [s.to_dict() for s in p.stages]}
                              for p in self.pipelines]}

    @classmethod
    def from_dict(cls, data: object, path: str = "") -> Plan:
        """Build a plan from either JSON shape; raises :class:`InstanceError` naming paths.

        Whether the plan fits an instance (pipeline count, microbatches adding up to
        ``M``, ...) is for :func:`evaluate` to say; here only the shape is checked.
        """
        pre = f"{path}." if path else ""
        if not isinstance(data, dict):
            raise InstanceError([f"{path or '(plan)'}: must be an object"])
        if "stages" in data and "pipelines" in data:
            raise InstanceError([f"{path or '(plan)'}: give 'stages' (one pipeline) or "
                                 f"'pipelines', not both"])
        if "pipelines" in data:
            return cls(pipelines=_pipelines_from_dict(data["pipelines"], f"{pre}pipelines"))
        problems: list[str] = []
        stages = _stages_from_dict(data.get("stages"), f"{pre}stages", problems)
        if problems:
            raise InstanceError(problems)
        return cls(stages)

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


def _stages_from_dict(stages: object, path: str, problems: list[str]) -> tuple[Stage, ...]:
    """The stages of one pipeline (a non-empty list), problems noted."""
    if not isinstance(stages, list) or not stages:
        problems.append(f"{path}: must be a non-empty list")
        return ()
    out = []
    for s, st in enumerate(stages):
        stage = _stage_from_dict(st, f"{path}[{s}]", problems)
        if stage is not None:
            out.append(stage)
    return tuple(out)


def _pipelines_from_dict(pipelines: object, path: str) -> tuple[Pipeline, ...]:
    """The second form's pipelines: each ``{"microbatches": M_p, "stages": [...]}``."""
    if not isinstance(pipelines, list) or not pipelines:
        raise InstanceError([f"{path}: must be a non-empty list"])
    problems: list[str] = []
    out = []
    for p, pipe in enumerate(pipelines):
        where = f"{path}[{p}]"
        if not isinstance(pipe, dict):
            problems.append(f"{where}: must be an object {{\"microbatches\": M_p, "
                            f"\"stages\": [...]}}")
            continue
        problems.extend(f"{where}.{k if isinstance(k, str) else '?'}: unknown field"
                        for k in pipe if k not in ("microbatches", "stages"))
        m = pipe.get("microbatches")
        if "microbatches" not in pipe:
            problems.append(f"{where}.microbatches: missing field (required with "
                            f"'pipelines')")
        elif not (isinstance(m, int) and not isinstance(m, bool)):
            problems.append(f"{where}.microbatches: must be an integer, got "
                            f"{quote(m) if isinstance(m, str) else shorten(str(m))}")
        out.append(Pipeline(_stages_from_dict(pipe.get("stages"), f"{where}.stages", problems),
                            m))
    if problems:
        raise InstanceError(problems)
    return tuple(out)


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
    forward_time_s: float = float("nan")  # f_s (v3; nan where a caller did not compute it)
    backward_time_s: float = float("nan")  # b_s
    pipeline: int = 0  # the index of its pipeline (v3)

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
    pipeline: int = 0  # the index of its pipeline (v3)


@dataclass(frozen=True)
class PipelineCost:
    """One pipeline's part of ``T`` (contract section 4.3) and what paces it.

    Attributes
    ----------
    index : int
        The pipeline's position in the plan (0-based).
    microbatches : int
        ``M_p``.
    datacenters : tuple of str
        The DC range it occupies, first to last, transit DCs included.
    fill_drain_s : float
        ``sum C_s + sum Q_s``, one microbatch's round trip.
    period_s : float
        ``lambda_p``, the steady-state period (by objective and schedule).
    steady_s : float
        ``(M_p - 1) * lambda_p``.
    time_s : float
        ``T_p = fill_drain_s + steady_s``.
    paced_by : str
        What sets the period: ``"device"``, ``"link"`` or ``"loop"`` (a 1F1B loop).
    bottleneck : str
        The same in words: ``stage 2 on a/g/0``, ``link a-b after stage 1``, ``loop
        s2..s5: 41% compute, 59% MAN round trips``; GPipe's period names each phase's.
    stages, boundaries : tuple
        Its :class:`StageCost` and :class:`BoundaryCost` entries.
    """

    index: int
    microbatches: int
    datacenters: tuple[str, ...]
    fill_drain_s: float
    period_s: float
    steady_s: float
    time_s: float
    paced_by: str
    bottleneck: str
    stages: tuple[StageCost, ...]
    boundaries: tuple[BoundaryCost, ...]


@dataclass(frozen=True)
class Evaluation:
    """The iteration time of a plan and everything it is made of.

    With one pipeline the fields are those of version 2 (``bottleneck_s`` is the
    pipeline's period ``lambda``). With several, ``fill_drain_s``, ``steady_s``,
    ``bottleneck_s`` and ``bottleneck`` describe the slowest pipeline (the largest
    ``T_p``), ``stages`` and ``boundaries`` list every pipeline's in plan order (each
    entry says its ``pipeline``), and ``pipelines`` has one :class:`PipelineCost` each.
    """

    iteration_time_s: float
    fill_drain_s: float  # sum C_s + sum Q_s
    steady_s: float  # (M - 1) * bottleneck
    bottleneck_s: float
    bottleneck: str  # what paces the steady state: a stage's devices, a link or a loop
    stages: tuple[StageCost, ...]
    boundaries: tuple[BoundaryCost, ...]
    violations: tuple[str, ...]
    sync_s: float = 0.0  # max_s R_s
    sync: str = "none"  # which stage's synchronisation sets sync_s ("none" when every d = 1)
    pipelines: tuple[PipelineCost, ...] = ()
    cross_sync_s: float = 0.0  # R_X, gradients averaged across pipelines (0 for one)
    cross_sync_period: int = 1  # H: T counts R_X / H
    cross_sync: str = "none"  # the chain span R_X crosses
    objective: str = "classic"

    @property
    def feasible(self) -> bool:
        return not self.violations

    @property
    def paced_by(self) -> str:
        """The largest of the parts of ``T`` after the fill: ``"device"``, ``"link"`` or
        ``"loop"`` (the slowest pipeline's steady state), ``"synchronisation"`` (``max
        R_s``) or ``"synchronisation across DCs"`` (``R_X / H``)."""
        if self.cross_sync_s / self.cross_sync_period > max(self.steady_s, self.sync_s):
            return "synchronisation across DCs"
        if self.sync_s > self.steady_s:
            return "synchronisation"
        if self.pipelines:
            return self.pipelines[_slowest(self.pipelines)].paced_by
        return "link" if self.bottleneck.startswith("link") else "device"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["feasible"] = self.feasible
        d["paced_by"] = self.paced_by
        return d


def _slowest(pipelines) -> int:
    """The index of the pipeline with the largest ``T_p`` (the first on ties)."""
    return max(range(len(pipelines)), key=lambda p: (pipelines[p].time_s, -p))


def _check_stage_shape(instance: Instance, s: int, st: Stage, refs: list,
                       where: str = "stages") -> list[str]:
    """The rules of one stage's devices: count ``d * t``, allowed widths, one group, node
    size and tensor-parallel groups inside one node."""
    par = instance.parallelism
    out = []
    if msg := instance.training.width_problem(st.data_parallel):
        out.append(f"{where}[{s}].data_parallel: {shorten(str(st.data_parallel))} {msg}")
    if st.tensor_parallel not in par.tensor_parallel:
        out.append(f"{where}[{s}].tensor_parallel: {shorten(str(st.tensor_parallel))} is not an "
                   f"allowed degree {list(par.tensor_parallel)}")
    if len(st.devices) != st.width:
        out.append(f"{where}[{s}].devices: lists {len(st.devices)} device(s), data_parallel x "
                   f"tensor_parallel = {shorten(str(st.width))}")
    known = [r for r in refs if r is not None]
    if not known:
        return out
    first = known[0]
    if any((r.dc, r.group) != (first.dc, first.group) for r in known):
        groups = sorted({f"{instance.datacenters[r.dc].name}/"
                         f"{instance.group(r).type}" for r in known})
        out.append(f"{where}[{s}].devices: mixes device groups {', '.join(groups)}; a stage "
                   f"runs on one group")
        return out
    group = instance.group(first)
    node = group.devices_per_node
    if st.tensor_parallel > node:
        out.append(f"{where}[{s}].tensor_parallel: {st.tensor_parallel} exceeds the "
                   f"{node} device(s) per node of {instance.datacenters[first.dc].name}/"
                   f"{group.type}")
    elif len(st.devices) == st.width:
        t = st.tensor_parallel
        for j in range(0, len(refs), t):
            block = refs[j:j + t]
            if all(r is not None for r in block) and len({r.index // node for r in block}) > 1:
                out.append(f"{where}[{s}].devices[{j}:{j + t}]: tensor-parallel group spans "
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
    for st in plan.all_stages:
        for name in st.devices:
            dc, kind, _ = name.split("/", 2) if name.count("/") >= 2 else (name, "", "")
            used[dc, kind] = used.get((dc, kind), 0) + 1
    return [(dc.name, g.type, g.count - used.get((dc.name, g.type), 0), g.count)
            for dc in instance.datacenters for g in dc.devices
            if used.get((dc.name, g.type), 0) < g.count]


def _stage_refs(instance: Instance, stages, where: str, unknown: list) -> list[list]:
    """Each stage's device references, ``None`` for a name the instance lacks (noted in
    ``unknown`` with its place)."""
    refs: list[list] = []
    for s, st in enumerate(stages):
        stage_refs = []
        for j, name in enumerate(st.devices):
            try:
                stage_refs.append(instance.locate(name))
            except KeyError:
                at = f"{where}[{s}].device" if len(st.devices) == 1 else f"{where}[{s}].devices[{j}]"
                unknown.append((at, name))
                stage_refs.append(None)
        refs.append(stage_refs)
    return refs


def _check_layers(instance: Instance, s: int, st: Stage, expect: int, where: str) -> list[str]:
    """The layer range of stage ``s``: starting where the previous one ended (``expect``),
    non-empty and inside the model."""
    L, out = instance.num_layers, []
    if st.start != expect:
        out.append(f"{where}[{s}].layers: starts at {shorten(str(st.start))}, expected {expect}")
    if not (0 <= st.start < st.end <= L):
        out.append(
            f"{where}[{s}].layers: [{shorten(str(st.start))}, {shorten(str(st.end))}) is not "
            f"a non-empty range of the model's layers 0..{L - 1} ([start, end) with "
            f"0 <= start < end <= {L})"
        )
    return out


def _check_devices_once(stages, refs, where: str, seen: dict) -> list[str]:
    """No device twice: within a stage, across stages, across pipelines (``seen`` maps a
    name to where it first ran, shared by the plan's pipelines)."""
    out = []
    for s, st in enumerate(stages):
        for name, ref in zip(st.devices, refs[s]):
            shown = name if ref is not None else quote(name)
            if name in seen:
                if seen[name] == (where, s):
                    out.append(f"{where}[{s}].devices: {shown} is listed twice")
                else:
                    other, r = seen[name]
                    runs = f"stage {r}" if other == where else f"{other}[{r}]"
                    out.append(f"{where}[{s}].device: {shown} already runs {runs}")
            seen.setdefault(name, (where, s))
    return out


def _check_structure(instance: Instance, stages, where: str = "stages",
                     seen: dict | None = None) -> tuple[list, list[str]]:
    """Each stage's device reference (``None`` for an unknown name) and the structural
    violations of one pipeline's ``stages``, named under ``where``.

    Ranges contiguous and covering, devices real and distinct (``seen``: the devices of
    the pipelines before), each stage on ``d * t`` devices of one group with its
    tensor-parallel groups inside nodes, datacenters in chain order.
    """
    unknown: list[tuple[str, str]] = []
    refs = _stage_refs(instance, stages, where, unknown)
    violations = _unknown_devices(unknown)
    ends = [0] + [st.end for st in stages]
    for s, st in enumerate(stages):  # per stage its layers, then its shape
        violations += _check_layers(instance, s, st, ends[s], where)
        violations += _check_stage_shape(instance, s, st, refs[s], where)
    if ends[-1] != instance.num_layers:
        violations.append(f"{where}: cover layers up to {shorten(str(ends[-1]))}, the model "
                          f"has {instance.num_layers}")
    violations += _check_devices_once(stages, refs, where, {} if seen is None else seen)
    dcs = [next((r.dc for r in stage_refs if r is not None), None) for stage_refs in refs]
    for s in range(1, len(dcs)):
        if dcs[s] is not None and dcs[s - 1] is not None and dcs[s] < dcs[s - 1]:
            violations.append(
                f"{where}[{s}].device: datacenter {instance.datacenters[dcs[s]].name} "
                f"comes before {instance.datacenters[dcs[s - 1]].name} in the chain"
            )
    return [r[0] if r and all(x is not None for x in r) else None for r in refs], violations


def _stage_costs(instance: Instance, stages, refs, sums: cost.LayerSums,
                 violations: list[str], downstream: int = 0, microbatches: int | None = None,
                 where: str = "stages", pipeline: int = 0) -> list[StageCost]:
    """Compute time, memory per device and synchronisation of every stage; memory
    violations appended. ``microbatches``: ``M_p`` of the pipeline (default ``M``);
    ``downstream``: stages that follow the last one given (a part of a plan, as a CDynP
    agent evaluates its own stages)."""
    training, S = instance.training, len(stages) + downstream
    M = instance.microbatches if microbatches is None else microbatches
    out = []
    for s, (st, ref) in enumerate(zip(stages, refs)):
        group = instance.group(ref)
        option = cost.StageOption(st.start, st.end, ref.dc, ref.group, st.data_parallel,
                                  st.tensor_parallel)
        n = cost.in_flight(training.schedule, M, S - s)
        mem = sums.option_memory_need(option, n)
        if not cost.memory_fits(mem, group.memory_bytes):
            on = st.devices[0] if st.width == 1 else \
                f"each of its {st.width} {instance.datacenters[ref.dc].name}/{group.type} devices"
            violations.append(
                f"{where}[{s}]: needs {mem:.6g} bytes ({n} microbatches in flight) "
                f"on {on}, which has {group.memory_bytes:.6g} bytes"
            )
        f, b = sums.option_phase_times(option)
        out.append(StageCost(s, st.start, st.end, st.devices, instance.datacenters[ref.dc].name,
                             st.data_parallel, st.tensor_parallel,
                             sums.option_compute_time(option), n, mem, group.memory_bytes,
                             sums.option_sync_time(option), f, b, pipeline))
    return out


def _boundary_costs(instance: Instance, stages, refs, pipeline: int = 0) -> list[BoundaryCost]:
    """Path, occupancy and traversal of every boundary between consecutive stages."""
    out = []
    for s in range(len(stages) - 1):
        k1, k2 = refs[s].dc, refs[s + 1].dc
        lo, hi = min(k1, k2), max(k1, k2)
        names = tuple(dc.name for dc in instance.datacenters[lo : hi + 1])
        out.append(boundary_cost(instance.model, s, stages[s].end - 1, names,
                                 *cost.path(instance, lo, hi), pipeline))
    return out


def boundary_cost(model, after_stage: int, last_layer: int, path: tuple[str, ...],
                  bandwidth: float, latency: float, pipeline: int = 0) -> BoundaryCost:
    """The cost of the boundary after stage ``after_stage``, whose last layer's output
    crosses ``path`` (one DC name: that DC's own link) of that bandwidth and latency."""
    x = model.layers[last_layer].output_bytes
    u = cost.occupancy(x, bandwidth)
    return BoundaryCost(after_stage, last_layer, x, path, bandwidth, latency, u,
                        cost.traversal(latency, u), pipeline)


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
    part = tuple(stages)
    violations, refs = [], []
    for s, st in enumerate(part):
        try:
            stage_refs = [instance.locate(name) for name in st.devices]
        except KeyError as exc:
            raise InstanceError([f"stages[{s}]: no device named {exc.args[0]!r}"]) from None
        violations.extend(_check_stage_shape(instance, s, st, stage_refs))
        refs.append(stage_refs[0])
    costs = _stage_costs(instance, part, refs, cost.LayerSums(instance), violations, downstream)
    name = instance.datacenters[0].name
    bounds = [boundary_cost(instance.model, s, part[s].end - 1, (name,),
                            *cost.path(instance, 0, 0)) for s in range(len(part) - 1)]
    return costs, bounds, violations


def _where_of(plan: Plan, p: int) -> str:
    """How a violation names pipeline ``p``'s stages: ``stages`` in the first form."""
    return "stages" if plan.single else f"pipelines[{p}].stages"


def _check_pipelines(instance: Instance, plan: Plan, dc_ranges) -> list[str]:
    """The rules between pipelines: an allowed count, ``M_p >= 1`` adding up to ``M``,
    DC ranges disjoint and in chain order (``dc_ranges[p]``: ``(first, last)`` or None)."""
    allowed, P, out = list(instance.parallelism.pipelines), plan.num_pipelines, []
    if P not in allowed:
        out.append(f"stages: a plan of one pipeline, but 1 is not an allowed pipeline count "
                   f"{allowed} (training.parallelism.pipelines)" if plan.single else
                   f"pipelines: {P} pipeline(s), not an allowed count {allowed} "
                   f"(training.parallelism.pipelines)")
    if plan.single:
        return out
    counts = [pipe.microbatches for pipe in plan.pipelines]
    for p, m in enumerate(counts):
        if m < 1:
            out.append(f"pipelines[{p}].microbatches: must be at least 1, got {shorten(str(m))}")
    if sum(counts) != instance.microbatches:
        out.append(f"pipelines: microbatches add up to {shorten(str(sum(counts)))}, "
                   f"training.microbatches is {instance.microbatches}")
    names = [dc.name for dc in instance.datacenters]
    for p in range(1, P):
        before, here = dc_ranges[p - 1], dc_ranges[p]
        if before is not None and here is not None and here[0] <= before[1]:
            out.append(f"pipelines[{p}]: its DCs {names[here[0]]}..{names[here[1]]} do not come "
                       f"after pipelines[{p - 1}]'s {names[before[0]]}..{names[before[1]]}; "
                       f"pipelines run on disjoint DC ranges in chain order")
    return out


def _dc_range(refs) -> tuple[int, int] | None:
    """``(first, last)``: the DCs of a pipeline's first and last stage (None if unknown)."""
    known = [r.dc for r in refs if r is not None]
    return (known[0], known[-1]) if known and refs[0] is not None and refs[-1] is not None \
        else None


def evaluate(instance: Instance, plan: Plan) -> Evaluation:
    """Iteration time and breakdown of ``plan``; every violated rule is listed.

    The time is computed even for an infeasible plan whenever its stages name real
    devices and valid layer ranges, so a user can see what the plan would cost.

    Parameters
    ----------
    instance : Instance
        The instance the plan is for.
    plan : Plan
        One pipeline (the first form) or several, each's stages in chain order.

    Returns
    -------
    Evaluation
        ``iteration_time_s`` (``inf`` when stages name unknown devices or empty
        ranges), the fill/drain and steady-state parts, what paces each pipeline
        and the whole, per-stage and per-boundary costs, and ``violations`` (empty
        iff the plan is feasible): per pipeline the stage rules, and between them
        the pipeline count, the microbatches ``M_p`` and the DC ranges.

    Raises
    ------
    InstanceError
        For a plan without stages.
    """
    if any(not pipe.stages for pipe in plan.pipelines) or not plan.pipelines:
        raise InstanceError(["stages: a plan needs at least one stage"])
    seen: dict = {}
    checked = [_check_structure(instance, pipe.stages, _where_of(plan, p), seen)
               for p, pipe in enumerate(plan.pipelines)]
    violations = [v for _refs, lines in checked for v in lines]
    refs = [r for r, _lines in checked]
    violations += _check_pipelines(instance, plan, [_dc_range(r) for r in refs])
    L = instance.num_layers
    if any(r is None for pipe_refs in refs for r in pipe_refs) or any(
        not (0 <= st.start < st.end <= L) or st.tensor_parallel <= 0 or st.data_parallel <= 0
        for st in plan.all_stages
    ) or any(pipe.microbatches is not None and pipe.microbatches < 1 for pipe in plan.pipelines):
        # the time cannot be computed for a plan whose stages do not exist
        return Evaluation(
            float("inf"), float("inf"), float("inf"), float("inf"), "undefined", (), (),
            tuple(violations), objective=instance.training.objective,
        )
    sums, training = cost.LayerSums(instance), instance.training
    pipes = []
    for p, (pipe, pipe_refs) in enumerate(zip(plan.pipelines, refs)):
        m = instance.microbatches if pipe.microbatches is None else pipe.microbatches
        stages = _stage_costs(instance, pipe.stages, pipe_refs, sums, violations,
                              microbatches=m, where=_where_of(plan, p), pipeline=p)
        pipes.append(pipeline_cost(p, m, stages,
                                   _boundary_costs(instance, pipe.stages, pipe_refs, p),
                                   training.objective, training.schedule))
    cross_s, cross = _cross_sync(instance, [_dc_range(r) for r in refs])
    return assemble(pipes, violations, cross_s, cross, training.pipeline_sync_period,
                    training.objective)


def _cross_sync(instance: Instance, dc_ranges) -> tuple[float, str]:
    """``R_X`` and the span it crosses: the chain links from the first pipeline's first DC
    to the last pipeline's last (``0, "none"`` for one pipeline)."""
    if len(dc_ranges) == 1:
        return 0.0, "none"
    lo = min(r[0] for r in dc_ranges)
    hi = max(r[1] for r in dc_ranges)
    bandwidth, latency = cost.path(instance, lo, hi)  # a DC's own link only if infeasible
    total = float(sum(ly.params for ly in instance.layers))
    r_x = float(cost.cross_sync_time(total, instance.training.gradient_bytes_per_param,
                                     bandwidth, latency))
    names = instance.datacenters
    return r_x, (f"{len(dc_ranges)} pipelines over {names[lo].name}..{names[hi].name} "
                 f"({bandwidth:.4g} B/s, {latency:.4g} s)")


def pipeline_cost(index: int, microbatches: int, stages, boundaries, objective: str = "classic",
                  schedule: str = "1f1b") -> PipelineCost:
    """One pipeline's :class:`PipelineCost` from its stages' and boundaries' costs.

    Parameters
    ----------
    index : int
        Its position in the plan.
    microbatches : int
        ``M_p``.
    stages, boundaries : sequence
        Its :class:`StageCost` and :class:`BoundaryCost` entries, in order.
    objective : {"classic", "period"}, default "classic"
    schedule : {"1f1b", "gpipe"}, default "1f1b"
        The objective and schedule that define its period (:func:`chainpipe.cost.period`).
    """
    stages, boundaries = tuple(stages), tuple(boundaries)
    C = [c.compute_time_s for c in stages]
    U = [b.occupancy_s for b in boundaries]
    Q = [b.traversal_s for b in boundaries]
    fill, _ = cost.fill_and_bottleneck(C, U, Q)
    lam = cost.period(objective, schedule, C, U, Q, [c.forward_time_s for c in stages],
                      [c.backward_time_s for c in stages], microbatches)
    paced_by, label = _pace(stages, boundaries, lam, objective, schedule, microbatches)
    steady = cost.steady_state(microbatches, lam)
    dcs = tuple(dict.fromkeys(c.datacenter for c in (stages[0], stages[-1])))
    return PipelineCost(index, microbatches, dcs, fill, lam, steady, fill + steady, paced_by,
                        label, stages, boundaries)


def _resource(stages, boundaries, value: float, times) -> tuple[str, str]:
    """The device (first at ``value`` among ``times`` of the stages) or else the link whose
    occupancy reaches ``value``: ``(kind, words)``."""
    worst = max(range(len(stages)), key=lambda s: (times[s], -s))
    if times[worst] >= value or not boundaries:
        return "device", f"stage {worst} on {_where(stages[worst])}"
    b = max(boundaries, key=lambda b: (b.occupancy_s, -b.after_stage))
    return "link", f"link {'-'.join(b.path)} after stage {b.after_stage}"


def _pace(stages, boundaries, lam: float, objective: str, schedule: str,
          microbatches: int) -> tuple[str, str]:
    """What sets a pipeline's period, as ``(kind, words)``: a device, a link, a 1F1B loop
    (its stages and make-up), or for GPipe's period each phase's resource."""
    C = [c.compute_time_s for c in stages]
    if objective == "period" and schedule == "gpipe":
        u = max((b.occupancy_s for b in boundaries), default=0.0)
        f = [c.forward_time_s for c in stages]
        b_ = [c.backward_time_s for c in stages]
        kf, wf = _resource(stages, boundaries, max(max(f), u), f)
        kb, wb = _resource(stages, boundaries, max(max(b_), u), b_)
        kind = kf if max(max(f), u) >= max(max(b_), u) else kb
        return kind, f"forward: {wf}; backward: {wb}"
    if objective == "period":
        loop, s, t = cost.worst_loop(C, [b.traversal_s for b in boundaries], microbatches)
        if s >= 0 and loop >= lam and loop > cost.classic_period(
                C, [b.occupancy_s for b in boundaries]):
            return "loop", _loop_words(stages, boundaries, s, t)
    return _resource(stages, boundaries, lam, C)


def _loop_words(stages, boundaries, s: int, t: int) -> str:
    """``loop s2..s5: 41% compute, 59% MAN round trips`` (and in-DC round trips if any)."""
    compute = sum(c.compute_time_s for c in stages[s:t + 1])
    man = sum(b.traversal_s for b in boundaries[s:t] if len(b.path) > 1)
    local = sum(b.traversal_s for b in boundaries[s:t] if len(b.path) == 1)
    total = compute + man + local

    def share(x: float) -> str:
        return "<1%" if 0 < 100 * x / total < 0.5 else f"{100 * x / total:.0f}%"

    parts = [f"{share(compute)} compute"]
    if man:
        parts.append(f"{share(man)} MAN round trips")
    if local:
        parts.append(f"{share(local)} in-DC round trips")
    return f"loop s{s}..s{t} ({t - s + 1} microbatches per round trip): {', '.join(parts)}"


def assemble(pipelines, violations=(), cross_sync_s: float = 0.0, cross_sync: str = "none",
             sync_period: int = 1, objective: str = "classic") -> Evaluation:
    """The :class:`Evaluation` of a plan from its pipelines' costs:
    ``T = max_p T_p + max_{p,s} R_s + R_X / H`` (:func:`chainpipe.cost.plan_time`)."""
    pipelines = tuple(pipelines)
    stages = tuple(c for pipe in pipelines for c in pipe.stages)
    boundaries = tuple(b for pipe in pipelines for b in pipe.boundaries)
    slow = pipelines[_slowest(pipelines)]
    slowest_sync = max(stages, key=lambda c: c.sync_time_s)
    sync_s = slowest_sync.sync_time_s
    sync = "none"
    if sync_s > 0:
        sync = f"stage {slowest_sync.index} on {_where(slowest_sync)}"
        if len(pipelines) > 1:
            sync = f"pipeline {slowest_sync.pipeline}, {sync}"
    T = cost.plan_time([p.time_s for p in pipelines], sync_s, cross_sync_s, sync_period)
    bottleneck = slow.bottleneck if len(pipelines) == 1 else \
        f"pipeline {slow.index}: {slow.bottleneck}"
    return Evaluation(T, slow.fill_drain_s, slow.steady_s, slow.period_s, bottleneck, stages,
                      boundaries, tuple(violations), sync_s, sync, pipelines, cross_sync_s,
                      sync_period, cross_sync, objective)


def combine(stages, boundaries, microbatches: int, violations=()) -> Evaluation:
    """The :class:`Evaluation` of a one-pipeline plan under the classic objective from the
    costs of its stages and boundaries.

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
    return assemble([pipeline_cost(0, microbatches, stages, boundaries)], violations)


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
