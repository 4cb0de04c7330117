"""Background traffic on the fibre spans: a seeded AR(1) load per span.

Every ``change_s`` seconds, each span's target load is
``clip(load + swing * z, 0, 1)`` of its wavelengths, rounded, where ``z``
follows ``z' = rho z + sqrt(1 - rho^2) e`` with ``e`` standard normal: a
stationary process with standard deviation ``swing`` whose steps are
correlated by ``rho`` (``background.correlation``). Each span draws from its own
stream, so the traffic is the same whatever the policy does. A scenario may give
a trace of loads instead (``background.trace``), one step per ``change_s``.
"""

from __future__ import annotations

import math

from .jobs import stream_rng
from .network import Edge, Network
from .scenario import Background


class BackgroundTraffic:
    """The background load of every span, step by step.

    Parameters
    ----------
    network : Network
    spec : Background
    seed : int
    """

    def __init__(self, network: Network, spec: Background, seed: int):
        self.spec = spec
        self.network = network
        self.rngs = {s: stream_rng(seed, f"background/{s[0]}-{s[1]}") for s in network.spans}
        self.z = {s: self.rngs[s].gauss(0.0, 1.0) for s in network.spans}
        self.loads = {s: 0.0 for s in network.spans}  # of the trace
        self.steps = 0

    def step(self) -> dict[Edge, int]:
        """The next targets: wavelengths per span; the first call gives step 0."""
        if self.spec.trace is not None:
            if self.steps < len(self.spec.trace):
                self.loads.update(dict(self.spec.trace[self.steps]))
            self.steps += 1
            return {s: round(load * self.network.wavelengths[s])
                    for s, load in self.loads.items()}
        out = {}
        rho = self.spec.correlation
        for s in self.network.spans:
            frac = min(1.0, max(0.0, self.spec.load + self.spec.swing * self.z[s]))
            out[s] = round(frac * self.network.wavelengths[s])
            self.z[s] = rho * self.z[s] + math.sqrt(1 - rho * rho) * self.rngs[s].gauss(0.0, 1.0)
        return out
