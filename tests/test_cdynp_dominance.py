"""The dominance among a DC's stage options at every microbatch count at once
(:func:`chainpipe.solvers.cdynp.local.dominance_by_count`), which the agents' classic
label DP keeps across ``M_p`` (:meth:`~chainpipe.solvers.cdynp.local.LocalDP._dominated`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from chainpipe.instance import Instance
from chainpipe.solvers.cdynp.agent import own_tables
from chainpipe.solvers.cdynp.local import LocalDP, dominance_by_count
from chainpipe.tables import dominated_options
from helpers import random_v3_instance


def _local(inst: Instance, k: int, M: int) -> Instance:
    training = dataclasses.replace(inst.training, microbatches=M)
    return Instance(inst.name, inst.model, training, (inst.datacenters[k],), ())


def test_dominance_by_count_is_the_dominance_at_each_count():
    """On random v3 DCs (with and without a ``sync_cap``), built at a count ``M0``: at every
    ``M <= M0`` the thresholds give :func:`dominated_options` of the limits capped at ``M``
    (and in-flight limits differing across ``M`` change it on many: a rule that ignores
    the count fails)."""
    moved = checked = 0
    for seed in range(30):
        inst = random_v3_instance(seed)
        if inst.training.schedule == "gpipe":
            continue
        for k in range(inst.num_datacenters):
            for cap in (None, 1.0):
                tables = own_tables(_local(inst, k, 12), cap)
                for g in range(tables.G):
                    o = tables.options(g)
                    ok = o.max_in_flight >= 1
                    T1, B = dominance_by_count(ok, o.compute_time, o.max_in_flight,
                                               o.sync_time, o.width)
                    seen = set()
                    for M in range(1, 13):
                        N = np.minimum(o.max_in_flight, M)
                        want = dominated_options(ok, o.compute_time, N, o.sync_time, o.width)
                        got = (M <= T1) | ((M > o.max_in_flight) & B)
                        assert (got == want).all(), (seed, k, cap, g, M)
                        seen.add(want.tobytes())
                    checked += 1
                    moved += len(seen) > 1
    assert checked >= 40 and moved >= 1, (checked, moved)


def _random_options(rng, P: int, shape: tuple, sync=(0.0, 1.0, 2.0)):
    """``(C, R, N, W)``: option arrays of ``P`` pairs with many ties (times from a few
    values, ``nan`` and ``inf`` among them; ``R`` from ``sync``; limits -1 to 8; widths 1,
    2 and 4, ascending)."""
    C = rng.choice([1.0, 2.0, 3.0, math.inf, math.nan], size=shape)
    R = rng.choice(list(sync), size=shape)
    N = rng.integers(-1, 9, size=shape)
    W = np.sort(rng.choice([1, 2, 4], size=P))
    return C, R, N, W


def test_dominance_by_count_on_random_options():
    """The same on random option arrays with many ties (times from a few values, ``nan``
    and ``inf`` among them; limits 0 to 8): at every count 1 to 9, and the dominance
    changes with the count on most draws."""
    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(200):
        P = int(rng.integers(2, 6))
        C, R, N, W = _random_options(rng, P, (P, 3, 3))
        ok = N >= 1
        T1, B = dominance_by_count(ok, C, N, R, W)
        seen = set()
        for M in range(1, 10):
            want = dominated_options(ok, C, np.minimum(N, M), R, W)
            assert ((M <= T1) | ((M > N) & B) == want).all(), M
            seen.add(want.tobytes())
        moved += len(seen) > 1
    assert moved >= 100, moved


def test_candidates_kept_across_counts_equal_those_built_afresh():
    """The classic DP's candidate runs at each ``M_p``, with the dominance kept from a
    larger count, equal those built from that count's options alone."""
    from chainpipe.solvers.cdynp import local

    for seed in range(12):
        inst = random_v3_instance(seed)
        if inst.training.schedule == "gpipe":
            continue
        for M in (9, 4, 2, 7):
            tables = own_tables(_local(inst, 0, M), None)
            kept = LocalDP(tables, position_cap=M - 1)._direct_candidates(math.inf, tops=True)
            with local._DOMINANCE_LOCK:
                local._DOMINANCE.clear()
            fresh = LocalDP(tables, position_cap=M - 1)._direct_candidates(math.inf, tops=True)
            assert _same(kept, fresh), (seed, M)


def _same(a, b) -> bool:
    (ra, wa), (rb, wb) = a, b
    if wa != wb or len(ra) != len(rb):
        return False
    for ga, gb in zip(ra, rb):
        for xa, xb in zip(ga, gb):
            if len(xa) != len(xb):
                return False
            for (w1, c1, r1, t1), (w2, c2, r2, t2) in zip(xa, xb):
                if w1 != w2 or c1 != c2 or not np.array_equal(r1, r2) or list(t1) != list(t2):
                    return False
    return True


def test_the_compiled_dominance_is_the_interpreted_one():
    """:func:`chainpipe.solvers.cdynp.local.dominated` (the compiled kernel at a count above
    every limit) equals :func:`dominated_options` on random option arrays with many ties
    (``nan`` and ``inf`` among the times, limits from -1 to 8, equal widths), and on the
    options of random v3 DCs under both schedules."""
    from chainpipe.solvers.cdynp.local import dominated

    rng = np.random.default_rng(11)
    some = 0
    for _ in range(300):
        P = int(rng.integers(1, 7))
        shape = (P, 3, 4)
        C, R, N, W = _random_options(rng, P, shape, (0.0, 1.0, 2.0, math.nan))
        ok = rng.random(shape) < 0.8
        want = dominated_options(ok, C, N, R, W)
        assert (dominated(ok, C, N, R, W) == want).all()
        some += bool(want.any())
    assert some >= 150, some
    checked = 0
    for seed in range(20):
        inst = random_v3_instance(seed)
        for k in range(inst.num_datacenters):
            tables = own_tables(_local(inst, k, 7), None)
            for g in range(tables.G):
                o = tables.options(g)
                ok = o.max_in_flight >= (7 if inst.training.schedule == "gpipe" else 1)
                want = dominated_options(ok, o.compute_time, o.max_in_flight, o.sync_time,
                                         o.width)
                got = dominated(ok, o.compute_time, o.max_in_flight, o.sync_time, o.width)
                assert (got == want).all(), (seed, k, g)
                checked += 1
    assert checked >= 20, checked
