"""``gmc-mdp``: load forecast by a grey-Markov model, paths chosen by a Markov decision process.

At every background step the policy observes each span's load (wavelengths in
use, background and jobs, as a fraction) and each DC's GPU load, and forecasts
the next step by GM(1,1) with a Markov-chain correction of its residuals
(:mod:`.forecast`; the forecasts are scored against what then happened).

The MDP: a state is a DC, an action moves to a neighbouring DC, and its reward
is ``-(span load + DC load)`` by the forecast; value iteration over the
remaining hops ``h`` gives ``Q_h(u, v) = r(u, v) + gamma V_{h-1}(v)``. For every
start DC and chain length, following the greedy action (never revisiting a DC)
gives a chain whose value is the start DC's ``-load`` plus its rewards. The
chains holding the job's GPU budget, best value first, are the candidates: the
``k`` best are planned exactly by ``dp``, the plan minimising
``T x (1 + mean forecast load of its spans)`` is placed. On a span forecast
busier than :data:`BUSY`, only the communication-bound wavelengths are
reserved (as ``cba`` computes them); elsewhere the job's whole allowance.
"""

from __future__ import annotations

from .forecast import LoadForecaster
from .network import Chain, edge
from .policies import Policy

#: discount of the MDP
GAMMA = 0.9
#: forecast span load above which only the communication-bound wavelengths are reserved
BUSY = 0.6


class GmcMdp(Policy):
    """Grey-Markov load forecasts and MDP path choice."""

    name = "gmc-mdp"

    def __init__(self, planner):
        super().__init__(planner)
        self.forecaster = LoadForecaster()
        self.net = planner.network

    # ------------------------------------------------------------------ forecasting
    def observe(self, now, state):
        values = {f"span:{a}-{b}": state.span_load((a, b)) for a, b in self.net.spans}
        values.update({f"dc:{d}": state.gpu_load(d) for d in self.net.datacenters})
        self.forecaster.observe(values)

    def span_forecast(self, span, state) -> float:
        return self.forecaster.forecast(f"span:{span[0]}-{span[1]}", state.span_load(span))

    def dc_forecast(self, dc, state) -> float:
        return self.forecaster.forecast(f"dc:{dc}", state.gpu_load(dc))

    def report(self):
        return {"forecast": self.forecaster.error_summary()}

    # ------------------------------------------------------------------ the MDP
    def mdp_chains(self, state) -> list[Chain]:
        """Chains from every start DC and length by the MDP's greedy policy, best value first."""
        g = self.net.graph
        nodes = sorted(g.nodes)
        dc_load = {d: self.dc_forecast(d, state) for d in nodes}
        reward = {(u, v): -(self.span_forecast(edge(u, v), state) + dc_load[v])
                  for u in nodes for v in g.neighbors(u)}
        H = self.planner.planning.max_chain - 1
        V = [{u: 0.0 for u in nodes}]
        Q = [None]
        for h in range(1, H + 1):
            q = {(u, v): reward[u, v] + GAMMA * V[h - 1][v] for (u, v) in reward}
            Q.append(q)
            V.append({u: max((q[u, v] for v in g.neighbors(u)), default=0.0) for u in nodes})
        found: dict[tuple[str, ...], float] = {}
        for s in nodes:
            for length in range(1, H + 2):
                path, value = [s], -dc_load[s]
                for h in range(length - 1, 0, -1):
                    options = [v for v in sorted(g.neighbors(path[-1])) if v not in path]
                    if not options:
                        break
                    v = max(options, key=lambda v: Q[h][path[-1], v])
                    value += reward[path[-1], v]
                    path.append(v)
                if len(path) < length:
                    continue
                key = tuple(path) if path[0] <= path[-1] else tuple(reversed(path))
                found[key] = max(found.get(key, value), value)
        ranked = sorted(found.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))
        return [Chain(p, sum(self.net.km[edge(p[i], p[i + 1])] for i in range(len(p) - 1)))
                for p, _ in ranked]

    def plan_job(self, job, state):
        chains = self.planner.candidates(job, state, self.k, chains=self.mdp_chains(state))
        if not chains:
            self.no_chain(job, state)
            return None

        def wavelengths(c):
            full = self.planner.full_wavelengths(job, state, c)
            busy = [s for s in c.spans if self.span_forecast(s, state) > BUSY]
            if busy:
                _, bound = self.comm_bound(job, state, c, busy)
                if bound is not None:
                    full.update({s: w for s, w in bound.wavelengths.items() if s in busy})
            return full

        def score(c, T):
            if not c.spans:
                return T
            load = sum(self.span_forecast(s, state) for s in c.spans) / len(c.spans)
            return T * (1 + load)

        return self.best_dp(job, state, chains, wavelengths, score)
