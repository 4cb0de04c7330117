"""The exact chain dynamic program (solver ``dp``): chainpipe's reference optimum.

The search walks the layers backwards, from ``L`` down to ``0``. A *state* is
``(b, p, k, u)``: the layers ``[b, L)`` are placed in ``p`` stages (capped where
1F1B memory stops depending on it), the first of them runs in datacenter ``k``,
and ``u`` counts the devices of each group of ``k`` already used. Each state
keeps the Pareto frontier of its partial plans' two cost terms, the bottleneck
``max(C_s, U_s)`` and the sum ``sum(C_s + Q_s)``; the optimum is the best
``sum + (M - 1) * max`` over the frontiers at ``b = 0``. Since
``T = sum + (M-1) max`` is increasing in both terms, a dominated partial plan
never completes into a better plan than its dominator (``docs/dp.md`` proves it).

Bounding makes it fast: a trial upper bound ``U`` on the optimum restricts
stages to those with ``C <= (U - sum lower bound) / (M - 1)``, boundaries the
same way, and prunes labels whose optimistic completion reaches ``U``. If no
plan beats ``U``, the optimum is at least ``U`` (a proven lower bound) and the
search repeats with a larger trial. The first trial that succeeds is exact.
"""

from __future__ import annotations

import numpy as np

from .. import cost
from ..deadline import Deadline, TimeUp
from ..plan import Plan
from ..result import OptionError, Outcome, number_option
from ..tables import CostTables
from .labels import TRIALS, across_usage, pareto3


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
    tables = CostTables(instance)
    reason = tables.infeasibility_reason()
    if reason:
        return Outcome("infeasible", message=reason, lower_bound=None)
    lb = tables.lower_bound
    proven = lb  # the optimum is at least this
    stats = {"trials": []}
    trials = [lb * (1 + d) for d in TRIALS]
    if upper_bound is not None:
        trials = [u for u in trials if u < upper_bound] + [upper_bound * (1 + 1e-9)]
    for trial in trials:
        search = _Search(tables, trial, deadline)
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


class _Search:
    """One bounded run of the DP: finds the optimum if it is below ``upper``."""

    def __init__(self, tables: CostTables, upper: float, deadline: Deadline):
        self.t = tables
        self.upper = upper
        self.deadline = deadline
        self.stats = {"labels": 0, "states": 0, "candidate_stages": 0}

    def run(self):
        """The best complete plan below ``upper`` as ``(T, stages)``, or ``None``."""
        t = self.t
        self.cap = np.inf if t.M == 1 else (self.upper - self._sum_lower_bound()) / (t.M - 1)
        self.cands, t_max = self._candidate_stages()
        # 1F1B memory depends on a stage's position only up to t_max + 1, and a plan has at
        # most L stages: the cap keeps every structure independent of M
        self.p_cap = 0 if t.schedule == "gpipe" else min(t.M, t_max + 1, t.L)
        states, best = self._label_loop()
        return None if best is None else (best[0], self._backtrack(states, best[1]))

    def _sum_lower_bound(self) -> float:
        """``sum_s C_s`` of any plan is at least the total FLOP on the fastest device."""
        return cost.compute_time(self.t.flop_prefix[-1], self.t.rate.max())

    def _candidate_stages(self):
        """Per group and end ``b``: ``(a, C, max in flight)`` of stages ``[a, b)`` worth trying.

        A stage is kept when ``C <= cap`` and memory fits at some position. Also
        returns the largest in-flight limit below ``M``, where 1F1B positions stop mattering.
        """
        t, L, M = self.t, self.t.L, self.t.M
        C, thr = t.compute_time, t.max_in_flight
        need = t.in_flight(1)  # the least a stage stashes (the last stage's count)
        limit = self.cap * (1 + 1e-12)
        cands: list[list[list[tuple[int, float, int]]]] = []
        t_max = ncand = 0
        for g in range(t.G):
            self.deadline.check()
            per_end = [[] for _ in range(L + 1)]
            for b in range(1, L + 1):
                for a in range(b - 1, -1, -1):
                    c = C[g, a, b]
                    if c > limit:
                        break
                    n = int(thr[g, a, b])
                    if n < need:
                        break  # memory only grows as the stage takes more layers
                    per_end[b].append((a, float(c), n))
                    if n < M:
                        t_max = max(t_max, n)
                ncand += len(per_end[b])
            cands.append(per_end)
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
        self.K = K
        self.rate_by_dc = [t.rate[t.group_dc <= k].max() for k in range(K)]
        flop = t.flop_prefix
        # optimistic completion of a prefix [0, a) on DCs <= k
        prefix_max = np.concatenate(([0.0], np.maximum.accumulate(np.diff(flop))))
        # boundary figures: U[b][k0][k] and Q for the boundary at layer b between DCs k0 <= k
        self.occupancy = t.boundary_occupancy.tolist()
        self.traversal = t.boundary_traversal.tolist()
        # in-flight count of a new stage placed before p stages (p capped at p_cap)
        need_at = [t.in_flight(p + 1) for p in range(p_cap + 1)]
        self.groups_of = [[g for g in range(t.G) if t.group_dc[g] == k] for k in range(K)]
        self.local = [int(np.sum(t.group_dc[:g] == t.group_dc[g])) for g in range(t.G)]
        self.count = [int(min(c, L)) for c in t.count]
        iteration_time = cost.iteration_time

        # states[b]: dict (k, u) -> labels (mx, sm, p, parent); parent = (b, key, idx, a, g).
        # p (stages placed, capped at p_cap) is a third Pareto criterion: fewer is better,
        # since it is all that 1F1B memory depends on.
        states: list[dict] = [dict() for _ in range(L + 1)]
        best = None  # (T, parent) of the best complete plan
        states[L][(K, ())] = [(0.0, 0.0, 0, None)]  # the empty suffix; sentinel DC K
        labels_total = 0
        check = 0
        for b in range(L, 0, -1):
            layer_states = states[b]
            if not layer_states:
                continue
            for key in list(layer_states):
                layer_states[key] = pareto3(layer_states[key], p_cap)
            if len(layer_states) > 1:
                across_usage(layer_states)
            labels_total += sum(len(v) for v in layer_states.values())
            self.stats["states"] += len(layer_states)
            for key, labels in layer_states.items():
                check += 1
                if check % 64 == 0:
                    self.deadline.check()
                for g, nkey, U, Q, rmax in self._moves(b, key):
                    for a, c, n in cands[g][b]:
                        # optimistic completion of the prefix [0, a) on DCs <= k0
                        pre_sum = cost.compute_time(flop[a], rmax)
                        pre_max = cost.compute_time(prefix_max[a], rmax)
                        bucket = None
                        for idx, (mx, sm, p, _) in enumerate(labels):
                            if need_at[p] > n:
                                continue
                            nmx = mx if mx >= c else c
                            if nmx < U:
                                nmx = U
                            nsm = sm + c + Q
                            opt = iteration_time(nsm + pre_sum,
                                                 nmx if nmx >= pre_max else pre_max, M)
                            if opt >= upper:
                                continue
                            if a == 0:
                                if best is None or opt < best[0]:
                                    best = (opt, (b, key, idx, a, g))
                                continue
                            if bucket is None:
                                bucket = states[a].setdefault(nkey, [])
                            bucket.append((nmx, nsm, p + 1 if p < p_cap else p_cap,
                                           (b, key, idx, a, g)))
        self.stats["labels"] = labels_total
        return states, best

    def _moves(self, b: int, key):
        """The next stage's options before a state ``key = (k, u)`` at layer ``b``.

        Yields ``(g, next key, U, Q, fastest rate of DCs <= k0)``: the group ``g`` of a
        datacenter ``k0 <= k`` with a device left, and the boundary at ``b`` from ``k0`` to
        ``k`` (none when nothing is placed yet).
        """
        k, u = key
        first = k == self.K  # nothing placed yet
        for k0 in range(self.K if first else k + 1):
            if first:
                U = Q = 0.0
            else:
                U = self.occupancy[b][k0][k]
                if self.cap * (1 + 1e-12) < U:
                    continue
                Q = self.traversal[b][k0][k]
            for g in self.groups_of[k0]:
                gl = self.local[g]
                if k0 == k:
                    if u[gl] >= self.count[g]:
                        continue
                    u_next = u[:gl] + (u[gl] + 1,) + u[gl + 1:]
                else:
                    u_next = tuple(1 if x == gl else 0 for x in range(len(self.groups_of[k0])))
                yield g, (k0, u_next), U, Q, self.rate_by_dc[k0]

    def _backtrack(self, states, parent) -> list[tuple[int, int, int, int]]:
        """The stages ``(start, end, dc, group in dc)`` of the plan ending at ``parent``."""
        # parent = (b, key, idx, a, g) means stage [a, b) on group g
        stages = []
        while parent is not None:
            b, key, idx, a, g = parent
            stages.append((a, b, int(self.t.group_dc[g]), self.local[g]))
            parent = states[b][key][idx][3]
        return stages
