"""The exact chain dynamic program (solver ``dp``): chainpipe's reference optimum.

The search walks the layers backwards, from ``L`` down to ``0``. A *state* is
``(b, k, u)``: the layers ``[b, L)`` are placed, the first of their stages runs
in datacenter ``k``, and ``u`` counts the devices of each group of ``k`` already
used (``d * t`` per stage). Each state keeps the Pareto frontier of labels
``(bottleneck max(C_s, U_s), sum(C_s + Q_s), stages placed p, sync max R_s)``
(``p`` capped where 1F1B memory stops depending on it); the optimum is the best
``sum + (M - 1) * max + sync`` over the frontiers at ``b = 0``. Since ``T`` is
increasing in every criterion and each criterion of an extended plan depends
only on the label and the new stage, a dominated partial plan never completes
into a better plan than its dominator (``docs/dp.md`` proves it). A stage
option is a layer range on a group with a pair ``(d, t)``; options of one
range and group dominated by another pair (no more devices, no larger ``C`` or
``R``, no smaller in-flight limit) are dropped first.

Bounding makes it fast: a trial upper bound ``U`` on the optimum restricts
stages to those with ``C <= (U - sum lower bound) / (M - 1)``, boundaries the
same way, and prunes labels whose optimistic completion reaches ``U``. If no
plan beats ``U``, the optimum is at least ``U`` (a proven lower bound) and the
search repeats with a larger trial. The first trial that succeeds is exact.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from .. import cost
from ..deadline import Deadline, TimeUp
from ..plan import Plan
from ..result import OptionError, Outcome, number_option
from ..support import features
from ..tables import CostTables, dominated_options, fill_bound, fill_curve
from .labels import (
    BOUND_SLACK,
    HYBRID_TRIALS,
    TRIALS,
    across_usage,
    killers,
    pareto3,
    pareto4,
    shifted_pareto,
)


def run(instance, *, deadline=None, seed=0, threads=1, log=None, upper_bound=None,
        **options) -> Outcome:
    """Solve ``instance`` to proven optimality (or report what was proven by the limit).

    ``log``, if given, is called with one line per trial bound.
    """
    if options:
        raise OptionError(f"dp: unknown option(s) {', '.join(sorted(options))}")
    if upper_bound is not None:
        upper_bound = number_option("dp", "upper_bound", upper_bound, strict=True)
    deadline = Deadline.of(deadline)
    if features(instance.training):  # version 3: the period objective, several pipelines
        if upper_bound is not None:
            raise OptionError("dp: upper_bound is not supported under contract version 3 yet")
        from .dp_pipelines import solve as solve_v3

        return solve_v3(instance, deadline, log)
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason:
        return Outcome("infeasible", message=reason, lower_bound=None)
    try:
        lb, capacity = _first_bound(tables, deadline)
    except TimeUp:
        return Outcome("no_solution", lower_bound=None,
                       message="time limit reached while the search was being prepared")
    if capacity is not None and not np.isfinite(lb):  # so no datacenter alone holds it
        return Outcome("infeasible", lower_bound=None, message=(
            "the devices cannot hold the model: no set of stages that fit memory covers "
            "its FLOP, whatever the bottleneck"))
    proven = lb  # the optimum is at least this
    stats = {"trials": []}
    steps = TRIALS if tables.single_device else HYBRID_TRIALS
    # the last step is unbounded; a zero lower bound (a model of no FLOP) makes every
    # finite step the same trial, and 0 * inf no trial at all: one of each, then inf
    trials = sorted({lb * (1 + d) if math.isfinite(d) else math.inf for d in steps})
    if upper_bound is not None:
        trials = [u for u in trials if u < upper_bound] + [upper_bound * (1 + 1e-9)]
    for trial in trials:
        search = _Search(tables, trial, deadline, capacity)
        try:
            found = search.run()
        except TimeUp:
            stats["trials"].append({"upper_bound": trial, "timed_out": True, **search.stats})
            if log is not None:
                log(f"dp: trial T < {trial:.6g} s stopped by the time limit")
            return Outcome("no_solution", lower_bound=proven,
                           message="time limit reached before a plan was proven optimal",
                           stats=stats)
        stats["trials"].append({"upper_bound": trial, **search.stats})
        if log is not None:
            log(f"dp: trial T < {trial:.6g} s: {'plan found' if found else 'no plan, bound proven'}"
                f" ({search.stats['labels']} labels, {deadline.elapsed():.2f} s)")
        if found is not None:
            T, stages = found
            stats["labels"] = sum(t["labels"] for t in stats["trials"])
            stats["objective_s"] = T  # the search's own T of its plan (tests: equals evaluate)
            return Outcome("optimal", plan=Plan.from_tuples(instance, stages), lower_bound=None,
                           stats=stats)
        proven = max(proven, trial)
    if upper_bound is not None:  # only plans below the caller's bound were searched
        return Outcome("no_solution", lower_bound=min(proven, float(upper_bound)), stats=stats,
                       message=f"no plan with T below the upper bound {upper_bound:.6g} s")
    return Outcome("infeasible", lower_bound=None, stats=stats,
                   message="no plan satisfies the memory limits and device counts")


def _first_bound(tables: CostTables, deadline: Deadline):
    """The lower bound the trials start from and the :class:`_LayerCapacity` they share
    (``None`` in version 1 or for one microbatch); ``inf`` when the devices cannot hold
    the model under any bottleneck. Raises :class:`TimeUp` when the deadline passes."""
    if tables.single_device or tables.M == 1 or not _LayerCapacity.affordable(tables):
        return tables.lower_bound, None
    # what the free devices can hold under a bottleneck (see _LayerCapacity): built
    # once, used by every trial, and a floor under the bottleneck of the lower bound
    capacity = _LayerCapacity(tables, usage_caps(tables), deadline.check)
    total = float(tables.flop_prefix[-1])
    across = float(capacity.needed(capacity.curve(list(range(tables.G)), []), total))
    if not np.isfinite(across):
        return math.inf, capacity
    alone = []
    for k in range(tables.K):
        deadline.check()
        alone.append(float(capacity.needed(capacity.curve(
            [g for g in np.flatnonzero(tables.group_dc == k).tolist()], []), total)))
    return max(tables.lower_bound, tables.bound_with_floors(alone, across)), capacity


class _Search:
    """One bounded run of the DP: finds the optimum if it is below ``upper``."""

    def __init__(self, tables: CostTables, upper: float, deadline: Deadline,
                 capacity: _LayerCapacity | None = None):
        self.t = tables
        self.upper = upper
        self.deadline = deadline
        self.capacity = capacity
        self.stats = {"labels": 0, "states": 0, "candidate_stages": 0}

    def run(self):
        """The best complete plan below ``upper`` as ``(T, stages)``, or ``None``."""
        t = self.t
        self.sum_lb = self._sum_lower_bound()
        self.cap = np.inf if t.M == 1 else (self.upper - self.sum_lb) / (t.M - 1)
        if t.M > 1 and np.isfinite(self.cap):
            # a plan below upper has every C_s <= cap, so its fill is at least the fill bound
            # at cap, which shrinks the cap in turn (each step is a valid bound: 3 suffice)
            everything = (t.rate * t.count).tolist()
            for _ in range(3):
                curve_x, _ = fill_curve(everything, self.cap)
                self.sum_lb = max(self.sum_lb, fill_bound(float(t.flop_prefix[-1]),
                                                           curve_x.tolist(), self.cap))
                self.cap = (self.upper - self.sum_lb) / (t.M - 1)
        self.cands, t_max = self._candidate_stages()
        # 1F1B memory depends on a stage's position only up to t_max + 1, and a plan has at
        # most L stages: the cap keeps every structure independent of M
        self.p_cap = 0 if t.schedule == "gpipe" else min(t.M, t_max + 1, t.L)
        states, best = self._label_loop()
        return None if best is None else (best[0], self._backtrack(states, best[1]))

    def _sum_lower_bound(self) -> float:
        """``sum_s C_s`` of any plan is at least the total FLOP on the widest stage of the
        fastest devices (tensor-parallel all-reduces only add)."""
        return cost.compute_time(self.t.flop_prefix[-1], self.t.rate.max(), self.t.widest)

    def _candidate_stages(self):
        """Per group and end ``b``: the stage options ``[a, b)`` worth trying, as arrays
        ``(a, C, R, devices)`` and rows ``(a, C, max in flight, devices, R, pair)``
        (``None`` when there is none).

        An option is kept when ``C <= cap``, its synchronisation leaves room below the
        trial bound, memory fits at some position, and no other pair of the same group
        and range dominates it. Also returns the largest in-flight limit below ``M``,
        where 1F1B positions stop mattering.
        """
        t, L, M = self.t, self.t.L, self.t.M
        need = t.in_flight(1)  # the least a stage stashes (the last stage's count)
        limit = self.cap * (1 + 1e-12)
        sync_limit = (self.upper - self.sum_lb) * (1 + 1e-12)
        cands: list[list] = []
        t_max = ncand = 0
        shared: dict = {}  # groups with the same options share their candidates
        for g in range(t.G):
            self.deadline.check()
            opts = t.options(g)
            if id(opts) in shared:
                cands.append(shared[id(opts)])
                continue
            per_end: list = [None] * (L + 1)
            cands.append(per_end)
            shared[id(opts)] = per_end
            if not len(opts.d):
                continue
            C, N, R, W = opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width
            ok = (C <= limit) & (N >= need) & (R <= sync_limit)
            ok &= ~dominated_options(ok, C, N, R, W, self.deadline.check)
            cs, starts, ends = np.nonzero(ok)
            order = np.lexsort((-starts, cs, ends))  # by end, then pair, then start descending
            cs, starts, ends = cs[order], starts[order], ends[order]
            n_all = N[cs, starts, ends]
            below = n_all[n_all < M]
            if len(below):
                t_max = max(t_max, int(below.max()))
            c_all, r_all = C[cs, starts, ends], R[cs, starts, ends]
            w_all = W[cs]
            cuts = np.searchsorted(ends, np.arange(L + 2))
            for b in range(1, L + 1):
                lo, hi = cuts[b], cuts[b + 1]
                if lo == hi:
                    continue
                rows = list(zip(starts[lo:hi].tolist(), c_all[lo:hi].tolist(),
                                n_all[lo:hi].tolist(), w_all[lo:hi].tolist(),
                                r_all[lo:hi].tolist(), cs[lo:hi].tolist()))
                a_b, w_b = starts[lo:hi], w_all[lo:hi]
                by_width = None
                if self.capacity is not None and len(rows) >= _VECTOR_MIN:
                    # the capacity floors are looked up in numpy for the rows of each width
                    by_width = []
                    for wv in np.unique(w_b).tolist():
                        sel = np.flatnonzero((w_b == wv) & (a_b > 0))
                        if len(sel):
                            by_width.append((wv, sel, a_b[sel]))
                per_end[b] = (a_b, c_all[lo:hi], r_all[lo:hi], w_b, rows, by_width)
            ncand += len(cs)
        self.stats["candidate_stages"] = ncand
        return cands, t_max

    def _label_loop(self):
        """Walk the layers backwards, extending Pareto labels by one stage at a time.

        Returns the states (for back-tracking) and the best complete plan
        ``(T, parent)``, or ``None`` when no plan beats ``upper``.
        """
        t = self.t
        L, M, K = t.L, t.M, t.K
        upper, cands, p_cap = self.upper, self.cands, self.p_cap
        sync = not t.single_device
        self.K = K
        self.rate_by_dc = [t.rate[t.group_dc <= k].max() for k in range(K)]
        widest = t.widest
        flop = t.flop_prefix.tolist()
        # optimistic completion of a prefix [0, a) on DCs <= k: per k and a, its compute sum
        # and its largest layer on the widest stage of the fastest devices of DCs <= k
        prefix_max = np.concatenate(([0.0], np.maximum.accumulate(np.diff(flop))))
        prefix_sum_arr = [cost.compute_time(np.asarray(flop), r, widest) for r in self.rate_by_dc]
        prefix_max_arr = [cost.compute_time(prefix_max, r, widest) for r in self.rate_by_dc]
        prefix_sum_list = [x.tolist() for x in prefix_sum_arr]
        prefix_max_list = [x.tolist() for x in prefix_max_arr]
        flop_arr = np.asarray(flop)
        # in-flight count of a new stage placed before p stages (p capped at p_cap)
        need_at = [t.in_flight(p + 1) for p in range(p_cap + 1)]
        self.groups_of = [[] for _ in range(K)]
        for g, k in enumerate(t.group_dc.tolist()):
            self.groups_of[k].append(g)
        self.local = [t.groups[g].index for g in range(t.G)]
        # usage never needs to exceed what L stages of the widest option take
        self.count = usage_caps(t)
        # total rate of the devices of DCs before k: bounds the bottleneck of a prefix
        capacity_before = _PerDC(lambda k: (t.rate[t.group_dc < k] * t.count[t.group_dc < k])
                                 .tolist())
        # the fill bound of a prefix (see fill_curve) needs a finite cap
        use_fill = np.isfinite(self.cap) and M > 1
        fill_cap = self.cap if use_fill else 0.0
        rate_of = t.rate.tolist()
        true_count = t.count.tolist()
        iteration_time = cost.iteration_time
        next_key: dict = {}
        # how many FLOP the devices left can hold under a bottleneck (v2: the widths make
        # the spread of rates a weak bound); per k0, the DCs before it at full count
        capacity = self.capacity if use_fill else None
        before_groups = _PerDC(lambda k: np.flatnonzero(t.group_dc < k).tolist())
        curves: dict = {}

        # a prefix [0, a) that does not stay inside DC k0 crosses a link at some boundary
        # b' <= a between DCs k1 < k2 <= k0: its bottleneck is at least the least such
        # occupancy and its fill gains at least the least such traversal (per k0 and a)
        cross_u, cross_q = self._crossing_floors()
        cap_limit = self.cap * (1 + 1e-12)
        # what each datacenter's devices hold with every C <= cap (for the crossings a
        # prefix needs: it spans at least as many DCs as the fewest that hold it)
        dc_hold = None if capacity is None else _PerDC(
            lambda k: capacity.held(capacity.curve(self.groups_of[k], []), cap_limit))

        def needed_curve(k0, u, gl, w):
            """Per prefix end ``a``, once a stage of w devices of local group gl is placed
            on top of usage u: a floor under the prefix's bottleneck (the least under which
            the devices free on DCs <= k0 hold the FLOP of [0, a), and under which those of
            DC k0 hold it unless the prefix crosses a link) and what its fill gains when
            DC k0 cannot hold it under the cap (the crossing). Arrays and lists; 0 at a = 0."""
            nkey = next_key.get((k0, u, gl, w))
            if nkey is None:
                nkey = next_key[(k0, u, gl, w)] = (k0, u[:gl] + (u[gl] + w,) + u[gl + 1:])
            got = curves.get(nkey)  # it depends on the usage after the stage only
            if got is None:
                here = tuple((h, true_count[h] - x) for h, x in zip(self.groups_of[k0], nkey[1]))
                need, stay, local = capacity.for_prefixes(before_groups(k0), here, flop_arr)
                need = np.maximum(need, np.minimum(stay, cross_u[k0]))
                # the fewest DCs whose devices hold [0, a) under the cap, less one: links
                # crossed at distinct boundaries; at least one if DC k0 cannot hold it
                held = np.cumsum(sorted(dc_hold.upto(k0) + [capacity.held(local, cap_limit)],
                                        reverse=True))
                crossings = np.minimum(np.searchsorted(held, flop_arr / _HOLD_SLACK), k0)
                crossings = np.maximum(crossings, stay > cap_limit)
                with np.errstate(invalid="ignore"):  # 0 crossings of no link: 0
                    gain = np.where(crossings > 0, crossings * cross_q[k0], 0.0)
                need[0] = gain[0] = 0.0
                got = curves[nkey] = (need, need.tolist(), gain, gain.tolist())
            return got
        # (k0, usage) -> (rate of the devices free on DCs <= k0, fill curve of the prefix)
        free_rate: dict = {}

        # states[b]: dict (k, u) -> labels (mx, sm, p, r, parent); parent =
        # (b, key, idx, a, g, pair). p (stages placed, capped at p_cap) is a criterion since
        # 1F1B memory depends on it; r (largest synchronisation) only under data parallelism.
        states: list[dict] = [dict() for _ in range(L + 1)]
        # fronts[a][key]: per bottleneck, the (sum, stages, sync) of the labels in the
        # bucket states[a][key] so far (until layer a is filtered)
        fronts: list = [dict() for _ in range(L + 1)]
        best = None  # (T, parent) of the best complete plan
        states[L][(K, ())] = [(0.0, 0.0, 0, 0.0, None)]  # the empty suffix; sentinel DC K
        labels_total = 0
        check = 0
        for b in range(L, 0, -1):
            layer_states = states[b]
            fronts[b] = None
            if not layer_states:
                continue
            for key in list(layer_states):
                labels = (pareto4(layer_states[key]) if sync
                          else pareto3(layer_states[key], p_cap))
                layer_states[key] = shifted_pareto(labels, M) if sync else labels
            if len(layer_states) > 1:
                across_usage(layer_states, sync=sync)
            labels_total += sum(len(v) for v in layer_states.values())
            self.stats["states"] += len(layer_states)
            for key, labels in layer_states.items():
                check += 1
                if check % 64 == 0:
                    self.deadline.check()
                low_mx = min(lab[0] for lab in labels)
                low_sm = min(lab[1] for lab in labels)
                low_r = min(lab[3] for lab in labels)
                # labels by bottleneck (the filters keep that order); a stage that lifts
                # the first i to one bottleneck makes the later killers of each redundant
                # (under parallelism: in version 1 it was measured to save no time)
                mxs = [lab[0] for lab in labels] if sync else None
                kill = killers(labels) if sync else None
                n_labels = len(labels)
                lts = [iteration_time(lab[1], lab[0], M) for lab in labels]
                alive_by_prefix: dict = {}
                for g, k0, gl, u, U, Q in self._moves(b, key):
                    arrays = cands[g][b]
                    if arrays is None:
                        continue
                    a_arr, c_arr, r_arr, w_arr, rows, by_width = arrays
                    # devices still free on DCs <= k0 before this stage, weighted by rate
                    free_here = free_rate.get((k0, u))
                    if free_here is None:
                        groups_free = capacity_before(k0) + [
                            (true_count[h] - x) * rate_of[h]
                            for h, x in zip(self.groups_of[k0], u)]
                        curve_x, curve_y = fill_curve(groups_free, fill_cap)
                        free_here = free_rate[(k0, u)] = (
                            sum(groups_free), curve_x, curve_y, curve_x.tolist(), fill_cap)
                    base, curve_x, curve_y, curve_list, step = free_here
                    # optimistic completion of the prefix [0, a) on DCs <= k0: its sum on
                    # the widest stage of the fastest devices, its bottleneck at least its
                    # largest layer so, and its FLOP spread over every device still free;
                    # first with the state's least label values: no label can do better
                    free = self.count[g] - u[gl]
                    low_u = max(U, low_mx)
                    if len(rows) < _VECTOR_MIN:
                        survivors = []
                        pre_sums, pre_maxs = prefix_sum_list[k0], prefix_max_list[k0]
                        rate_g = rate_of[g]
                        for row in rows:
                            a, c, _n, w, r, _ci = row
                            if w > free:
                                continue
                            pm, ps = pre_maxs[a], pre_sums[a]
                            if a and use_fill:
                                fill = fill_bound(flop[a], curve_list, step)
                                if fill > ps:
                                    ps = fill
                            if a:
                                avail = base - w * rate_g
                                if avail <= 0:
                                    continue
                                if flop[a] / avail > pm:
                                    pm = flop[a] / avail
                                if capacity is not None:
                                    floors = needed_curve(k0, u, gl, w)
                                    if floors[1][a] > pm:
                                        pm = floors[1][a]
                                    ps += floors[3][a]
                            nmx = c if c >= low_u else low_u
                            rr = r if r >= low_r else low_r
                            if iteration_time(low_sm + Q + c + ps, nmx if nmx >= pm else pm, M,
                                              rr) >= upper:
                                continue
                            survivors.append((row, pm, ps))
                    else:
                        avail = base - w_arr * rate_of[g]
                        with np.errstate(divide="ignore", invalid="ignore"):
                            pre_max = np.maximum(prefix_max_arr[k0][a_arr],
                                                 np.where(a_arr > 0, flop_arr[a_arr] / avail, 0))
                        pre_sum = prefix_sum_arr[k0][a_arr]
                        if use_fill:
                            pre_sum = np.maximum(pre_sum, np.where(
                                a_arr > 0, np.interp(flop_arr[a_arr], curve_x, curve_y), 0.0))
                        if capacity is not None:  # the bottleneck the free devices need
                            for wv, sel, a_sel in by_width:
                                floors = needed_curve(k0, u, gl, wv)
                                pre_max[sel] = np.maximum(pre_max[sel], floors[0][a_sel])
                                pre_sum[sel] += floors[2][a_sel]
                        nmx = np.maximum(np.maximum(c_arr, low_u), pre_max)
                        bound = iteration_time(low_sm + Q + c_arr + pre_sum, nmx, M,
                                               np.maximum(r_arr, low_r))
                        ok = (w_arr <= free) & ((a_arr == 0) | (avail > 0)) & (bound < upper)
                        idx = np.flatnonzero(ok)
                        survivors = list(zip([rows[i] for i in idx.tolist()],
                                             pre_max[idx].tolist(), pre_sum[idx].tolist()))
                    for (a, c, n, w, r, ci), pm, ps in survivors:
                        nkey = next_key.get((k0, u, gl, w))
                        if nkey is None:
                            nkey = next_key[(k0, u, gl, w)] = (
                                k0, u[:gl] + (u[gl] + w,) + u[gl + 1:])
                        bucket = front = None
                        pairs = enumerate(labels)
                        if sync:
                            i = bisect_right(mxs, c if c >= U else U)
                            if i > 1:
                                pairs = alive_by_prefix.get(i)
                                if pairs is None:
                                    pairs = alive_by_prefix[i] = [
                                        (j, labels[j]) for j in range(i) if kill[j] >= i] + list(
                                        zip(range(i, n_labels), labels[i:]))
                        # the bound test without assembling T per label: a label with
                        # mx <= h (the image's floor, the prefix's included) completes in at
                        # least its sum and sync plus a term common to the row; one above
                        # it in its own T (lts) plus the row's sum; thresholds widened a
                        # hair so that rounding never cuts what assembling T would keep
                        cu = c if c >= U else U
                        h = cu if cu >= pm else pm
                        base = c + Q + ps
                        thr_lo = upper - iteration_time(base, h, M) + upper * BOUND_SLACK
                        thr_hi = upper - base + upper * BOUND_SLACK
                        for idx, (mx, sm, p, rs, _) in pairs:
                            if need_at[p] > n:
                                continue
                            nr = rs if rs >= r else r
                            if mx <= h:
                                if sm + nr >= thr_lo:
                                    continue
                            elif lts[idx] + nr >= thr_hi:
                                continue
                            nmx = mx if mx >= cu else cu
                            nsm = sm + c + Q  # in this order: the sums of every path add alike
                            if a == 0:
                                opt = iteration_time(nsm + ps, nmx if nmx >= pm else pm, M, nr)
                                if opt < upper:
                                    best = (opt, (b, key, idx, a, g, ci))
                                    # a complete plan: nothing slower is worth extending now
                                    upper = opt
                                continue
                            np_ = p + 1 if p < p_cap else p_cap
                            if bucket is None:
                                bucket = states[a].get(nkey)
                                if bucket is None:
                                    bucket = states[a][nkey] = []
                                    front = fronts[a][nkey] = {}
                                else:
                                    front = fronts[a][nkey]
                            # an image an earlier one of the bucket with the same bottleneck
                            # dominates is the Pareto filter's to drop: dropped now (most are)
                            same = front.get(nmx)
                            if same is None:
                                front[nmx] = [(nsm, np_, nr)]
                            else:
                                for s_, p_, r_ in same:
                                    if s_ <= nsm and p_ <= np_ and r_ <= nr:
                                        break
                                else:
                                    same.append((nsm, np_, nr))
                                    bucket.append((nmx, nsm, np_, nr, (b, key, idx, a, g, ci)))
                                continue
                            bucket.append((nmx, nsm, np_, nr, (b, key, idx, a, g, ci)))
        self.stats["labels"] = labels_total
        return states, best

    def _crossing_floors(self):
        """Per DC ``k0`` and prefix end ``a``: the least occupancy and the least traversal
        of a boundary ``b' <= a`` between two DCs ``k1 < k2 <= k0`` (``inf`` for ``k0 = 0``
        or ``a = 0``, where no prefix crosses a link); ``O(L K)`` from
        :meth:`~chainpipe.tables.CostTables.crossing_floors`."""
        least_u, least_q = self.t.crossing_floors()
        cross_u, cross_q = [], []
        for u, q in zip(least_u.copy(), least_q.copy()):
            u[0] = q[0] = np.inf
            cross_u.append(np.minimum.accumulate(u))
            cross_q.append(np.minimum.accumulate(q))
        return cross_u, cross_q

    def _first_reachable(self, b: int, k: int) -> int:
        """The least ``k0 < k`` whose chain path to ``k`` keeps the boundary at ``b`` within
        the cap (``k`` if none): a longer path is never faster, so the scan stops at the
        first path past the cap and costs only the reachable span."""
        limit = self.cap * (1 + 1e-12)
        k0 = k
        while k0 > 0 and not limit < self.t.occupancy(b, k0 - 1, k):
            k0 -= 1
        return k0

    def _moves(self, b: int, key):
        """The next stage's groups before a state ``key = (k, u)`` at layer ``b``.

        Yields ``(g, k0, local index of g, usage of k0 before the stage, U, Q)``: a group
        ``g`` of a datacenter ``k0 <= k`` with a device left, and the boundary at ``b``
        from ``k0`` to ``k`` (none when nothing is placed yet).
        """
        k, u = key
        first = k == self.K  # nothing placed yet
        t = self.t
        for k0 in range(0 if first else self._first_reachable(b, k), self.K if first else k + 1):
            self.deadline.check()
            if first:
                U = Q = 0.0
            else:
                U = t.occupancy(b, k0, k)
                if self.cap * (1 + 1e-12) < U:
                    continue
                Q = t.traversal(b, k0, k)
            base = u if k0 == k else (0,) * len(self.groups_of[k0])
            for g in self.groups_of[k0]:
                gl = self.local[g]
                if base[gl] >= self.count[g]:
                    continue
                yield g, k0, gl, base, U, Q

    def _backtrack(self, states, parent) -> list[tuple[int, int, int, int, int, int]]:
        """The stages ``(start, end, dc, group in dc, d, t)`` of the plan ending at ``parent``."""
        return backtrack_stages(self.t, states, parent, 4)


class _PerDC:
    """A figure per datacenter ``k``, computed when first asked (a long chain asks few)."""

    def __init__(self, compute):
        self.compute = compute
        self.known: dict[int, object] = {}

    def __call__(self, k: int):
        if k not in self.known:
            self.known[k] = self.compute(k)
        return self.known[k]

    def upto(self, k: int) -> list:
        """The figures of the datacenters before ``k``."""
        return [self(j) for j in range(k)]


def usage_caps(tables: CostTables) -> list[int]:
    """Devices per group a search counts up to: the count, or what ``L`` stages of the
    widest option take if fewer."""
    return [int(min(c, tables.L * tables.widest)) for c in tables.count]


class _LayerCapacity:
    """How many FLOP free devices can hold with every stage's ``C <= B``: a bound that
    sees the layers' granularity, which the spread of rates does not.

    A stage with pair ``c`` on group ``g`` and ``C <= B`` holds at most
    ``fmax(c, B)``, the most FLOP of any layer range whose ``C`` with that pair is at
    most ``B`` and which fits memory at the last position (the least any stage
    stashes). So ``n`` free devices of ``g`` hold at most the best sum of ``fmax`` over
    stages whose widths add up to ``n`` or less: an unbounded knapsack, solved once per
    breakpoint of ``B``. A prefix of ``F`` FLOP fits under ``B`` only if the free
    devices hold ``F``. (Counting layers instead of FLOP was tried: a cheap embedding
    layer lets every device hold "a layer" and the bound says nothing.)
    """

    def __init__(self, tables: CostTables, count: list[int], check=None,
                 need: int | None = None):
        # the least any stage stashes (the last stage's count); a smaller ``need`` holds
        # more and stays a valid floor for any larger stash (a GPipe pipeline of M_p < M)
        need = tables.in_flight(1) if need is None else need
        check = check or (lambda: None)
        #: per group: breakpoints of B, knapsack table [point, n <= n0], LP ratio per point
        #: and the L-stage cap per point (groups with the same options and cap share one)
        self.arrays: list[tuple] = []
        shared: dict = {}
        for g in range(tables.G):
            check()
            opts = tables.options(g)
            key = (id(opts), count[g])
            if key not in shared:
                points, fmax = _most_held(tables, opts, need)
                shared[key] = (points, *_knapsack(fmax, opts.width.tolist(), count[g],
                                                  tables.L, check))
            self.arrays.append(shared[key])
        self._before: dict[tuple, tuple] = {}
        self._prefixes: dict[tuple, tuple] = {}
        self.count = count
        #: the deadline's check, called in the loops over groups
        self.check = check

    @staticmethod
    def affordable(tables: CostTables) -> bool:
        """Whether its tables stay within :data:`KNAPSACK_CELLS` for every group: at most
        one breakpoint per pair and range, times the pairs (a long list of widths on a
        large count would not fit; the search is exact without this bound, only slower)."""
        ranges = tables.L * (tables.L + 1) // 2
        return all(len(tables.pairs(g)) ** 2 * ranges <= KNAPSACK_CELLS
                   for g in range(tables.G))

    def group_many(self, g: int, free: np.ndarray, bottleneck: np.ndarray) -> np.ndarray:
        """FLOP ``free`` devices of group ``g`` hold with every ``C <= bottleneck``
        (arrays of free counts and bottlenecks): the knapsack's value up to its table's
        width, beyond it the LP bound (``free`` times the best FLOP per device, at most
        ``L`` stages of the most one stage holds), an upper bound as the prunes need."""
        breaks, table, ratio, stages_cap = self.arrays[g]
        if not len(breaks):
            return np.zeros(np.shape(bottleneck))
        i = np.maximum(np.searchsorted(breaks, bottleneck, side="right") - 1, 0)
        free = np.minimum(np.asarray(free), self.count[g])
        n0 = table.shape[1] - 1
        got = table[i, np.clip(free, 0, n0)]
        with np.errstate(invalid="ignore", over="ignore"):
            wide = np.minimum(free * ratio[i], stages_cap[i])
        got = np.where(free > n0, np.maximum(wide, table[i, n0]), got)
        below = np.searchsorted(breaks, bottleneck, side="right") - 1 < 0
        return np.where(below | (free <= 0), 0, got)

    def curve(self, before: list[int], here: list[tuple[int, int]]):
        """FLOP held under ``B`` by every device of the groups ``before`` and ``free``
        devices of each ``(group, free)`` in ``here``: breakpoints and values (arrays,
        values non-decreasing), for :meth:`needed`."""
        b_points, b_values = self.before(before)
        points = np.unique(np.concatenate([b_points] + [self.arrays[g][0] for g, _ in here]))
        j = np.searchsorted(b_points, points, side="right") - 1
        values = np.where(j >= 0, b_values[np.maximum(j, 0)] if len(b_values) else 0.0, 0.0)
        for g, free in here:
            values = values + self.group_many(g, np.full(len(points), free), points)
        return points, values

    def for_prefixes(self, before: list[int], here: tuple, flop: np.ndarray):
        """For every prefix FLOP in ``flop``: the least bottleneck under which every
        device of the groups ``before`` and the free ones of ``here`` (as in :meth:`curve`)
        hold it, the same for those of ``here`` alone, and the curve of ``here`` alone;
        computed once per argument (every trial of a run asks for the same ones)."""
        key = (tuple(before), here)
        got = self._prefixes.get(key)
        if got is None:
            local = self.curve([], list(here))
            got = self._prefixes[key] = (self.needed(self.curve(before, list(here)), flop),
                                         self.needed(local, flop), local)
        return got

    @staticmethod
    def held(curve, bottleneck: float) -> float:
        """The FLOP a curve of :meth:`curve` holds under ``bottleneck``."""
        points, values = curve
        i = int(np.searchsorted(points, bottleneck, side="right")) - 1
        return float(values[i]) if i >= 0 else 0.0

    @staticmethod
    def needed(curve, flop):
        """The least bottleneck under which a curve of :meth:`curve` holds ``flop``
        (arrays or scalars); ``inf`` where it never does."""
        points, values = curve
        i = np.searchsorted(values, np.asarray(flop) / _HOLD_SLACK, side="left")
        return np.where(i < len(points), points[np.minimum(i, len(points) - 1)]
                        if len(points) else np.inf, np.inf)

    def before(self, groups: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """FLOP every device of ``groups`` holds as a step function of the bottleneck:
        breakpoints and values, computed once per set of groups (alike groups, which
        share their tables, once per kind: a long chain of one type costs one)."""
        key = tuple(groups)
        if key not in self._before:
            kinds: dict = {}  # (table, count) -> [a group of it, how many]
            for g in groups:
                kind = kinds.setdefault((id(self.arrays[g]), self.count[g]), [g, 0])
                kind[1] += 1
            self.check()
            points = np.unique(np.concatenate([self.arrays[g][0] for g, _ in kinds.values()]
                                              + [np.zeros(0)]))
            values = np.zeros(len(points))
            for g, n in kinds.values():
                self.check()
                values += n * self.group_many(g, np.full(len(points), self.count[g]), points)
            self._before[key] = (points, values)
        return self._before[key]


def _most_held(tables: CostTables, opts, need: int) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints of the bottleneck ``B`` and ``fmax[point, pair]``: the most FLOP one
    stage with that pair holds with ``C <= B`` and memory fitting at the last position."""
    flop = tables.stage_flop
    steps = []  # per pair: (C at which fmax rises, fmax from there on)
    for p in range(len(opts.width)):
        fit = (opts.max_in_flight[p] >= need) & np.isfinite(opts.compute_time[p])
        c, f = opts.compute_time[p][fit], flop[fit]
        order = np.argsort(c, kind="stable")
        c, f = c[order], np.maximum.accumulate(f[order]) if len(f) else f[order]
        rises = np.flatnonzero(np.diff(f, prepend=-1.0) > 0)
        steps.append((c[rises], f[rises]))
    points = np.unique(np.concatenate([x for x, _ in steps] + [np.zeros(0)]))
    fmax = np.zeros((len(points), len(steps)))
    for p, (x, y) in enumerate(steps):
        i = np.searchsorted(x, points, side="right") - 1
        fmax[:, p] = np.where(i >= 0, y[np.maximum(i, 0)] if len(y) else 0.0, 0.0)
    return points, fmax


def _knapsack(fmax: np.ndarray, widths: list[int], n_max: int, layers: int, check):
    """The unbounded knapsack of :class:`_LayerCapacity` per breakpoint, for ``n`` free
    devices up to ``n0 <= n_max`` (``n0`` keeps the table and its work within
    :data:`KNAPSACK_CELLS` and :data:`KNAPSACK_STEPS`, whatever the count or the widths' values), with the LP ratio
    (best FLOP per device) and ``L`` times the most one stage holds for ``n > n0``.

    Returns ``(table [point, n], ratio [point], stages_cap [point])``.
    """
    n_points, w = fmax.shape[0], np.asarray(widths, dtype=float)
    ratio = (fmax / w[None, :]).max(axis=1, initial=0.0)
    stages_cap = layers * fmax.max(axis=1, initial=0.0)
    steps = max(1, len(widths))
    n0 = int(max(0, min(n_max, KNAPSACK_CELLS // max(1, n_points * steps),
                        KNAPSACK_STEPS // steps)))
    best = np.zeros((n_points, n0 + 1))
    usable = [(p, wd) for p, wd in enumerate(widths) if wd <= n0]
    for n in range(1, n0 + 1):
        if n % 64 == 0:
            check()
        best[:, n] = best[:, n - 1]
        for p, wd in usable:
            if wd <= n:
                np.maximum(best[:, n], best[:, n - wd] + fmax[:, p], out=best[:, n])
    return best, ratio, stages_cap


#: cells (breakpoints x free counts x pairs) the capacity knapsack of a group may work
#: through; beyond it, counts are bounded by the LP ratio (weaker, never wrong)
KNAPSACK_CELLS = 20_000_000
#: (free count, pair) steps of that knapsack, each one numpy operation
KNAPSACK_STEPS = 100_000


#: the FLOP capacity is compared with a relative slack, so that rounding in its sums
#: never cuts a prefix that fits exactly
_HOLD_SLACK = 1 + 1e-9

#: from this many options of one group and end on, the bound check runs in numpy (measured:
#: below it the per-call overhead of numpy outweighs the loop it saves)
_VECTOR_MIN = 24


def backtrack_stages(tables: CostTables, states, parent, link: int
                     ) -> list[tuple[int, int, int, int, int, int]]:
    """The stages ``(start, end, dc, group in dc, d, t)`` of a plan, from its last parent.

    ``parent = (b, key, idx, a, g, pair)`` means stage ``[a, b)`` on group ``g`` with that
    ``(d, t)``; the label at ``states[b][key][idx]`` holds the next parent at index ``link``.
    Shared by the version-2 search and the version-3 one (:mod:`.dp_period`).
    """
    stages = []
    while parent is not None:
        b, key, idx, a, g, ci = parent
        opts = tables.options(g)
        stages.append((a, b, int(tables.group_dc[g]), tables.groups[g].index, int(opts.d[ci]),
                       int(opts.t[ci])))
        parent = states[b][key][idx][link]
    return stages
