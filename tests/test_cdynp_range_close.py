"""An exact range run's ladder puts its next bound close above a dear miss
(``chainpipe.solvers.cdynp.RANGE_CLOSE``, ``dp_ranges.close_step``): the answer is still
the least ``T_p`` (or none), and the close steps are taken."""

from __future__ import annotations

import sys

from chainpipe.deadline import Deadline
from chainpipe.solvers import dp_ranges
from chainpipe.solvers.cdynp import LocalOwner, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options
from helpers import random_v3_instance


def _run(owner, i, j, m, bound):
    backend = owner.chain(i, j, m, count_sync=False)
    options = {**agent_options(), "upper_bound": bound, "sync_cap": sys.float_info.max}
    out = solve_chain(backend, options, Deadline(None), probe=False)
    T = None if out.plan is None else backend.evaluation(out.plan).pipelines[0].time_s
    return T, [s["upper_bound"] for s in out.stats.get("ladder") or []]


def test_close_steps_keep_the_least_time(monkeypatch):
    """Every miss made dear (``CLOSE`` at 0 labels): on random v3 ranges of two or more DCs
    at ``M_p = M``, under a bound 25% above the least ``T_p`` the ladder still finds it,
    and under a bound a hair below it nothing; many ladders take a close step (1.5% above
    the step before, where the 3% ladder had a wider gap)."""
    monkeypatch.setattr(dp_ranges, "CLOSE", 0)
    close = checked = 0
    for seed in range(40):
        inst = random_v3_instance(seed)
        K, M = inst.num_datacenters, inst.microbatches
        if K < 2 or M < 2 or inst.training.objective != "period":
            continue
        owner = LocalOwner(inst, False, 60)
        for i, j in ((0, K - 1), (K - 2, K - 1)):
            least, _ = _run(owner, i, j, M, None)
            if least is None:
                continue
            got, bounds = _run(owner, i, j, M, least * 1.25)
            assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
            close += any(abs(b / a - 1 - dp_ranges.CLOSE_STEP) < 1e-9
                         for a, b in zip(bounds, bounds[1:]))
            assert _run(owner, i, j, M, least * (1 - 1e-6))[0] is None, (seed, i, j)
            checked += 1
    assert checked >= 30 and close >= 8, (checked, close)
