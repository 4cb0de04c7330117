"""Offers: a job's view of a candidate chain as a chainpipe instance, solved and cached.

An offer spreads the job's GPU budget over the chain's datacenters in
proportion to what is free (water-filling, fastest group first inside a DC)
and gives each span the wavelengths the policy reserves, as link bandwidth
``wavelengths x wavelength rate``. A DC that offers nothing is crossed in
transit: its two spans become one link of the instance (the smaller bandwidth,
the summed latency), as the cost model's paths are. A solver of
:mod:`chainpipe.solve` plans the instance; the plan's iteration time is the one
cost model's (:func:`chainpipe.plan.evaluate`, through ``solve``).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ..instance import Datacenter, Instance, Link
from ..instances.gpus import GPUS
from ..plan import Plan
from ..solve import solve
from .jobs import JobRequest, model_of, training_of
from .network import Chain, Edge, Network
from .scenario import Planning
from .state import Placement, ResourceState


@dataclass(frozen=True)
class Offer:
    """An instance of free resources along a chain, and how it maps to the network.

    Attributes
    ----------
    instance : Instance
    chain : tuple of str
        The instance's DCs, in chain order (the chain's DCs that offer devices).
    link_spans : tuple of tuple of Edge
        For each instance link, the fibre spans it crosses.
    wavelengths : dict
        Wavelengths per span of the chain, as offered.
    """

    instance: Instance
    chain: tuple[str, ...]
    link_spans: tuple[tuple[Edge, ...], ...]
    wavelengths: Mapping[Edge, int]

    def held(self, plan: Plan) -> tuple[dict, dict]:
        """``({(dc, type): devices}, {span: wavelengths})`` a plan of this offer holds.

        Devices are counted from the plan's stages; wavelengths are reserved on
        the spans between the first and the last DC the plan uses.
        """
        devices: Counter = Counter()
        used = set()
        for st in plan.stages:
            for name in st.devices:
                dc, typ, _ = name.split("/")
                devices[(dc, typ)] += 1
                used.add(dc)
        idx = [k for k, dc in enumerate(self.chain) if dc in used]
        spans = {s: self.wavelengths[s] for k in range(idx[0], idx[-1])
                 for s in self.link_spans[k]}
        return dict(devices), spans


def split_budget(budget: int, free: list[int]) -> list[int]:
    """Water-fill ``budget`` devices over DCs with ``free`` devices each.

    Every DC gets an equal share in turn, capped by what it has, until the
    budget or the free devices run out. ``split_budget(10, [8, 2, 8]) == [4, 2, 4]``.
    """
    give = [0] * len(free)
    left = budget
    while left > 0:
        open_ = [k for k in range(len(free)) if give[k] < free[k]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for k in open_:
            take = min(share, free[k] - give[k], left)
            give[k] += take
            left -= take
            if left == 0:
                break
    return give


def device_group(dc: str, gpu_type: str, count: int, state: ResourceState):
    """``count`` GPUs of ``gpu_type`` in ``dc`` as an instance's group, at the rate the events
    leave them (:meth:`ResourceState.speed` times the catalogue's)."""
    group = GPUS[gpu_type].group(count, nodes=True)
    speed = state.speed(dc, gpu_type)
    return group if speed == 1.0 else dataclasses.replace(group,
                                                          flop_per_s=group.flop_per_s * speed)


class Planner:
    """Builds offers and solves them, with a cache shared by every policy of a run.

    Parameters
    ----------
    network : Network
    planning : Planning
    """

    def __init__(self, network: Network, planning: Planning):
        self.network = network
        self.planning = planning
        self.cache: dict = {}
        self.solves = 0  # solver calls made (cache misses)
        self.solve_cpu_s = 0.0  # process time spent in them

    # ------------------------------------------------------------------ chains
    def candidates(self, job: JobRequest, state: ResourceState, k: int | None = None,
                   chains=None) -> list[Chain]:
        """The first ``k`` chains (shortest first) holding the job's budget of free GPUs with
        a free wavelength on each span; ``chains`` replaces the network's ranking."""
        out = []
        for c in self.network.chains if chains is None else chains:
            if sum(state.free_in(dc) for dc in c.datacenters) < job.gpus:
                continue
            if any(state.free_wavelengths(s) < 1 for s in c.spans):
                continue
            out.append(c)
            if k is not None and len(out) == k:
                break
        return out

    def why_not(self, job: JobRequest, state: ResourceState) -> str:
        """One phrase: why no chain is a candidate for ``job`` now."""
        gpus = [c for c in self.network.chains
                if sum(state.free_in(dc) for dc in c.datacenters) >= job.gpus]
        if not gpus:
            return f"no chain of at most {self.planning.max_chain} DCs has {job.gpus} free GPUs"
        return "every chain with enough free GPUs has a span without a free wavelength"

    # ------------------------------------------------------------------ offers
    def full_wavelengths(self, job: JobRequest, state: ResourceState, chain: Chain) -> dict:
        """The job's whole allowance on each span: ``min(free, max_wavelengths)``."""
        return {s: min(state.free_wavelengths(s), job.max_wavelengths) for s in chain.spans}

    def offer(self, job: JobRequest, state: ResourceState, chain: Chain,
              wavelengths: Mapping[Edge, int]) -> Offer:
        """The instance of the job's budget on ``chain`` with ``wavelengths`` per span."""
        dcs = chain.datacenters
        give = split_budget(job.gpus, [state.free_in(dc) for dc in dcs])
        built, names, spans_of, pending = [], [], [], []
        for k, dc in enumerate(dcs):
            if k > 0:
                pending.append(chain.spans[k - 1])
            if give[k] == 0:
                continue
            groups = []
            left = give[k]
            templates = sorted(self.network.groups[dc], key=lambda g: -g.flop_per_s)
            for g in templates:
                n = min(left, state.free[(dc, g.type)])
                if n > 0:
                    groups.append(device_group(dc, g.type, n, state))
                    left -= n
            if built:
                spans_of.append(tuple(pending))
            pending = []
            built.append(Datacenter(dc, tuple(groups), self.network.intra[dc]))
            names.append(dc)
        inst = Instance("offer", model_of(job.model),
                        training_of(self.planning, job.microbatches), tuple(built),
                        self.links(spans_of, wavelengths, state))
        return Offer(inst, tuple(names), tuple(spans_of), dict(wavelengths))

    def links(self, spans_of, wavelengths: Mapping[Edge, int], state: ResourceState
              ) -> tuple[Link, ...]:
        """The instance links over ``spans_of`` with ``wavelengths`` per span: the smallest
        ``wavelengths x rate x bandwidth factor`` and the summed ``delay x latency factor``
        (the factors of the links' events now, :meth:`ResourceState.factors`)."""
        rate = self.network.wavelength_bytes_per_s
        return tuple(
            Link(min(wavelengths[s] * rate * state.factors(s)[0] for s in spans),
                 sum(self.network.latency_s(s) * state.factors(s)[1] for s in spans))
            for spans in spans_of)

    def reprice(self, offer: Offer, state: ResourceState) -> Offer:
        """``offer`` on the network as it is now: the same devices and wavelengths, each
        link's bandwidth and latency and each group's rate under the events so far (what a
        running job sees)."""
        links = self.links(offer.link_spans, offer.wavelengths, state)
        dcs = tuple(dataclasses.replace(dc, devices=tuple(
            device_group(dc.name, g.type, g.count, state) for g in dc.devices))
            for dc in offer.instance.datacenters)
        if links == offer.instance.links and dcs == offer.instance.datacenters:
            return offer
        return Offer(dataclasses.replace(offer.instance, links=links, datacenters=dcs),
                     offer.chain, offer.link_spans, offer.wavelengths)

    # ------------------------------------------------------------------ solving
    def solve(self, offer: Offer, solver: str = "dp"):
        """``(plan, T, result)`` of ``solver`` on the offer, or ``(None, None, result)``;
        cached on the instance, so equal offers are solved once."""
        key = (solver, offer.instance)
        hit = self.cache.get(key)
        if hit is None:
            self.solves += 1
            start = time.process_time()
            res = solve(offer.instance, solver)
            self.solve_cpu_s += time.process_time() - start
            ok = res.status in ("optimal", "feasible") and res.plan is not None
            hit = (res.plan, res.iteration_time, res) if ok else (None, None, res)
            self.cache[key] = hit
        return hit

    def placement(self, job: JobRequest, offer: Offer, plan: Plan, T: float,
                  note: str = "") -> Placement:
        """The placement of ``plan`` on ``offer``: what it holds, its time ``T``."""
        devices, spans = offer.held(plan)
        return Placement(job, offer.chain, offer.instance, plan, T, devices, spans, note, offer)
