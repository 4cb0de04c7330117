"""A DC agent: one datacenter's private data and its part of the chain DP.

The agent of DC ``k`` knows the public instance and its own devices and
internal link, nothing else. In the backward pass it receives the summary of
DC ``k+1`` (suffix plans downstream), prepends runs of its own stages to them
and sends DC ``k-1`` the merged summary. In the forward pass it is told which
point of its summary to realise, rebuilds its own stages from its memo and
tells DC ``k+1`` which of *its* points the plan continues with.

Before the backward pass, in the prefix pass, DC ``k`` receives DC ``k-1``'s
lower bounds on the cost of the whole model on DC 1..k-1, adds its own devices
and sends DC ``k+1`` the bounds for DC 1..k (:meth:`DCAgent.prefix`); with them
it bounds the cost of any plan's prefix.

Work per backward step (all of it private; see :meth:`DCAgent._search`):
the DC's own label DP (:mod:`.local`, or :mod:`.wide` vectorised for wide
DPs) over suffix plans that begin here, joined to the incoming points, run
under an upper bound ``U`` on the optimum so that only partial plans that
could still be part of a plan with ``T <= U`` are kept. ``U`` is the best
complete plan known: from the incoming ``b = 0`` entry, a user's
``upper_bound``, or found by the DC itself (trials ``LB (1 + d)`` as in
``dp``, or a greedy probe). DC 1 then decides; DC 2..K merge their frontiers
with the passed-through downstream points into the summary for DC ``k-1``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import fields, replace
from itertools import accumulate, chain

import numpy as np

from ... import cost
from ...deadline import Deadline, TimeUp
from ...instance import Datacenter, Instance, Training
from ...plan import Stage, evaluate_part, pack_devices
from ...tables import CostTables, fastest_rate
from ..labels import TRIALS
from . import alone, protocol
from . import curve as curve_mod
from .cover import cover_order, fit_cover
from .local import END, IN, OWN, LocalDP
from .period import PeriodDP, concave_majorant, frontier_lines, period_time
from .period import cap_estimates as period_cap_estimates
from .period import epsilon_keep as period_epsilon_keep
from .period import pareto as period_pareto
from .public import PublicInstance
from .reach import fit_reach, reach_order
from .summary import (
    cap_estimates,
    cap_keep,
    epsilon_keep,
    fit_budget,
    frontier,
    frontier_columns,
    round_digits,
    round_down,
    round_up,
    shifted_keep,
)
from .wide import WideDP

#: whether a compressed period summary ranks its points by the prefix-curve pass's paired
#: floor (:meth:`DCAgent._period_estimates`) where the run makes the pass; off: measured on
#: ``v3-large-01``'s one pipeline (digits=3, max_entries=4, the same ladder) it found 7.29 s
#: in 76.6 CPU s against 7.09 s in 46.8 s by the FLOP-scaled estimate (optimum 6.87 s)
RANK_BY_CURVE = False

#: whether a compressed period summary keeps per entry a cover of its points
#: (:mod:`.cover`: farthest first from the least estimate's) rather than the points of
#: the least estimates, and spreads its byte budget over the entries by the same rule
SELECT_BY_COVER = True

#: whether, in a run under a finite bound (not a frontier run), that selection is targeted
#: instead (:mod:`.reach`: the points that reach the most others within the bound less
#: their proven floors), the cover otherwise
SELECT_BY_REACH = True

#: trials of DC 2..K, which want some good plan rather than a proof: bolder steps
#: (measured on medium/: fewer failed trials, and the bound is only used for pruning)
_BOUND_TRIALS = (0.2, 0.5, 1.0, 3.0)

#: the period DP's trials: ``LB * _PERIOD_STEP ** n`` for ``n < _PERIOD_TRIALS`` below the
#: known bound, then that bound (:meth:`DCAgent._period_backward`)
_PERIOD_STEP = 1.25
_PERIOD_TRIALS = 40

#: points of a summary entry from which its bound (and the prefix-curve cut) are tested on
#: their columns (:meth:`DCAgent._columns`; fewer: per point, the same test)
_CUT_COLUMNS_FROM = 16

#: points of a classic summary entry within the bound from which its frontier is taken on
#: their columns (:func:`.summary.frontier_columns`; fewer: as tuples,
#: :func:`.summary.frontier`, which keeps the same ones and is faster on few)
_COLUMNS_FROM = 64

#: layers x usage states from which DC 2..K run :class:`WideDP` (measured: medium/ has
#: at most 6,642 and runs 1.3-5x faster with :class:`LocalDP`; large/ has 27,450 and
#: more and runs 2.5-9x faster with :class:`WideDP`)
_WIDE_SIZE = 10_000


#: a DC's own tables of its last runs (:func:`own_tables`), most recent last
_TABLES: OrderedDict = OrderedDict()
#: how many :data:`_TABLES` keeps (each a few MB on ``v3/medium``)
TABLES_KEPT = 32
_TABLES_LOCK = threading.Lock()


#: per DC (what its walks read of its tables and link: :func:`.curve.walk_key`), its
#: prefix-curve walks by cap and incoming table (:class:`.curve.CurvePass`): runs of one
#: ladder share them, and range runs of the DC at every ``M_p`` whose tables agree
_WALKS: OrderedDict = OrderedDict()

#: the DCs' :class:`.floors.Floors` (:meth:`DCAgent._floors`), the :data:`TABLES_KEPT` last
#: asked in this process, by :func:`floors_key` and cap class (``None``: the uncapped
#: tables', which serve every cap: :data:`FLOORS_PER_CAP`), then upstream bound
_FLOORS: OrderedDict = OrderedDict()

#: whether a capped run's floors (:meth:`DCAgent._floors`) are built on its capped tables
#: (one knapsack per cap class); ``False`` (session 48): on the DC's uncapped tables, one
#: knapsack per DC, valid under every cap and a little lower where a cap cuts options.
#: Measured, CPU s least of 2, per cap class / uncapped: ``v3-large-03`` 14.95 / 12.06,
#: ``-02`` 7.71 / 6.43, ``v3-medium-02`` 1.20 / 1.03, ``-03`` 1.14 / 1.00, fresh
#: ``v3-medium-01``-like seed 52 0.69 / 0.60, ``-04-gpipe``-like 44 1.32 / 1.17; the same
#: range runs, labels within 1 %
FLOORS_PER_CAP = False


def _located(srcs: list, rows):
    """Per row of ``rows`` (ascending, numbered over the sources ``(points, latency,
    entry)`` of ``srcs`` one after another; an array, a list or a range): ``(point,
    latency, entry, index in its source)``."""
    ends = list(accumulate(len(pts) for pts, _lat, _e in srcs))
    k = lo = 0
    for i in (rows.tolist() if isinstance(rows, np.ndarray) else rows):
        while i >= ends[k]:
            lo = ends[k]
            k += 1
        pts, lat, e = srcs[k]
        yield pts[i - lo], lat, e, i - lo


def forget() -> None:
    """Drop what the DCs keep in this process between runs (:data:`_TABLES`,
    :data:`_FLOORS`, :data:`_OPTIONS`, :data:`_WALKS`, :data:`_SYNC_VALUES`, and the
    digests of :func:`.curve.walk_key`): a solve
    after it starts cold, as a benchmark times it."""
    with _TABLES_LOCK:
        for kept in (_TABLES, _FLOORS, _OPTIONS, _WALKS, _SYNC_VALUES):
            kept.clear()
    with curve_mod._DIGESTS_LOCK:
        curve_mod._DIGESTS.clear()


class _NoPlans:
    """A floor run's search (:meth:`DCAgent._period_backward`): none made, no plan."""

    points: dict = {}


class DCKey:
    """A dict key standing for a DC's one-DC instance with some of its training's fields
    changed (:func:`dc_key`): equal exactly when the instances so changed are equal, its
    hash taken without the model. The model (the public layers) is the same object in
    every run of a solve, so comparing it costs an identity test, while hashing it hashes
    every layer's fields at every look-up (``v3-medium-02``'s tiny period run: 800 hashes
    of dataclasses per DC); nor is an instance built (and checked) for a key."""

    __slots__ = ("_hash", "parts")

    def __init__(self, local: Instance, training: tuple):
        rest = (local.name, training, local.datacenters, local.links)
        self.parts = (local.model, *rest)
        self._hash = hash(rest)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return type(other) is DCKey and self.parts == other.parts


#: the fields of :class:`~chainpipe.instance.Training` an instance's equality compares
_TRAINING_FIELDS = tuple(f.name for f in fields(Training) if f.compare)


def dc_key(local: Instance, **changes) -> DCKey:
    """The key of ``local`` (a DC's one-DC instance) with the training fields ``changes``
    in place of its own (:class:`DCKey`)."""
    t = local.training
    return DCKey(local, tuple(changes[n] if n in changes else getattr(t, n)
                              for n in _TRAINING_FIELDS))


def floors_key(local: Instance) -> DCKey:
    """What a DC's :class:`.floors.Floors` depend on: its one-DC instance, with the
    microbatch count left out under 1F1B (:func:`dc_key`). The floors are ``dp``'s knapsack
    at the least stash, ``in_flight(1)``: 1 under 1F1B whatever ``M_p``, and an option fits
    one microbatch at every ``M_p`` or at none (its in-flight limit is its memory's, capped
    at ``M_p >= 1``); the compute times, widths, counts and a ``sync_cap``'s cut do not read
    ``M_p``, and nothing of them reads the objective (a range run's classic and period
    runs ask the same). So the range runs of one DC at every ``M_p`` share one
    (``v3-medium-03``: 89 built per solve before, 32 after). Under GPipe a stage stashes
    ``M_p``: one per count."""
    gpipe = local.training.schedule == "gpipe"
    return dc_key(local, objective="period",
                  microbatches=local.training.microbatches if gpipe else 1)


#: per DC (its one-DC instance at one microbatch), ``(M, options)``: every group's options
#: (:meth:`CostTables.options`' cache) at the largest ``M_p`` built so far
_OPTIONS: OrderedDict = OrderedDict()


def _count_free(local: Instance) -> Instance:
    """A DC's one-DC instance at one microbatch under ``period``: the key of what its
    options determine whatever ``M_p`` (:func:`_options_at`, :func:`_sync_values`)."""
    return replace(local, training=replace(local.training, microbatches=1, objective="period"))


def _options_at(local: Instance, tables: CostTables) -> dict:
    """Every group's options of ``tables`` (the DC's own, at ``M_p = tables.M``), as
    :meth:`CostTables.options` caches them: from those kept at a count ``M >= M_p``, the
    in-flight limits capped at ``M_p``, else built (and kept, in place of those of a
    smaller count). An in-flight limit is the largest ``n <= M`` that fits memory
    (:func:`chainpipe.cost.max_in_flight`, exact against the memory rule), so at ``M_p``
    it is the limit at ``M`` capped at ``M_p``; compute and synchronisation times do not
    read the count. (``v3-medium-03``: 85 option sets built per solve before.)"""
    key = _count_free(local)
    with _TABLES_LOCK:
        kept = _OPTIONS.get(key)
        if kept is not None:
            _OPTIONS.move_to_end(key)
    if kept is not None and kept[0] >= tables.M:
        return {k: replace(o, max_in_flight=np.minimum(o.max_in_flight, tables.M))
                for k, o in kept[1].items()}
    for g in range(tables.G):
        tables.options(g)
    got = tables.__dict__["_options"]
    with _TABLES_LOCK:
        _OPTIONS[key] = (tables.M, dict(got))
        while len(_OPTIONS) > TABLES_KEPT:
            _OPTIONS.popitem(last=False)
    return got


def own_tables(local: Instance, sync_cap: float | None) -> CostTables:
    """The tables of a DC's own one-DC instance ``local`` (under ``sync_cap``:
    :func:`_cap_sync`), the same object for the same instance and cap class
    (:func:`cap_class`: every cap of a class keeps the same options) while it is among
    the :data:`TABLES_KEPT` last asked in this process. The owner's range runs ask the same
    DC again and again with the same ``M_p`` and ``theta`` (every range it belongs to), and
    the tables keep what the DPs derive from them (options, candidate stages) between
    runs. Only this DC's own data is in them (each entry is keyed by its own record).

    Parameters
    ----------
    local : Instance
        The DC's one-DC instance (public model and training, its own record).
    sync_cap : float or None
        The run's ``sync_cap`` (``None``: every option).

    Returns
    -------
    CostTables
    """
    base, cap = None, sync_cap
    if sync_cap is not None:  # every cap of one class keeps the same options: one tables
        base = own_tables(local, None)
        cap = math.inf if base.single_device else cap_class(base, float(sync_cap))
    key = (dc_key(local), cap)
    with _TABLES_LOCK:  # an agent server runs its sessions in threads
        got = _TABLES.get(key)
        if got is not None:
            _TABLES.move_to_end(key)
            return got
    got = CostTables(local)
    if base is not None and not got.single_device:  # one device per stage: R is 0
        # the options of every cap are the uncapped tables' (cost.py's arrays, built once
        # per instance), and so are the period DP's candidate runs, cut at the cap
        # (:meth:`.period.PeriodDP._group_runs`)
        got.__dict__["_options"] = base.__dict__.setdefault("_options", {})
        got.__dict__["_cdynp_base"] = (base, cap)
        # (a bound from the devices' rates and counts alone: no option is read)
        got.__dict__["lower_bound"] = base.lower_bound
        _cap_sync(got, cap)
    elif not got.single_device:
        got.__dict__["_options"] = _options_at(local, got)
    with _TABLES_LOCK:
        _TABLES[key] = got
        while len(_TABLES) > TABLES_KEPT:
            _TABLES.popitem(last=False)
    return got


def cap_class(base: CostTables, cap: float) -> float:
    """The least ``R`` of an option of ``base`` (a DC's uncapped tables) at or above
    ``cap`` (``inf`` if none): every cap in ``(the largest R below cap, cap_class]`` keeps
    the same options (:func:`_cap_sync` keeps those with ``R < cap``), so the floors
    (:meth:`DCAgent._floors`) of one serve them all (the owner's search asks a DC under
    caps that mostly cut the same options: ``v3-large-03`` built 103 knapsacks for its 153
    one-DC range runs)."""
    values = base.__dict__.get("_cdynp_sync_values")
    if values is None:
        values = base.__dict__["_cdynp_sync_values"] = _sync_values(base)
    at = int(np.searchsorted(values, cap, side="left"))  # NaN sorts last: never >= cap
    return float(values[at]) if at < len(values) and values[at] >= cap else math.inf


#: per DC (its one-DC instance at one microbatch, :func:`_options_at`'s key), the sorted
#: distinct ``R`` of its options (:func:`cap_class`), the :data:`TABLES_KEPT` last asked
_SYNC_VALUES: OrderedDict = OrderedDict()


def _sync_values(base: CostTables) -> np.ndarray:
    """The sorted distinct ``R`` of every option of ``base`` (a DC's uncapped tables),
    kept per DC across ``M_p``: ``R`` does not read the microbatch count (the options at
    every ``M_p`` differ only in their in-flight limits, :func:`_options_at`), and the
    owner asks a DC at many counts (``v3-large-03``: 193 sets of 8 DCs' values built,
    0.6 CPU s, before they were kept across counts)."""
    local = base.instance
    key = _count_free(local)
    with _TABLES_LOCK:
        got = _SYNC_VALUES.get(key)
        if got is not None:
            _SYNC_VALUES.move_to_end(key)
            return got
    got = np.unique(np.concatenate(
        [np.ravel(base.options(g).sync_time) for g in range(base.G)] or [np.zeros(0)]))
    with _TABLES_LOCK:
        _SYNC_VALUES[key] = got
        while len(_SYNC_VALUES) > TABLES_KEPT:
            _SYNC_VALUES.popitem(last=False)
    return got


def _cap_sync(tables: CostTables, cap: float) -> None:
    """Make ``tables`` offer only the stage options with ``R < cap``, with ``R = 0``.

    An option at or above the cap gets the in-flight limit ``-1`` (it fits nowhere, as an
    option whose parameters do not fit); the others keep their compute time and memory
    and count no synchronisation, so the label DP minimises ``T_p`` alone. The instance
    attribute shadows :meth:`CostTables.options` for this agent's tables only.
    """
    plain = tables.options
    capped: dict[int, object] = {}

    def options(g: int):
        got = capped.get(g)
        if got is None:
            opts = plain(g)
            over = opts.sync_time >= cap
            got = capped[g] = replace(opts, max_in_flight=np.where(over, -1, opts.max_in_flight),
                                      sync_time=np.zeros_like(opts.sync_time))
        return got

    tables.options = options


def _number_option(name: str, value, default):
    """A number option's value as a float (``default`` when ``None``), checked by
    :func:`.protocol.option_problem`: a ``ValueError`` naming it when out of its range."""
    if value is None:
        return default
    problem = protocol.option_problem(name, value)
    if problem:
        raise ValueError(f"{name}: {problem}, got {value!r}")
    return float(value)


class DCAgent:
    """One DC's part of the protocol: :meth:`backward`, then :meth:`decide` (DC 1) or
    :meth:`forward`; :meth:`report` is what it tells the job's owner.

    Parameters
    ----------
    public : PublicInstance
        What every DC knows.
    index : int
        This DC's place in the chain.
    datacenter : Datacenter
        This DC's private data.
    epsilon, quantum, max_entries, digits, upper_bound, prefix_bound
        The solver's options (see :mod:`chainpipe.solvers.cdynp`); ``prefix_bound=False``:
        this DC sends ``null`` in its ``prefix`` message (:meth:`prefix`).
    sync_cap : float, optional
        A range search of several pipelines (:mod:`.pipelines`): only stage options with
        ``R < sync_cap`` are used, and ``R`` counts 0 in every label and point, so that
        the run finds the least ``T_p`` among plans whose every ``R_s`` is below it
        (``docs/privacy.md``, "Several pipelines"). ``None``: every option, ``R`` counted.
    lower_bound : float, optional
        A proven lower bound on the optimum (public: the classic optimum of the same
        chain, under ``period``); the period run's trials start there
        (:meth:`_period_backward`), since none below it can find a plan.
    frontier : int, optional
        A frontier run (``period`` only, exact): ``m_hi >= M``. The labels keep ``M``'s
        positions, stashes and loops, every dominance test weighs the period ``m_hi - 1``
        times, and a label is cut only when its cost lies above the bound at both ``M``
        (``upper_bound``) and ``m_hi`` (``frontier_bound``); DC 1 then reports the lower
        envelope of its complete plans' lines ``T(m) = fill + (m - 1) period`` over ``[M,
        m_hi]`` (:func:`.period.frontier_lines`, ``docs/privacy.md``, "T_p as a function
        of M_p"). 0: an ordinary run.
    frontier_bound : float, optional
        The bound at ``m_hi`` of a frontier run (default: ``upper_bound``).
    curve_low : float, optional
        A public floor under the optimum (the classic optimum): with it, an exact period
        run of one pipeline under 1F1B within a finite ``upper_bound`` makes the
        prefix-curve pass (:mod:`.curve`) in its prefix pass, on the caps of
        :func:`.curve.cap_grid` from it to the bound, and filters its labels by the
        paired floor; the last DC reports the pass's floor (``curve_floor_s``).
    curve_top : float, optional
        The grid's top (public; default ``upper_bound``): the owner's ladder keeps one grid
        for runs under several bounds, whose floor reads every plan up to it.
    floors_only : int, optional
        1: a *floor run* of a range (``period``, 1F1B, exact, two DCs or more): the prefix
        pass (with its curve when ``curve_low`` is given) and no search; the range's last
        DC reports the floor under its period (``period_floor_s``) and, per cap of the
        grid, the least fill of the whole model on the range (``curve_fills``,
        :meth:`_fills_report`): the owner's floors under the range's ``T_p`` at every
        ``M_p`` (``docs/privacy.md``, "Floor runs"). 0: an ordinary run.
    sum_limit : float, optional
        A range run of one DC (``sync_cap`` given) asked, as ``dp`` asks its ranges
        (:meth:`.dp_ranges.RangeTimes.within`), only of plans with ``T_p + max R`` below
        it (public: the owner's incumbent less the span's cross-DC term): the DC's own
        search (:mod:`.alone`) keeps no other, so "none" means none of them, and the plan
        it finds is the least ``T_p`` among them. The owner gives it to no other run
        (:meth:`.pipelines.RangeRuns.limited`); a label DP, which counts ``R`` as 0 under
        ``sync_cap``, does not read it and answers for every plan (a stronger answer).
        ``None``: no limit.
    curve_steps : int, optional
        A floor run's caps per doubling of the grid (default :data:`.curve.CAP_STEPS`):
        its first pass finds where the model starts to fit on a coarse grid, its second
        walks the caps near there on the fine one (:meth:`.pipelines.RangeRuns.floors`).
    deadline : Deadline, optional
        Checked in the DP's loops; :class:`~chainpipe.deadline.TimeUp` names this DC.
    """

    def __init__(self, public: PublicInstance, index: int, datacenter: Datacenter, *,
                 epsilon: float = 0.0, quantum: float = 0.0, max_entries: int = 0,
                 digits: int = 0, upper_bound: float | None = None, prefix_bound: bool = True,
                 beam: int = 0, grid: int = 0, sync_cap: float | None = None,
                 lower_bound: float | None = None, frontier: int = 0,
                 frontier_bound: float | None = None, curve_low: float | None = None,
                 curve_top: float | None = None, floors_only: int = 0,
                 curve_steps: int = 0, sum_limit: float | None = None,
                 deadline: Deadline | None = None):
        if public.datacenter_names[index] != datacenter.name:
            raise ValueError(f"agent {index} holds {datacenter.name!r}, the chain has "
                             f"{public.datacenter_names[index]!r} there")
        self.public = public
        self.k = index
        self.dc = datacenter
        self.name = datacenter.name
        self.epsilon = float(epsilon)
        self.quantum = float(quantum)
        self.digits = int(digits or 0)
        self.initial_bound = math.inf if upper_bound is None else float(upper_bound)
        self.max_entries = int(max_entries or 0)
        self.share_prefix = bool(prefix_bound)
        #: ``(stage FLOP/s, FLOP/s)`` bounds of DC 1..k's devices, this DC's own included
        #: (:meth:`prefix`); ``None``: unknown (an upstream DC kept its own to itself)
        self.prefix_capacity: tuple[float, float] | None = None
        self._upstream_flops: float | None = None  # FLOP/s bound of DC 1..k-1 alone
        self.beam = int(beam or 0)
        #: the probe's stage boundaries: ``grid`` equal parts of the layers (public)
        L = public.num_layers
        problem = protocol.option_problem("grid", grid or 0, L)
        if problem:  # never more parts than layers: the work stays O(L)
            raise ValueError(f"grid: {problem}, got {grid!r}")
        self.grid = ({round(i * L / grid) for i in range(int(grid) + 1)} if grid else None)
        self.deadline = deadline if deadline is not None else Deadline(None)
        self.local = public.local(datacenter)
        self.sync_cap = _number_option("sync_cap", sync_cap, None)
        self.sum_limit = _number_option("sum_limit", sum_limit, math.inf)
        self.tables = own_tables(self.local, self.sync_cap)  # this DC's groups only: private
        self.floor = _number_option("lower_bound", lower_bound, 0.0)
        self.L = public.num_layers
        self.M = public.microbatches
        self.R = public.position_cap
        #: the ``period`` objective (:mod:`.period`): points carry the period terms and
        #: the window majorant; compression as under ``classic`` (:meth:`_period_compress`),
        #: no probe (no beam or grid)
        self.period = public.period
        if self.period and (beam or grid):
            raise ValueError("under the period objective no probe runs (no beam or grid)")
        self.frontier = self._frontier_option(frontier, frontier_bound)
        self.floors_only = self._floors_only_option(floors_only)
        #: the run's public caps of the prefix-curve pass (empty: no pass) and this DC's part
        self.curve_grid = self._curve_option(curve_low, curve_top, curve_steps)
        self.curve = None
        self.bytes = self.tables.boundary_bytes
        self.stats: dict = {}
        caps = np.minimum(self.tables.count, self.L)
        self._size = self.L * float(np.prod(caps + 1))  # layers x usage states: DP width
        #: under data or tensor parallelism the vectorised engine does not apply
        self._wide_ok = self.tables.single_device
        # memo of the backward pass
        self._out_origin: list[list[tuple]] = []
        self._out_b: list[int] = []  # the boundary of each entry sent
        self._incoming: list[tuple] = []  # (b, bw, points) of each entry received
        self.stages: list[dict] = []  # own stages in the plan's shape (forward pass)
        self.boundaries: dict[str, int | None] = {}
        self.continues_with: dict | None = None  # the incoming point the plan goes on with
        #: what own stages and the boundaries between them cost (plan.evaluate_part): the
        #: owner, who runs the plan, combines them into T when it holds no private data
        self.costs: dict = {"stages": [], "boundaries": [], "violations": []}

    def _frontier_option(self, frontier, frontier_bound) -> tuple[int, float] | None:
        """``(m_hi, bound at m_hi)`` of a frontier run, ``None`` for an ordinary one.

        Raises
        ------
        ValueError
            Out of range, under ``classic``, compressed or with a probe."""
        problem = protocol.option_problem("frontier", frontier or 0)
        if problem:
            raise ValueError(f"frontier: {problem}, got {frontier!r}")
        if not frontier:
            return None
        if not self.period or frontier < self.M:
            raise ValueError("frontier: a frontier run is a period run with m_hi >= M")
        if self.epsilon or self.quantum or self.digits or self.max_entries or self.beam:
            raise ValueError("frontier: a frontier run is exact")
        hi = self.initial_bound
        if frontier_bound is not None:
            problem = protocol.option_problem("frontier_bound", frontier_bound)
            if problem:
                raise ValueError(f"frontier_bound: {problem}, got {frontier_bound!r}")
            hi = float(frontier_bound)
        return int(frontier), hi

    def _floors_only_option(self, floors_only) -> bool:
        """Whether this is a floor run (option ``floors_only``).

        Raises
        ------
        ValueError
            Out of range, or a floor run that is not a period run under 1F1B of two DCs or
            more, exact, with no frontier."""
        problem = protocol.option_problem("floors_only", floors_only or 0)
        if problem:
            raise ValueError(f"floors_only: {problem}, got {floors_only!r}")
        if not floors_only:
            return False
        if (not self.period or self.tables.schedule != "1f1b" or self.frontier is not None
                or self._compressed() or self.beam or self.public.num_datacenters < 2):
            raise ValueError("floors_only: a floor run is an exact period run under 1F1B "
                             "of two DCs or more")
        return True

    def _curve_option(self, curve_low, curve_top, curve_steps=0) -> np.ndarray:
        """The public caps of the prefix-curve pass (:func:`.curve.cap_grid`), empty when the
        run makes none: no ``curve_low``, not a period run under 1F1B within a finite bound
        (a frontier run or a range of one DC answered by ``dp``'s search make none; a range
        run's walks use the options its ``sync_cap`` leaves, as its labels do). A compressed
        run's grid is coarse (:data:`.curve.COMPRESSED_CAP_STEPS`, at most
        :data:`.curve.COMPRESSED_CAPS_MOST` caps) and its table is sent one bucket wide.

        A floor run's grid has ``curve_steps`` caps per doubling (given).

        Raises
        ------
        ValueError
            ``curve_low``, ``curve_top`` or ``curve_steps`` out of range, or
            ``curve_steps`` in a run that is not a floor run."""
        for name, value in (("curve_low", curve_low), ("curve_top", curve_top),
                            ("curve_steps", curve_steps or 0)):
            problem = value is not None and protocol.option_problem(name, value)
            if problem:
                raise ValueError(f"{name}: {problem}, got {value!r}")
        if curve_steps and not self.floors_only:
            raise ValueError("curve_steps: only a floor run takes it")
        if curve_low is None:
            return np.empty(0)
        compressed = self._compressed()
        if (not self.period or self.frontier is not None
                or self.tables.schedule != "1f1b"
                or alone.usable(self.public, self.sync_cap, self.frontier, compressed)):
            return np.empty(0)
        top = self.initial_bound if curve_top is None else float(curve_top)
        # compressed: the coarse grid (a table that fits the messages' size target)
        if compressed:
            return curve_mod.cap_grid(float(curve_low), top, self.M,
                                      curve_mod.COMPRESSED_CAP_STEPS,
                                      curve_mod.COMPRESSED_CAPS_MOST, keep_low=True)
        return curve_mod.cap_grid(float(curve_low), top, self.M,
                                  int(curve_steps) or curve_mod.CAP_STEPS)

    def _compressed(self) -> bool:
        """Whether the run's summaries are compressed (and its prefix-curve table coarse)."""
        return bool(self.epsilon or self.quantum or self.digits or self.max_entries)

    # ------------------------------------------------------------------ helpers
    def _link_to_prev(self):
        return self.public.links[self.k - 1] if self.k > 0 else None

    def _T(self, bottleneck, total, sync=0.0):
        """``T`` of a complete plan (or its bound) from a label's costs."""
        return cost.iteration_time(total, bottleneck, self.M, sync)

    # ------------------------------------------------------------------ prefix pass
    def own_capacity(self) -> tuple[float, float]:
        """Upper bounds on what this DC's devices compute: ``(stage, total)`` FLOP/s.

        ``stage``: the most one stage can run, ``rate * d * t`` of the widest pair of the
        fastest group (a stage's ``C`` is at least its FLOP over that, tensor-parallel
        all-reduces only add); ``total``: every device's rate summed, at most ``L`` stages'
        worth of each group (a plan has no more stages than layers).
        """
        groups = self._groups()
        stage = max((r * w for r, _n, w in groups), default=0.0)
        total = sum(r * min(n, self.L * w) for r, n, w in groups)
        return float(stage), float(total)

    def _groups(self) -> list[tuple[float, int, int]]:
        """Per own group: its rate, its device count and its widest pair's ``d t`` (0 when
        no pair fits it)."""
        tab = self.tables
        return [(float(tab.rate[g]), int(tab.count[g]),
                 max((d * t for d, t in tab.pairs(g)), default=0)) for g in range(tab.G)]

    def prefix(self, incoming: dict | None) -> dict | None:
        """Take DC k-1's ``prefix`` message (``None`` at DC 1); return the one this DC
        sends DC k+1 (``None`` at DC K).

        A message bounds the whole model run on DC 1..k-1 alone: its stages' ``C`` sum to
        at least ``total_s``, and its slowest takes at least ``bottleneck_s``. Read back
        as capacities, ``F / total_s`` FLOP/s at most per stage and ``F / bottleneck_s``
        in all (``F``: the model's FLOP, public), they are added to this DC's own
        (:meth:`own_capacity`: the larger per stage, the sum in all) into
        :attr:`prefix_capacity`, which bounds every plan's prefix ending before one of
        this DC's stages (:meth:`_upstream_prefix`), and sent on as the same two bounds
        for DC 1..k, rounded down to the public grid (:data:`.protocol.PREFIX_STEPS`). A
        DC asked not to share (option ``prefix_bound=false``) sends ``null``, and so does
        every DC after one that did: then nobody downstream bounds a prefix.
        """
        stage, total = self.own_capacity()
        F = float(self.tables.flop_prefix[-1])
        if self.k == 0:
            up = (0.0, 0.0)
        elif incoming is None or incoming["bound"] is None:
            up = None
        else:
            b = incoming["bound"]
            up = tuple(F / v if v > 0 else math.inf for v in (b["total_s"], b["bottleneck_s"]))
        self.prefix_capacity = None if up is None else (max(up[0], stage), up[1] + total)
        self._upstream_flops = None if up is None else up[1]
        self._curve_pass(incoming)
        if self.k == self.public.num_datacenters - 1:
            return None
        bound = None
        if self.share_prefix and self.prefix_capacity is not None:
            steps = protocol.PREFIX_STEPS
            P, A = self.prefix_capacity
            bound = {"total_s": round_down(F / P, steps) if P > 0 else 0.0,
                     "bottleneck_s": round_down(F / A, steps) if A > 0 else 0.0}
        table = None
        if self.curve is not None and self.share_prefix:
            sent = self.curve.sent()
            if self._compressed():  # one bucket: the least over the excess buckets
                sent = sent.min(axis=2, keepdims=True)
            table = curve_mod.encode_rows(sent)
        return protocol.prefix(self.name, self.public.datacenter_names[self.k + 1], bound,
                               table)

    def _curve_pass(self, incoming: dict | None) -> None:
        """This DC's part of the prefix-curve pass (:class:`.curve.CurvePass`), when the run
        makes one and the DC before it sent its table (else none here nor downstream).

        Raises
        ------
        ProtocolError
            The table received does not hold one row set per cap of the run's grid."""
        self.curve = None
        if not len(self.curve_grid):
            return
        if self.k == 0:
            table = None
        else:
            rows = incoming.get("curve") if incoming is not None else None
            if rows is None:
                return
            nb = 1 if not curve_mod.windows_capped(self.tables) else curve_mod.BUCKETS
            want = 1 if self._compressed() else nb  # compressed: one bucket is sent
            # (every row's length at once: set and map loop in C, 14 caps of 80 rows here)
            if len(rows) != len(self.curve_grid) or not set(
                    map(len, chain.from_iterable(rows))) <= {want}:
                raise protocol.ProtocolError(
                    f"curve: must hold {len(self.curve_grid)} caps of {want}-bucket rows",
                    incoming["from"])
            # one bucket read as every bucket's: a floor under each (the least of them)
            table = np.repeat(curve_mod.decode_rows(rows, self.L, want), nb // want, axis=2)
        key = curve_mod.walk_key(self.tables, self._link_to_prev())
        with _TABLES_LOCK:
            walks = _WALKS.setdefault(key, {})
            _WALKS.move_to_end(key)
            while len(_WALKS) > TABLES_KEPT:
                _WALKS.popitem(last=False)
        t0 = time.process_time()
        self.curve = curve_mod.CurvePass(self.tables, self.curve_grid, self._link_to_prev(),
                                         table, walks)
        self._curve_s = time.process_time() - t0

    # ------------------------------------------------------------------ backward pass
    def backward(self, incoming: dict | None) -> dict | None:
        """Process DC k+1's summary; return the summary for DC k-1 (``None`` for DC 1,
        which keeps its decision for :meth:`decide`)."""
        t0 = time.perf_counter()
        entries = incoming["entries"] if incoming is not None else []
        self._incoming = [(e["b"], e["bw"], e["points"]) for e in entries]
        if self.period:
            out = self._period_backward(t0)
            self._report_floor()
            return out
        ub = self.initial_bound  # an upper bound on the optimum: complete plans already known
        for b, _bw, pts in self._incoming:
            if b == 0:
                ub = min(ub, min(self._T(bn, sm, s) for _r, bn, sm, s in pts))
        try:
            ub, dp = self._search(self._base_labels(), ub)
        except TimeUp:
            raise TimeUp(f"time limit reached in {self.name}") from None
        self._dp = dp
        out = None if self.k == 0 else self._summary(dp.points, ub)
        self.stats["backward_s"] = time.perf_counter() - t0
        self._report_floor()
        return out

    def _report_floor(self) -> None:
        """In a range run (``sync_cap``), the range's last DC reports the owner a floor
        under the period of every plan on the range (``period_floor_s``, rounded down to
        the prefix pass's public grid): the least bottleneck under which its own devices
        and the prefix pass's bound on the FLOP/s of the DCs before it hold the whole
        model (:class:`.floors.Floors` at the model's end, nothing used; a range of one DC,
        answered by ``dp``'s search, :mod:`.alone`: that search's own floor, every option
        counted whatever the cap, as ``dp``'s ranges take it). The owner's
        floors proven at ``M_p = m0`` then rise by it per microbatch more, as ``dp``'s do
        (``docs/privacy.md``, "A floor under a range's period"). Nothing when the prefix
        pass left the upstream FLOP/s unknown, this DC shares no prefix bound
        (``prefix_bound=false``), or the knapsack is too large."""
        if (self.sync_cap is None or self.k != self.public.num_datacenters - 1
                or not self.share_prefix):
            return
        if isinstance(self._dp, alone.AloneDP):  # dp's own floor, every option counted
            got = self._dp.period_floor
        else:
            floors = self._floors()
            if floors is None and self.floors_only and self.prefix_capacity is not None:
                # (the knapsack too large) a floor run's grid starts at a floor: the whole
                # model over every device's FLOP/s, upstream and own (no C is below it)
                flop, rate = float(self.tables.flop_prefix[-1]), self.prefix_capacity[1]
                got = flop / rate if rate > 0 else 0.0
            elif floors is None:
                return
            else:
                got = float(floors.period((0,) * self.tables.G)[self.L])
        if math.isfinite(got) and got > 0:
            self.stats["period_floor_s"] = round_down(got, protocol.PREFIX_STEPS)

    def _base_labels(self) -> dict[int, list]:
        """Base labels (``u = 0``): the downstream suffixes joined through the inter-DC
        boundary. Its traversal ``2 (latency + U)`` over the path to the suffix's first
        stage is paid in two parts: the latencies were added to ``total`` by the DCs that
        passed the point on (:meth:`_summary`), the occupancy ``U`` is added here."""
        base: dict[int, list] = {self.L: [(0.0, 0.0, 0, 0.0, (END, 0, 0))]}
        for i, (b, bw, pts) in enumerate(self._incoming):
            if b == 0:
                continue
            u = cost.occupancy(self.bytes[b], bw)
            q = cost.traversal(0.0, u)
            base.setdefault(b, []).extend(
                (max(bn, u), sm + q, r, s, (IN, i, j)) for j, (r, bn, sm, s) in enumerate(pts))
        return base

    def _search(self, base: dict, ub: float) -> tuple[float, LocalDP | WideDP]:
        """The DP run whose labels this DC keeps, and the upper bound it proves.

        Trial bounds ``LB (1 + d)`` from a lower bound ``LB`` on plans that start here,
        as in ``dp``: a run with bound ``U`` keeps every partial plan that could be part
        of a plan with ``T <= U``, so if it finds a complete plan within ``U`` the run is
        exact (and the optimum is at most that plan's ``T``); if not, the next trial is
        larger, ending with ``ub`` itself (a known plan's ``T``, or infinity). A run whose
        bound cut nothing was exhaustive and ends the trials too.

        DC 1 decides, so it may prune with an optimistic prefix cost (its prefix runs on
        its own devices) and keeps dp's fine trial steps. The other DCs build a summary,
        which must keep suffix plans that the DCs upstream could complete: they prune with
        the prefix cost the prefix pass bounds (:meth:`_upstream_prefix`), and take bolder
        steps. Every DC's label DP also bounds a prefix by the devices a label leaves
        free (:meth:`_spread`). A failed trial of a wide DP is costly, so a wide DC
        instead runs a greedy probe (one label per state) and takes the best complete
        plan it finds as the bound of one exact run.
        """
        self.stats = {"labels": 0, "trials": []}
        spread = self._spread()
        if self.beam or self.grid:  # a probe: one run, few labels per state
            dp = self._run(LocalDP, base, ub, self._prefix_bound() if self.k == 0
                           else self._upstream_prefix(), beam=self.beam, grid=self.grid,
                           spread=spread)
            return min(ub, self._best(dp)), dp
        if self.k > 0 and self._wide_ok and self._size >= _WIDE_SIZE:
            # wide: a greedy probe (one label per state) for a plan, then one exact run
            upstream = self._upstream_prefix()
            probe = self._run(WideDP, base, ub, upstream, greedy=True, spread=spread)
            ub = min(ub, self._best(probe))
            dp = self._run(WideDP, base, ub, upstream, spread=spread)
            return min(ub, self._best(dp)), dp
        prefix = self._prefix_bound()
        lb = self._lower_bound(base, prefix)
        if self.k > 0 and min(lb, self._upstream_floor(base)) > ub * (1 + 1e-12):
            # no plan holding an own label lies within ub (none starting here: lb; none
            # with a prefix upstream: _upstream_floor), so every trial would end with no
            # own point and ub unchanged: that outcome, without the runs
            self.stats["skipped"] = True
            dp = LocalDP(self.tables, position_cap=self.R, deadline=self.deadline)
            dp.bound_cut = True
            return ub, dp
        schedule = TRIALS if self.k == 0 else _BOUND_TRIALS
        trials = sorted({lb * (1 + d) for d in schedule
                         if math.isfinite(d) and lb * (1 + d) < ub}) + [ub]
        run_prefix = prefix if self.k == 0 else self._upstream_prefix()
        for trial in trials:
            dp = self._run(LocalDP, base, trial, run_prefix, spread=spread)
            best = self._best(dp)
            if best <= trial * (1 + 1e-12) or trial >= ub or not dp.bound_cut:
                return min(ub, best), dp
        raise AssertionError("the last trial is ub itself")

    def _run(self, engine, base: dict, ub: float, prefix, **options):
        dp = engine(self.tables, position_cap=self.R, deadline=self.deadline)
        dp.run(base, ub, prefix, **options)
        self.stats["labels"] += dp.stats["labels"]
        self.stats["trials"].append({"upper_bound": float(ub) if ub < math.inf else None,
                                     "labels": dp.stats["labels"],
                                     "engine": "wide" if engine is WideDP else "local",
                                     **({"greedy": True} if options.get("greedy") else {}),
                                     **({"beam": options["beam"]} if options.get("beam") else {})})
        return dp

    def _best(self, dp) -> float:
        """The least ``T`` of the complete plans a run found (``inf``: none)."""
        return min((self._T(bn, sm, s) for _r, bn, sm, s, _i in dp.points.get(0, ())),
                   default=math.inf)

    def _lower_bound(self, base: dict, prefix) -> float:
        """A lower bound on ``T`` of every complete plan whose first stage is in this DC:
        own devices alone (:attr:`CostTables.lower_bound`), or a prefix ``[0, b)`` on
        own devices before a downstream suffix plan joined at ``b``."""
        pre_sum, pre_max = prefix
        lb = self.tables.lower_bound
        for b, labels in base.items():
            if b < self.L:
                for bn, sm, _r, s, _ref in labels:
                    lb = min(lb, self._T(max(bn, pre_max[b]), sm + pre_sum[b], s))
        return lb

    def _upstream_floor(self, base: dict) -> float:
        """For DC 2..K: a lower bound on ``T`` of every complete plan that holds one of
        this DC's own labels and runs a stage upstream (``0``: DC 1..k's capacity unknown).
        With :meth:`_lower_bound` under :meth:`_prefix_bound` (the plans that start here)
        it bounds every plan an own label can be part of (:meth:`_search` skips the runs
        when both lie above the bound).

        Every own label descends from one base label at some ``b`` (a downstream suffix
        joined at ``b < L``, its inter-DC boundary folded in, or the end label at ``L``),
        so such a plan runs ``[0, a)`` on DC 1..k-1 and ``[a, b)`` here, ``0 < a < b``,
        before that base label's ``(bottleneck, total, sync)``. By the prefix pass's
        bounds (:attr:`prefix_capacity`: ``P`` FLOP/s per stage, ``A`` in all, DC 1..k, as
        in :meth:`_upstream_prefix`) the stages of ``[0, b)`` have ``C`` summing to at least
        ``FLOP[0, b) / P``, and the slowest is at least ``layer / P`` and ``FLOP[0, b) /
        min(A, b P)``. The boundary at ``a`` enters this DC from upstream: over a path at
        most as wide as the chain link into it and no shorter, so its ``U`` and ``Q`` are
        at least that link's for the least ``bytes[a]``, ``0 < a < b``; other boundaries
        only add. ``T`` grows with each term, so the least over the base labels bounds
        every such plan. Not :meth:`_lower_bound` under :meth:`_upstream_prefix`: that adds
        a boundary at ``b`` the base label already paid and leaves out the plans that end
        here with a prefix upstream, faster than own devices alone
        (``tests/test_cdynp_skip.py``)."""
        if self.prefix_capacity is None:
            return 0.0
        P, A = self.prefix_capacity
        if not P > 0 or not A > 0:
            return 0.0
        link = self._link_to_prev()
        # least occupancy of a boundary 0 < a < b on the link in, per b
        u_in = cost.occupancy(self.bytes, link.bandwidth_bytes_per_s)
        least = np.concatenate(([math.inf, math.inf], np.minimum.accumulate(u_in[1:-1])))
        flop = self.tables.flop_prefix
        layer_max = self.tables.layer_flop_max
        shave = 1.0 - 1e-12  # rounding never lifts the bound above a true cost
        lb = math.inf
        for b, labels in base.items():
            if b < 2 or not labels:  # no 0 < a < b
                continue
            u = float(least[b])
            q = float(cost.traversal(link.latency_s, u))
            pre_sum = (float(flop[b]) / P + q) * shave
            pre_max = max(u, float(layer_max[b]) / P, float(flop[b]) / min(A, b * P)) * shave
            for bn, sm, _r, s, _ref in labels:
                lb = min(lb, self._T(max(bn, pre_max), sm + pre_sum, s))
        return lb

    def _kept(self, key: tuple, make):
        """``make()``, kept on this DC's tables under ``key`` (the run's parts it reads
        besides the tables): the range runs of a ladder ask it again and again. What it
        returns is only read."""
        got = self.tables.__dict__.get(key)
        if got is None:
            got = self.tables.__dict__[key] = make()
        return got

    def _prefix_bound(self) -> tuple[list, list]:
        """:meth:`_make_prefix_bound`, kept on the tables (:meth:`_kept`)."""
        return self._kept(("_cdynp_prefix_bound",), self._make_prefix_bound)

    def _make_prefix_bound(self) -> tuple[list, list]:
        """An optimistic cost of the prefix ``[0, a)`` of a plan that starts in this DC
        (it runs on own devices only), as ``(sum, bottleneck)`` lists over ``a``: the sum
        is at least its FLOP on the widest stage (``w`` devices) of the fastest own rate;
        the bottleneck at least the largest layer's time so, and at least the FLOP spread
        over the ``min(a w, D)`` fastest own devices in proportion to their rates (a stage
        on ``n`` devices of rate ``r`` holds at most ``n r C`` FLOP; tensor-parallel
        all-reduces only add)."""
        tab = self.tables
        rmax, w = float(tab.rate.max()), tab.widest
        flop = tab.flop_prefix
        layer_max = tab.layer_flop_max
        # the n = a w fastest own devices (at most L w per group), O(G) per n
        top = fastest_rate(tab.rate, np.minimum(tab.count, self.L * w),
                           np.arange(self.L + 1) * float(w))
        spread = flop / top.clip(min=rmax)
        return (cost.compute_time(flop, rmax, w).tolist(),
                np.maximum(cost.compute_time(layer_max, rmax, w), spread).tolist())

    def _spread(self) -> tuple | None:
        """What :class:`.local.LocalDP` needs to bound a prefix by the devices a label
        leaves free: the prefix FLOP, the FLOP/s bound of DC 1..k-1 (0 at DC 1) and this
        DC's ``(rate, count, most)`` per group; ``None`` when DC 1..k-1's is unknown."""
        if self.k == 0:
            up = 0.0
        elif self._upstream_flops is None:
            return None
        else:
            up = self._upstream_flops
        caps = [(r, n, self.L * w) for r, n, w in self._groups()]
        return self.tables.flop_prefix.tolist(), up, caps

    def _upstream_prefix(self) -> tuple[list, list]:
        """:meth:`_make_upstream_prefix`, kept on the tables per link in and
        :attr:`prefix_capacity` (:meth:`_kept`)."""
        link = self._link_to_prev()
        return self._kept(("_cdynp_upstream_prefix", link.bandwidth_bytes_per_s,
                           link.latency_s, self.prefix_capacity), self._make_upstream_prefix)

    def _make_upstream_prefix(self) -> tuple[list, list]:
        """For DC 2..K: an optimistic cost of what precedes a label whose first stage
        starts here at ``a > 0``, as ``(sum, bottleneck)`` lists.

        The boundary at ``a`` is paid either on this DC's own link (another own stage
        before it) or across the chain link into this DC at least (a path's bandwidth is
        at most that link's, its latency at least that link's), so the cheaper of the
        two. The prefix's stages run on DC 1..k: with their capacity bounds
        (:meth:`prefix`; ``P`` per stage, ``A`` in all) its stages' ``C`` sum to at
        least ``FLOP[0, a) / P``, the largest layer makes one at least ``layer / P``, and
        at most ``a`` stages hold ``FLOP[0, a)`` between them on devices computing at
        most ``min(A, a P)`` FLOP/s together, so one ``C`` is at least ``FLOP[0, a) /
        min(A, a P)``. Without the bounds, nothing for the compute."""
        link = self._link_to_prev()
        u_in = cost.occupancy(self.bytes, link.bandwidth_bytes_per_s)
        u = np.minimum(u_in, self.tables.boundary_occupancy[:, 0, 0])
        q = np.minimum(cost.traversal(link.latency_s, u_in),
                       self.tables.boundary_traversal[:, 0, 0])
        if self.prefix_capacity is not None:
            P, A = self.prefix_capacity
            flop = self.tables.flop_prefix
            layer_max = self.tables.layer_flop_max
            shave = 1.0 - 1e-12  # rounding never lifts the bound above a true cost
            # P = 0: no prefix runs (inf); 0 / 0 (no FLOP): no bound (fmax skips the nan)
            with np.errstate(divide="ignore", invalid="ignore"):
                most = np.minimum(A, np.arange(self.L + 1) * P)
                q = q + np.nan_to_num(flop / P, nan=0.0, posinf=math.inf) * shave
                u = np.fmax(u, np.fmax(layer_max / P, flop / most) * shave)
        u[0] = q[0] = 0.0  # a = 0: the plan starts here, no boundary before it
        return q.tolist(), u.tolist()

    def _summary(self, own_pts: dict, ub: float) -> dict:
        """Merge own and passed-through points per (b, bw), prune, compress.

        An entry's points stay where they came from (:meth:`_summary_sources`) through
        the bound and the frontier (:meth:`_summary_front`, on columns from enough
        points); only the points these keep become tuples ``(r, bn, sm, sync, origin)``
        (:meth:`_summary_points`), the same values as when every point was one."""
        M = self.M
        prev = self._link_to_prev()
        # the latency part of the traversal of boundary b (see _base_labels), this hop's
        hop = cost.traversal(prev.latency_s, 0.0)
        groups = self._summary_sources(own_pts, hop)  # (b, bw) -> [(points, lat, e)]
        entries, origins, ests = [], [], []
        by_b: dict[int, list] = {}
        for key in groups:
            by_b.setdefault(key[0], []).append(key[1])
        flop = self.tables.flop_prefix  # public: the model's
        for b in sorted(by_b):
            # higher path bandwidth first: a point of a class with a larger bandwidth
            # dominates an equal-or-worse point of a class with a smaller one
            kept: list[tuple] = []
            for bw in sorted(by_b[b], key=lambda v: -math.inf if v is None else -v):
                pts = self._summary_front(groups[(b, bw)], b, bw, ub, kept)
                pts = [pts[i] for i in shifted_keep(pts, M)]
                if self.epsilon > 0:
                    pts = [pts[i] for i in epsilon_keep(pts, self.epsilon)]
                if self.max_entries:
                    u = cost.occupancy(self.bytes[b], bw) if bw is not None else 0.0
                    rest = float(flop[-1] - flop[b])
                    scale = float(flop[-1]) / rest if rest > 0 else 1.0
                    pts = [pts[i] for i in cap_keep(pts, M, self.max_entries, scale, u)]
                if not pts:
                    continue
                pts.sort(key=lambda p: p[:4])
                kept.extend(pts)
                entries.append({"b": int(b), "bw": bw,
                                "points": [[r, bn, sm, s] for r, bn, sm, s, _ in pts]})
                origins.append([p[4] for p in pts])
                if self.max_entries:  # the size target (no guarantee either)
                    u = cost.occupancy(self.bytes[b], bw) if bw is not None else 0.0
                    rest = float(flop[-1] - flop[b])
                    ests.append(cap_estimates(pts, M, float(flop[-1]) / rest if rest > 0
                                              else 1.0, u))
        if self.max_entries:
            entries, origins = self._fit(entries, origins, ests)
        self._out_origin = origins
        self._out_b = [e["b"] for e in entries]
        return protocol.summary(self.name, self.public.datacenter_names[self.k - 1], entries)

    def _summary_front(self, srcs: list, b: int, bw, ub: float, kept: list) -> list[tuple]:
        """The points of entry ``(b, bw)`` (:meth:`_summary_sources`) within ``ub``, rounded
        up (``quantum``, ``digits``) and on the frontier (against the ``kept`` points of
        wider paths too). From :data:`_CUT_COLUMNS_FROM` points on the bound, and from
        :data:`_COLUMNS_FROM` points within it the frontier, are taken on columns
        (:meth:`_columns`; the same floats, the same points), else per point as tuples."""
        n = sum(len(pts) for pts, _lat, _e in srcs)
        rounded = self.quantum > 0 or self.digits > 0
        limit = ub * (1 + 1e-12)
        # the bound applies to the true values (rounding up comes after it): any
        # completion pays at least this boundary, over a path no wider
        u = cost.occupancy(self.bytes[b], bw) if bw is not None else 0.0
        q = cost.traversal(0.0, u)
        if n < _CUT_COLUMNS_FROM:
            pts = self._summary_points(srcs, range(n))
            if ub < math.inf:
                pts = [p for p in pts if self._T(max(p[1], u), p[2] + q, p[3]) <= limit]
        else:
            R, BN, SM, S = self._columns(srcs, 4, 2)
            live = np.arange(n)
            if ub < math.inf:
                live = np.flatnonzero(self._within(SM + q, np.maximum(BN, u), S, self.M,
                                                   limit))
            if not rounded and len(live) >= _COLUMNS_FROM:
                live = live[frontier_columns(R[live], BN[live], SM[live], S[live], kept)]
                return self._summary_points(srcs, live)
            pts = self._summary_points(srcs, live)
        if rounded:
            pts = [(r, *(round_digits(round_up(v, self.quantum), self.digits)
                         for v in (bn, sm, s)), o) for r, bn, sm, s, o in pts]
        return [pts[i] for i in frontier(pts, kept)]

    def _summary_sources(self, own_pts: dict, hop) -> dict:
        """Per summary entry ``(b, bw)``, where its points come from, in the order they are
        listed: ``(points, latency, e)``, own points (``e = None``, ``(r, bn, sm, s, i)``)
        first, then those of incoming entry ``e`` (``[r, bn, sm, s]``); ``latency``: the
        hop's, added to each total (0 for complete plans). Under ``period`` the points
        are ``(r, x1, x2, sm, s, hull[, i])``."""
        prev = self._link_to_prev()
        groups: dict[tuple, list] = {}
        for a, pts in own_pts.items():
            key = (a, prev.bandwidth_bytes_per_s if a > 0 else None)
            groups.setdefault(key, []).append((pts, hop if a > 0 else 0.0, None))
        for e, (b, bw, pts) in enumerate(self._incoming):
            key = (b, min(bw, prev.bandwidth_bytes_per_s)) if b > 0 else (0, None)
            groups.setdefault(key, []).append((pts, hop if b > 0 else 0.0, e))
        return groups

    @staticmethod
    def _summary_points(srcs: list, rows) -> list[tuple]:
        """The points ``rows`` (ascending, numbered over ``srcs`` one after another, as
        :meth:`_columns` lists them; an array or a range) as ``(r, bn, sm + latency, s,
        origin)``."""
        return [(p[0], p[1], p[2] + lat, p[3], ("own", p[4]) if e is None else ("in", e, j))
                for p, lat, e, j in _located(srcs, rows)]

    @staticmethod
    def _columns(srcs: list, width: int, total: int) -> list[np.ndarray]:
        """The first ``width`` fields of the points of ``srcs`` (:meth:`_summary_sources`)
        as float columns, the sources one after another; column ``total`` with each
        source's latency added (the same sums as per point)."""
        cols: list[list] = [[] for _ in range(width)]
        for pts, lat, _e in srcs:
            if not pts:
                continue
            got = list(zip(*pts))
            for c in range(width):
                v = np.array(got[c], dtype=float)
                cols[c].append(v + lat if c == total else v)
        return [np.concatenate(c) if c else np.zeros(0) for c in cols]

    @staticmethod
    def _within(fill: np.ndarray, period: np.ndarray, sync: np.ndarray, M: int,
                limit: float) -> np.ndarray:
        """Per point, whether ``T = fill + (M - 1) period + sync`` is at most ``limit``:
        :func:`chainpipe.cost.iteration_time` term by term, in its order (no ``0 * inf``
        at ``M = 1``), so each ``T`` is the float :meth:`_T` gives."""
        with np.errstate(over="ignore", invalid="ignore"):
            steady = (M - 1) * period if M != 1 else 0.0
            return fill + steady + sync <= limit

    # ------------------------------------------------------------------ period objective
    def _period_T(self, point) -> float:
        """``T`` of a complete plan from a period point ``[r, x1, x2, total, sync, hull]``."""
        return period_time(self.M, point[1], point[2], point[3], point[4])

    def _period_backward(self, t0: float) -> dict | None:
        """The backward step under ``period`` (:mod:`.period`): base labels from the
        incoming points, one exact run of :class:`.period.PeriodDP` under the best
        complete plan known, and the summary for DC k-1. A range run of one DC is
        answered by ``dp``'s own search instead (:meth:`_alone_backward`)."""
        compressed = bool(self.epsilon or self.quantum or self.digits or self.max_entries)
        if alone.usable(self.public, self.sync_cap, self.frontier, compressed):
            return self._alone_backward(t0)
        ub = self.initial_bound
        for b, _bw, pts in self._incoming:
            if b == 0 and self.frontier is None:  # a plan's T at M bounds nothing at m_hi
                ub = min([ub] + [self._period_T(p) for p in pts])
        self.stats = {"labels": 0, "trials": []}
        if self.curve is not None:
            self.stats["curve_s"] = self._curve_s
            floor = round_down(self.curve.floor(), 4 * protocol.CURVE_STEPS)
            if self.k == self.public.num_datacenters - 1 and floor > 0:
                self.stats["curve_floor_s"] = floor  # the owner's ladder starts there
        if self.floors_only:  # no search: the pass's floors are the run's answer
            self._dp = _NoPlans()
            last = self.k == self.public.num_datacenters - 1
            if last and self.curve is not None and self.share_prefix:  # (as _report_floor)
                self.stats["curve_fills"] = self._fills_report()
            self.stats["backward_s"] = time.perf_counter() - t0
            return None if self.k == 0 else self._period_summary({}, 0.0)
        base = self._period_base()
        # trial bounds LB (1 + d) as in _search: a run under U keeps every partial plan of a
        # plan with T <= U, so the first that finds a complete plan starting here within U
        # is exact (and so is a run the bound cut nothing of); LB: a plan inside this DC
        # (the classic bound, below its period) or a suffix joined from downstream (at
        # least that suffix's own T)
        lb = float(self.tables.lower_bound)
        for labels in base.values():
            for x1, x2, sm, s, _p, _h, _ref in labels:
                if sm > 0:
                    lb = min(lb, period_time(self.M, x1, x2, sm, s))
        lb = max(lb, self.floor)  # no plan at all lies below the public lower bound
        # a dense geometric ladder (a run's labels grow steeply with how far its bound
        # lies above what it can reach, and runs below it are cheap: v3-medium-01's DC 3
        # kept 36,087 labels under a bound of 37 s after trials to 2.8 s, the optimum 11 s)
        # (none at the public lower bound itself, when no own bound lies above it: no plan
        # lies at or below it, so that trial would find nothing, whatever it cost;
        # v3-medium-02 least of 3 cold solves 4.33 -> 3.76 CPU s)
        trials = sorted({lb * _PERIOD_STEP ** n for n in range(_PERIOD_TRIALS)
                         if self.floor * (1 + 1e-9) < lb * _PERIOD_STEP ** n < ub}) + [ub]
        if self.frontier is not None:  # a plan found at M ends nothing at m_hi: one run
            trials = [ub]
        prefix = self._prefix_bound() if self.k == 0 else self._upstream_prefix()
        floors = self._floors()
        for trial in trials:
            dp = PeriodDP(self.tables, position_cap=self.R, deadline=self.deadline,
                          frontier=self.frontier, floors=floors, curve=self.curve)
            try:
                dp.run(base, trial, prefix)
            except TimeUp:
                raise TimeUp(f"time limit reached in {self.name}") from None
            self.stats["labels"] += dp.stats["labels"]
            self.stats["trials"].append({"upper_bound": float(trial) if trial < math.inf
                                         else None, "labels": dp.stats["labels"],
                                         "engine": "period"})
            best = min((self._period_T(p) for p in dp.points.get(0, ())), default=math.inf)
            if best <= trial * (1 + 1e-12) or trial >= ub or not dp.bound_cut:
                break
        self._dp = dp
        cut = min(ub, best) if self.frontier is None else ub
        out = None if self.k == 0 else self._period_summary(dp.points, cut)
        self.stats["backward_s"] = time.perf_counter() - t0
        return out

    def _fills_report(self) -> list:
        """A floor run's report: per cap of the grid, the least fill of the whole model on
        the range under it (:attr:`.curve.CurvePass.table` at ``a = L``, least over the
        excess buckets), rounded down to the public grid of the curve's tables as they are
        sent (:func:`.curve.withhold`), ``None`` where it does not fit."""
        whole = curve_mod.withhold(self.curve.table)[:, -1].min(axis=1)
        return [float(v) if math.isfinite(v) else None for v in whole]

    def _alone_backward(self, t0: float) -> None:
        """A range run of one DC (:mod:`.alone`): the plan of least ``T_p`` under the run's
        ``sync_cap`` within its ``upper_bound`` (among those with ``T_p + max R`` below its
        ``sum_limit``), by ``dp``'s range search on this DC's own tables (every option:
        the search takes the cap itself); no summary."""
        dp = alone.AloneDP(self.local, self.tables.options, self.deadline)
        try:
            dp.run(self.initial_bound, self.sync_cap, self.sum_limit)
        except TimeUp:
            raise TimeUp(f"time limit reached in {self.name}") from None
        self.stats = {"labels": 0, "trials": [], "engine": "dp",
                      "searches": dp.stats["searches"]}
        self._dp = dp
        self.stats["backward_s"] = time.perf_counter() - t0

    def _floors(self):
        """The floors under a prefix's period from own free devices and the upstream
        FLOP/s (:class:`.floors.Floors`), or ``None``: the knapsack too large, or DC
        ``1..k-1``'s FLOP/s unknown (an upstream DC kept its prefix bound to itself).

        Built on the DC's uncapped tables whatever the run's ``sync_cap`` (every option
        counted: a floor under every plan, so under any cap, as :class:`.alone.AloneDP`'s
        ``period_floor``): one knapsack per DC serves every cap. A knapsack per cap class
        is a little higher where the cap cuts options a floor counts, but the owner asks a
        DC under many caps (:data:`FLOORS_PER_CAP`)."""
        from .floors import Floors

        up = 0.0 if self.k == 0 else self._upstream_flops
        if up is None or not Floors.affordable(self.tables):
            return None
        # kept per DC and upstream bound, across M_p under 1F1B (:func:`floors_key`;
        # built in milliseconds: no deadline check, which a later run's would not be)
        # (the knapsack shared by every upstream bound)
        base = self.tables.__dict__.get("_cdynp_base")  # (uncapped tables, cap) if capped
        tables = self.tables
        if base is None:  # uncapped, or one device per stage (no cap cuts an option)
            key = (floors_key(self.local), None)
        elif FLOORS_PER_CAP:
            key = (floors_key(self.local), cap_class(base[0], base[1]))
        else:
            key, tables = (floors_key(self.local), None), base[0]
        with _TABLES_LOCK:
            kept = _FLOORS.get(key)
            if kept is not None:
                _FLOORS.move_to_end(key)
                if up in kept:
                    return kept[up]
        capacity = None if not kept else next(iter(kept.values())).capacity
        got = Floors(tables, up, capacity=capacity)
        with _TABLES_LOCK:
            _FLOORS.setdefault(key, {})[up] = got
            while len(_FLOORS) > TABLES_KEPT:
                _FLOORS.popitem(last=False)
        return got

    def _period_base(self) -> dict[int, list]:
        """Base labels under ``period``: each incoming point joined through its inter-DC
        boundary, whose traversal ``Q = 2 (latency + U)`` enters the total and every window
        of the majorant (the latencies added by the DCs that passed the point on, the
        occupancy part here) and whose occupancy ``U`` lifts the period terms (both
        phases under GPipe)."""
        base: dict[int, list] = {self.L: [PeriodDP.end_label()]}
        gpipe = self.tables.schedule == "gpipe"
        # rounded windows may leave a dent: loops are read off the majorant, at or above
        # them (period.concave_majorant); an exact run's majorants are taken as they are
        rounded = self.quantum > 0 or self.digits > 0
        for i, (b, bw, pts) in enumerate(self._incoming):
            if b == 0:
                continue
            u = float(cost.occupancy(self.bytes[b], bw))
            q = float(cost.traversal(0.0, u))
            base.setdefault(b, []).extend(
                (max(x1, u), max(x2, u) if gpipe else x2, sm + q, s, r,
                 tuple(h + q for h in (concave_majorant(hull) if rounded else hull)),
                 (IN, i, j))
                for j, (r, x1, x2, sm, s, hull) in enumerate(pts))
        return base

    def _period_summary(self, own_pts: dict, ub: float) -> dict:
        """The summary under ``period``: own and passed-through points per ``(b, bw)``,
        the hop's latency part of the traversal added to the total and to every window,
        cut at ``ub`` (with the least occupancy and traversal of boundary ``b``) and
        filtered by :func:`.period.dominates` (a point of a wider path dominates one of a
        narrower path as well). An entry's points stay columns through the cuts
        (:meth:`_period_cut`); only those left become tuples (:meth:`_period_points`)."""
        prev = self._link_to_prev()
        hop = float(cost.traversal(prev.latency_s, 0.0))
        gpipe = self.tables.schedule == "gpipe"
        groups = self._summary_sources(own_pts, hop)  # (b, bw) -> [(points, lat, e)]
        by_b: dict[int, list] = {}
        for key in groups:
            by_b.setdefault(key[0], []).append(key[1])
        same_p = not gpipe
        entries, origins, ests = [], [], []
        for b in sorted(by_b):
            kept: list[tuple] = []
            for bw in sorted(by_b[b], key=lambda v: -math.inf if v is None else -v):
                srcs = groups[(b, bw)]
                pts = self._period_points(srcs, self._period_cut(srcs, b, bw, ub))
                pts = self._period_compress(pts, same_p, kept, b, bw)
                if not pts:
                    continue
                pts.sort(key=lambda p: (p[4], p[0], p[1], p[2], p[3], p[5]))
                kept.extend(pts)
                entries.append({"b": int(b), "bw": bw,
                                "points": [[r, x1, x2, sm, s, list(hull)]
                                           for x1, x2, sm, s, r, hull, _o in pts]})
                origins.append([p[6] for p in pts])
                if self.max_entries:  # the size target (no guarantee either)
                    ests.append(self._period_estimates(pts, same_p, b, bw))
        if self.max_entries:
            entries, origins = self._fit(entries, origins, ests)
        self._out_origin = origins
        self._out_b = [e["b"] for e in entries]
        return protocol.summary(self.name, self.public.datacenter_names[self.k - 1], entries)

    def _period_cut(self, srcs: list, b: int, bw, ub: float):
        """The rows (ascending, over ``srcs`` as :meth:`_columns` lists them) of entry
        ``(b, bw)``'s period points within ``ub`` (:meth:`_beyond`; from
        :data:`_CUT_COLUMNS_FROM` points on in numpy, on columns) and then left by the
        prefix-curve cut (:meth:`_curve_cut`): any completion pays at least this
        boundary."""
        n = sum(len(pts) for pts, _lat, _e in srcs)
        if not ub < math.inf:
            return range(n)
        u = float(cost.occupancy(self.bytes[b], bw)) if bw is not None else 0.0
        q = float(cost.traversal(0.0, u))
        gpipe = self.tables.schedule == "gpipe"
        if n < _CUT_COLUMNS_FROM:  # per point
            pts = [(p[0], p[1], p[2], p[3], i) for i, p in enumerate(
                self._period_points(srcs, range(n), hull=False))]
            pts = [p for p in pts if not self._beyond(
                max(p[0], u), max(p[1], u) if gpipe else p[1], p[2] + q, p[3],
                ub * (1 + 1e-12))]
            return [p[4] for p in self._curve_cut(pts, b, u, q, ub)]
        _R, X1, X2, SM, S = self._columns(srcs, 5, 3)
        x1 = np.maximum(X1, u)
        x2 = np.maximum(X2, u) if gpipe else X2
        ok = self._within(SM + q, x1 + x2, S, self.M, ub * (1 + 1e-12))
        if self.frontier is not None:  # a frontier run: above the bound at m_hi too
            m_hi, hi = self.frontier
            ok |= self._within(SM + q, x1 + x2, S, m_hi, hi * (1 + 1e-12))
        rows = np.flatnonzero(ok)
        light = list(zip(X1[rows].tolist(), X2[rows].tolist(), SM[rows].tolist(),
                         S[rows].tolist(), rows.tolist()))
        return [p[4] for p in self._curve_cut(light, b, u, q, ub)]

    @staticmethod
    def _period_points(srcs: list, rows, hull: bool = True) -> list[tuple]:
        """The period points ``rows`` (ascending, numbered over ``srcs`` one after another;
        a list or a range) as ``(x1, x2, sm + latency, s, r, hull + latency, origin)``
        (without ``hull``: the first four only)."""
        if not hull:
            return [(p[1], p[2], p[3] + lat, p[4]) for p, lat, _e, _j in _located(srcs, rows)]
        return [(p[1], p[2], p[3] + lat, p[4], p[0], tuple(h + lat for h in p[5]),
                 ("own", p[6]) if e is None else ("in", e, j))
                for p, lat, e, j in _located(srcs, rows)]

    def _curve_cut(self, pts: list, b: int, u: float, q: float, ub: float) -> list:
        """The points of a summary entry at boundary ``b > 0`` (occupancy ``u``, traversal
        ``q`` on its path, the hop's latency already in each total) that the paired floor
        of the table this DC received leaves within ``ub`` (:func:`.curve.paired`): the
        prefix ``[0, b)`` of every completion lies on the DCs before this one, whose least
        fill under each cap that table bounds. The DC before this one would drop the
        same points with its own rows (at least that table, :attr:`.curve.CurvePass.
        CF_base`); dropped here they are neither compressed, sent, nor filed there
        (``stats["curve_cut_points"]``). Nothing else without the pass."""
        if self.curve is None or b == 0 or not pts:
            return pts
        S = np.array([(max(p[0], u), p[1], p[2] + q, p[3]) for p in pts], dtype=float)
        ok = curve_mod.paired(S, self.curve.upstream[:, b], self.curve.grid, self.curve.below,
                              self.M, ub)
        if ok.all():
            return pts
        self.stats["curve_cut_points"] = self.stats.get("curve_cut_points", 0) + int(
            len(pts) - ok.sum())
        return [p for p, keep in zip(pts, ok.tolist()) if keep]

    def _beyond(self, x1: float, x2: float, total: float, sync: float, limit: float) -> bool:
        """Whether a point of these terms (its least completion) lies above the bound: at
        ``M``, and in a frontier run at ``m_hi`` too (:meth:`.period.PeriodDP._over`)."""
        if period_time(self.M, x1, x2, total, sync) <= limit:
            return False
        if self.frontier is None:
            return True
        m_hi, hi = self.frontier
        return period_time(m_hi, x1, x2, total, sync) > hi * (1 + 1e-12)

    def _period_compress(self, pts: list, same_p: bool, kept: list, b: int, bw) -> list:
        """One summary entry's points under ``period``: rounded up (``quantum``,
        ``digits``: every value and every window, each over-estimated by at most the
        factor), filtered by dominance (:func:`.period.dominates`, against the ``kept``
        points of wider paths too), then by epsilon-dominance
        (:func:`.period.epsilon_keep`) and the ``max_entries`` cap
        (:meth:`_period_cap`, no guarantee), as :meth:`_summary` does under
        ``classic``. Under the cap the points are first filtered and capped on their true
        values (to a few times the cap, so that what rounding merges leaves enough), and
        only those are rounded: rounding every point of a large entry was a fifth of a
        compressed solve's time (``v3-medium-02``)."""
        if self.max_entries and len(pts) > 4 * self.max_entries:
            pts = period_pareto(pts, same_p, kept)
            pts = [pts[i] for i in self._period_cap(pts, same_p, b, bw, 4 * self.max_entries)]
        if self.quantum > 0 or self.digits > 0:
            def up(v: float) -> float:
                return round_digits(round_up(v, self.quantum), self.digits)

            pts = [(up(x1), up(x2), up(sm), up(s), r, tuple(up(h) for h in hull), o)
                   for x1, x2, sm, s, r, hull, o in pts]
        pts = period_pareto(pts, same_p, kept)
        if self.epsilon > 0:
            pts = [pts[i] for i in period_epsilon_keep(pts, self.epsilon, same_p)]
        if self.max_entries:
            pts = [pts[i] for i in self._period_cap(pts, same_p, b, bw, self.max_entries)]
        return pts

    def _period_cap(self, pts: list, same_p: bool, b: int, bw, n: int) -> list[int]:
        """The indices of ``n`` points of an entry: under :data:`SELECT_BY_COVER` the first
        ``n`` of :func:`.cover.cover_order` from the point of the least estimated ``T``
        (:meth:`_period_estimates`), a cover of the entry; else those of the least
        estimates."""
        if n <= 0 or len(pts) <= n:
            return list(range(len(pts)))
        est = self._period_estimates(pts, same_p, b, bw)
        if self._targeted():  # from the least estimate's, the points reaching most others
            first = min(range(len(pts)), key=est.__getitem__)
            return sorted(reach_order(pts, self._cap_floors(pts, b, bw), self.initial_bound,
                                      same_p, n, self.M, first)[0])
        if SELECT_BY_COVER:  # a cover of the entry, from the least estimate's point
            first = min(range(len(pts)), key=est.__getitem__)
            return sorted(cover_order(pts, first, same_p, n, self.M)[0])
        return sorted(sorted(range(len(pts)), key=est.__getitem__)[:n])

    def _cap_terms(self, b: int, bw) -> tuple[float, float]:
        """``(scale, occupancy)`` of entry ``(b, bw)`` for the cap's estimate: the model's
        FLOP over the suffix's, and the boundary's occupancy on the path (0 at ``b = 0``)."""
        flop = self.tables.flop_prefix  # public: the model's
        u = float(cost.occupancy(self.bytes[b], bw)) if bw is not None else 0.0
        rest = float(flop[-1] - flop[b])
        return (float(flop[-1]) / rest if rest > 0 else 1.0), u

    def _targeted(self) -> bool:
        """Whether the cap's selection is targeted (:data:`SELECT_BY_REACH`): a period
        run under a finite bound, not a frontier run."""
        return (SELECT_BY_REACH and SELECT_BY_COVER and self.period and self.frontier is None
                and math.isfinite(self.initial_bound))

    def _cap_floors(self, pts: list, b: int, bw) -> np.ndarray:
        """Per point ``(x1, x2, total, sync, ...)`` of entry ``(b, bw)``, a proven floor on
        the ``T`` of every plan through it: with the prefix-curve pass and ``b > 0`` the
        paired floor (:func:`.curve.paired_floor`, as :meth:`_curve_cut` tests it), else its
        own ``T`` with the boundary's occupancy and traversal."""
        gpipe = self.tables.schedule == "gpipe"
        u = float(cost.occupancy(self.bytes[b], bw)) if bw is not None else 0.0
        q = float(cost.traversal(0.0, u))
        S = np.array([(max(p[0], u), max(p[1], u) if gpipe else p[1], p[2] + q, p[3], 0.0)
                      for p in pts], dtype=float).reshape(-1, 5)
        if self.curve is None or b == 0:
            return S[:, 2] + (self.M - 1) * (S[:, 0] + S[:, 1]) + S[:, 3]
        return curve_mod.paired_floor(S, self.curve.upstream[:, b], self.curve.grid,
                                      self.curve.below, self.M)

    def _period_estimates(self, pts: list, same_p: bool, b: int, bw) -> list[float]:
        """Per point of an entry, the cap's estimate of a whole plan's ``T``
        (:func:`.period.cap_estimates`); in a run with the prefix-curve pass, first the
        paired floor of a plan through it (:func:`.curve.paired_floor`: the prefix
        ``[0, b)`` on the DCs upstream at least the table this DC received), a far better
        guide than the FLOP-scaled total, the estimate breaking ties."""
        est = period_cap_estimates(pts, self.M, *self._cap_terms(b, bw), not same_p)
        if self.curve is None or not RANK_BY_CURVE or b == 0 or not pts:
            return est
        u = float(cost.occupancy(self.bytes[b], bw))
        q = float(cost.traversal(0.0, u))
        S = np.array([(max(p[0], u), p[1], p[2] + q, p[3], 0.0) for p in pts], dtype=float)
        floor = curve_mod.paired_floor(S, self.curve.upstream[:, b], self.curve.grid,
                                       self.curve.below, self.M)
        # the floor first, the estimate breaking ties (no floor: after every one with one)
        return [float(f) + 1e-6 * e if math.isfinite(f) else 1e12 + e
                for f, e in zip(floor, est)]

    def _fit(self, entries: list, origins: list, ests: list) -> tuple[list, list]:
        """A compressed summary cut to the size target (:func:`.summary.fit_budget`), the
        points of each entry ranked by ``ests``; under :data:`SELECT_BY_COVER` first by
        :func:`.cover.fit_cover` (the budget spread over the entries, each keeping a cover
        of its points from the least estimate's; the radii it reaches stay with the DC:
        they tell how far the points not sent lie from those sent)."""
        if self._targeted():  # the bytes to the points reaching the most, over the entries
            same_p = self.tables.schedule != "gpipe"
            orders, keys = [], []
            for e in entries:  # (no first point: it would hold back its entry's next)
                pts = [(x1, x2, sm, s, r, hull) for r, x1, x2, sm, s, hull in e["points"]]
                order, key = reach_order(pts, self._cap_floors(pts, e["b"], e["bw"]),
                                         self.initial_bound, same_p, len(pts), self.M)
                orders.append(order)
                keys.append(key)
            entries, origins, keeps, live = fit_reach(entries, origins, orders, keys)
            ests = [[ests[e][j] for j in kp] for e, kp in zip(live, keeps)]
        elif SELECT_BY_COVER and self.period:
            same_p = self.tables.schedule != "gpipe"
            orders, radii = [], []
            for e, est in zip(entries, ests):
                pts = [(x1, x2, sm, s, r, hull) for r, x1, x2, sm, s, hull in e["points"]]
                first = min(range(len(est)), key=est.__getitem__, default=0)
                order, rad = cover_order(pts, first, same_p, len(pts), self.M)
                orders.append(order)
                radii.append(rad)
            entries, origins, keeps, _radii = fit_cover(entries, origins, orders, radii)
            ests = [[est[j] for j in kp] for est, kp in zip(ests, keeps)]
        ranks = []
        for est in ests:
            rank = [0] * len(est)
            for place, j in enumerate(sorted(range(len(est)), key=est.__getitem__)):
                rank[j] = place
            ranks.append(rank)
        return fit_budget(entries, origins, ranks, [min(e, default=math.inf) for e in ests])

    # ------------------------------------------------------------------ decision (DC 1)
    def decide(self) -> tuple[dict | None, float]:
        """DC 1 picks the best complete plan; returns its own realise-request and T estimate."""
        if self.period:
            return self._period_decide()
        best, choice = math.inf, None
        for _r, bn, sm, s, i in self._dp.points.get(0, ()):
            t = self._T(bn, sm, s)
            if t < best:
                best, choice = t, ("own", i)
        for e, (b, _bw, pts) in enumerate(self._incoming):
            if b == 0:
                for j, (_r, bn, sm, s) in enumerate(pts):
                    t = self._T(bn, sm, s)
                    if t < best:
                        best, choice = t, ("in", e, j)
        self.estimate = best
        return choice, best

    def _period_decide(self) -> tuple[dict | None, float]:
        best, choice = math.inf, None
        for r, x1, x2, sm, s, hull, i in self._dp.points.get(0, ()):
            t = self._period_T((r, x1, x2, sm, s, hull))
            if t < best:
                best, choice = t, ("own", i)
        for e, (b, _bw, pts) in enumerate(self._incoming):
            if b == 0:
                for j, p in enumerate(pts):
                    t = self._period_T(p)
                    if t < best:
                        best, choice = t, ("in", e, j)
        self.estimate = best
        if self.frontier is not None:
            self.stats["frontier"] = self._frontier_report()
        return choice, best

    def _frontier_report(self) -> dict:
        """DC 1's report of a frontier run: the lines of its complete plans that are least
        at some ``M_p`` of ``[M, m_hi]``, among all and among the settled ones
        (:func:`.period.frontier_lines`)."""
        gpipe = self.tables.schedule == "gpipe"
        complete = [(r, x1, x2, sm, s) for r, x1, x2, sm, s, _h, _i in
                    self._dp.points.get(0, ())]
        complete += [tuple(p[:5]) for b, _bw, pts in self._incoming if b == 0 for p in pts]
        lines = [(sm + s, x1 + x2, not gpipe and r < self.M - 1)
                 for r, x1, x2, sm, s in complete]
        return {"first": self.M, "last": self.frontier[0],
                "lines": frontier_lines(lines, self.M, self.frontier[0])}

    # ------------------------------------------------------------------ forward pass
    def realise_origin(self, origin) -> dict | None:
        """Rebuild own stages for ``origin``; return the request for DC k+1."""
        self.costs = {"stages": [], "boundaries": [], "violations": []}
        if origin is None:
            self.stages = []
            return None
        if origin[0] == "in":
            _, e, p = origin
            self.stages = []
            b = self._incoming[e][0]
            self.boundaries = {"passes": int(b)}
            return self._continue_with(e, p)
        i = origin[1]
        stages = []
        while True:
            start, g, c, (kind, j, p) = self._dp.label(i)
            end = self._dp.label(j)[0] if kind == OWN else (self.L if kind == END else
                                                       self._incoming[j][0])
            opts = self.tables.options(g)
            stages.append((start, end, g, int(opts.d[c]), int(opts.t[c])))
            if kind != OWN:
                break
            i = j
        devices = pack_devices(self.dc, [st[2:] for st in stages])
        own = [Stage(start, end, devs, d, t)
               for (start, end, _g, d, t), devs in zip(stages, devices)]
        self.stages = [st.to_dict() for st in own]
        first, last = stages[0][0], stages[-1][1]
        self.boundaries = {"from_upstream": first if first > 0 else None,
                           "to_downstream": last if last < self.L else None}
        request = None if kind == END else self._continue_with(j, p)
        downstream = 0 if kind == END else self.continues_with["point"][0]
        costs, bounds, broken = evaluate_part(self.local, own, downstream)
        # (their fields are numbers, strings and tuples of strings: a shallow copy, which
        # asdict's deep one equals)
        self.costs = {"stages": [dict(vars(c)) for c in costs],
                      "boundaries": [dict(vars(b)) for b in bounds], "violations": broken}
        return request

    def _continue_with(self, e: int, p: int) -> dict:
        """The request for DC k+1: point ``p`` of its entry ``e``, remembered as received."""
        b, bw, pts = self._incoming[e]
        self.continues_with = {"b": int(b), "bw": bw, "point": list(pts[p])}
        return {"entry": e, "point": p, "b": int(b)}

    def forward(self, request: dict) -> dict | None:
        """Handle an ``assemble`` request from DC k-1 (a point of the summary we sent).

        Raises
        ------
        ProtocolError
            The request names a point this DC never sent (``sender``: DC k-1).
        """
        rz = request["realise"]
        if rz is None:
            return self.realise_origin(None)
        e, p = rz["entry"], rz["point"]
        if e >= len(self._out_origin) or p >= len(self._out_origin[e]) or rz["b"] != self._out_b[e]:
            raise protocol.ProtocolError(f"asks {self.name!r} to realise a point it never sent",
                                         request["from"])
        return self.realise_origin(self._out_origin[e][p])

    def report(self) -> dict:
        """What this DC tells the job's owner: its own stages in the plan's shape (the
        owner runs them), the boundaries it learned, the incoming point its part of the
        plan goes on with, and its work."""
        return {"datacenter": self.name, "stages": [dict(s) for s in self.stages],
                "learned_boundaries": self.boundaries, "continues_with": self.continues_with,
                "costs": self.costs, **self.stats}
