"""The owner's floor ``(M_p - 1) lambda`` from the period floors range runs reported
(:meth:`chainpipe.solvers.cdynp.questions.OwnerRangeTimes._period_line`): which reports it
reads, and that it lies under the least ``T_p`` on random v3 ranges."""

from __future__ import annotations

import math
import types

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, alone
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from chainpipe.solvers.cdynp.questions import OwnerRangeTimes
from helpers import random_v3_chains


def _owner_ranges(schedule: str, K: int = 3) -> OwnerRangeTimes:
    public = types.SimpleNamespace(training=types.SimpleNamespace(schedule=schedule),
                                   num_datacenters=K)
    # (no floor runs: the floors read here are the reported lines alone)
    runs = types.SimpleNamespace(owner=types.SimpleNamespace(public=public),
                                 deadline=Deadline(None), floors=lambda i, j, make=True: None)
    return OwnerRangeTimes(runs)


def test_period_line_reads_the_reports_it_may():
    """A run on DCs 0..1 at ``M_p = 40`` that reported ``lambda = 0.25``: under 1F1B the
    floor at ``M_p = 20`` is ``19 lambda`` on 0..1 and on the ranges inside it (0..0, 1..1),
    not on 0..2 nor 2..2, nor at a larger ``theta``; under GPipe only from ``M_p = 40`` on
    (below it the proven floor itself is not raised either)."""
    ranges = _owner_ranges("1f1b")
    ranges.proven[(0, 1)] = [(40, 1.0, 12.0, 0.25)]
    assert ranges._floor(0, 1, 20, 1.0) == 19 * 0.25
    assert ranges._floor(0, 0, 20, 0.5) == 19 * 0.25
    assert ranges._floor(1, 1, 20, 1.0) == 19 * 0.25
    assert ranges._floor(0, 2, 20, 1.0) == 0.0
    assert ranges._floor(2, 2, 20, 1.0) == 0.0
    assert ranges._floor(0, 1, 20, 2.0) == 0.0
    assert ranges._floor(0, 1, 60, 1.0) == max(12.0 + 20 * 0.25, 59 * 0.25)
    gpipe = _owner_ranges("gpipe")
    gpipe.proven[(0, 1)] = [(40, 1.0, 12.0, 0.25)]
    assert gpipe._floor(0, 1, 20, 1.0) == 0.0
    assert gpipe._floor(0, 1, 40, 1.0) == 12.0
    assert gpipe._floor(0, 1, 41, 1.0) == max(12.0 + 0.25, 40 * 0.25)


def test_period_line_is_under_the_least_time():
    """On random v3 instances: the period floor a range run at ``M_p = M`` reported, times
    ``m - 1``, is at most the least ``T_p`` of a run at ``m = 2`` and ``M // 2``, on every
    range of two DCs or more and each range inside it, under 1F1B."""
    checked = 0
    for seed, inst in random_v3_chains(4, objective=None, schedule="1f1b"):
        K, M = inst.num_datacenters, inst.microbatches
        alone.forget()
        runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
        for i in range(K - 1):
            lam = runs._run(i, i + 1, M, math.inf, math.inf)[1]
            for a, b in ((i, i + 1), (i, i), (i + 1, i + 1)):
                for m in (2, M // 2):
                    got = runs._run(a, b, m, math.inf, math.inf)[0]
                    if got is not None:
                        assert (m - 1) * lam <= got.time * (1 + 1e-9), (seed, a, b, m)
                        checked += lam > 0
        if checked >= 30:
            break
    assert checked >= 30, checked
