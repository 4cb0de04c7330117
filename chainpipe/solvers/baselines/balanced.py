"""Layers in proportion to each stage's throughput, memory repaired: ``proportional`` and
``metis`` (see :mod:`chainpipe.solvers.baselines`)."""

from __future__ import annotations

import itertools

import numpy as np

from ...deadline import Deadline
from ...instance import Instance
from ...result import Outcome
from .common import best_of, fastest_first, one_device_only
from .stage_costs import StageCosts, effective_rate

#: a stage slot before layers are cut: (flattened group, d, t)
Slot = tuple[int, int, int]

#: ``metis`` tries every combination of per-type shapes when there are at most this many;
#: beyond, a coordinate search over them
EXHAUSTIVE_CONFIGURATIONS = 4096


def proportional_bounds(c: StageCosts, rates: list[float]) -> list[int]:
    """Boundaries giving each stage a FLOP share near its share of the total rate."""
    S, L = len(rates), c.L
    prefix = c.sums.flop
    total = prefix[-1]
    rate_sum = float(sum(rates))
    if 0 < rate_sum < np.inf:
        cum = np.cumsum(rates) / rate_sum
    else:  # rates that underflow or overflow in the sum: equal shares
        cum = np.arange(1, S + 1) / S
    b = [0]
    for s in range(1, S):
        target = cum[s - 1] * total
        lo, hi = b[-1] + 1, L - (S - s)  # leave every stage at least one layer
        j = int(np.searchsorted(prefix, target))  # prefix[j-1] < target <= prefix[j]
        j = min(max(j, lo), hi)
        if j - 1 >= lo and abs(prefix[j - 1] - target) <= abs(prefix[j] - target):
            j -= 1
        b.append(j)
    b.append(L)
    return b


def repair_memory(c: StageCosts, b: list[int], slots: list[Slot]) -> list[int] | None:
    """Move boundary layers from over-full stages to neighbours that still fit afterwards.

    Each move takes a layer from a stage that breaks memory and gives it to a
    neighbour that fits with it, so the over-full stages only shrink and the
    loop ends. ``None`` if some stage stays over-full.
    """
    S = len(slots)
    b = list(b)

    def fits(s: int, i: int, j: int) -> bool:
        return i < j and c.fits(i, j, *slots[s], S - s)

    def slack(s: int, i: int, j: int) -> int:
        return c.max_in_flight(i, j, *slots[s]) - c.tables.in_flight(S - s)

    for _ in range(c.L * S + 1):
        bad = next((s for s in range(S) if not fits(s, b[s], b[s + 1])), None)
        if bad is None:
            return b
        moves = []
        if bad > 0 and b[bad + 1] - b[bad] > 1 and fits(bad - 1, b[bad - 1], b[bad] + 1):
            # first layer to the left neighbour
            moves.append((slack(bad - 1, b[bad - 1], b[bad] + 1), 0, bad, b[bad] + 1))
        if bad < S - 1 and b[bad + 1] - b[bad] > 1 and fits(bad + 1, b[bad + 1] - 1, b[bad + 2]):
            # last layer to the right neighbour
            moves.append((slack(bad + 1, b[bad + 1] - 1, b[bad + 2]), 1, bad + 1, b[bad + 1] - 1))
        if not moves:
            return None
        _, _, index, value = max(moves)
        b[index] = value
    return None


def balanced_stages(c: StageCosts, slots: list[Slot], rates: list[float]):
    """Stages on ``slots`` (in plan order) with layers cut by ``rates``, memory repaired
    (left unrepaired, and so reported as not fitting, when no repair works)."""
    b = proportional_bounds(c, rates)
    b = repair_memory(c, b, slots) or b
    return [(b[s], b[s + 1], c.dc(g), g, d, t) for s, (g, d, t) in enumerate(slots)]


# --------------------------------------------------------------------------- proportional
def proportional(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Metis/FlashFlex-style on one device per stage: layers in proportion to device
    rates, memory repaired; the number of devices swept."""
    c = StageCosts(instance)
    refused = one_device_only(c, "proportional")
    if refused is not None:
        return refused
    tab = c.tables
    ranked = fastest_first(c, range(tab.G))
    n_max = min(c.L, len(ranked))

    def candidates():
        for S in range(1, n_max + 1):
            # the S fastest devices, in chain order, fastest first inside a datacenter
            chosen = sorted(ranked[:S], key=lambda g: (tab.group_dc[g], -tab.rate[g],
                                                       -tab.memory[g], g))
            yield balanced_stages(c, [(g, 1, 1) for g in chosen],
                                  [float(tab.rate[g]) for g in chosen])

    return best_of(c, candidates(),
                   f"layers in proportion to the rates of the S fastest devices, S = 1..{n_max}",
                   {"strategy": "proportional"}, deadline)


# --------------------------------------------------------------------------- metis
class _Metis:
    """Per-type stage shapes, each group filled with stages of its type's shape."""

    def __init__(self, c: StageCosts):
        self.c = c
        tab = c.tables
        # groups in plan order: chain order, fastest first inside a datacenter
        self.order = sorted(range(tab.G),  # O(G log G): a long chain has K groups
                            key=lambda g: (c.dc(g), -tab.rate[g], -tab.memory[g], g))
        self.types = sorted({tab.groups[g].type for g in range(tab.G)})
        # per type: every shape one of its groups can run, or None (the type unused)
        self.options = [
            sorted({s for g in range(tab.G) if tab.groups[g].type == ty for s in c.shapes(g)},
                   key=lambda s: (-s[0] * s[1], -s[1])) + [None]
            for ty in self.types]
        self.type_of = {g: self.types.index(tab.groups[g].type) for g in range(tab.G)}
        self.scores: dict[tuple, float] = {}

    @property
    def size(self) -> int:
        """How many configurations the family has."""
        n = 1
        for opts in self.options:
            n *= len(opts)
        return n

    def stages(self, config: tuple):
        """The balanced plan of one configuration (a shape or ``None`` per type); ``[]`` if
        it uses no device."""
        c = self.c
        slots, rates = [], []
        for g in self.order:
            shape = config[self.type_of[g]]
            if shape is not None:
                n = c.capacity(g, *shape)
                slots += [(g, *shape)] * n
                rates += [effective_rate(c, g, *shape)] * n
        if len(slots) > c.L:
            # more stages than layers: drop the slowest, the later first among equals
            keep = sorted(sorted(range(len(slots)), key=lambda s: (-rates[s], s))[:c.L])
            slots, rates = [slots[s] for s in keep], [rates[s] for s in keep]
        return balanced_stages(c, slots, rates) if slots else []

    def score(self, config: tuple) -> float:
        if config not in self.scores:
            stages = self.stages(config)
            self.scores[config] = self.c.plan_time(stages) if stages else float("inf")
        return self.scores[config]

    def exhaustive(self):
        """Every configuration's plan."""
        for config in itertools.product(*self.options):
            yield self.stages(config)

    def coordinate(self, deadline: Deadline):
        """Plans met by a coordinate search: from every type on one common shape, change one
        type's shape at a time while it helps."""
        members = [set(opts) for opts in self.options]  # a long list of widths: O(1) tests
        starts = {tuple(s if s in m else None for m in members)
                  for opts in self.options for s in opts if s is not None}
        for config in sorted(starts, key=lambda x: [(o is None, o) for o in x]):
            yield self.stages(config)
            improved = True
            while improved and not deadline.expired():
                improved = False
                for ty, opts in enumerate(self.options):
                    for shape in opts:
                        if deadline.expired():
                            yield []  # seen by best_of as a stop at the deadline
                            return
                        trial = config[:ty] + (shape,) + config[ty + 1:]
                        if self.score(trial) < self.score(config):
                            config, improved = trial, True
                            yield self.stages(config)


def metis(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Metis-style: per-type data- and tensor-parallel shapes enumerated, layers balanced
    by effective throughput, memory repaired."""
    deadline = Deadline.of(deadline)
    search = _Metis(StageCosts(instance))
    exhaustive = search.size <= EXHAUSTIVE_CONFIGURATIONS
    candidates = search.exhaustive() if exhaustive else search.coordinate(deadline)
    return best_of(search.c, candidates,
                   "per-type shapes d x t, layers in proportion to effective throughput",
                   {"strategy": "metis", "search": "exhaustive" if exhaustive else "coordinate",
                    "configurations": search.size}, deadline)
