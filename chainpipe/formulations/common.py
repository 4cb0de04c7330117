"""Backend-free pieces shared by the ILP formulations and the CP-SAT model.

Everything here is plain numpy on top of :class:`chainpipe.tables.CostTables`;
no solver is imported. The public API (stable, used by ``ilp_assign``,
``ilp_path`` and the CP-SAT model):

- :func:`max_stages` -- an upper bound on the number of stages of any feasible plan;
- :class:`Positions` / :func:`position_classes` -- the stage positions (counted from
  the end) a model must distinguish, with the last class *saturating* when every
  position at or beyond it has the same in-flight count;
- :class:`CandidateOptions` / :func:`candidate_options` -- every (group, ``(d, t)``
  option, layers, position class) stage that can appear in a feasible plan, memory
  pre-filtered per device;
- :func:`time_scale` -- a positive time unit that puts objectives at a chosen magnitude;
- :data:`BOUND_RTOL` / :func:`safe_bound` -- how a solver's floating-point dual bound is
  turned into a bound that is valid for the true problem.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import cost
from ..tables import CostTables, dominance_tops

#: relative slack subtracted from a MIP/LP solver's dual bound before it is reported.
#: The models' objective equals ``T / time_scale`` exactly (up to floating point), so
#: the solver's bound is valid up to its own tolerances (about 1e-9 relative on an
#: objective near 1e3, see :func:`time_scale`); 1e-7 covers them with margin and stays well inside the
#: project's optimality tolerance (``chainpipe.numeric.OPTIMALITY_RTOL = 1e-6``).
BOUND_RTOL = 1e-7


#: objective magnitude the ILPs scale time to (see :func:`time_scale`)
OBJECTIVE_MAGNITUDE = 1e3


def safe_bound(scaled_bound: float | None, scale: float) -> float | None:
    """``scaled_bound * scale`` lowered by :data:`BOUND_RTOL` (``None`` stays ``None``)."""
    if scaled_bound is None or not np.isfinite(scaled_bound):
        return None
    value = float(scaled_bound) * scale
    return value - BOUND_RTOL * abs(value)


def time_scale(tables: CostTables, magnitude: float = 1.0) -> float:
    """A positive time unit (seconds): the cheap lower bound (else 1 s) / ``magnitude``.

    Dividing every time coefficient by it puts objectives near ``magnitude`` (the
    lower bound is at most the optimum), so a solver's absolute tolerances become
    relative ones. The ILPs use ``magnitude = 1e3``: MIP solvers check rows to an
    absolute 1e-6, which is then 1e-9 of the objective.
    """
    lb = float(tables.lower_bound)
    unit = lb if np.isfinite(lb) and lb > 0 else 1.0
    return unit / magnitude


def memory_stage_cap(tables: CostTables) -> int | None:
    """Largest stage count memory allows under 1F1B, or ``None`` if memory caps nothing.

    Under 1F1B the first of ``S`` stages holds ``min(M, S)`` microbatches; if no stage
    on any group can hold ``n_max < M`` of them then ``S <= n_max``. Under gpipe every
    stage holds ``M`` regardless of ``S``, so memory caps nothing.
    """
    if tables.schedule != "1f1b":
        return None
    n_max = _widest_in_flight(tables)
    return max(n_max, 0) if n_max < tables.M else None


def _widest_in_flight(tables: CostTables) -> int:
    """The most microbatches any stage can stash on any group with any allowed ``(d, t)``
    (``-1`` if none); with every stage on one device, ``tables.max_in_flight.max()``."""
    if tables.single_device:
        return int(tables.max_in_flight.max()) if tables.G else -1
    return max((int(opt.max_in_flight.max()) for opt in map(tables.options, range(tables.G))
                if opt.max_in_flight.size), default=-1)


def max_stages(tables: CostTables) -> int:
    """Upper bound on ``S`` for every feasible plan: ``min(L, D, memory cap)``."""
    cap = min(tables.L, int(tables.count.sum()))
    mem = memory_stage_cap(tables)
    return cap if mem is None else min(cap, mem)


class CoefficientOverflow(ValueError):
    """A model coefficient or right-hand side is not a finite number (the instance's figures
    overflow a double once scaled); the route reports it as out of range."""


@dataclass(frozen=True)
class Positions:
    """Stage positions counted from the end (the last stage has position 1).

    Classes ``1..count`` stand for positions ``1..count``; when ``saturating`` the
    last class stands for every position ``>= count`` -- allowed because they all
    stash the same number of microbatches (``M``: 1F1B with ``count = M``, or gpipe
    with ``count = 1``).
    """

    count: int
    saturating: bool
    schedule: str
    microbatches: int

    def in_flight(self, c: int) -> int:
        """Microbatches stashed by a stage of class ``c`` (exact for the whole class)."""
        return cost.in_flight(self.schedule, self.microbatches, c)

    def successors(self, c: int) -> tuple[int, ...]:
        """Classes the next stage may have (the empty tuple only for the last class 1)."""
        out = (c - 1,) if c >= 2 else ()
        if self.saturating and c == self.count:
            out = (c,) + out
        return out

    def may_end(self, c: int) -> bool:
        """A stage of class ``c`` may be the last one (position 1)."""
        return c == 1

    def may_continue(self, c: int) -> bool:
        """A stage of class ``c`` may be followed by another one."""
        return c >= 2 or (self.saturating and c == self.count)


def position_classes(tables: CostTables) -> Positions:
    """The fewest position classes that keep every in-flight count exact.

    gpipe: one saturating class (every stage stashes ``M``). 1F1B: ``min(S_max, M)``
    classes, the last saturating when ``S_max > M`` (positions ``>= M`` all stash ``M``).
    """
    s_max = max(max_stages(tables), 1)
    if tables.schedule == "gpipe":
        return Positions(1, s_max > 1, "gpipe", tables.M)
    count = min(s_max, tables.M)
    return Positions(count, s_max > count, "1f1b", tables.M)


def memory_position_classes(tables: CostTables) -> Positions:
    """:func:`position_classes` with the saturating class as low as memory allows.

    Under 1F1B a stage at position ``p`` fits iff ``min(M, p) <= max_in_flight``. If no
    stage option of any group has ``n <= max_in_flight < n(count)`` then every option fits
    at all positions ``>= n`` or at none of them, so those positions need not be told
    apart: one saturating class ``c* = 1 + max{max_in_flight < n(count)}`` stands for them
    all (exact: the candidate filter at ``c*`` keeps the same options as at any position
    above). Without any such value, ``c* = 1``: one class, as under gpipe.
    """
    pos = position_classes(tables)
    if pos.schedule != "1f1b" or pos.count <= 1:
        return pos
    top = pos.in_flight(pos.count)
    below = -1
    for g in range(tables.G):
        mif = (tables.options(g).max_in_flight if not tables.single_device
               else tables.max_in_flight[g][None])
        small = mif[(mif < top) & (mif >= 0)]
        if small.size:
            below = max(below, int(small.max()))
    count = max(below + 1, 1)
    if count >= pos.count:
        return pos
    return Positions(count, True, "1f1b", tables.M)


@dataclass(frozen=True)
class CandidateOptions:
    """Stage options ``[start, end)`` on group ``group`` with pair ``option`` of
    :meth:`CostTables.options` and position class ``cls``, as arrays (contract version 2).

    Every stage of every feasible plan is one of these; ``total`` counts the unfiltered
    candidates ``sum_g pairs(g) * L (L + 1) / 2 * classes``.
    """

    group: np.ndarray  # int64, index into tables.groups
    option: np.ndarray  # int64, index into tables.options(group)
    start: np.ndarray  # int64, first layer
    end: np.ndarray  # int64, one past the last layer
    cls: np.ndarray  # int64, position class 1..positions.count
    d: np.ndarray  # int64, data-parallel width
    t: np.ndarray  # int64, tensor-parallel degree
    compute_time: np.ndarray  # float64, C (seconds)
    sync_time: np.ndarray  # float64, R (seconds)
    positions: Positions
    total: int

    @property
    def width(self) -> np.ndarray:
        """Devices ``d * t`` of each candidate."""
        return self.d * self.t

    def __len__(self) -> int:
        return int(self.group.shape[0])


def candidate_options(tables: CostTables, positions: Positions | None = None,
                      check=None) -> CandidateOptions:
    """Every stage option that can appear in a feasible plan, filtered with numpy.

    A candidate is dropped when it can never be feasible: memory per device
    (``in_flight(c) > options(g).max_in_flight[o, i, j]``), the ending rules, and room
    after the stage (``c - 1`` layers and ``c - 1`` further devices in its datacenter or
    later ones); in addition the option's own ``d * t`` devices must exist there too.
    ``check`` (``Deadline.check``) is called per group and class.
    """
    pos = positions or position_classes(tables)
    L = tables.L
    ii, jj = np.triu_indices(L + 1, 1)
    dc_devices = np.bincount(tables.group_dc, weights=tables.count, minlength=tables.K)
    devices_from = np.cumsum(dc_devices[::-1])[::-1]
    cols: list[list[np.ndarray]] = [[] for _ in range(9)]
    total = 0
    for g in range(tables.G):
        opt = tables.options(g)
        n_opt = int(opt.d.shape[0])
        total += n_opt * (L * (L + 1) // 2) * pos.count
        if n_opt == 0:
            continue
        room = devices_from[tables.group_dc[g]]
        for c in range(1, pos.count + 1):
            if check is not None:
                check()
            need = pos.in_flight(c)
            fits = opt.max_in_flight[:, ii, jj] >= need  # [o, pair]
            ends = jj == L
            ok_end = (ends & pos.may_end(c)) | (~ends & pos.may_continue(c))
            ok_room = (L - jj) >= (c - 1)
            ok_dev = room >= opt.width + (c - 1)  # [o]
            o_idx, pair = np.nonzero(fits & (ok_end & ok_room)[None, :] & ok_dev[:, None])
            i, j = ii[pair], jj[pair]
            for col, v in zip(cols, (np.full(o_idx.shape, g), o_idx, i, j,
                                     np.full(o_idx.shape, c), opt.d[o_idx], opt.t[o_idx],
                                     opt.compute_time[o_idx, i, j], opt.sync_time[o_idx, i, j])):
                col.append(v)
    arrays = [np.concatenate(col) if col else np.zeros(0) for col in cols]
    ints = [a.astype(np.int64) for a in arrays[:7]]
    floats = [np.asarray(a, dtype=float) for a in arrays[7:]]
    return CandidateOptions(*ints, *floats, positions=pos, total=total)


def undominated(cand: CandidateOptions, check=None) -> np.ndarray:
    """Mask of the candidates no other option of the same stage dominates.

    Candidate ``(g, o, i, j, c)`` is dominated by ``(g, o', i, j, c)`` when ``o'`` takes
    no more devices and has no larger ``C`` and no larger ``R`` (ties: the lower option
    index is kept). Dropping it loses no optimum: in any plan the stage can switch to
    ``o'`` (same group, fewer or as many devices, memory fits since ``o'`` is a
    candidate at the same class) without raising any term of ``T``.

    ``C`` and ``R`` do not depend on the class, and ``o'`` is a candidate at class ``c``
    of ``(i, j)`` iff ``c`` is at most its largest class there (memory only fails more
    at higher classes, the room and ending rules hold for ``o'`` where they hold for
    ``o``): so the comparison runs once per range, ``P^2 L^2`` and not ``P^2 L^2`` times
    the classes. ``check`` (``Deadline.check``) is called once per option and group.
    """
    keep = np.ones(len(cand), dtype=bool)
    if len(cand) == 0:
        return keep
    L1 = int(cand.end.max()) + 1
    for g in np.unique(cand.group):
        if check is not None:
            check()
        mine = np.nonzero(cand.group == g)[0]
        o, x = cand.option[mine], cand.start[mine] * L1 + cand.end[mine]  # the range
        n_opt = int(o.max()) + 1
        top = np.zeros((n_opt, L1 * L1), dtype=np.int64)
        np.maximum.at(top, (o, x), cand.cls[mine])
        C = np.full(top.shape, np.inf)
        R = np.full(top.shape, np.inf)
        width = np.zeros(n_opt)
        C[o, x] = cand.compute_time[mine]
        R[o, x] = cand.sync_time[mine]
        width[o] = cand.width[mine]
        # memory is already filtered per class, so in-flight limits are all equal here
        tops = dominance_tops(top, C, np.zeros(top.shape), R, width, check)
        keep[mine] = cand.cls[mine] > tops[o, x]
    return keep


# --------------------------------------------------------------------------- version 3
def period_mode(tables: CostTables) -> str:
    """How a model writes the period ``lambda`` of its one pipeline (contract 4.3).

    Parameters
    ----------
    tables : CostTables

    Returns
    -------
    str
        ``"classic"``: ``lambda = max(max C, max U)`` (objective ``classic``, or
        ``M = 1`` where no period is paid); ``"gpipe"``: two phase maxima
        ``max(max f, max U) + max(max b, max U)``; ``"1f1b"``: ``max(max C, max U)``
        and the loop windows of the stages that stash fewer than ``M`` microbatches.
    """
    if tables.instance.training.objective != "period" or tables.M <= 1:
        return "classic"
    return tables.schedule


def phase_arrays(tables: CostTables, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward times of every stage option of group ``g``.

    Parameters
    ----------
    tables : CostTables
    g : int
        The group's index in ``tables.groups``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``f`` and ``b`` ``[option, i, j]`` (:func:`chainpipe.cost.phase_time`), ``inf``
        where the option's ``C`` is (no such range, or an overflow); computed once per
        group and tables.
    """
    cache = tables.__dict__.setdefault("_formulation_phases", {})
    if g not in cache:
        opts, grp, sums = tables.options(g), tables.groups[g], tables.sums
        shape = (len(opts.d), 1, 1)
        dd, tt = opts.d.reshape(shape), opts.t.reshape(shape)
        tp = sums.range_sums(sums.tp_bytes)[None]
        out = []
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for prefix in (sums.fwd_flop, sums.bwd_flop):
                x = cost.phase_time(sums.range_sums(prefix)[None], grp.flop_per_s, dd, tt, tp,
                                    grp.node_bandwidth)
                out.append(np.where(np.isfinite(opts.compute_time), x, np.inf))
        cache[g] = (out[0], out[1])
    return cache[g]
