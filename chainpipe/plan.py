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
    start: int  # first layer, 0-based
    end: int  # one past the last layer
    device: str  # "dc/type/i"

    def to_dict(self) -> dict:
        return {"layers": [self.start, self.end], "device": self.device}


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
            p = f"{pre}stages[{s}]"
            if not isinstance(st, dict):
                problems.append(f"{p}: must be an object")
                continue
            lay, dev = st.get("layers"), st.get("device")
            good_layers = (
                isinstance(lay, list)
                and len(lay) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in lay)
            )
            if not good_layers:
                problems.append(f"{p}.layers: must be a list [start, end] of two integers")
            if not isinstance(dev, str):
                problems.append(f"{p}.device: must be a device name 'dc/type/i'")
            if good_layers and isinstance(dev, str):
                out.append(Stage(lay[0], lay[1], dev))
        if problems:
            raise InstanceError(problems)
        return cls(tuple(out))

    @classmethod
    def from_tuples(cls, instance: Instance, stages) -> Plan:
        """Plan from ``(start, end, dc_index, group_index)`` tuples; devices numbered in order."""
        used: dict[tuple[int, int], int] = {}
        out = []
        for start, end, k, g in stages:
            i = used.get((k, g), 0)
            used[(k, g)] = i + 1
            dc = instance.datacenters[k]
            out.append(Stage(int(start), int(end), Instance.device_name(dc, dc.devices[g], i)))
        return cls(tuple(out))


@dataclass(frozen=True)
class StageCost:
    index: int
    start: int
    end: int
    device: str
    datacenter: str
    compute_time_s: float  # C_s, forward + backward per microbatch
    in_flight: int  # n_s, microbatches whose activations are stashed
    memory_bytes: float  # bytes_per_param * P_s + n_s * A_s
    memory_limit_bytes: float


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
    bottleneck: str  # what paces the steady state
    stages: tuple[StageCost, ...]
    boundaries: tuple[BoundaryCost, ...]
    violations: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        d = asdict(self)
        d["feasible"] = self.feasible
        return d


def _check_structure(instance: Instance, plan: Plan) -> tuple[list, list[str]]:
    """Each stage's device reference (``None`` if unknown) and the structural violations.

    Ranges contiguous and covering, devices real and distinct, datacenters in chain order.
    """
    L = instance.num_layers
    violations: list[str] = []
    expect = 0
    refs = []
    for s, st in enumerate(plan.stages):
        if st.start != expect:
            violations.append(f"stages[{s}].layers: starts at {shorten(str(st.start))}, "
                              f"expected {expect}")
        if not (0 <= st.start < st.end <= L):
            violations.append(
                f"stages[{s}].layers: [{shorten(str(st.start))}, {shorten(str(st.end))}) is not a "
                f"non-empty range of layers 0..{L}"
            )
        expect = st.end
        try:
            refs.append(instance.locate(st.device))
        except KeyError:
            violations.append(f"stages[{s}].device: no device named {quote(st.device)}")
            refs.append(None)
    if expect != L:
        violations.append(f"stages: cover layers up to {shorten(str(expect))}, the model has {L}")
    seen: dict[str, int] = {}
    for s, st in enumerate(plan.stages):
        if st.device in seen:
            violations.append(
                f"stages[{s}].device: {st.device if refs[s] is not None else quote(st.device)} "
                f"already runs stage {seen[st.device]}"
            )
        seen.setdefault(st.device, s)
    for s in range(1, len(refs)):
        if refs[s] is not None and refs[s - 1] is not None and refs[s].dc < refs[s - 1].dc:
            violations.append(
                f"stages[{s}].device: datacenter {instance.datacenters[refs[s].dc].name} "
                f"comes before {instance.datacenters[refs[s - 1].dc].name} in the chain"
            )
    return refs, violations


def _stage_costs(instance: Instance, plan: Plan, refs, sums: cost.LayerSums,
                 violations: list[str]) -> list[StageCost]:
    """Compute time and memory of every stage; memory violations appended."""
    training, S = instance.training, plan.num_stages
    out = []
    for s, (st, ref) in enumerate(zip(plan.stages, refs)):
        group = instance.group(ref)
        option = cost.StageOption(st.start, st.end, ref.dc, ref.group)
        n = cost.in_flight(training.schedule, instance.microbatches, S - s)
        mem = sums.option_memory_need(option, n)
        if not cost.memory_fits(mem, group.memory_bytes):
            violations.append(
                f"stages[{s}]: needs {mem:.6g} bytes ({n} microbatches in flight) on "
                f"{st.device}, which has {group.memory_bytes:.6g} bytes"
            )
        out.append(StageCost(s, st.start, st.end, st.device, instance.datacenters[ref.dc].name,
                             sums.option_compute_time(option), n, mem, group.memory_bytes))
    return out


def _boundary_costs(instance: Instance, plan: Plan, refs) -> list[BoundaryCost]:
    """Path, occupancy and traversal of every boundary between consecutive stages."""
    out = []
    for s in range(plan.num_stages - 1):
        k1, k2 = refs[s].dc, refs[s + 1].dc
        lo, hi = min(k1, k2), max(k1, k2)
        bw, lat = cost.path(instance, lo, hi)
        last = plan.stages[s].end - 1
        x = instance.layers[last].output_bytes
        u = cost.occupancy(x, bw)
        names = tuple(dc.name for dc in instance.datacenters[lo : hi + 1])
        out.append(BoundaryCost(s, last, x, names, bw, lat, u, cost.traversal(lat, u)))
    return out


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
        not (0 <= st.start < st.end <= L) for st in plan.stages
    ):
        # the time cannot be computed for a plan whose stages do not exist
        return Evaluation(
            float("inf"), float("inf"), float("inf"), float("inf"), "undefined", (), (),
            tuple(violations),
        )
    stages = _stage_costs(instance, plan, refs, cost.LayerSums(instance), violations)
    boundaries = _boundary_costs(instance, plan, refs)

    fill, bottleneck_s = cost.fill_and_bottleneck(
        [c.compute_time_s for c in stages], [b.occupancy_s for b in boundaries],
        [b.traversal_s for b in boundaries])
    # what paces it: the first stage at the maximum, unless a link is strictly slower
    worst = max(stages, key=lambda c: c.compute_time_s)
    bottleneck = f"stage {worst.index} on {worst.device}"
    if worst.compute_time_s < bottleneck_s:
        b = next(b for b in boundaries if b.occupancy_s == bottleneck_s)
        bottleneck = f"link {'-'.join(b.path)} after stage {b.after_stage}"
    M = instance.microbatches
    return Evaluation(
        cost.iteration_time(fill, bottleneck_s, M), fill, cost.steady_state(M, bottleneck_s),
        bottleneck_s, bottleneck, tuple(stages), tuple(boundaries), tuple(violations),
    )
