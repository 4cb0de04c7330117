"""Several pipelines (contract version 3) around one-pipeline models: the outer enumeration.

The ILPs and CP-SAT model one pipeline; a plan of ``P >= 2`` pipelines is found by
enumerating the outer choice and solving models of one pipeline inside it
(``docs/formulations.md``, "Several pipelines"):

- an **entry** is ``P`` contiguous DC blocks partitioning a span ``[a, b]`` of the chain,
  in chain order, and a split ``M_1 + ... + M_P = M`` (``M_p >= 1``); one pipeline
  (``P = 1``) is the whole chain with all ``M``. Every plan of ``P`` pipelines lies in the
  entry whose span is its own outer span, each pipeline's range extended to the start of
  the next one's; in that entry its ``R_X`` is the entry's (a plan of an entry that does
  not reach the span's ends has a smaller ``R_X`` than the entry counts, so an entry's
  value is never below the true time of the plan it returns);
- per block and ``M_p`` a **sub-instance**: the block's DCs and links alone, ``M_p``
  microbatches, one pipeline; its optimum ``v`` is the least ``T_p + max R`` of the block;
- an entry's plans have ``T = max_p T_p + max_{p,s} R_s + R_X / H >= max_p v_p + R_X /
  H``; putting the blocks' optimal plans side by side reaches that bound unless their
  synchronisations differ; only then a **joint model** (the ``P`` one-pipeline models in
  one model, ``T_max >= T_p``, ``R_max >= R_p``) is solved.

Entries are taken in order of a cheap lower bound (:func:`capacity_bound` of the blocks),
those whose blocks are single DCs first for a share of the limit
(:attr:`OuterSearch.local_share`); an entry whose cheap bound reaches the incumbent is
proven no better. The reported bound is the least over entries of what is proven of each
(its value when solved, its sub-models' bounds, else its cheap bound raised by what its
blocks are proven elsewhere, :meth:`OuterSearch.settle`): ``bound <= optimum <= T``
always; ``optimal`` only when it meets ``T``. Entries a pass leaves open (a sub-solve cut
by its slice) are taken again in rounds while the limit lasts (:meth:`OuterSearch.revisit`).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from dataclasses import dataclass, field

from .. import cost
from ..deadline import Deadline, TimeUp
from ..numeric import OPTIMALITY_RTOL
from ..plan import Pipeline, Plan, evaluate
from ..result import Outcome
from .cpu_clock import cpu_clock

#: relative slack when comparing a bound with the incumbent (a bound that meets it
#: within rounding proves the entry no better)
PRUNE_RTOL = 1e-9
#: share of the time left that one block's sub-solve may take
SUB_SHARE = 0.5
#: at most this many partitions of the chain are seeded with heuristic plans
SEED_PARTITIONS = 64
#: a block and ``M_p`` is solved at most this many times in the first pass over the
#: entries (again only with a higher cutoff); each later round (:meth:`OuterSearch.revisit`)
#: allows one more
MAX_SOLVES = 2
#: share of the time limit for a first pass over the entries whose blocks are single DCs
#: (each block one DC: small, fast sub-models, and a good incumbent for the cutoffs)
LOCAL_SHARE = 0.4
#: share of the time limit for the one-pipeline entry's block before every other entry,
#: for a route whose block solve keeps its work for a later solve (the arc-flow route's
#: windows of the period, :attr:`OuterSearch.early_share`; 0: none)
EARLY_SHARE = 0.08
#: ... on chains of at least this many DCs
EARLY_DCS = 3


def several(instance) -> bool:
    """Whether the instance allows a pipeline count other than 1.

    Parameters
    ----------
    instance : Instance

    Returns
    -------
    bool
        ``True`` when ``parallelism.pipelines`` is not ``[1]``: the routes then run the
        outer enumeration (:class:`OuterSearch`).
    """
    return tuple(instance.parallelism.pipelines) != (1,)


def sub_instance(instance, first: int, last: int, microbatches: int):
    """The instance of one pipeline on DCs ``first..last`` with ``microbatches``.

    Parameters
    ----------
    instance : Instance
    first, last : int
        The block's first and last DC (chain indices, inclusive).
    microbatches : int
        ``M_p``.

    Returns
    -------
    Instance
        The block's DCs and the links between them, ``M_p`` microbatches, pipelines
        ``[1]``, everything else as in ``instance``. The DCs keep their names, so a
        sub-plan's device names are the full instance's.
    """
    training = instance.training
    par = dataclasses.replace(training.parallelism, pipelines=(1,))
    return dataclasses.replace(
        instance, datacenters=tuple(instance.datacenters[first:last + 1]),
        links=tuple(instance.links[first:last]),
        training=dataclasses.replace(training, microbatches=microbatches, parallelism=par))


def _seconds(budget: Deadline) -> float:
    """The length of a sub-solve's slice (:meth:`OuterSearch.slice`): its CPU seconds
    for a :class:`CpuPhase`, its wall-clock limit else (``inf`` without one)."""
    if isinstance(budget, CpuPhase):
        return budget.cpu_at - budget.cpu_start
    return math.inf if budget.unlimited else budget.limit


#: :meth:`CpuPhase.rate` is measured after this many wall-clock seconds (``1.0`` before)
RATE_AFTER_S = 1.0
#: :meth:`CpuPhase.rate` is at least this (a wall-clock limit at most 50 times the CPU
#: seconds left)
MIN_RATE = 0.02


class CpuPhase(Deadline):
    """A phase of a solve that ends after ``cpu_s`` seconds of this process's CPU time
    (:func:`~chainpipe.formulations.cpu_clock.cpu_clock`: HiGHS's threads and
    children included), or at ``parent``'s end if that
    comes first.

    A share of the time limit measured on the wall clock gives a phase half the work on
    a machine where the solve gets half a core; measured in CPU time the phase does the
    same work at any load, and what is left of the wall-clock limit goes to the rest.
    Backends get :meth:`remaining` (the CPU seconds left, as wall seconds: no more
    than the phase could use) and are stopped hard at ``parent``'s end.
    """

    __slots__ = ("parent", "cpu_at", "cpu_start")

    def __init__(self, parent: Deadline, cpu_s: float):
        super().__init__(None if parent.unlimited else parent.remaining())
        self.cpu_start = cpu_clock()
        self.parent, self.cpu_at = parent, self.cpu_start + cpu_s
        self.at = parent.at

    def remaining(self) -> float:
        return min(self.parent.remaining(), max(0.0, self.cpu_at - cpu_clock()))

    def expired(self) -> bool:
        return self.parent.expired() or cpu_clock() >= self.cpu_at

    def cpu_end(self) -> float:
        """Its own CPU end, or that of a phase it is part of if earlier."""
        return min(self.cpu_at, self.parent.cpu_end())

    def wall(self) -> Deadline:
        """The wall-clock deadline it is part of (its first ancestor that is not a
        phase)."""
        return self.parent.wall()

    def outermost(self) -> CpuPhase:
        """The outermost phase it is part of (itself if none): the run's CPU limit."""
        root = self
        while isinstance(root.parent, CpuPhase):
            root = root.parent
        return root

    def run_cpu_end(self) -> float:
        """The CPU time at which the whole run ends (the outermost phase's end, at or
        after :meth:`cpu_end`): a phase may run past its own end, taking the seconds from
        the rest of the run, but no part of the run may go past this one, whatever share
        of a core the process gets (:func:`~chainpipe.solvers.highs.own_limit`)."""
        return self.outermost().cpu_at

    def rate(self) -> float:
        """The share of a core this process has had: CPU seconds per wall-clock second
        since the outermost phase it is part of began (``1.0`` before
        :data:`RATE_AFTER_S` of wall clock), at least :data:`MIN_RATE`. A backend whose
        own limit is on the wall clock gets the CPU seconds left divided by it
        (:mod:`chainpipe.solvers.highs`)."""
        root = self.outermost()
        wall = time.monotonic() - root.start
        if wall < RATE_AFTER_S:
            return 1.0
        return max(MIN_RATE, (cpu_clock() - root.cpu_start) / wall)


def share(deadline: Deadline, seconds: float) -> Deadline:
    """A part of ``deadline`` of ``seconds``: CPU seconds (a :class:`CpuPhase` within
    ``deadline``) when ``deadline`` ends on CPU time (:meth:`Deadline.cpu_end`, e.g. a
    run under ``benchmarks/formulations.py --cpu-limit``), else wall-clock seconds as
    before. Measured on the wall clock, a share of a CPU-limited run does a tenth of its
    work at a tenth of a core (``docs/formulations.md``, "Fourteenth round").

    Parameters
    ----------
    deadline : Deadline
        What the part belongs to.
    seconds : float
        Its length (``inf``: no limit of its own).

    Returns
    -------
    Deadline
        A :class:`CpuPhase` over ``deadline`` when that has a CPU end, else a wall-clock
        :class:`Deadline` of ``seconds`` (``None``: unlimited).
    """
    if math.isinf(seconds):
        return Deadline(None)
    if math.isfinite(deadline.cpu_end()):
        return CpuPhase(deadline, seconds)
    return Deadline(seconds)


def heuristic_plan(instance, deadline: Deadline | None = None):
    """:func:`chainpipe.solvers.incumbent.heuristic_plan` with its share of the time
    (:data:`~chainpipe.solvers.incumbent.SHARE` of what is left, at most
    :data:`~chainpipe.solvers.incumbent.MAX_S`) in CPU seconds when ``deadline`` ends on
    CPU time (:func:`share`), as the sub-solves' slices are: on the wall clock, a run at
    a tenth of a core got a tenth of the heuristics' work and a worse first incumbent,
    and the cutoffs and the path of the enumeration changed with the load (fresh
    ``v3-medium-04``-like seed 3: proven in 11 CPU s, or in 35-45 after a seed 15 %
    slower, ``docs/formulations.md``, "Fifteenth round"). Else the same function.

    Parameters
    ----------
    instance : Instance
        The instance.
    deadline : Deadline, optional
        The solve's deadline.

    Returns
    -------
    (Plan or None, float, str or None)
        The plan, its ``T`` and the heuristic's name (``(None, inf, None)`` if none).
    """
    from ..solvers import incumbent

    deadline = Deadline.of(deadline)
    seconds = min(incumbent.MAX_S, incumbent.SHARE * deadline.remaining())
    return incumbent.heuristic_plan(instance, deadline, part=share(deadline, seconds))


def cross_time(instance, first: int, last: int) -> float:
    """``R_X / H`` of pipelines spanning DCs ``first..last``.

    Parameters
    ----------
    instance : Instance
    first, last : int
        The span's outer DCs (inclusive).

    Returns
    -------
    float
        Seconds per iteration (:func:`chainpipe.cost.cross_sync_time` over the chain
        links of the span, divided by ``pipeline_sync_period``); 0 for one DC.
    """
    if last <= first:
        return 0.0
    bw, lat = cost.chain_path(instance.links, first, last)
    total = float(sum(ly.params for ly in instance.layers))
    x = cost.cross_sync_time(total, instance.training.gradient_bytes_per_param, bw, lat)
    return float(x) / instance.training.pipeline_sync_period


@dataclass
class Entry:
    """One outer choice: DC blocks ``(first, last)`` in chain order and their ``M_p``."""

    blocks: tuple[tuple[int, int], ...]
    splits: tuple[int, ...]
    cross: float  # R_X / H of the span
    cheap: float = 0.0  # a cheap lower bound on T of the entry's plans (capacity_bound)
    bound: float = 0.0  # what is proven of the entry so far
    done: bool = False
    visited: bool = False  # solved or pruned by :meth:`OuterSearch.visit`
    #: cut short by the end of a pass's phase (:meth:`OuterSearch.visit`): the next pass
    #: takes it first
    cut: bool = False

    @property
    def single(self) -> bool:
        return len(self.blocks) == 1


def _partitions(a: int, b: int, P: int):
    """Every cut of DCs ``a..b`` into ``P`` contiguous non-empty blocks."""
    for cuts in itertools.combinations(range(a + 1, b + 1), P - 1):
        bounds = (a, *cuts, b + 1)
        yield tuple((bounds[i], bounds[i + 1] - 1) for i in range(P))


def _splits(M: int, P: int):
    for cuts in itertools.combinations(range(1, M), P - 1):
        bounds = (0, *cuts, M)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(P))


def entries(instance) -> list[Entry]:
    """Every outer choice the instance allows.

    Parameters
    ----------
    instance : Instance

    Returns
    -------
    list of Entry
        One for ``P = 1`` (if allowed: the whole chain, all ``M``), and for each allowed
        ``2 <= P <= min(M, K)`` every cut of every span into ``P`` blocks times every
        split of ``M`` into ``P`` parts ``>= 1``; unsorted, bounds not yet set.
    """
    K, M = len(instance.datacenters), instance.microbatches
    out = []
    for P in sorted(set(instance.parallelism.pipelines)):
        if P == 1:
            out.append(Entry(((0, K - 1),), (M,), 0.0))
            continue
        if P > min(M, K):
            continue
        for a in range(K):
            for b in range(a + P - 1, K):
                X = cross_time(instance, a, b)
                for blocks in _partitions(a, b, P):
                    for split in _splits(M, P):
                        out.append(Entry(blocks, split, X))
    return out


def assemble(instance, entry: Entry, plans: list[Plan]) -> Plan:
    """The plan of ``entry`` from its blocks' one-pipeline plans.

    Parameters
    ----------
    instance : Instance
    entry : Entry
    plans : list of Plan
        One plan per block, each of its sub-instance (device names are the instance's).

    Returns
    -------
    Plan
        The first form (``{"stages": ...}``) for one pipeline, else the pipelines in
        chain order with their ``M_p``.
    """
    if entry.single:
        return Plan(plans[0].stages)
    return Plan(pipelines=[Pipeline(p.stages, m) for p, m in zip(plans, entry.splits)])


def capacity_terms(instance, first: int, last: int) -> tuple[float, float]:
    """``(fill floor, period floor)`` in seconds of one pipeline on DCs ``first..last``.

    With ``F`` the model's FLOP, each stage has ``C_s >= F_s / (w_s r_s)``: the fill
    ``sum_s C_s >= F / max_g (w_g r_g)`` (``w_g`` the widest stage group ``g`` allows) and
    the period ``lambda >= max_s C_s >= F / sum_g n_g r_g`` (the stages' devices are
    distinct). Both hold for any ``M_p``, schedule and objective (``lambda`` is at least
    ``max C`` under each).
    """
    flop = float(sum(ly.flop for ly in instance.layers))
    par = instance.parallelism
    widest = max(par.data_parallel) * max(par.tensor_parallel)
    groups = [g for dc in instance.datacenters[first:last + 1] for g in dc.devices]
    if not groups:
        return math.inf, math.inf
    with _errstate():
        fastest = max(min(widest, g.count) * g.flop_per_s for g in groups)
        total = sum(g.count * g.flop_per_s for g in groups)
        return (float(cost.compute_time(flop, float(fastest))),
                float(cost.compute_time(flop, float(total))))


def capacity_bound(fill: float, period: float, microbatches: int) -> float:
    """A lower bound on ``T_p`` (and ``T_p + max R``) of a block.

    Parameters
    ----------
    fill, period : float
        :func:`capacity_terms` of the block.
    microbatches : int
        ``M_p``.

    Returns
    -------
    float
        ``fill + (M_p - 1) period`` (0 where the figures give ``nan``).
    """
    value = fill + float(cost.steady_state(microbatches, period))
    return value if not math.isnan(value) else 0.0


def _errstate():
    """Overflow to ``inf`` silently (extreme but valid figures)."""
    import numpy as np

    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def rate_split(instance, blocks) -> tuple[int, ...]:
    """``M`` split over ``blocks`` in proportion to their devices' FLOP rates (largest
    remainders; every share at least 1, ``len(blocks) <= M``): a seed's guess, no bound
    rests on it."""
    M = instance.microbatches
    rates = [sum(g.count * g.flop_per_s for dc in instance.datacenters[a:b + 1]
                 for g in dc.devices) for a, b in blocks]
    total = sum(rates)
    if not (total > 0 and math.isfinite(total)):
        rates, total = [1.0] * len(blocks), float(len(blocks))
    free = M - len(blocks)
    exact = [free * r / total for r in rates]
    share = [int(math.floor(x)) for x in exact]
    order = sorted(range(len(blocks)), key=lambda i: share[i] - exact[i])
    for i in order[:free - sum(share)]:
        share[i] += 1
    return tuple(1 + x for x in share)


@dataclass
class SubResult:
    """A block's one-pipeline solve: its plan, ``T_p + max R`` and proven bound."""

    plan: Plan | None
    T: float
    bound: float
    optimal: bool
    infeasible: bool = False
    cutoff: float | None = None  # the cutoff it was solved with


@dataclass
class OuterSearch:
    """The enumeration of :mod:`chainpipe.formulations.pipelines` for one route.

    Parameters
    ----------
    instance : Instance
        A version-3 instance allowing several pipelines.
    deadline : Deadline
        Covers every sub-solve and joint solve.
    single : callable
        ``single(sub_instance, deadline, cutoff) -> Outcome``: the route's own solve of
        one pipeline (its proof and bound its own); ``cutoff`` (``None`` or seconds) is
        what the enumeration needs to know: a plan faster than it, or a proof that there
        is none (a bound at least the cutoff). A route may ignore it.
    joint : callable
        ``joint(entry, sub_instances, upper, deadline) -> (plans or None, bound)``: the
        route's model of the entry's ``P`` pipelines together, minimising
        ``max T_p + max R``; ``plans`` one per block, ``bound`` a proven lower bound on
        ``max T_p + max R`` over the entry's plans below ``upper`` (``upper`` itself when
        there is none).
    log : callable, optional
        One line per step.
    local_share : float, optional
        Share of the time limit for a first pass over the entries whose blocks are single
        DCs (:data:`LOCAL_SHARE`; 0 takes every entry by cheap bound from the start).
    sub_limit : float, optional
        At most this many seconds for one sub-solve in the first pass, doubled in each
        later round (:meth:`revisit`); ``None`` (default): only :data:`SUB_SHARE` of the
        time left.
    """

    instance: object
    deadline: Deadline
    single: object
    joint: object
    log: object = None
    subs: dict = field(default_factory=dict)
    best_T: float = math.inf
    best_plan: Plan | None = None
    stats: dict = field(default_factory=lambda: {"entries": 0, "sub_solves": 0,
                                                 "joint_solves": 0, "pruned": 0,
                                                 "pruned_by_growth": 0})
    #: per block ``(first, last)``: the ``(M_p, proven bound)`` of its sub-solves
    proven: dict = field(default_factory=dict)
    #: per block and ``M_p``: how many times it was solved
    solves: dict = field(default_factory=dict)
    #: the deadline of the current pass (:meth:`visit`): joint models stop there
    until: Deadline | None = None
    #: share of the time limit for the first pass over single-DC entries (0: none)
    local_share: float = LOCAL_SHARE
    #: per block of several DCs ``(first, last)``: ``(M_p, entry)`` of every entry holding
    #: it, by ``M_p`` (:meth:`needed_first`)
    by_block: dict = field(default_factory=dict)
    #: seconds for one sub-solve in the first pass (``None``: a share of the time left)
    sub_limit: float | None = None
    #: rounds of :meth:`revisit` begun (0 in the first pass)
    rounds: int = 0
    #: per block and ``M_p``: the seconds its last solve was given and its cutoff
    budgets: dict = field(default_factory=dict)
    #: share of the time limit for the one-pipeline entry's block before every other
    #: entry (:meth:`early`; 0: none)
    early_share: float = 0.0
    #: blocks and ``M_p`` whose last solve said (``stats["resumable"]``) that a solve
    #: again goes on from where it stopped (the arc-flow route's windows of the period):
    #: :meth:`more_than_before` then allows one with any time
    resumable: set = field(default_factory=set)

    def grown(self, first: int, last: int, m: int) -> float:
        """The largest bound proven of the block with ``m0 <= m`` microbatches: a bound
        with ``m`` too, since the least ``T_p + max R`` of a block never falls as ``M_p``
        grows (``docs/formulations.md``, "Several pipelines"); 0 when none is known."""
        return max((b for m0, b in self.proven.get((first, last), ()) if m0 <= m),
                   default=0.0)

    def offer(self, plan: Plan | None) -> float:
        """Keep ``plan`` if :func:`evaluate` finds it feasible and faster; its ``T``."""
        if plan is None:
            return math.inf
        ev = evaluate(self.instance, plan)
        if not ev.feasible:
            raise RuntimeError(f"a decoded plan is infeasible: {ev.violations[0]}")
        T = float(ev.iteration_time_s)
        if T < self.best_T:
            self.best_T, self.best_plan = T, plan
        return T

    def cheap(self, first: int, last: int, m: int) -> float:
        """A cheap lower bound on ``T_p + max R`` of the block with ``m`` microbatches:
        :func:`capacity_bound`, from two numbers per block (no tables are built)."""
        key = ("capacity", first, last)
        if key not in self.subs:
            self.deadline.check()
            self.subs[key] = capacity_terms(self.instance, first, last)
        fill, per = self.subs[key]
        return capacity_bound(fill, per, m)

    def tables_bound(self, first: int, last: int, m: int) -> float:
        """:attr:`CostTables.lower_bound` of the block's sub-instance (``inf`` when
        :meth:`CostTables.infeasibility_reason` finds that nothing fits), once per block
        and ``m``: stronger than :meth:`cheap`, built only for entries that are reached."""
        from ..tables import CostTables

        key = ("tables", first, last, m)
        if key not in self.subs:
            self.deadline.check()
            tables = CostTables(sub_instance(self.instance, first, last, m))
            lb = math.inf if tables.infeasibility_reason() else float(tables.lower_bound)
            self.subs[key] = max(lb, self.cheap(first, last, m)) if not math.isnan(lb) \
                else self.cheap(first, last, m)
        return self.subs[key]

    def _note_size(self, stats: dict) -> None:
        """Keep the size of the largest one-pipeline sub-model solved so far (by its
        variables) as ``stats["largest_sub_model"]``: ``variables``, ``constraints``,
        ``nonzeros`` (a model that reports no size leaves it as it is)."""
        if not stats or stats.get("variables") is None:
            return
        size = {k: stats.get(k) for k in ("variables", "constraints", "nonzeros")}
        old = self.stats.get("largest_sub_model")
        if old is None or size["variables"] > old["variables"]:
            self.stats["largest_sub_model"] = size

    def sub(self, first: int, last: int, m: int, cutoff: float | None = None,
            budget: Deadline | None = None) -> SubResult:
        """The block's one-pipeline solve, once per block and ``M_p``; again (at most
        :data:`MAX_SOLVES` solves in all) when an entry needs more than the last solve
        proved (its bound is below ``cutoff``, with a time slice or an incumbent that may
        now be better). ``budget``: its deadline (default :meth:`slice`)."""
        key = (first, last, m)
        old = self.subs.get(key)
        budget = self.slice() if budget is None else budget
        if old is not None and (old.optimal or old.infeasible or cutoff is None
                                or old.bound >= cutoff * (1 - PRUNE_RTOL)
                                or self.solves.get(key, 0) >= MAX_SOLVES + self.rounds
                                or not self.more_than_before(key, budget, cutoff)):
            return old
        inst = sub_instance(self.instance, first, last, m)
        if cutoff is not None and not math.isfinite(cutoff):
            cutoff = None
        self.budgets[key] = (_seconds(budget), math.inf if cutoff is None else cutoff)
        try:
            out = self.single(inst, budget, cutoff)
        except TimeUp:  # the sub-solve's own slice ended (the whole limit: raised on)
            self.deadline.check()
            out = Outcome("no_solution", message="the sub-solve's time ran out")
        self.stats["sub_solves"] += 1
        if out.stats.get("resumable"):
            self.resumable.add(key)
        self._note_size(out.stats)
        self.solves[key] = self.solves.get(key, 0) + 1
        status = out.status.value
        T = math.inf
        if out.plan is not None:
            ev = evaluate(inst, out.plan)
            T = float(ev.iteration_time_s) if ev.feasible else math.inf
        if status == "infeasible":
            res = SubResult(None, math.inf, math.inf, True, True)
        else:
            lb = out.lower_bound if out.lower_bound is not None else self.cheap(first, last, m)
            res = SubResult(out.plan, T, max(float(lb), self.cheap(first, last, m)),
                            status == "optimal", cutoff=cutoff)
        if old is not None:  # keep the better plan and the higher bound of the two solves
            if old.T < res.T:
                res.plan, res.T = old.plan, old.T
            res.bound = max(res.bound, old.bound)
            res.optimal = res.optimal or res.T <= res.bound * (1 + OPTIMALITY_RTOL)
        self.subs[key] = res
        self.proven.setdefault((first, last), []).append((m, res.bound))
        if self.log is not None:
            self.log(f"pipelines: DCs {first}-{last}, M_p = {m}: {status}, "
                     f"T_p + R = {T:.6g} s, bound {res.bound:.6g} s"
                     + (f" (cutoff {cutoff:.6g} s)" if cutoff is not None else ""))
        return res

    def slice(self) -> Deadline:
        """The deadline of one sub-solve: :data:`SUB_SHARE` of what is left (a hard block
        must not keep the enumeration from every other entry), all of it in the rounds of
        :meth:`revisit` (least bound first: an entry left open there keeps the status from
        ``optimal`` whatever else is proven); at most :attr:`sub_limit` doubled per round
        when that is set; no limit without either. In CPU seconds when the
        enumeration's deadline ends on CPU time (:func:`share`)."""
        part = SUB_SHARE if self.rounds == 0 else 1.0
        limit = self.deadline.remaining() * part
        if self.sub_limit is not None:
            limit = min(limit, self.sub_limit * 2.0 ** self.rounds)
        return share(self.deadline, limit)

    def more_than_before(self, key: tuple, budget: Deadline, cutoff: float | None) -> bool:
        """Whether a solve of block and ``M_p`` ``key`` with ``budget`` and ``cutoff`` can
        prove more than its last one: always in the first pass (as before the rounds); in
        a round of :meth:`revisit` only with more time or a lower cutoff (the same solve
        again would stop where the last one did), or when the last solve is resumable
        (:attr:`resumable`: the next one goes on from there)."""
        if self.rounds == 0 or key not in self.budgets or key in self.resumable:
            return True
        seconds, last_cutoff = self.budgets[key]
        limit = _seconds(budget)
        cut = math.inf if cutoff is None else cutoff
        return limit > seconds * (1 + 1e-9) or cut < last_cutoff * (1 - PRUNE_RTOL)

    def seed(self) -> None:
        """First incumbents from the cheap heuristics (:func:`heuristic_plan`, in CPU
        seconds under a CPU-time limit; never the DP): one pipeline
        (when 1 is an allowed count), and for every other allowed count ``P`` each cut of
        the whole chain into ``P`` blocks (at most :data:`SEED_PARTITIONS` cuts in all)
        with ``M`` split by the blocks' FLOP rates (:func:`rate_split`). A plan to return
        if every model runs out of time, and a bound that prunes entries."""
        K, M = len(self.instance.datacenters), self.instance.microbatches
        counts = sorted(set(self.instance.parallelism.pipelines))
        if 1 in counts:
            plan, _T, name = heuristic_plan(sub_instance(self.instance, 0, K - 1, M),
                                            self.deadline)
            if plan is not None:
                self.offer(Plan(plan.stages))
                self.stats["seed"] = name
        cuts = [blocks for P in counts if 2 <= P <= min(M, K)
                for blocks in _partitions(0, K - 1, P)]
        for blocks in cuts[:SEED_PARTITIONS]:
            split = rate_split(self.instance, blocks)
            plans = []
            for (a, b), m in zip(blocks, split):
                plan, _T, _name = heuristic_plan(sub_instance(self.instance, a, b, m),
                                                 self.deadline)
                if plan is None:
                    break
                plans.append(plan)
            else:
                before = self.best_T
                self.offer(assemble(self.instance, Entry(blocks, split, 0.0), plans))
                if self.best_T < before:
                    self.stats["seed"] = f"{len(blocks)} pipelines, heuristic"

    def run(self) -> Outcome:
        """Every entry, best first; the outcome with its proven bound."""
        todo = entries(self.instance)
        message = None
        try:
            self.seed()
            for e in todo:
                e.cheap = max(self.cheap(a, b, m) for (a, b), m in zip(e.blocks, e.splits)) \
                    + e.cross
                e.bound = e.cheap
            # by cheap bound (largest block first was slower and reported weaker bounds:
            # docs/formulations.md, "Order"), the entries of single-DC blocks first
            todo.sort(key=lambda e: (e.cheap, len(e.blocks)))
            for e in todo:
                for (a, b), m in zip(e.blocks, e.splits):
                    if a < b:
                        self.by_block.setdefault((a, b), []).append((m, e))
            for pairs in self.by_block.values():
                pairs.sort(key=lambda p: p[0])
            self.early(todo)
            local = [e for e in todo if all(a == b for a, b in e.blocks)]
            if self.local_share > 0 and local and len(local) < len(todo):
                self.visit(local, self.phase(self.local_share))
                self.stats["local_phase_s"] = self.deadline.elapsed()
            self.visit(todo, self.deadline)
            self.revisit(todo)
        except TimeUp:
            message = f"time limit ({self.deadline.limit:g} s) reached in the enumeration"
        return self.outcome(todo, message)

    def early(self, todo: list[Entry]) -> None:
        """The one-pipeline entry's block (the whole chain, all ``M``) solved first for
        :attr:`early_share` of the time left, cut at the incumbent, on a chain of
        :data:`EARLY_DCS` DCs or more: its plan (the arc-flow route's windows find plans
        from their least paths) gives every later entry a tighter cutoff, and the route
        keeps its windows for the entry's own visit (``stats["resumable"]``). Fresh
        ``v3-medium-02``-like seed 31: that block, which holds the optimum, was reached at
        89 CPU s, after three joint models of four single-DC pipelines cut at the
        heuristic's 0.997 s (``docs/formulations.md``, "Twenty-second round")."""
        K, M = len(self.instance.datacenters), self.instance.microbatches
        e = next((e for e in todo if e.blocks == ((0, K - 1),)), None)
        if self.early_share <= 0 or e is None or K < EARLY_DCS:
            return
        if self.cheap(0, K - 1, M) + e.cross >= self.best_T * (1 - PRUNE_RTOL):
            return
        budget = share(self.deadline, self.deadline.remaining() * self.early_share)
        res = self.sub(0, K - 1, M, self.best_T - e.cross, budget)
        if res.plan is not None:
            self.offer(assemble(self.instance, e, [res.plan]))
        e.bound = max(e.bound, res.bound + e.cross)
        self.stats["early_s"] = self.deadline.elapsed()

    def open(self, todo: list[Entry]) -> list[Entry]:
        """The entries that keep the outcome from ``optimal``: neither settled nor proven
        within ``OPTIMALITY_RTOL`` of the incumbent (:meth:`outcome`'s test)."""
        memo = {}
        return [e for e in todo if not e.done
                and self.known(e, memo) < self.best_T * (1 - OPTIMALITY_RTOL)]

    def revisit(self, todo: list[Entry]) -> None:
        """Rounds over the entries a pass left open (a sub-solve cut by its slice, a block
        without a plan), least proven bound first, while the time limit lasts: each round
        gives a sub-solve all the time left (and doubles :attr:`sub_limit`) and allows one
        more solve per block and ``M_p``; a block is solved again only with more time or
        a lower cutoff than its last solve (:meth:`more_than_before`). Ends when nothing
        is open or a round neither solves a block again (with more time: the next round
        may prove more) nor finds a better plan or a higher bound of an open entry (a
        joint model solved again alone proves the same: then the outcome stays
        ``feasible``)."""
        while True:
            left = self.open(todo)
            if not left:
                return
            self.deadline.check()
            before = (self.stats["sub_solves"], self.best_T, self._known_all(left))
            self.rounds += 1
            self.stats["revisits"] = self.rounds
            for e in left:
                e.visited = False
            self.visit(left, self.deadline)
            if (self.stats["sub_solves"], self.best_T, self._known_all(left)) == before:
                return

    def phase(self, share: float) -> Deadline:
        """A deadline for one phase: ``share`` of the time left, in CPU seconds
        (:class:`CpuPhase`; none without a limit)."""
        if self.deadline.unlimited:
            return Deadline(None)
        return CpuPhase(self.deadline, self.deadline.remaining() * share)

    def known(self, e: Entry, memo: dict | None = None) -> float:
        """What is proven of ``e`` now without solving it: the largest of its blocks'
        bounds proven so far (their sub-solves, growth in ``M_p`` and tables bounds built
        for other entries) plus ``R_X / H``, and its cheap bound. ``memo``: the blocks'
        bounds by ``(first, last, M_p)``, shared by calls between which nothing is solved
        (:meth:`block_known`)."""
        memo = {} if memo is None else memo
        return max(e.cheap, e.bound, max(self.block_known(a, b, m, memo) for (a, b), m
                                         in zip(e.blocks, e.splits)) + e.cross)

    def block_known(self, a: int, b: int, m: int, memo: dict) -> float:
        """What is proven of block ``(a, b)`` with ``m`` microbatches: its bound by growth
        in ``M_p`` (:meth:`grown`) or its tables bound, kept in ``memo``. A pass over
        every entry asks the same few blocks again and again: fresh ``-02``-like seed
        4 has 40 342 entries and 640 blocks and ``M_p``; without it, a pass took 0.24 CPU
        s, and :meth:`outcome`'s ran past the time limit."""
        key = (a, b, m)
        if key not in memo:
            memo[key] = max(self.grown(a, b, m), self.subs.get(("tables", a, b, m), 0.0))
        return memo[key]

    def _known_all(self, todo: list[Entry]) -> list[float]:
        """:meth:`known` of every entry of ``todo``, one memo for all."""
        memo = {}
        return [self.known(e, memo) for e in todo]

    def visit(self, todo: list[Entry], until: Deadline) -> None:
        """Solve or prune each entry of ``todo`` not yet visited, least proven bound first
        (:meth:`known`, kept current as blocks are solved: a heap re-keyed lazily, the
        bounds only rise), until the deadline ``until`` (its end stops this pass only).
        An entry that the end of an earlier pass's phase cut short (:attr:`Entry.cut`: its
        sub-solves and joint model part done, their levels and windows kept) is taken
        first: fresh ``-02``-like seed 4's joint model of its four single-DC pipelines,
        cut at the first pass's end with its plan 0.977 s not yet found, was otherwise
        taken last (its bound the highest) and the run ended at 1.018 s."""
        memo = {}
        heap = [(not e.cut, self.known(e, memo) if self.rounds else e.cheap, len(e.blocks),
                 n) for n, e in enumerate(todo) if not e.visited]
        heapq.heapify(heap)
        while heap:
            if until.expired():
                self.deadline.check()
                return
            self.deadline.check()
            later, _key, size, n = heapq.heappop(heap)
            e = todo[n]
            if e.visited:
                continue
            if e.cheap >= self.best_T * (1 - PRUNE_RTOL):
                self.stats["pruned"] += 1
                e.visited = True
                continue
            e.bound = self.known(e)
            if e.bound >= self.best_T * (1 - PRUNE_RTOL):
                self.stats["pruned_by_growth"] += 1
                e.visited = True
                continue
            if heap and (later, e.bound, size) > heap[0][:3]:  # risen since it was queued
                heapq.heappush(heap, (later, e.bound, size, n))
                continue
            self.stats["entries"] += 1
            self.until, e.cut = until, False
            try:
                self.entry(e)
            except TimeUp:
                if until is self.deadline or self.deadline.expired():
                    raise
                e.cut = True
                return  # the pass's own end: the entry is taken again in the next pass
            # an entry the phase's end cut short (its joint model) is taken again later
            e.visited = until is self.deadline or e.done or \
                e.bound >= self.best_T * (1 - PRUNE_RTOL)
            e.cut = not e.visited and until.expired()

    def entry(self, e: Entry) -> None:
        """Solve one entry: its blocks alone, then together if their syncs disagree."""
        e.bound = max(e.bound, max(self.tables_bound(a, b, m)
                                   for (a, b), m in zip(e.blocks, e.splits)) + e.cross)
        if e.bound >= self.best_T * (1 - PRUNE_RTOL):
            e.done = math.isinf(e.bound)
            return
        need = self.best_T - e.cross  # a block proven at least this prunes the entry
        # blocks solved before first (free), then the highest proven bound first (the
        # likeliest to prune the entry alone), then the fewest DCs (the cheapest solve)
        order = sorted(range(len(e.blocks)), key=lambda n: (
            (*e.blocks[n], e.splits[n]) not in self.subs,
            -max(self.grown(*e.blocks[n], e.splits[n]),
                 self.subs.get(("tables", *e.blocks[n], e.splits[n]), 0.0)),
            e.blocks[n][1] - e.blocks[n][0], n))
        solved = {}
        for n in order:
            (a, b), m = e.blocks[n], e.splits[n]
            self.needed_first(a, b, m)
            grown = self.grown(a, b, m) + e.cross
            if grown >= self.best_T * (1 - PRUNE_RTOL):
                e.bound = max(e.bound, grown)
                return  # pruned by the block's bound at fewer microbatches
            solved[n] = self.sub(a, b, m, need)
            if solved[n].bound + e.cross >= self.best_T * (1 - PRUNE_RTOL):
                e.bound = max(e.bound, solved[n].bound + e.cross)
                return  # pruned by this block: the others need no solve
        subs = [solved[n] for n in range(len(e.blocks))]
        if any(s.infeasible for s in subs):
            e.bound, e.done = math.inf, True
            return
        e.bound = max(e.cheap, max(s.bound for s in subs) + e.cross)
        if any(s.plan is None for s in subs):
            return
        T = self.offer(assemble(self.instance, e, [s.plan for s in subs]))
        if all(s.optimal for s in subs) and T <= e.bound * (1 + OPTIMALITY_RTOL):
            e.bound, e.done = min(e.bound, T), True
            return
        if e.bound >= self.best_T * (1 - PRUNE_RTOL) or e.single:
            return
        insts = [sub_instance(self.instance, a, b, m) for (a, b), m in zip(e.blocks, e.splits)]
        self.stats["joint_solves"] += 1
        upper = self.best_T - e.cross
        plans, bound = self.joint(e, insts, upper, self.until or self.deadline)
        if plans is not None:
            self.offer(assemble(self.instance, e, plans))
        e.bound = max(e.bound, bound + e.cross)
        if self.log is not None:
            self.log(f"pipelines: joint model of {len(e.blocks)} pipelines {e.blocks} "
                     f"{e.splits}: bound {e.bound:.6g} s, incumbent {self.best_T:.6g} s")

    def needed_first(self, a: int, b: int, m: int) -> None:
        """Before block ``(a, b)`` of several DCs is solved with ``m`` microbatches, solve
        it with the fewest ``m2 < m`` an open entry needs for sure: an entry whose other
        blocks are all solved to optimality below what would prune it, so that this
        block at ``m2`` must be solved for it anyway (to prune it, or for its plan). A
        bound proven there holds at ``m`` (growth in ``M_p``, :meth:`grown`), and the
        fewest microbatches give the largest reach: on ``v3-medium-03`` DCs 1-3 at 47
        prune 48 to 50 (``docs/formulations.md``, "Ninth round"). Order only: every
        bound is still a proven one."""
        if a == b or (a, b, m) in self.subs:
            return
        for m2, other in self.by_block.get((a, b), ()):
            if m2 >= m:
                return
            if other.visited or other.done or (a, b, m2) in self.subs:
                continue
            if self.known(other) >= self.best_T * (1 - PRUNE_RTOL):
                continue
            rest = [self.subs.get((*blk, mm)) for blk, mm in zip(other.blocks, other.splits)
                    if blk != (a, b)]
            if all(r is not None and r.optimal and r.bound + other.cross
                   < self.best_T * (1 - PRUNE_RTOL) for r in rest):
                self.stats["needed_first"] = self.stats.get("needed_first", 0) + 1
                self.sub(a, b, m2, self.best_T - other.cross)
                return

    def settle(self, e: Entry, memo: dict | None = None) -> float:
        """What is proven of ``e`` at the end: its bound, raised for an entry never reached
        by what its blocks' proven bounds give by growth in ``M_p`` (:meth:`grown`) and
        by the blocks' tables bounds built for other entries (``memo``: as
        :meth:`known`'s)."""
        if e.visited or e.done:
            return e.bound
        memo = {} if memo is None else memo
        return max(e.bound, max(self.block_known(a, b, m, memo) for (a, b), m
                                in zip(e.blocks, e.splits)) + e.cross)

    def outcome(self, todo: list[Entry], message: str | None) -> Outcome:
        """The answer: the incumbent and the least of what is proven of each entry."""
        memo = {}
        bound = min((self.settle(e, memo) for e in todo), default=math.inf)
        stats = dict(self.stats, outer_entries=len(todo))
        if self.best_plan is None:
            if math.isinf(bound) and message is None:
                return Outcome("infeasible", stats=stats, message=(
                    "no allowed pipeline count has a plan that satisfies the memory limits "
                    "and device counts"))
            return Outcome("no_solution", lower_bound=None if math.isinf(bound) else bound,
                           stats=stats, message=message or "no plan found")
        T = self.best_T
        bound = min(bound, T)
        if T - bound <= OPTIMALITY_RTOL * T:
            return Outcome("optimal", plan=self.best_plan, lower_bound=bound, stats=stats)
        return Outcome("feasible", plan=self.best_plan, lower_bound=bound, stats=stats,
                       message=message or "the enumeration ended before every entry was proven")


def merge_models(models: list, sync_columns: list) -> tuple:
    """One linear model of several pipelines from their one-pipeline models.

    Parameters
    ----------
    models : list of LinearModel
        Each pipeline's model, minimising its ``T_p + R_p`` in one common time unit.
    sync_columns : list of int or None
        Per model, the column of its ``R_p`` (``None``: it has none).

    Returns
    -------
    (LinearModel, list of int)
        The block-diagonal model with two more columns ``T_max`` and ``R_max`` (the last
        two), rows ``cost_p . x_p - T_max <= 0`` (``cost_p`` without the ``R_p`` column)
        and ``R_p - R_max <= 0``, minimising ``T_max + R_max``; and each model's first
        column (to split a solution).
    """
    import numpy as np

    from .matrix import LinearModel

    offsets, n = [], 0
    for m in models:
        offsets.append(n)
        n += m.num_cols
    t_col, r_col = n, n + 1
    cols = n + 2
    cost = np.zeros(cols)
    cost[t_col] = cost[r_col] = 1.0
    lower = np.concatenate([m.col_lower for m in models] + [np.zeros(2)])
    upper = np.concatenate([m.col_upper for m in models] + [np.full(2, np.inf)])
    integer = np.concatenate([m.integer for m in models] + [np.zeros(2, dtype=bool)])
    row_lower = [m.row_lower for m in models]
    row_upper = [m.row_upper for m in models]
    starts, index, value = [np.zeros(1, dtype=np.int64)], [], []
    nnz = 0
    for m, off in zip(models, offsets):
        starts.append(m.starts[1:].astype(np.int64) + nnz)
        index.append(m.index.astype(np.int64) + off)
        value.append(m.value)
        nnz += m.nonzeros
    extra_lo, extra_up, extra_rows = [], [], []
    for m, off, sync in zip(models, offsets, sync_columns):
        c = m.cost.copy()
        if sync is not None:
            c[sync] = 0.0
        nz = np.nonzero(c)[0]
        extra_rows.append((np.concatenate([nz + off, [t_col]]), np.concatenate([c[nz], [-1.0]])))
        extra_lo.append(-np.inf)
        extra_up.append(-m.offset)
        if sync is not None:
            extra_rows.append((np.array([sync + off, r_col]), np.array([1.0, -1.0])))
            extra_lo.append(-np.inf)
            extra_up.append(0.0)
    for idx, val in extra_rows:
        index.append(idx.astype(np.int64))
        value.append(val)
        nnz += len(idx)
        starts.append(np.array([nnz], dtype=np.int64))
    model = LinearModel(
        cost, lower, upper, integer,
        np.concatenate(row_lower + [np.array(extra_lo)]),
        np.concatenate(row_upper + [np.array(extra_up)]),
        np.concatenate(starts).astype(np.int32), np.concatenate(index).astype(np.int32),
        np.concatenate(value).astype(float), 0.0,
        [v for m in models for v in m.variables] + [None, None])
    return model, offsets
