"""A search skipped by the floor under an upstream prefix
(:meth:`chainpipe.solvers.cdynp.agent.DCAgent._upstream_floor`): a DC after the first
runs no label search when no plan holding one of its own labels lies within the run's
bound, and sends only what it passes through. Under a bound a hair above ``dp``'s
optimum the classic run still finds it, searches are skipped on many instances, and with
the floor taken as :meth:`~chainpipe.solvers.cdynp.agent.DCAgent._lower_bound` under
:meth:`~chainpipe.solvers.cdynp.agent.DCAgent._upstream_prefix` (a boundary counted
twice, the plans ending in the DC left out) some instance loses its optimum (the test
can fail)."""

from __future__ import annotations

import random

from chainpipe.plan import evaluate
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.local import IN, OWN
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.cdynp.runner import run_in_process
from chainpipe.solvers.dp import run as dp_run
from helpers import random_instance


def _instances(n: int):
    """Random classic instances on 2 or 3 DCs with at least 4 layers."""
    seed, got = 0, 0
    while got < n:
        rng = random.Random(seed)
        inst = random_instance(seed, max_layers=8, microbatches=rng.choice((2, 4, 8)))
        seed += 1
        if inst.num_datacenters < 2 or inst.num_layers < 4:
            continue
        yield seed - 1, inst
        got += 1


def _run(inst, bound: float):
    opts = {**agent_options(), "upper_bound": bound}
    return run_in_process(PublicInstance.of(inst), list(inst.datacenters), **opts)


def _wrong_floor(self, base):
    """The floor as first proposed: :meth:`DCAgent._lower_bound` under the upstream
    prefix."""
    return self._lower_bound(base, self._upstream_prefix())


def test_skipped_searches_keep_the_optimum(monkeypatch):
    checked, skipped, lost = 0, 0, 0
    for seed, inst in _instances(30):
        ref = dp_run(inst)
        if ref.plan is None:
            continue
        want = evaluate(inst, ref.plan).iteration_time_s
        got = _run(inst, want * (1 + 1e-6))
        assert got.estimate is not None and abs(got.estimate - want) <= 1e-9 * want, (
            seed, got.estimate, want)
        checked += 1
        skipped += any(a.get("skipped") for a in got.agents)
        with monkeypatch.context() as m:
            m.setattr(DCAgent, "_upstream_floor", _wrong_floor)
            bad = _run(inst, want * (1 + 1e-6)).estimate
            lost += bad is None or bad > want * (1 + 1e-9)
    # (measured: 27 checked, searches skipped on 4, the first floor lost the optimum on 7)
    assert checked >= 24 and skipped >= 3 and lost >= 2, (checked, skipped, lost)


def _chain(inst):
    """One unbounded classic run, the agents kept: each DC's floor over its own labels
    (recorded before its search) and the agents."""
    public = PublicInstance.of(inst)
    agents = [DCAgent(public, k, dc) for k, dc in enumerate(inst.datacenters)]
    msg = None
    for a in agents:
        msg = a.prefix(msg)
    msg = None
    for a in reversed(agents):
        msg = a.backward(msg)
    return agents


def _holders(agents, k: int, origin) -> list[int]:
    """The DCs ``>= k`` whose own labels the plan part ``origin`` of DC ``k`` holds."""
    out = []
    while origin is not None:
        if origin[0] == "own":
            out.append(k)
            dp, i = agents[k]._dp, origin[1]
            while True:
                _start, _g, _c, (kind, j, p) = dp.label(i)
                if kind != OWN:
                    break
                i = j
            if kind != IN:
                return out
            e, q = j, p
        else:
            _, e, q = origin
        k += 1
        origin = agents[k]._out_origin[e][q]
    return out


def test_the_floor_lies_under_every_plan_holding_an_own_label(monkeypatch):
    """Per instance, with every DC's two floors recorded from its base labels: every
    complete plan of the unbounded run has ``T`` at or above :meth:`DCAgent._lower_bound`
    under the own-devices prefix of the DC it starts in and :meth:`DCAgent._upstream_floor`
    of each later DC whose own labels it holds, the latter within 20% on a few (a floor
    20% higher fails); the first floor proposed is above some such plan on several
    instances."""
    floors: dict = {}
    search = DCAgent._search

    def record(self, base, ub):
        if self.k > 0:
            floors[self.k] = (self._lower_bound(base, self._prefix_bound()),
                              self._upstream_floor(base),
                              self._lower_bound(base, self._upstream_prefix()))
        return search(self, base, ub)

    monkeypatch.setattr(DCAgent, "_search", record)
    checked, close, wrong = 0, 0, 0
    for seed, inst in _instances(30):
        floors.clear()
        agents = _chain(inst)
        bad = False
        for k, a in enumerate(agents):
            for _r, bn, sm, s, i in a._dp.points.get(0, ()):
                T = a._T(bn, sm, s)
                for h in _holders(agents, k, ("own", i)):
                    if h == 0:
                        continue
                    floor = floors[h][0 if h == k else 1]
                    assert T >= floor * (1 - 1e-12), (seed, k, h, T, floors[h])
                    checked += 1
                    close += h != k and T < 1.2 * floor
                    bad |= T < floors[h][2] * (1 - 1e-9)
        wrong += bad
    # (measured: 126 plans checked, 43 against _upstream_floor, 3 of them within 20% of
    # it, the least 14.6% above; the first floor wrong on 11 instances)
    assert checked >= 100 and close >= 2 and wrong >= 3, (checked, close, wrong)
