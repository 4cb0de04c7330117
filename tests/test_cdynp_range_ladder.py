"""An exact range run's ladder of period bounds (``chainpipe.solvers.cdynp._range_ladder``,
``docs/privacy.md``, "A ladder of bounds inside a range run") gives the answer one run
under the owner's bound gives: the least ``T_p`` when it lies within the bound, else none.
"""

from __future__ import annotations

import sys

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options
from helpers import random_v3_instance


def _run(owner, i, j, m, bound, floor=0.0):
    backend = owner.chain(i, j, m, count_sync=False)
    options = {**agent_options(), "upper_bound": bound, "sync_cap": sys.float_info.max}
    out = solve_chain(backend, options, Deadline(None), probe=False, floor=floor)
    T = None if out.plan is None else backend.evaluation(out.plan).pipelines[0].time_s
    return T, out.stats.get("ladder") or []


def test_the_ladder_finds_the_least_time_or_none():
    """On random v3 ranges of two or more DCs at ``M_p = M``: under a bound 25% above the
    least ``T_p`` (one unbounded run's) the ladder finds that least ``T_p``; under a bound
    a hair below it, nothing; with the least ``T_p`` 3% below as a proven floor, the same.
    Many of the bounded runs climb more than one step (a ladder stopped at its first failed
    step, or taking a failed step for the answer, fails it)."""
    climbed = checked = 0
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
            got, steps = _run(owner, i, j, M, least * 1.25)
            assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
            climbed += len(steps) > 1
            got, _ = _run(owner, i, j, M, least * 1.25, floor=least * 0.97)
            assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
            assert _run(owner, i, j, M, least * (1 - 1e-6))[0] is None, (seed, i, j)
            checked += 1
    assert checked >= 30 and climbed >= 8, (checked, climbed)
