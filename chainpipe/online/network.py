"""The metro network of a scenario as a graph, and the candidate DC chains on it.

Nodes are datacenters, each holding GPU groups built from the catalogue
(:mod:`chainpipe.instances.gpus`: sustained rate, usable memory, node size);
edges are fibre spans with a length, a latency from that length
(:data:`~chainpipe.instances.network.FIBRE_S_PER_KM`) and a number of DWDM
wavelengths of ``wavelength_gbit`` each.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..instance import DeviceGroup, Link
from ..instances.gpus import gpu
from ..instances.network import FIBRE_S_PER_KM, GBIT, INTRA_DC_LATENCY_S
from .scenario import Scenario

Edge = tuple[str, str]


def edge(a: str, b: str) -> Edge:
    """The key of the span between ``a`` and ``b``: its two ends in sorted order."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Chain:
    """A candidate DC chain: a simple path of the graph, with its spans in order."""

    datacenters: tuple[str, ...]
    km: float

    @property
    def spans(self) -> tuple[Edge, ...]:
        d = self.datacenters
        return tuple(edge(d[i], d[i + 1]) for i in range(len(d) - 1))


class Network:
    """The graph of a scenario's metro network, and its fixed figures.

    Parameters
    ----------
    scenario : Scenario
        Its ``datacenters``, ``links`` and ``wavelength_gbit``.
    """

    def __init__(self, scenario: Scenario):
        self.graph = nx.Graph()
        self.wavelength_bytes_per_s = scenario.wavelength_gbit * GBIT
        #: per DC, its groups (catalogue type -> DeviceGroup template with the full count)
        self.groups: dict[str, tuple[DeviceGroup, ...]] = {}
        self.intra: dict[str, Link] = {}
        for dc in scenario.datacenters:
            self.graph.add_node(dc.name)
            self.groups[dc.name] = tuple(gpu(g.type).group(g.count, nodes=True) for g in dc.gpus)
            self.intra[dc.name] = Link(dc.nic_gbit * GBIT, INTRA_DC_LATENCY_S[0])
        self.wavelengths: dict[Edge, int] = {}
        for ln in scenario.links:
            self.graph.add_edge(ln.a, ln.b, km=ln.km)
            self.wavelengths[edge(ln.a, ln.b)] = ln.wavelengths
        self.km = {edge(a, b): d["km"] for a, b, d in self.graph.edges(data=True)}
        self.chains = self._chains(scenario.planning.max_chain)

    @property
    def datacenters(self) -> list[str]:
        return list(self.groups)

    @property
    def spans(self) -> list[Edge]:
        return list(self.wavelengths)

    def latency_s(self, span: Edge) -> float:
        """One-way propagation delay of a span."""
        return self.km[span] * FIBRE_S_PER_KM

    def total_gpus(self) -> int:
        return sum(g.count for groups in self.groups.values() for g in groups)

    def _chains(self, max_chain: int) -> tuple[Chain, ...]:
        """Every simple path of at most ``max_chain`` DCs (``networkx.all_simple_paths``),
        one orientation each (from the end whose name sorts first), shortest first: by
        DC count, then fibre km, then names."""
        nodes = sorted(self.graph.nodes)
        found = [(n,) for n in nodes]
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                found += [tuple(p) for p in
                          nx.all_simple_paths(self.graph, a, b, cutoff=max_chain - 1)]

        def km(p: tuple[str, ...]) -> float:
            return sum(self.km[edge(p[i], p[i + 1])] for i in range(len(p) - 1))

        return tuple(Chain(p, km(p)) for p in sorted(found, key=lambda p: (len(p), km(p), p)))
