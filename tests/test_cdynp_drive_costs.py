"""The per-run shortcuts of a CDynP drive give what the long ways give: the keys a DC's
caches are looked up by (:class:`~chainpipe.solvers.cdynp.agent.DCKey`), a summary's
points checked a field at a time (:func:`~chainpipe.solvers.cdynp.protocol._points_ok`),
the prefix-curve pass's boundary terms for every cap at once
(:func:`~chainpipe.solvers.cdynp.curve._adds`) and the instances and checks kept per
:class:`~chainpipe.solvers.cdynp.public.PublicInstance`."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest

from chainpipe.io import read
from chainpipe.solvers.cdynp import agent, curve, protocol
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.prefix_kernel import SLACK

ROOT = Path(__file__).resolve().parents[1]


def _local(inst, k: int, **training):
    """DC ``k``'s one-DC instance with ``training`` changed, built afresh."""
    t = dataclasses.replace(inst.training, **training)
    return dataclasses.replace(inst, training=t, datacenters=(inst.datacenters[k],), links=())


@pytest.mark.parametrize("name", ["v3-medium-02-small-model", "v3-medium-04-gpipe"])
def test_dc_keys_equal_exactly_when_instances_are(name):
    """A key equals another (and hashes alike) exactly when the instances it stands for,
    with the changes it names, are equal; a copy of the model (not the same object) still
    matches, another model does not. :func:`.agent.floors_key` leaves ``M_p`` out under 1F1B only."""
    inst = read(ROOT / f"instances/v3/medium/{name}.json")
    model_copy = dataclasses.replace(inst.model, layers=tuple(inst.model.layers))
    other = dataclasses.replace(inst.model, layers=inst.model.layers[:-1])
    cases = []
    for k in range(inst.num_datacenters):
        for m in (1, 3, 40):
            for objective in ("classic", "period"):
                local = _local(inst, k, microbatches=m, objective=objective)
                cases.append(local)
                cases.append(dataclasses.replace(local, model=model_copy))
                cases.append(dataclasses.replace(local, model=other))
    for a in cases:
        for b in cases:
            same = a == b
            assert (agent.dc_key(a) == agent.dc_key(b)) == same
            if same:
                assert hash(agent.dc_key(a)) == hash(agent.dc_key(b))
            free = _local(a, 0, microbatches=1, objective="period") == _local(
                b, 0, microbatches=1, objective="period")
            assert (agent.dc_key(a, microbatches=1, objective="period")
                    == agent.dc_key(b, microbatches=1, objective="period")) == free
            gpipe = a.training.schedule == "gpipe"
            want = (_local(a, 0, objective="period", **({} if gpipe else {"microbatches": 1}))
                    == _local(b, 0, objective="period", **({} if gpipe else {"microbatches": 1})))
            assert (agent.floors_key(a) == agent.floors_key(b)) == want
    assert agent.dc_key(cases[0]) != cases[0]  # a key is no instance


def _point(rng: random.Random, period: bool) -> list:
    p = [rng.randint(0, 5)] + [rng.choice([0.0, 1.5, 2, 1e-3, 7e300]) for _ in range(4)]
    if period:
        return p + [[rng.choice([0.0, 3.25, 4]) for _ in range(rng.randint(0, 3))]]
    return p[:4]


_BAD = [True, None, "1", -1, -0.5, math.nan, math.inf, -math.inf, 10**400, 1.5, [1.0], {}]


def _mutated(rng: random.Random, pts: list) -> list:
    """``pts`` with one value, a hull or a point's shape broken (or left as it is)."""
    pts = [list(p) if not isinstance(p, list) else [*p[:5], *(
        [list(p[5])] if len(p) == 6 else [])] for p in pts]
    p = rng.choice(pts)
    what = rng.randrange(6)
    if what == 0:
        p[rng.randrange(len(p) if len(p) == 4 else 5)] = rng.choice(_BAD)
    elif what == 1 and len(p) == 6:
        p[5] = rng.choice([p[5] + [rng.choice(_BAD)], (1.0,), None, 2.0])
    elif what == 2:
        p.append(1.0)
    elif what == 3:
        pts[pts.index(p)] = tuple(p)
    elif what == 4:
        p.pop()
    return pts


def test_points_ok_agrees_with_the_point_by_point_check(monkeypatch):
    """Random entries, valid and broken (a bool, null, string, negative, NaN, infinity,
    an integer past a float, a float stage count, a tuple, a wrong length, a bad hull):
    :func:`.protocol._points_ok` says yes only where the point-by-point check passes, and
    says yes to every valid entry of exact lists and numbers (the fast way is taken)."""
    rng = random.Random(7)
    checked = {"ok": 0, "bad": 0}
    for _ in range(3000):
        period = rng.random() < 0.5
        pts = [_point(rng, period) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.8:
            pts = _mutated(rng, pts)
        entry = {"b": 1, "bw": 1.0, "points": pts}
        with monkeypatch.context() as m:
            m.setattr(protocol, "_points_ok", lambda pts: False)
            try:
                protocol._check_entry(0, entry)
                slow = True
            except protocol.ProtocolError:
                slow = False
        fast = protocol._points_ok(pts)
        assert not fast or slow, pts
        if slow and all(type(p) is list for p in pts) and len({len(p) for p in pts}) == 1:
            assert fast, pts
        checked["ok" if slow else "bad"] += 1
    assert min(checked.values()) > 500, checked


def test_adds_are_the_per_cap_terms():
    """:func:`.curve._adds` gives, cap by cap, the terms of the boundary before a label's
    first stage as one cap at a time computes them (to the bit)."""
    rng = np.random.default_rng(3)
    L1 = 12
    grid = 2.0 ** (np.arange(-20, 5) / 4)
    links = [(rng.random(L1) * 3, rng.random(L1) * 5) for _ in range(2)]
    links[1] = (np.full(L1, np.inf), np.full(L1, np.inf))  # DC 1: no link in
    own, up = curve._adds(grid, links[0], links[1])
    inner = np.zeros(L1, dtype=bool)
    inner[1:-1] = True
    for i, lam in enumerate(grid):
        reach = float(lam) * (1 + SLACK)
        for got, (U, Q) in ((own[i], links[0]), (up[i], links[1])):
            want = np.where(inner, np.where(U <= reach, Q, np.inf), 0.0)
            assert np.array_equal(got, want)


def test_public_keeps_one_local_and_expect():
    """An agent's one-DC instance and a link's :class:`.protocol.Expect` are built once per
    :class:`PublicInstance` and equal those built afresh."""
    inst = read(ROOT / "instances/v3/medium/v3-medium-02-small-model.json")
    public = PublicInstance.of(inst)
    for k, dc in enumerate(inst.datacenters):
        got = public.local(dc)
        assert got is public.local(dc)
        assert got == dataclasses.replace(inst, datacenters=(dc,), links=())
        if k:
            assert public.expect(k, k - 1) is public.expect(k, k - 1)
            assert public.expect(k, k - 1) == public._expect(k, k - 1)
