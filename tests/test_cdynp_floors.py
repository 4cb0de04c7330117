"""A CDynP agent's floors under a prefix's period (:mod:`chainpipe.solvers.cdynp.floors`).

Each DC bounds the period of the prefix before a label by what its own free devices hold
(``dp``'s knapsack on its own tables) plus ``A B`` for the devices upstream (``A``: the
prefix pass's FLOP/s bound). Checked here: the least bottleneck of a step function plus a
line against a brute force; at DC 1 (``A = 0``) the floor is ``dp``'s own; exact solves
still equal ``dp`` on random 5- and 6-layer v3 chains; and the floors prune (a range run
of ``v3-medium-01`` keeps a few hundred labels, not thousands).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from test_cdynp_frontier import _longer

from chainpipe.deadline import Deadline
from chainpipe.io import read
from chainpipe.solvers.cdynp import LocalOwner
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.floors import Floors, least_bottleneck
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from chainpipe.solvers.cdynp.public import PublicInstance
from helpers import check_cdynp_equals_dp


def least_bottleneck_dense(points: np.ndarray, values: np.ndarray, rate: float,
                           flop: np.ndarray) -> np.ndarray:
    """:func:`least_bottleneck` by the definition: every step's least ``B`` per value of
    ``flop``, the least of them (``O(len(flop) len(points))``: the reference the bisection must equal)."""
    flop = np.asarray(flop, dtype=float)
    starts = np.concatenate(([0.0], np.asarray(points, dtype=float)))
    held = np.concatenate(([0.0], np.asarray(values, dtype=float)))
    ends = np.concatenate((starts[1:], [np.inf]))
    need = flop[:, None] - held[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        lin = np.where(need <= 0, 0.0, need / rate if rate > 0 else np.inf)
    cand = np.maximum(starts[None, :], lin)
    cand = np.where(cand < ends[None, :], cand, np.inf)
    # held(B) = held[i] exactly on [starts[i], ends[i]): a candidate at ends[i] belongs to
    # the next step, whose own candidate is at most it
    out = cand.min(axis=1)
    out[flop <= 0] = 0.0
    return out

ROOT = Path(__file__).resolve().parents[1]


def _brute(points, values, rate, F) -> float:
    """The least ``B`` among the candidates (every step's start and every step's line
    crossing) at which the step function plus ``rate B`` reaches ``F``."""
    if F <= 0:
        return 0.0

    def held(B):
        i = int(np.searchsorted(points, B, side="right")) - 1
        return float(values[i]) if i >= 0 else 0.0

    cands = list(points) + [0.0]
    if rate > 0:
        cands += [max(0.0, (F - v) / rate) for v in [0.0, *values]]
    ok = [B for B in cands if held(B) + rate * B >= F * (1 - 1e-12)]
    return min(ok, default=math.inf)


@pytest.mark.parametrize("seed", range(40))
def test_least_bottleneck_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 6)
    points = np.sort(np.array([rng.uniform(0.1, 10) for _ in range(n)]))
    values = np.cumsum([rng.uniform(0, 5) for _ in range(n)])
    rate = rng.choice([0.0, 0.0, rng.uniform(0.1, 3)])
    flop = np.array([0.0] + [rng.uniform(0, 20) for _ in range(8)])
    got = least_bottleneck(points, values, rate, flop)
    for F, b in zip(flop, got):
        want = _brute(points, values, rate, F)
        assert (math.isinf(b) and math.isinf(want)) or b == pytest.approx(want, rel=1e-9)


def test_first_dc_floor_is_dps():
    from chainpipe.solvers.dp import HOLD_SLACK, LayerCapacity, usage_caps

    inst = read(ROOT / "instances/v3/medium/v3-medium-01.json")
    pub = PublicInstance.of(inst)
    agent = DCAgent(pub, 0, inst.datacenters[0])
    t = agent.tables
    floors = Floors(t, 0.0)
    cap = LayerCapacity(t, usage_caps(t))
    for used in (0, 2, 8):
        usage = (used,) + (0,) * (t.G - 1)
        here = [(g, int(t.count[g]) - x) for g, x in enumerate(usage)]
        want = cap.needed(cap.curve([], here), t.flop_prefix)
        got = floors.period(usage)
        assert np.allclose(got[1:], want[1:], rtol=1e-12) or np.array_equal(got[1:], want[1:])
        assert got[0] == 0.0 and HOLD_SLACK > 1


@pytest.mark.parametrize("seed", range(30))
def test_exact_equals_dp_on_longer_chains(seed):
    check_cdynp_equals_dp(_longer(seed))


def test_floors_prune_a_range_run():
    inst = read(ROOT / "instances/v3/medium/v3-medium-01.json")
    runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
    g = 9.708592152127837  # dp's least T_p of DCs 0..1 with M_p = 31
    got = runs.least(0, 1, 31, math.inf, g * (1 + 1e-4))
    assert got is not None and got.time == pytest.approx(g, rel=1e-9)
    assert runs.labels < 1000  # 8,000 before the floors


def test_own_tables_kept_per_record_and_cap_class():
    """A DC's tables under a ``sync_cap`` are kept per record and cap class
    (:func:`~chainpipe.solvers.cdynp.agent.cap_class`): caps that keep the same options
    share one object (and its derived caches); a cap that keeps one option more does not,
    and its tables offer that option."""
    from chainpipe.solvers.cdynp.agent import cap_class, own_tables

    inst = read(ROOT / "instances/v3/medium/v3-medium-01.json")
    agent = DCAgent(PublicInstance.of(inst), 2, inst.datacenters[2], sync_cap=0.05)
    base = own_tables(agent.local, None)
    cls = cap_class(base, 0.05)
    assert 0.05 <= cls < 0.06
    assert own_tables(agent.local, 0.05) is agent.tables
    assert own_tables(agent.local, cls) is agent.tables  # the same options kept
    assert own_tables(agent.local, (0.05 + cls) / 2) is agent.tables
    above = own_tables(agent.local, cls * (1 + 1e-6))  # keeps the options at R = cls
    assert above is not agent.tables

    def fitting(tables) -> int:
        return sum(int((tables.options(g).max_in_flight >= 0).sum()) for g in range(tables.G))

    assert fitting(above) > fitting(agent.tables)
    assert own_tables(agent.local, 1e9) is own_tables(agent.local, 2e9)  # every option
    other = DCAgent(PublicInstance.of(inst), 3, inst.datacenters[3], sync_cap=0.05)
    assert other.tables is not agent.tables


def test_floors_of_every_cap_are_the_uncapped_tables():
    """Every run of a DC, under any ``sync_cap``, takes the one :class:`Floors` built on
    its uncapped tables (``FLOORS_PER_CAP`` off): the same object for every cap and none,
    equal to floors built on the uncapped tables, and nowhere above the floors of the
    capped tables (the knapsack counts every option: a floor under any cap's plans).
    With ``FLOORS_PER_CAP`` on, a cap that cuts options gets floors of its own."""
    from chainpipe.solvers.cdynp import agent as agent_module
    from chainpipe.solvers.cdynp.agent import own_tables

    inst = read(ROOT / "instances/v3/medium/v3-medium-01.json")
    agent_module._FLOORS.clear()
    got, higher = [], 0
    for cap in (None, 0.05, 0.2, 1e9):
        agent = DCAgent(PublicInstance.of(inst), 2, inst.datacenters[2], sync_cap=cap)
        agent._upstream_flops = 1e15
        got.append(agent._floors())
        capped = Floors(agent.tables, 1e15)
        for u in ((0,) * agent.tables.G, tuple(int(c) // 2 for c in agent.tables.count)):
            mine, theirs = got[-1].period(u), capped.period(u)
            assert np.all(mine <= theirs), (cap, u)
            higher += int(np.sum(mine < theirs))
    assert all(f is got[0] for f in got)
    fresh = Floors(own_tables(agent.local, None), 1e15)
    u = (0,) * agent.tables.G
    assert np.array_equal(got[0].period(u), fresh.period(u))
    assert higher > 0  # some cap cuts options that the uncapped floors count
    agent_module._FLOORS.clear()
    try:
        agent_module.FLOORS_PER_CAP = True
        per_cap = DCAgent(PublicInstance.of(inst), 2, inst.datacenters[2], sync_cap=0.05)
        per_cap._upstream_flops = 1e15
        assert per_cap._floors() is not got[0]
        assert np.array_equal(per_cap._floors().period(u),
                              Floors(per_cap.tables, 1e15).period(u))
    finally:
        agent_module.FLOORS_PER_CAP = False
        agent_module._FLOORS.clear()


def test_capped_tables_take_the_uncapped_lower_bound():
    """A DC's capped tables take :attr:`CostTables.lower_bound` from its uncapped ones
    (:func:`~chainpipe.solvers.cdynp.agent.own_tables`): the bound reads the devices'
    rates and counts, no option, so it equals the bound of tables capped afresh."""
    from chainpipe.solvers.cdynp.agent import _cap_sync
    from chainpipe.tables import CostTables

    inst = read(ROOT / "instances/v3/medium/v3-medium-03-slow-sync8.json")
    for k in range(inst.num_datacenters):
        for cap in (0.001, 0.05, 0.3):
            agent = DCAgent(PublicInstance.of(inst), k, inst.datacenters[k], sync_cap=cap)
            fresh = CostTables(agent.local)
            _cap_sync(fresh, cap)
            assert "lower_bound" in agent.tables.__dict__ or agent.tables.single_device
            assert agent.tables.lower_bound == fresh.lower_bound, (k, cap)


@pytest.mark.parametrize("seed", range(60))
def test_least_bottleneck_bisection_equals_dense(seed):
    """The bisection gives exactly the least of every step's candidate (the dense
    definition), on steps with repeated breakpoints, a breakpoint at 0, flat values and
    rate 0, at values of ``flop`` on the steps' own crossings too."""
    rng = random.Random(seed)
    n = rng.randint(0, 30)
    points = np.sort(np.array([rng.choice([0.0, 1.0, 2.5, rng.uniform(0, 10)])
                               for _ in range(n)]))
    values = np.cumsum([rng.choice([0.0, 1.0, rng.uniform(0, 5)]) for _ in range(n)])
    rate = rng.choice([0.0, 1.0, rng.uniform(0.01, 3)])
    flop = [0.0, -1.0, *(rng.uniform(0, 3 * n + 5) for _ in range(40))]
    flop += [v + rate * p for p, v in zip(points, values)]  # on a crossing
    flop = np.array(flop)
    got = least_bottleneck(points, values, rate, flop)
    want = least_bottleneck_dense(points, values, rate, flop)
    assert np.array_equal(got, want)


def test_least_bottleneck_bisection_on_real_curves():
    """On ``v3-medium-03``'s DC curves (every usage of two groups, upstream bounds 0 and
    the prefix pass's order of magnitude) the bisection equals the dense definition."""
    from chainpipe.solvers.dp import HOLD_SLACK, LayerCapacity, usage_caps

    inst = read(ROOT / "instances/v3/medium/v3-medium-03-slow-sync8.json")
    checked = 0
    for k in range(inst.num_datacenters):
        agent = DCAgent(PublicInstance.of(inst), k, inst.datacenters[k])
        t = agent.tables
        count = usage_caps(t)
        capacity = LayerCapacity(t, count)
        flop = np.asarray(t.flop_prefix, dtype=float) / HOLD_SLACK
        for used in range(0, int(t.count[0]) + 1, max(1, int(t.count[0]) // 5)):
            here = [(g, int(t.count[g]) - (used if g == 0 else 0)) for g in range(t.G)]
            points, values = capacity.curve([], here)
            for rate in (0.0, float(t.rate.sum()), 10 * float(t.rate.sum())):
                assert np.array_equal(least_bottleneck(points, values, rate, flop),
                                      least_bottleneck_dense(points, values, rate, flop))
                checked += 1
    assert checked >= 12


def test_floors_shared_across_counts_under_1f1b():
    """A DC's floors are built once for every ``M_p`` and both objectives under 1F1B (the
    knapsack at the least stash, 1, does not read them), once per ``M_p`` under GPipe, and
    they equal floors built on the tables of that ``M_p``."""
    import dataclasses

    from chainpipe.solvers.cdynp import agent as agent_module

    for name, shared in (("v3-medium-01", True), ("v3-medium-04-gpipe", False)):
        inst = read(ROOT / f"instances/v3/medium/{name}.json")
        agent_module._FLOORS.clear()
        got = []
        for m, objective in ((7, "period"), (30, "period"), (30, "classic")):
            training = dataclasses.replace(inst.training, microbatches=m, objective=objective)
            one = dataclasses.replace(inst, training=training)
            agent = DCAgent(PublicInstance.of(one), 1, one.datacenters[1], sync_cap=1e9)
            agent._upstream_flops = 1e15
            got.append(agent._floors())
            fresh = Floors(agent.tables, 1e15)
            for u in ((0,) * agent.tables.G, tuple(int(c) // 2 for c in agent.tables.count)):
                assert np.array_equal(got[-1].period(u), fresh.period(u)), (name, m, u)
        assert (got[0] is got[1] is got[2]) == shared, name
        assert got[1] is got[2]  # the objective is never read


@pytest.mark.parametrize("name", ["v3-medium-02-small-model", "v3-medium-04-gpipe"])
def test_options_kept_across_counts_equal_fresh_ones(name):
    """A DC's options at ``M_p``, taken from those kept at a larger count (in-flight
    limits capped), equal those its tables of ``M_p`` build, for counts asked rising and
    falling; a smaller count asked first is replaced by the larger one."""
    import dataclasses

    from chainpipe.solvers.cdynp import agent as agent_module
    from chainpipe.tables import CostTables

    inst = read(ROOT / f"instances/v3/medium/{name}.json")
    agent_module._OPTIONS.clear()
    agent_module._TABLES.clear()
    for m in (3, 64, 1, 17, 40, 64, 2):
        training = dataclasses.replace(inst.training, microbatches=m)
        one = dataclasses.replace(inst, training=training)
        for k in range(inst.num_datacenters):
            local = DCAgent(PublicInstance.of(one), k, one.datacenters[k]).local
            got, fresh = agent_module.own_tables(local, None), CostTables(local)
            for g in range(got.G):
                a, b = got.options(g), fresh.options(g)
                for field in ("d", "t", "width", "compute_time", "max_in_flight",
                              "sync_time"):
                    assert np.array_equal(getattr(a, field), getattr(b, field)), (m, k, field)
            key = dataclasses.replace(local, training=dataclasses.replace(
                local.training, microbatches=1, objective="period"))
            assert agent_module._OPTIONS[key][0] == (3 if m == 3 else 64)
