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

from ..deadline import Deadline, TimeUp
from ..plan import Plan
from ..result import OptionError, Outcome
from ..tables import CostTables
from .labels import TRIALS, across_usage, pareto3


def run(instance, *, deadline=None, seed=0, threads=1, log=None, upper_bound=None,
        **options) -> Outcome:
    """Solve ``instance`` to proven optimality (or report what was proven by the limit).

    ``log``, if given, is called with one line per trial bound.
    """
    if options:
        raise OptionError(f"dp: unknown option(s) {', '.join(sorted(options))}")
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
            return Outcome("optimal", plan=Plan.from_tuples(instance, stages), lower_bound=None,
                           stats=stats)
        proven = max(proven, trial)
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
        t = self.t
        L, M, K = t.L, t.M, t.K
        gpipe = t.schedule == "gpipe"
        upper = self.upper
        rate_by_dc = [t.rate[t.group_dc <= k].max() for k in range(K)]
        flop = t.flop_prefix
        layer_flop = np.diff(flop)
        # optimistic completion of a prefix [0, a) on DCs <= k
        prefix_max = np.concatenate(([0.0], np.maximum.accumulate(layer_flop)))
        sum_lb_total = flop[-1] / t.rate.max()
        cap = np.inf if M == 1 else (upper - sum_lb_total) / (M - 1)

        # candidate stages per (group, end b): starts a with C <= cap, memory fits at some position
        C = t.compute_time
        thr = t.max_in_flight
        need = M if gpipe else 1
        cands: list[list[list[tuple[int, float, int]]]] = []
        t_max = 0
        ncand = 0
        for g in range(t.G):
            per_end = [[] for _ in range(L + 1)]
            for b in range(1, L + 1):
                for a in range(b - 1, -1, -1):
                    c = C[g, a, b]
                    if c > cap * (1 + 1e-12):
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
        p_cap = 0 if gpipe else min(M, t_max + 1)

        # boundary figures: U[b][k0][k] and Q for the boundary at layer b between DCs k0 <= k
        X = t.boundary_bytes
        bw, lat = t.path_bandwidth, t.path_latency
        groups_of = [[g for g in range(t.G) if t.group_dc[g] == k] for k in range(K)]
        local = [int(np.sum(t.group_dc[:g] == t.group_dc[g])) for g in range(t.G)]
        count = [int(min(c, L)) for c in t.count]
        Mm1 = M - 1

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
                k, u = key
                first = k == K  # nothing placed yet
                for k0 in range(K if first else k + 1):
                    if first:
                        U = Q = 0.0
                    else:
                        U = X[b] / bw[k0, k]
                        if cap * (1 + 1e-12) < U:
                            continue
                        Q = 2.0 * (lat[k0, k] + U)
                    rmax = rate_by_dc[k0]
                    for g in groups_of[k0]:
                        gl = local[g]
                        if k0 == k:
                            if u[gl] >= count[g]:
                                continue
                            u_next = u[:gl] + (u[gl] + 1,) + u[gl + 1:]
                        else:
                            u_next = tuple(1 if x == gl else 0 for x in range(len(groups_of[k0])))
                        nkey = (k0, u_next)
                        for a, c, n in cands[g][b]:
                            # optimistic completion of the prefix [0, a) on DCs <= k0
                            pre_sum = flop[a] / rmax
                            pre_max = prefix_max[a] / rmax
                            bucket = None
                            for idx, (mx, sm, p, _) in enumerate(labels):
                                if not gpipe and (p + 1 if p < M else M) > n:
                                    continue
                                nmx = mx if mx >= c else c
                                if nmx < U:
                                    nmx = U
                                nsm = sm + c + Q
                                opt = nsm + pre_sum + Mm1 * (nmx if nmx >= pre_max else pre_max)
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
        if best is None:
            return None
        # back-track: parent = (b, key, idx, a, g) means stage [a, b) on group g
        stages = []
        parent = best[1]
        while parent is not None:
            b, key, idx, a, g = parent
            stages.append((a, b, int(t.group_dc[g]), local[g]))
            parent = states[b][key][idx][3]
        return best[0], stages
