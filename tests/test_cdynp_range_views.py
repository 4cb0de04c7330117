"""Range views kept across runs: one view (and one set of one-DC instances) per range,
count and objective, in an agent server (``PublicInstance.chain``) and in process
(``LocalOwner.chain``, ``InstanceAgents.with_objective``); nothing of a view changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from chainpipe.io import read
from chainpipe.solvers.cdynp import LocalOwner, public
from chainpipe.solvers.cdynp.public import PublicInstance, range_training

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def inst():
    return read(ROOT / "instances" / "v3" / "medium" / "v3-medium-01.json")


def test_a_range_view_is_kept_and_equals_a_new_one(inst):
    pub = PublicInstance.of(inst)
    a = pub.chain(1, 2, 17)
    assert pub.chain(1, 2, 17) is a
    assert a == PublicInstance(pub.name, pub.model, range_training(pub.training, 17),
                               pub.datacenter_names[1:3], pub.links[1:2])
    # its one-DC instances are kept with it
    dc = inst.datacenters[1]
    assert a.local(dc) is pub.chain(1, 2, 17).local(dc)


@pytest.mark.parametrize("other", [(1, 2, 18, None), (0, 2, 17, None), (1, 3, 17, None),
                                   (1, 2, 17, "classic")])
def test_another_range_count_or_objective_is_another_view(inst, other):
    pub = PublicInstance.of(inst)
    a = pub.chain(1, 2, 17)
    b = pub.chain(*other)
    assert b is not a and b != a
    first, last, m, objective = other
    assert b.datacenter_names == pub.datacenter_names[first:last + 1]
    assert b.microbatches == m
    assert b.training.objective == (objective or pub.training.objective)


def test_the_views_kept_are_bounded(inst, monkeypatch):
    monkeypatch.setattr(public, "CHAINS_KEPT", 3)
    pub = PublicInstance.of(inst)
    views = [pub.chain(0, 1, m) for m in range(1, 4)]
    assert all(pub.chain(0, 1, m) is v for m, v in zip(range(1, 4), views))
    pub.chain(0, 1, 4)  # a fourth: the three kept are dropped first
    assert len(pub.__dict__["_chains"]) == 1
    again = pub.chain(0, 1, 1)
    assert again is not views[0] and again == views[0]


def test_the_owner_in_process_keeps_a_range_and_its_classic_twin(inst):
    owner = LocalOwner(inst, False, 60.0)
    a = owner.chain(0, 1, 9, count_sync=False)
    assert owner.chain(0, 1, 9, count_sync=False) is a
    assert owner.chain(0, 1, 9) is not a  # counting R is another backend
    classic = a.with_objective("classic")
    assert a.with_objective("classic") is classic
    assert classic.public.training.objective == "classic"
    assert classic.count_sync is False
    assert a.public.datacenter_names == tuple(d.name for d in inst.datacenters[:2])
