"""Baselines: the strategies practitioners and recent systems use, in chainpipe's cost model.

Each is a solver with the registry signature ``(instance, *, deadline, seed,
threads, log) -> Outcome`` and stops at the deadline with the best plan it has. None of them proves anything about the
optimum, so a plan comes back ``feasible`` with no lower bound; when a
strategy finds no plan that fits memory it says ``no_solution`` and why, and
``infeasible`` only when :meth:`CostTables.infeasibility_reason` (or, for the
two built on the exact DP, the DP itself on an instance with the same devices
and memory) proves that no plan exists at all. All are deterministic: ``seed``
is accepted for the common signature and ignored.

What each stands for:

``uniform``
    Megatron-LM: equal layer counts per stage (the last ``L mod S`` stages take
    one more layer, which is the memory-friendly side under 1F1B), stages on
    devices taken datacenter by datacenter in chain order, fastest first. The
    pipeline degree ``S`` is swept over ``1 .. min(L, devices)`` and the best by
    the cost model kept: a practitioner tunes the pipeline degree, and taking the
    smallest ``S`` that fits memory would leave most devices idle in a model
    without data parallelism, an unfair straw man.
``greedy-fill``
    Atlas: fill pipeline stages DC by DC: all devices of the first datacenter,
    then all of the next, until the model fits memory with uniform layers
    (``S = min(L, devices in the prefix)``). No tuning of ``S``.
``proportional``
    Metis / FlashFlex: take the ``S`` fastest devices (ties broken by memory,
    then chain position), keep them in chain order, cut the layers so that each
    stage's FLOP share matches its device's share of the total rate, then repair
    memory by moving boundary layers from over-full stages to neighbours that
    still fit. ``S`` is swept and the best kept.
``comm-unaware``
    The exact DP on a copy of the instance whose links (inside and between
    datacenters) cost nothing, then the plan evaluated honestly with the links:
    what an optimal planner that ignores the network produces.
``uniform-chain``
    Sailor: uniform layer splits; search over the stage count ``S``, the
    contiguous range of datacenters used and how many stages each of them runs
    (every datacenter of the range at least one, fastest devices first), with
    branch and bound on the cost model. Exhaustive over that family unless the
    time limit stops it (then the best found, and ``stats['complete']`` is false).
``single-dc``
    The DP optimum of each datacenter alone (no inter-DC links); the best of them.
    What a user without cross-DC planning would run.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import cost
from ..deadline import Deadline
from ..instance import Instance, Link
from ..plan import Plan, evaluate
from ..result import Outcome
from ..tables import CostTables
from . import dp

#: bandwidth given to every link of the communication-unaware copy (finite: the format needs it)
FREE_BANDWIDTH = 1e300


# --------------------------------------------------------------------------- shared pieces
def _fastest_first(t: CostTables, groups) -> list[int]:
    """Device slots (group indices, one per usable device) of ``groups``, fastest first.

    Ties go to the larger memory, then to the earlier group in chain order.
    """
    order = sorted(groups, key=lambda g: (-t.rate[g], -t.memory[g], g))
    # a plan has at most L stages, so no more than L devices of a group are ever used:
    # a device count is a number, never a list of that length
    return [g for g in order for _ in range(min(int(t.count[g]), t.L))]


def _dc_slots(t: CostTables) -> list[list[int]]:
    """Per datacenter, its device slots fastest first."""
    return [_fastest_first(t, [g for g in range(t.G) if t.group_dc[g] == k]) for k in range(t.K)]


def uniform_bounds(L: int, S: int) -> list[int]:
    """Layer boundaries ``0 = b_0 < ... < b_S = L`` of ``S`` equal stages.

    Sizes differ by at most one; the last ``L mod S`` stages take the extra layer
    (under 1F1B the later stages hold fewer microbatches in flight).
    """
    q, r = divmod(L, S)
    sizes = [q] * (S - r) + [q + 1] * r
    return [0] + np.cumsum(sizes).tolist()


def _to_plan(t: CostTables, stages) -> Plan:
    """The plan of ``(start, end, dc, g)`` stages, ``g`` a flattened group of the tables."""
    return Plan.from_tuples(t.instance, [(i, j, k, t.groups[g].index) for i, j, k, g in stages])


def _memory_failure(t: CostTables, stages) -> str | None:
    """The first stage that breaks memory, in words; ``None`` if all fit."""
    S = len(stages)
    for s, (i, j, k, g) in enumerate(stages):
        if not t.fits(g, i, j, S - s):
            grp = t.groups[g]
            dc = t.instance.datacenters[k].name
            return (f"stage {s} (layers [{i}, {j}), {t.in_flight(S - s)} microbatch(es) in flight) "
                    f"does not fit a {dc}/{grp.type} device")
    return None


def _infeasible_or(t: CostTables, message: str, stats: dict | None = None) -> Outcome:
    """``infeasible`` if the tables prove it, else ``no_solution`` with ``message``."""
    reason = t.infeasibility_reason()
    if reason is not None:
        return Outcome("infeasible", message=reason, stats=stats or {})
    return Outcome("no_solution", message=message, stats=stats or {})


def _best(t: CostTables, candidates, what: str, stats: dict, deadline=None) -> Outcome:
    """Keep the candidate stage lists with the smallest time; explain if none fits.

    Stops at ``deadline`` with what it has (``stats["complete"]`` says whether every
    candidate was tried).
    """
    deadline = Deadline.of(deadline)
    best_T, best, tried, first_failure = math.inf, None, 0, None
    complete = True
    for stages in candidates:
        if deadline.expired():
            complete = False
            break
        tried += 1
        T = t.plan_time(stages)
        if best_T > T:
            best_T, best = T, stages
        elif best is None and first_failure is None:
            first_failure = _memory_failure(t, stages)
    stats = {**stats, "candidates": tried, "complete": complete}
    if best is None and not complete:
        return Outcome("no_solution", message=f"{what}: time limit reached after {tried} "
                       "candidates, none fits memory", stats=stats)
    if best is None:
        why = f"; e.g. {first_failure}" if first_failure else ""
        return _infeasible_or(t, f"{what}: no candidate fits memory ({tried} tried){why}", stats)
    stats["stages"] = len(best)
    return Outcome("feasible", _to_plan(t, best), stats=stats)


def _chain_fill(t: CostTables, S: int) -> list[tuple[int, int, int, int]]:
    """``S`` uniform stages on the first ``S`` devices in chain order, fastest first per DC."""
    slots = [g for dc in _dc_slots(t) for g in dc][:S]
    b = uniform_bounds(t.L, S)
    return [(b[s], b[s + 1], int(t.group_dc[g]), g) for s, g in enumerate(slots)]


# --------------------------------------------------------------------------- uniform
def uniform(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Megatron-style equal layers, DCs filled in chain order; pipeline degree swept."""
    t = CostTables(instance)
    n_max = min(t.L, int(t.count.sum()))
    return _best(t, (_chain_fill(t, S) for S in range(1, n_max + 1)),
                 f"uniform layers on the first S devices in chain order, S = 1..{n_max}",
                 {"strategy": "uniform"}, deadline)


# --------------------------------------------------------------------------- greedy-fill
def greedy_fill(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Atlas-style: whole datacenters in chain order until uniform stages fit memory."""
    t = CostTables(instance)
    devices = 0
    failure = None
    for k, dc in enumerate(instance.datacenters):
        devices += dc.device_count
        S = min(t.L, devices)
        stages = _chain_fill(t, S)
        if t.plan_time(stages) < math.inf:
            return Outcome("feasible", _to_plan(t, stages),
                           stats={"strategy": "greedy-fill", "datacenters": k + 1, "stages": S})
        failure = _memory_failure(t, stages)
        if S == t.L:
            break  # one layer per stage already: adding datacenters changes nothing
    return _infeasible_or(
        t, f"uniform stages over whole datacenters in chain order never fit memory; "
           f"with {devices} devices, {failure}", {"strategy": "greedy-fill"})


# --------------------------------------------------------------------------- proportional
def _proportional_bounds(t: CostTables, rates: list[float]) -> list[int]:
    """Boundaries giving each stage a FLOP share near its device's share of the total rate."""
    S, L = len(rates), t.L
    prefix = t.flop_prefix
    total = prefix[-1]
    cum = np.cumsum(rates) / sum(rates)
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


def _repair_memory(t: CostTables, b: list[int], slots: list[int]) -> list[int] | None:
    """Move boundary layers from over-full stages to neighbours that still fit afterwards.

    Each move takes a layer from a stage that breaks memory and gives it to a
    neighbour that fits with it, so the over-full stages only shrink and the
    loop ends. ``None`` if some stage stays over-full.
    """
    S = len(slots)
    b = list(b)

    def fits(s: int, i: int, j: int) -> bool:
        return i < j and t.fits(slots[s], i, j, S - s)

    for _ in range(t.L * S + 1):
        bad = next((s for s in range(S) if not fits(s, b[s], b[s + 1])), None)
        if bad is None:
            return b
        moves = []
        if bad > 0 and b[bad + 1] - b[bad] > 1 and fits(bad - 1, b[bad - 1], b[bad] + 1):
            slack = t.max_in_flight[slots[bad - 1], b[bad - 1], b[bad] + 1] - t.in_flight(S - bad + 1)
            moves.append((slack, 0, bad, b[bad] + 1))  # first layer to the left neighbour
        if bad < S - 1 and b[bad + 1] - b[bad] > 1 and fits(bad + 1, b[bad + 1] - 1, b[bad + 2]):
            slack = t.max_in_flight[slots[bad + 1], b[bad + 1] - 1, b[bad + 2]] - t.in_flight(S - bad - 1)
            moves.append((slack, 1, bad + 1, b[bad + 1] - 1))  # last layer to the right
        if not moves:
            return None
        _, _, index, value = max(moves)
        b[index] = value
    return None


def proportional(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Metis/FlashFlex-style: layers in proportion to device rates, memory repaired."""
    t = CostTables(instance)
    ranked = _fastest_first(t, range(t.G))
    n_max = min(t.L, len(ranked))

    def candidates():
        for S in range(1, n_max + 1):
            # the S fastest devices, in chain order, fastest first inside a datacenter
            chosen = sorted(ranked[:S], key=lambda g: (t.group_dc[g], -t.rate[g], -t.memory[g], g))
            b = _proportional_bounds(t, [float(t.rate[g]) for g in chosen])
            b = _repair_memory(t, b, chosen) or b  # unrepaired: reported as not fitting
            yield [(b[s], b[s + 1], int(t.group_dc[g]), g) for s, g in enumerate(chosen)]

    return _best(t, candidates(),
                 f"layers in proportion to the rates of the S fastest devices, S = 1..{n_max}",
                 {"strategy": "proportional"}, deadline)


# --------------------------------------------------------------------------- uniform-chain
def uniform_chain(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Sailor-style: uniform layers; search stage count, DC range and stages per DC."""
    search = _UniformChain(CostTables(instance), Deadline.of(deadline))
    search.seed_with_chain_fill()
    for S in range(1, search.n_max + 1):
        search.search(S)
        if not search.complete:
            break
    t = search.t
    stats = {"strategy": "uniform-chain", "nodes": search.visited, "complete": search.complete}
    if search.best is None:
        msg = ("no uniform split over a contiguous range of datacenters fits memory"
               if search.complete else
               "time limit reached before any uniform split was found to fit")
        return _infeasible_or(t, msg, stats)
    stats["stages"] = len(search.best)
    return Outcome("feasible", _to_plan(t, search.best), stats=stats)


class _UniformChain:
    """Branch and bound over uniform splits: stage count, datacenter range, stages per DC."""

    def __init__(self, t: CostTables, deadline: Deadline):
        self.t, self.deadline = t, deadline
        self.slots = _dc_slots(t)
        self.n_max = min(t.L, sum(len(x) for x in self.slots))
        # fastest rate available from datacenter k onwards, for the bound
        self.fastest_from = [max(t.rate[g] for dc in self.slots[k:] for g in dc)
                             for k in range(t.K)]
        self.best_T, self.best = math.inf, None
        self.visited, self.complete = 0, True

    def offer(self, T: float, stages) -> None:
        if self.best_T > T:
            self.best_T, self.best = T, list(stages)

    def seed_with_chain_fill(self) -> None:
        """Start from the chain-order fill (uniform's family is contained in this one)."""
        for S in range(1, self.n_max + 1):
            stages = _chain_fill(self.t, S)
            self.offer(self.t.plan_time(stages), stages)

    def search(self, S: int) -> None:
        """Every range of datacenters and stages per datacenter for ``S`` uniform stages."""
        t = self.t
        self.b = uniform_bounds(t.L, S)
        self.S = S
        # flop of the largest block from s onwards, for the bottleneck bound
        block = np.diff(t.flop_prefix[self.b])
        self.max_from = np.maximum.accumulate(block[::-1])[::-1]
        self.chosen: list[tuple[int, int, int, int]] = []
        for a in range(t.K):
            if self.complete:
                self.dfs(a, 0, 0.0, 0.0)

    def bound(self, k: int, e: int, total: float, peak: float) -> float:
        """Optimistic ``T`` once blocks ``..e`` are placed up to datacenter ``k``."""
        t, b = self.t, self.b
        fastest = self.fastest_from[k + 1]
        rest = cost.compute_time(t.flop_prefix[-1] - t.flop_prefix[b[e + 1]], fastest)
        block = cost.compute_time(self.max_from[e + 1], fastest)
        return cost.iteration_time(total + rest, max(peak, block), t.M)

    def dfs(self, k: int, s: int, total: float, peak: float) -> None:
        """Place blocks ``s..`` starting in datacenter ``k`` (which runs at least one)."""
        t, b, S, chosen = self.t, self.b, self.S, self.chosen
        self.visited += 1
        if self.visited % 4096 == 0 and self.deadline.expired():
            self.complete = False
        if not self.complete:
            return
        dc = self.slots[k]
        base = len(chosen)
        if s > 0:  # the boundary entering this datacenter
            kp = chosen[-1][2]
            total += float(t.traversal(b[s], kp, k))
            peak = max(peak, float(t.occupancy(b[s], kp, k)))
        for n in range(1, min(len(dc), S - s) + 1):
            e = s + n - 1  # block placed now
            g = dc[n - 1]
            if not t.fits(g, b[e], b[e + 1], S - e):
                break  # this device cannot hold this block; larger n keeps it there
            if n > 1:
                total += float(t.traversal(b[e], k, k))
                peak = max(peak, float(t.occupancy(b[e], k, k)))
            c = float(t.compute_time[g, b[e], b[e + 1]])
            total += c
            peak = max(peak, c)
            chosen.append((b[e], b[e + 1], k, g))
            if e + 1 == S:
                self.offer(cost.iteration_time(total, peak, t.M), chosen)
                break
            if k + 1 < t.K and self.bound(k, e, total, peak) < self.best_T:
                self.dfs(k + 1, e + 1, total, peak)
        del chosen[base:]


# --------------------------------------------------------------------------- DP-based
def _dp(instance: Instance, deadline: Deadline) -> tuple[Outcome, float | None]:
    """The exact DP's outcome on ``instance`` and its plan's time (evaluated)."""
    out = dp.run(instance, deadline=deadline)
    T = evaluate(instance, out.plan).iteration_time_s if out.plan is not None else None
    return out, T


def comm_unaware(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """The DP optimum with every link free, returned for honest evaluation with links."""
    free = Link(FREE_BANDWIDTH, 0.0)
    blind = dataclasses.replace(
        instance,
        datacenters=tuple(dataclasses.replace(dc, link=free) for dc in instance.datacenters),
        links=tuple(free for _ in instance.links),
    )
    res, T = _dp(blind, deadline)
    stats = {"strategy": "comm-unaware", "link_free_status": res.status.value,
             "link_free_time_s": T}
    if res.status in ("optimal", "feasible"):
        # same datacenter names and device types: the device names carry over
        return Outcome("feasible", res.plan, stats=stats)
    if res.status == "infeasible":
        # the copy has the same devices and memory, and feasibility ignores links
        return Outcome("infeasible", message=res.message, stats=stats)
    return Outcome("no_solution", message=f"the link-free DP returned {res.status}: {res.message}",
                   stats=stats)


def single_dc(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """The best DP optimum over the datacenters taken one at a time."""
    deadline = Deadline.of(deadline)
    t = CostTables(instance)
    best_T, best, per_dc = math.inf, None, {}
    reasons = []
    for _k, dc in enumerate(instance.datacenters):
        sub = Instance(f"{instance.name}[{dc.name}]", instance.model, instance.training, (dc,), ())
        res, T = _dp(sub, deadline)
        per_dc[dc.name] = T
        found = res.plan is not None
        if found and T < best_T:
            best_T, best = T, res.plan
        elif not found:
            reasons.append(f"{dc.name}: {res.status}" + (f" ({res.message})" if res.message else ""))
    stats = {"strategy": "single-dc", "per_datacenter_time_s": per_dc}
    if best is None:
        return _infeasible_or(t, "no datacenter can host the model alone: " + "; ".join(reasons),
                              stats)
    stats["datacenter"] = instance.locate(best.stages[0].devices[0]).dc
    return Outcome("feasible", best, stats=stats)
