"""``dp.LayerCapacity``'s curves of free devices, asked in the order a search asks
them (every usage of a DC's groups, after the groups of earlier DCs): the parts it keeps
per frame give the same curve as a capacity that never asked before."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from chainpipe.solvers.dp import LayerCapacity, usage_caps
from chainpipe.tables import CostTables
from helpers import random_hybrid_instance


@pytest.mark.parametrize("seed", range(16))
def test_a_curve_is_the_same_whatever_was_asked_before(seed):
    """For every DC, every set of groups before it (none, or every earlier group) and
    every usage of its groups: the curve and the prefix floors of a capacity that has
    answered every earlier question equal those of a fresh one. It fails when a group's
    part is kept without its frame (the groups before)."""
    inst = random_hybrid_instance(seed, max_layers=5, max_dcs=3)
    t = CostTables(inst)
    count = usage_caps(t)
    shared = LayerCapacity(t, count)
    asked = 0
    for k in range(t.K):
        here_groups = np.flatnonzero(t.group_dc == k).tolist()
        earlier = np.flatnonzero(t.group_dc < k).tolist()
        for before in ([], earlier) if earlier else ([],):
            for frees in itertools.product(*[range(count[g] + 1) for g in here_groups]):
                here = tuple(zip(here_groups, frees))
                got = shared.curve(before, list(here))
                want = LayerCapacity(t, count).curve(before, list(here))
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
                floors = shared.for_prefixes(before, here, t.flop_prefix)[0]
                fresh = LayerCapacity(t, count).for_prefixes(before, here, t.flop_prefix)[0]
                np.testing.assert_array_equal(floors, fresh)
                asked += 1
    assert asked
