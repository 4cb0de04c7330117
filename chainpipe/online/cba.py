"""``cba``: communication-bound-aware assignment, an ILP over candidate chains and bandwidth.

Our reading of the published method (``docs/online.md``): co-model computation
and communication, and give a job only the bandwidth below which
communication, not computation, bounds its iteration. For each waiting job
and each of its ``k`` shortest chains, two candidates are built with the exact
DP: the plan with the job's whole wavelength allowance on every span, and the
*communication-bound* plan: the fewest wavelengths per span (the same number
on each) whose optimal plan stays within ``1 + comm_slack`` of the first.
An ILP then picks at most one candidate per waiting job, all at once,
within the free devices of every GPU group and the free wavelengths of every
span, maximising the jobs placed first, then the iteration times (each as a
fraction above the job's best candidate, beyond the slack of the bound), then
the wavelengths left free: within the bound, the candidate reserving fewer
wavelengths wins.
It is solved by HiGHS through PuLP; with one job waiting, its optimum is the
best single candidate, taken without calling the solver.
"""

from __future__ import annotations

import pulp

from .policies import Policy

#: weight of a job's relative slowdown ``T / T_best - 1`` against placing it (1)
SLOWDOWN_WEIGHT = 0.25
#: weight of the wavelengths a candidate reserves, per wavelength of the network
WAVELENGTH_WEIGHT = 0.01


class CBA(Policy):
    """Communication-bound-aware assignment of the waiting jobs by one ILP per decision."""

    name = "cba"

    def __init__(self, planner):
        super().__init__(planner)
        self.total_wl = max(1, sum(planner.network.wavelengths.values()))
        self.ilps = 0

    def candidates_of(self, job, state) -> list:
        """The job's candidate placements: per chain, the full-allowance plan and the
        communication-bound plan (when it differs)."""
        out = []
        chains = self.planner.candidates(job, state, self.k)
        if not chains:
            self.no_chain(job, state)
        for c in chains:
            full, bound = self.comm_bound(job, state, c)
            if full is None:
                continue
            out.append(full)
            if bound.wavelengths != full.wavelengths:
                out.append(bound)
        return out

    def value(self, p, best_T: float) -> float:
        """What the ILP maximises for candidate ``p`` of a job whose best time is ``best_T``:
        1 for placing it, less its slowdown beyond the communication bound's slack
        (weighted, at most 1), less the share of the network's wavelengths it reserves."""
        slowdown = max(0.0, p.iteration_time_s / best_T - 1.0 - self.planner.planning.comm_slack)
        return (1.0 - SLOWDOWN_WEIGHT * min(slowdown, 1.0)
                - WAVELENGTH_WEIGHT * sum(p.wavelengths.values()) / self.total_wl)

    def place(self, waiting, state, now):
        cands = {job.id: self.candidates_of(job, state) for job in waiting}
        cands = {j: c for j, c in cands.items() if c}
        if not cands:
            return []
        best_T = {j: min(p.iteration_time_s for p in c) for j, c in cands.items()}
        if len(cands) == 1:
            (j, c), = cands.items()
            choice = [max(c, key=lambda p: self.value(p, best_T[j]))]
        else:
            choice = self.solve_ilp(cands, best_T, state)
        for p in choice:
            state.allocate(p)
        return choice

    def solve_ilp(self, cands: dict, best_T: dict, state) -> list:
        """The ILP over every waiting job's candidates; returns the chosen placements."""
        self.ilps += 1
        prob = pulp.LpProblem("cba", pulp.LpMaximize)
        x = {(j, i): prob.add_variable(f"x_{j}_{i}", 0, 1, cat="Binary")
             for j, c in cands.items() for i in range(len(c))}
        prob += pulp.lpSum(self.value(cands[j][i], best_T[j]) * v for (j, i), v in x.items())
        for j, c in cands.items():
            prob += pulp.lpSum(x[j, i] for i in range(len(c))) <= 1
        uses: dict = {}
        for (j, i), v in x.items():
            p = cands[j][i]
            for k, n in p.devices.items():
                uses.setdefault(("gpu", k), []).append(n * v)
            for s, w in p.wavelengths.items():
                uses.setdefault(("span", s), []).append(w * v)
        for (kind, key), terms in uses.items():
            cap = state.free[key] if kind == "gpu" else state.free_wavelengths(key)
            prob += pulp.lpSum(terms) <= cap
        prob.solve(pulp.HiGHS(msg=False))
        chosen = [cands[j][i] for (j, i), v in sorted(x.items()) if (v.value() or 0) > 0.5]
        arrival = {p.job.id: p.job.arrival_s for p in chosen}
        return sorted(chosen, key=lambda p: (arrival[p.job.id], p.job.id))
