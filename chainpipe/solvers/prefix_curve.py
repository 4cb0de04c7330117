"""Floors under what the prefix still to place adds to a pipeline of the 1F1B ``period``,
for the version-3 search (:mod:`.dp_period`; ``docs/dp.md``, "Version 3", "The prefix
curve").

The search walks the layers backwards: at a state ``(k0, usage)`` and layer ``a`` the
prefix ``[0, a)`` is still to place on DCs up to ``k0``, with ``usage`` devices of DC ``k0``
already taken. For a period cap ``lam``, every stage of a plan whose period is at most
``lam`` has ``C <= lam``, every boundary ``U <= lam`` and every window of stages a sum at
most ``lam`` per stage (when every stage's loops count: ``M_p`` above the layers). A
*forward* walk over ``(a, DC, usage on it)`` finds the least fill (compute and the
traversals between the prefix's own stages) of a prefix that meets those rules, with the
running excess of its windows (``h' = max(c - lam, h + q + c - lam)``, kept ``<= 0``)
rounded down to one of :data:`BUCKETS` steps per state: a relaxation (a lower ``h`` only
lets more through), so the least fill it finds is a floor, and a prefix it cannot place
proves the period above ``lam``. Memory is relaxed to the least stash of any stage.

Done on a grid of caps ``lam_0 < lam_1 < ...`` (from the least cap at which the whole
model fits, by bisection), these give, per state and prefix end, ``F_i``: a plan whose
period ``P`` lies in ``(lam_{i-1}, lam_i]`` adds a fill of at least ``F_i`` and a steady
part ``(M_p - 1) P >= (M_p - 1) max(x, lam_{i-1})`` for any floor ``x`` of ``P``; the
search takes the least over ``i`` (:func:`.period_kernel.curve_floor`).
"""

from __future__ import annotations

import numpy as np

from .prefix_kernel import SLACK, at_most, bottleneck, forward

#: steps of the windows' running excess kept per state and cap (``-lam .. 0``)
BUCKETS = 16
#: relative width at which the bisection for the least cap stops
LEAST_RTOL = 1e-3
#: the grid of caps above the least one (relative steps)
GRID = (0.0, 0.002, 0.004, 0.007, 0.01, 0.015, 0.02, 0.03, 0.04, 0.055, 0.07, 0.09, 0.12,
        0.15, 0.2, 0.25, 0.32, 0.4, 0.5, 0.65, 0.8, 1.0)
#: the grid and the bisection's width where the windows are not capped (a range's walks):
#: its floors weigh the fill more than the period, and coarser caps halve its walks
COARSE_GRID = (0.0, 0.004, 0.01, 0.02, 0.04, 0.07, 0.12, 0.2, 0.32, 0.5, 0.8, 1.0)
COARSE_RTOL = 4e-3
#: the most caps of a grid (past :data:`GRID`, each 1.5 times the last)
MOST = 40


class PrefixCurve:
    """The forward walks of one search's DC range, kept on its tables (they depend on
    neither ``M_p``, the memory being relaxed, nor the search's bounds).

    Parameters
    ----------
    tables : CostTables
    first_dc, last_dc : int
        The DCs the pipeline's first and last stage lie in (``first_fixed``: the first
        stage must lie in ``first_dc``; else anywhere from it).
    first_fixed : bool
    windows : bool
        Whether every stage's loops count (``M_p`` above the layers, 1F1B ``period``): the
        windows are then capped too.
    theta : float
        Only options with ``R < theta`` (a range's searches at that limit of ``max R``:
        they use no other; ``inf``: every option).
    """

    def __init__(self, tables, first_dc: int, last_dc: int, first_fixed: bool,
                 windows: bool, theta: float = np.inf):
        self.t, self.lo, self.hi, self.fixed = tables, first_dc, last_dc, first_fixed
        self.windows, self.theta = windows, theta
        #: how many caps of the grid the floors use (twice the least cap)
        self.steps = len(GRID if windows else COARSE_GRID)
        self._arrays = _arrays(tables)
        radix, stride, _, dc_groups, ngr, *_, U, Q = self._arrays
        own = slice(first_dc, last_dc + 1)  # the walk sees the range's DCs only, from 0
        local = [np.ascontiguousarray(x[own]) for x in (radix, stride, dc_groups, ngr)]
        local += [np.ascontiguousarray(x[:, own, own]) for x in (U, Q)]
        self._local = local
        self.walks: dict[float, np.ndarray] = {}
        self._ends = None  # (:meth:`_allowed`)
        #: walks not yet joined (:meth:`least_fill` read their last row only) and, per
        #: cap, the least fill of the whole model up to each last DC
        self._raw: dict[float, np.ndarray] = {}
        self.whole: dict[float, np.ndarray] = {}
        self._rows: dict[tuple, np.ndarray] = {}
        self.least, self.tried = None, 0.0

    @staticmethod
    def made(tables, first_dc: int, last_dc: int, first_fixed: bool,
             windows: bool, theta: float = np.inf) -> PrefixCurve | None:
        """The range's curve if :meth:`of` has made it for these tables, else ``None``
        (nothing is made: the tables may be a view without the curve's arrays)."""
        return tables.__dict__.get("_prefix_curves", {}).get(
            (first_dc, last_dc, first_fixed, windows, theta))

    @staticmethod
    def of(tables, first_dc: int, last_dc: int, first_fixed: bool,
           windows: bool, theta: float = np.inf) -> PrefixCurve:
        """The curve of a range, made once per tables (and ``theta``)."""
        cache = tables.__dict__.setdefault("_prefix_curves", {})
        key = (first_dc, last_dc, first_fixed, windows, theta)
        got = cache.get(key)
        if got is None:
            got = cache[key] = PrefixCurve(tables, first_dc, last_dc, first_fixed, windows,
                                           theta)
        return got

    def walk(self, lam: float) -> np.ndarray:
        """Per ``(prefix end a, DC k0, usage v)``: the least fill of a prefix on DCs up to
        ``k0`` using at most ``v`` (each group) on ``k0``, under cap ``lam`` (``k0`` counted
        from the range's first DC), with the traversal of boundary ``a`` from the prefix's
        last DC to ``k0`` (the stage after it lies on ``k0``: :func:`_at_most`)."""
        got = self.walks.get(lam)
        if got is None:
            raw = self._raw.pop(lam, None)
            if raw is None:
                raw = self._walked(lam)
            radix, _, _, _, U, Q = self._local
            got = self.walks[lam] = _at_most(raw, radix, (U, Q, lam))
        return got

    def least_fill(self, lam: float, last_dc: int) -> float:
        """The least fill of the whole model under cap ``lam`` with its last stage in a DC
        up to ``last_dc`` (:meth:`walk`'s last row, read without its joined tables: the
        floors of :meth:`least_time` need only this, the searches' rows the rest)."""
        got = self.whole.get(lam)
        if got is None:
            self._raw[lam] = self._walked(lam)
            got = self.whole[lam]
        return float(got[last_dc - self.lo])

    def _walked(self, lam: float) -> np.ndarray:
        """The walk under ``lam`` before :func:`_at_most` (:meth:`_fills`), its last row
        recorded: per DC, the least over it and those before (:meth:`least_fill`)."""
        raw = self._fills(lam)
        self._show(lam, raw[-1])
        self.whole[lam] = np.minimum.accumulate(raw[-1].min(axis=1))
        return raw

    def tables_at(self, lam: float, prune: bool = True, joined: bool = False) -> np.ndarray:
        """The walk under cap ``lam`` (not kept); ``prune=False`` expands every entry (the
        reference the pruned walk must equal); ``joined``: as :meth:`walk` reads it, with
        the traversal to a stage on ``k0`` after the prefix."""
        radix, _, _, _, U, Q = self._local
        return _at_most(self._fills(lam, prune), radix, (U, Q, lam) if joined else None)

    def _fills(self, lam: float, prune: bool = True) -> np.ndarray:
        """The walk's least fill per ``(prefix end, DC of its last stage, usage there)``
        (over the excess buckets), before :func:`_at_most`."""
        C, ok, widths, npairs = self._arrays[5:9]
        ok, last = self._allowed(ok)
        radix, stride, dc_groups, ngr, U, Q = self._local
        nV = int(np.prod(radix, axis=1).max())
        return forward(lam, 0, self.hi - self.lo, self.fixed, radix, stride, nV, dc_groups,
                       ngr, C, ok, last, widths, npairs, U, Q, BUCKETS if self.windows else 1,
                       self.windows, prune).min(axis=3)

    def _show(self, lam: float, last: np.ndarray) -> None:
        """Record what the walk under ``lam`` showed (:meth:`_shown`) from its last row
        (the whole model placed; per DC and usage, of the last stage or up to it: the
        first DC with a finite entry is the same either way)."""
        fit = np.flatnonzero(np.isfinite(last).any(axis=1))
        self._shown().append((lam, self.hi, self.lo + int(fit[0]) if len(fit) else None))

    def _shown(self) -> list:
        """What the walks of every curve of this first DC have shown: per walk ``(lam,
        its last DC, the first last DC under which the model fits, or None)``. A walk
        over ``lo..hi`` finds the least fill per DC of the last stage up to each one, so
        it tells the fit of every range ``lo..j``, ``j <= hi`` (the walk is the same up to
        ``j``, the DCs after ``j`` not yet reached), and a fit at ``j`` is one at every
        later ``j``."""
        shown = self.t.__dict__.setdefault("_prefix_shown", {})
        return shown.setdefault((self.lo, self.fixed, self.windows, self.theta), [])

    def _allowed(self, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``ok`` (per group, option and layer range, :func:`_arrays`') less the options
        with ``R >= theta`` (made per walk: a mask per curve would hold megabytes for each
        limit); without a limit, less those another outdoes (:func:`_walked_options`).
        With it, per group, option and start, the last end it allows (:func:`_last_ends`,
        kept per curve)."""
        if not np.isfinite(self.theta):
            return _walked_options(self.t)
        ok = ok & (_sync_times(self.t) < self.theta)
        if self._ends is None:
            self._ends = _last_ends(ok)
        return ok, self._ends

    def _bracket(self, lo: float, cap: float) -> tuple[float, float | None]:
        """The bracket of the least cap the walks so far show for this range: the largest
        ``lam`` shown not to fit (at least ``lo``) and the least one up to ``cap`` shown to
        fit (``None``: none)."""
        hi = None
        for lam, top, first, tighter, looser in self._shown_all():
            if first is not None and first <= self.hi:
                if tighter and lam <= cap and (hi is None or lam < hi):
                    hi = lam
            elif top >= self.hi and looser:
                lo = max(lo, lam)
        return lo, (hi if hi is not None and hi > lo else None)

    def _shown_all(self):
        """:meth:`_shown` of every curve of this first DC, each walk with whether its rules
        are at least as tight as this curve's (a fit there is one here) and whether they
        are at most as tight (a misfit there is one here): a smaller limit ``theta``
        leaves fewer options, capped windows add rules."""
        shown = self.t.__dict__.setdefault("_prefix_shown", {})
        for (lo, fixed, windows, theta), walks in shown.items():
            if (lo, fixed) == (self.lo, self.fixed):
                tighter = theta <= self.theta and windows >= self.windows
                looser = theta >= self.theta and windows <= self.windows
                for lam, top, first in walks:
                    yield lam, top, first, tighter, looser

    def fits(self, lam: float) -> bool:
        """Whether the whole model fits the relaxed rules under cap ``lam`` (a walk made
        only for this, as the least cap's bisection makes them, reads its last row alone:
        its tables are not kept)."""
        got = self.whole.get(lam)
        if got is not None:
            return bool(np.isfinite(got[self.hi - self.lo]))
        last = self._fills(lam)[-1]
        self._show(lam, last)
        return bool(np.isfinite(last[:self.hi - self.lo + 1]).any())

    def grid(self, cap: float) -> np.ndarray:
        """Caps from the least one that fits up to the first at or above ``cap``; empty
        when nothing fits under ``cap``."""
        if self.least is None and cap > self.tried:
            self.tried = cap
            self.least = self._least(cap)
        if self.least is None or self.least > cap:
            return np.empty(0)
        J = 1
        while J < MOST and self.grid_of(J)[-1] < cap:  # past GRID: steps of half
            J += 1
        return self.grid_of(J)

    def least_time(self, m: int, cap: float, last_dc: int) -> float:
        """A floor under ``T_p`` (fill and steady part, without ``max R``) of every plan of
        ``m`` microbatches whose period is at most ``cap`` and whose last stage lies in a DC
        up to ``last_dc``: the least over the grid of ``F_i + (m - 1) lam_{i - 1}``, ``F_i``
        the least fill of the whole model under cap ``lam_i``; ``inf`` if none fits."""
        grid = self.grid(cap)[:self.steps]  # (past them the walks grow dear, the gain small)
        if not len(grid):
            return np.inf
        best = (m - 1) * grid[-1] if grid[-1] < cap else np.inf  # periods past the grid
        for i in range(1, len(grid)):
            if (m - 1) * grid[i - 1] >= best:  # every fill is at least 0
                break
            fill = self.least_fill(grid[i], last_dc)
            best = min(best, fill + (m - 1) * grid[i - 1])
        return float(best)

    def rows(self, k0: int, usage: tuple, J: int) -> np.ndarray:
        """State ``(k0, usage)`` on the first ``J`` caps of the grid: per prefix end and cap
        the least fill (``[a, i]``, ``inf`` where the prefix cannot fit, 0 for the empty
        prefix), in an array of at least ``J`` columns (the caps of :meth:`grid_of`, which
        a larger ``J`` only extends): kept per state, grown as searches ask more caps."""
        got = self._rows.get((k0, usage))
        have = 0 if got is None else got.shape[1]
        if have < J:
            v = self.room(k0, usage)
            lams = self.grid_of(J)[have:]
            new = np.empty((self.t.L + 1, len(lams)))
            for c, lam in enumerate(lams.tolist()):
                new[:, c] = self.walk(lam)[:, k0 - self.lo, v]
            new[0] = 0.0
            got = self._rows[k0, usage] = new if got is None else \
                np.concatenate((got, new), axis=1)
        return got

    def grid_of(self, J: int) -> np.ndarray:
        """The first ``J`` caps of the grid (:meth:`grid` has made them)."""
        steps = GRID if self.windows else COARSE_GRID
        out = [self.least * (1 + step) for step in steps[:J]]
        while len(out) < J:
            out.append(out[-1] * 1.5)
        return np.asarray(out)

    def room(self, k0: int, usage: tuple) -> int:
        """The index of the devices left on DC ``k0`` after ``usage`` (its groups' order)."""
        radix, stride = self._arrays[0], self._arrays[1]
        return int(sum((int(radix[k0, i]) - 1 - u) * int(stride[k0, i])
                       for i, u in enumerate(usage)))

    def _least(self, cap: float):
        """The largest cap found not to fit (to :data:`LEAST_RTOL`, or :data:`COARSE_RTOL`
        without the windows: the grid starts there), searched below ``cap`` upwards from
        the slowest layer's least ``C`` (walks under large caps are dear); ``None`` if the
        model does not fit under ``cap``. It starts from the bracket earlier walks of the
        same first DC show (:meth:`_bracket`). Without the windows, one bottleneck walk
        answers every step (:meth:`_bottleneck_fits`); with them it answers first, since
        the windows only add rules: where the model does not fit without them, it does not
        fit with them, and only the other steps make a walk with the windows (the same
        steps and answers, so the same least cap)."""
        rtol = LEAST_RTOL if self.windows else COARSE_RTOL
        fits = relaxed = self._bottleneck_fits()
        if self.windows:
            def fits(lam: float) -> bool:
                return relaxed(lam) and self.fits(lam)
        lo, hi = self._bracket(self._layer_floor() * (1 - rtol), cap)
        if lo >= cap:
            return None
        while hi is None:
            hi = min(lo * 1.25, cap)
            if fits(hi):
                break
            if hi >= cap:
                return None
            lo, hi = hi, None
        while hi - lo > rtol * hi:
            mid = 0.5 * (lo + hi)
            if fits(mid):
                hi = mid
            else:
                lo = mid
        self.walks, self._raw, self.whole = {}, {}, {}
        return lo

    def _bottleneck_fits(self):
        """:meth:`fits` without the windows, from a walk per step up of the bisection.

        The rules are then a cap on every stage's ``C`` and boundary's ``U``, so the model
        fits under ``lam`` exactly when the least over placements of their largest
        (:func:`.prefix_kernel.bottleneck` under the largest cap asked so far: it tells
        every smaller one) is within ``lam`` and the walk's tolerance. The bisection keeps
        its steps, so the least cap, the grid and every search are as with a walk per
        step (``v3-large-03``: 567 walks of 45 ranges' bisections, 2.1 CPU s). An exact
        least instead (just below the bottleneck) changes the floors a little and so the
        ranges the several pipelines' search probes: fresh ``-03``-like seed 4 took 36 s
        instead of 45, and seed 6 234 s instead of 46 (a four-DC range searched at
        targets ever nearer its time, 548,000 labels at the last)."""
        walked = [-np.inf, None]  # the cap of the last walk and its least per last DC

        def fits(lam: float) -> bool:
            if lam > walked[0]:  # (a walk under a cap far above the least is dear)
                C, ok, widths, npairs = self._arrays[5:9]
                radix, stride, dc_groups, ngr, U, _ = self._local
                nV = int(np.prod(radix, axis=1).max())
                walked[:] = lam, bottleneck(float(lam), 0, self.hi - self.lo, self.fixed,
                                            radix, stride, nV, dc_groups, ngr, C,
                                            *self._allowed(ok), widths, npairs, U)
            fit = np.flatnonzero(walked[1] <= lam * (1 + SLACK))
            if not (len(fit) and self.windows):  # (a fit without the windows is none with them)
                self._shown().append((lam, self.hi, self.lo + int(fit[0]) if len(fit) else None))
            return bool(len(fit))

        return fits

    def _layer_floor(self) -> float:
        """The largest over the layers of the least ``C`` any option of the range's groups
        has on that layer alone: no plan's period is below it."""
        radix, stride, nV, dc_groups, ngr, C, ok = self._arrays[:7]
        groups = [int(dc_groups[k, i]) for k in range(self.lo, self.hi + 1)
                  for i in range(int(ngr[k]))]
        L = C.shape[3] - 1
        one_layer = (slice(None), slice(None), np.arange(L), np.arange(L) + 1)
        allowed = ok[one_layer][groups]  # [group, pair, layer]: the diagonals, then masked
        if np.isfinite(self.theta):  # (as :meth:`_allowed`)
            allowed &= _sync_times(self.t)[one_layer][groups] < self.theta
        one = np.where(allowed, C[one_layer][groups], np.inf)
        if one.size == 0:  # no group of the range has an option: nothing fits
            return np.inf
        return float(max(one.min(axis=(0, 1)).max(), 1e-300))


def _at_most(F: np.ndarray, radix: np.ndarray, join=None) -> np.ndarray:
    """``F[a, k, v]`` turned into the least over every DC before ``k`` and every usage
    ``<= v`` (per group) on ``k``.

    ``join = (U, Q, lam)``: the prefix ``[0, a)`` is followed by a stage on ``k`` (the
    search's state: its first stage lies on ``k``), so each prefix ending on ``k' <= k``
    pays the traversal ``Q[a, k', k]`` of that boundary, and none whose boundary
    occupancy ``U[a, k', k]`` is above ``lam`` is counted (a plan of period at most
    ``lam`` has every ``U`` within it). Both only raise the floor, which stays one: the
    traversal is part of every completion's fill, and the walk itself counts only the
    traversals between the prefix's own stages. ``U``, ``Q`` are 0 at ``a = L`` (no stage
    after the whole model), where the table is read as without ``join``."""
    out = np.empty(F.shape)
    U, Q, lam = join if join is not None else (_NO_JOIN, _NO_JOIN, 0.0)
    at_most(np.ascontiguousarray(F, dtype=float), np.ascontiguousarray(radix, dtype=np.int64),
            U, Q, float(lam), join is not None, out)
    return out


#: ``U`` and ``Q`` of :func:`_at_most` without a join (not read)
_NO_JOIN = np.empty((0, 0, 0))


def _sync_times(tables) -> np.ndarray:
    """``R`` per group, option and layer range, in the layout of :func:`_arrays`' ``C``
    (``inf`` where a group has fewer options), once per tables."""
    got = tables.__dict__.get("_prefix_curve_sync")
    if got is None:
        C = _arrays(tables)[5]
        got = np.full(C.shape, np.inf)
        for g in range(tables.G):
            o = tables.options(g)
            got[g, :len(o.width)] = o.sync_time
        tables.__dict__["_prefix_curve_sync"] = got
    return got


def _outdone(opts, least_stash: int) -> np.ndarray:
    """Per option and layer range of a group: whether another option of the range with
    no more devices and no larger ``C`` fits memory there too (strictly better in one, or
    the same and listed first). Where ``R`` does not count (no limit ``theta``), every
    prefix a walk makes with it the other makes on fewer devices at no more fill and
    excess, so the tables the walks give do not change without it (with a limit, the
    other may be barred by its ``R``)."""
    C, W = opts.compute_time, opts.width
    fits = (opts.max_in_flight >= least_stash) & np.isfinite(C)
    out = np.zeros(C.shape, dtype=np.bool_)
    for c in range(len(W)):
        for c2 in range(len(W)):
            if c != c2 and W[c] <= W[c2]:
                beats = fits[c] & (C[c] <= C[c2])
                if W[c] == W[c2] and c > c2:
                    beats &= C[c] < C[c2]
                out[c2] |= beats
    return out


def _walked_options(tables) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_arrays`' ``ok`` less the options :func:`_outdone` on their range (the walks
    without a limit ``theta`` use these: ``v3-large-03``, two thirds of the cells), and
    their :func:`_last_ends`, once per tables."""
    got = tables.__dict__.get("_prefix_curve_walked")
    if got is None:
        ok = _arrays(tables)[6].copy()
        for g in range(tables.G):
            o = tables.options(g)
            ok[g, :len(o.width)] &= ~_outdone(o, 1)
        got = tables.__dict__["_prefix_curve_walked"] = (ok, _last_ends(ok))
    return got


def _last_ends(ok: np.ndarray) -> np.ndarray:
    """Per group, option and start ``a``: the last end ``b`` with ``ok[g, c, a, b]``, -1
    where there is none (the walks' loops over ends stop there)."""
    L1 = ok.shape[3]
    last = L1 - 1 - np.argmax(ok[..., ::-1], axis=3)
    return np.where(ok.any(axis=3), last, -1).astype(np.int64)


def _arrays(tables):
    """The dense inputs of :func:`forward`, once per tables."""
    t = tables
    got = t.__dict__.get("_prefix_curve_arrays")
    if got is not None:
        return got
    L, K, G = t.L, t.K, t.G
    groups_of = [np.flatnonzero(t.group_dc == k).tolist() for k in range(K)]
    width = max(len(x) for x in groups_of)
    radix, stride = np.ones((K, width), np.int64), np.zeros((K, width), np.int64)
    dc_groups, ngr, nV = np.zeros((K, width), np.int64), np.zeros(K, np.int64), 1
    for k in range(K):
        s, ngr[k] = 1, len(groups_of[k])
        for gi, g in enumerate(groups_of[k]):
            radix[k, gi], stride[k, gi], dc_groups[k, gi] = int(t.count[g]) + 1, s, g
            s *= int(radix[k, gi])
        nV = max(nV, s)
    P = max(len(t.options(g).width) for g in range(G))
    C = np.full((G, P, L + 1, L + 1), np.inf)
    ok = np.zeros((G, P, L + 1, L + 1), np.bool_)
    widths, npairs = np.full((G, P), 1 << 40, np.int64), np.zeros(G, np.int64)
    least_stash = 1  # the least any stage of any pipeline stashes
    for g in range(G):
        o = t.options(g)
        n = len(o.width)
        npairs[g], widths[g, :n] = n, o.width
        C[g, :n] = o.compute_time  # grows with the range's end: the walk stops at the cap
        ok[g, :n] = o.max_in_flight >= least_stash
    U, Q = np.zeros((L + 1, K, K)), np.zeros((L + 1, K, K))
    for a in range(1, L):
        for k1 in range(K):
            for k2 in range(k1, K):
                U[a, k1, k2], Q[a, k1, k2] = t.occupancy(a, k1, k2), t.traversal(a, k1, k2)
    got = t.__dict__["_prefix_curve_arrays"] = (radix, stride, nV, dc_groups, ngr, C, ok,
                                                widths, npairs, U, Q)
    return got
