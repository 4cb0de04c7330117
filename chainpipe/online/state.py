"""What is free on the network at a moment: GPUs per datacenter group, wavelengths per span.

A placement takes devices and wavelengths; its release gives them back. Every
change is checked: a count never goes below zero nor above what the network
has (:class:`OverAllocation` otherwise), so a simulation that ends without one
conserved every device and every wavelength.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..instance import Instance
from ..plan import Plan
from .network import Edge, Network


class OverAllocation(RuntimeError):
    """A placement asked for more than is free, or a release gave back more than was held."""


@dataclass(frozen=True)
class Placement:
    """A job placed: its plan, what it holds, and its iteration time by the one cost model.

    Attributes
    ----------
    job : JobRequest
    chain : tuple of str
        The DCs of the instance it was planned on, in chain order.
    instance : Instance
        The offer it was planned on (free devices, reserved wavelengths as link bandwidth).
    plan : Plan
    iteration_time_s : float
        ``evaluate(instance, plan).iteration_time_s``.
    devices : dict
        ``{(dc, gpu type): count}`` held.
    wavelengths : dict
        ``{span: count}`` reserved.
    note : str
    offer : Offer, optional
        The offer it was planned on (its spans and wavelengths: what a change of the links
        re-prices, :meth:`chainpipe.online.offers.Planner.reprice`).
    """

    job: object
    chain: tuple[str, ...]
    instance: Instance
    plan: Plan
    iteration_time_s: float
    devices: Mapping[tuple[str, str], int]
    wavelengths: Mapping[Edge, int]
    note: str = ""
    offer: object = None

    @property
    def datacenters(self) -> tuple[str, ...]:
        """The DCs whose devices it holds, in chain order."""
        used = {dc for dc, _ in self.devices}
        return tuple(dc for dc in self.chain if dc in used)

    @property
    def device_count(self) -> int:
        return sum(self.devices.values())

    @property
    def duration_s(self) -> float:
        return self.job.iterations * self.iteration_time_s


@dataclass
class ResourceState:
    """Free GPUs and wavelengths; background traffic takes what jobs leave.

    Background lightpaths have the lower priority: a span's background is the
    smaller of its target and what reserved wavelengths leave, so it never
    pushes a job out and never over-fills the span.
    """

    network: Network
    free: dict[tuple[str, str], int] = field(default_factory=dict)
    reserved: dict[Edge, int] = field(default_factory=dict)
    background: dict[Edge, int] = field(default_factory=dict)
    #: ``{span: (bandwidth factor, latency factor)}`` of the links an event changed
    #: (scenario ``events``); a span not in it is nominal
    impairment: dict[Edge, tuple[float, float]] = field(default_factory=dict)
    #: ``{(dc, gpu type): speed}`` of the GPUs an event slowed (scenario ``events``); a
    #: group not in it runs at its catalogue rate
    slowdown: dict[tuple[str, str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.total = {(dc, g.type): g.count for dc, groups in self.network.groups.items()
                      for g in groups}
        self.free = dict(self.total)
        self.reserved = {s: 0 for s in self.network.spans}
        self.background = {s: 0 for s in self.network.spans}

    # ------------------------------------------------------------------ queries
    def free_in(self, dc: str) -> int:
        """Free GPUs in ``dc``, all groups."""
        return sum(n for (d, _), n in self.free.items() if d == dc)

    def free_wavelengths(self, span: Edge) -> int:
        return self.network.wavelengths[span] - self.reserved[span] - self.background[span]

    def busy_gpus(self) -> int:
        return sum(self.total.values()) - sum(self.free.values())

    def gpu_load(self, dc: str) -> float:
        """Fraction of ``dc``'s GPUs held by jobs."""
        total = sum(n for (d, _), n in self.total.items() if d == dc)
        return 1.0 - self.free_in(dc) / total

    def span_load(self, span: Edge) -> float:
        """Fraction of a span's wavelengths in use, by jobs and background."""
        return (self.reserved[span] + self.background[span]) / self.network.wavelengths[span]

    def factors(self, span: Edge) -> tuple[float, float]:
        """``(bandwidth, latency)`` factors of ``span`` now: ``(1, 1)`` when nominal."""
        return self.impairment.get(span, (1.0, 1.0))

    def copy(self) -> ResourceState:
        """An independent copy of what is free, reserved and impaired (the network shared): a
        policy's trial state."""
        other = ResourceState.__new__(ResourceState)
        other.network, other.total = self.network, self.total
        other.free, other.reserved = dict(self.free), dict(self.reserved)
        other.background, other.impairment = dict(self.background), dict(self.impairment)
        other.slowdown = dict(self.slowdown)
        return other

    def idle(self) -> bool:
        """Whether nothing is held: every GPU free, no wavelength reserved."""
        return self.free == self.total and not any(self.reserved.values())

    # ------------------------------------------------------------------ changes
    def fits(self, p: Placement) -> bool:
        """Whether ``p``'s devices and wavelengths are free now."""
        return (all(self.free.get(k, 0) >= n for k, n in p.devices.items())
                and all(self.free_wavelengths(s) >= w for s, w in p.wavelengths.items()))

    def allocate(self, p: Placement) -> None:
        """Take ``p``'s devices and wavelengths; :class:`OverAllocation` if they are not free."""
        if not self.fits(p):
            raise OverAllocation(f"job {p.job.id}: placement needs more than is free")
        for k, n in p.devices.items():
            self.free[k] -= n
        for s, w in p.wavelengths.items():
            self.reserved[s] += w

    def release(self, p: Placement) -> None:
        """Give back ``p``'s devices and wavelengths."""
        for k, n in p.devices.items():
            if self.free[k] + n > self.total[k]:
                raise OverAllocation(f"job {p.job.id}: releases devices it does not hold")
            self.free[k] += n
        for s, w in p.wavelengths.items():
            if self.reserved[s] < w:
                raise OverAllocation(f"job {p.job.id}: releases wavelengths it does not hold")
            self.reserved[s] -= w

    def impair(self, span: Edge, bandwidth: float, latency: float) -> None:
        """From now on ``span`` runs at ``bandwidth`` times its rate per wavelength and
        ``latency`` times its delay (``1, 1``: nominal again)."""
        if bandwidth == latency == 1.0:
            self.impairment.pop(span, None)
        else:
            self.impairment[span] = (bandwidth, latency)

    def speed(self, dc: str, gpu_type: str) -> float:
        """The share of its catalogue rate ``dc``'s GPUs of ``gpu_type`` sustain now."""
        return self.slowdown.get((dc, gpu_type), 1.0)

    def slow(self, dc: str, gpu_type: str, speed: float) -> None:
        """From now on ``dc``'s GPUs of ``gpu_type`` run at ``speed`` times their catalogue
        rate (1: nominal again)."""
        if speed == 1.0:
            self.slowdown.pop((dc, gpu_type), None)
        else:
            self.slowdown[(dc, gpu_type)] = speed

    def set_background(self, targets: Mapping[Edge, int]) -> None:
        """Background lightpaths per span: the target, capped by what jobs leave free."""
        for s, target in targets.items():
            room = self.network.wavelengths[s] - self.reserved[s]
            self.background[s] = max(0, min(int(target), room))
