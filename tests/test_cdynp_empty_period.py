"""An exact period run with nothing to search is not run
(:func:`chainpipe.solvers.cdynp._empty_period`): when the incumbent bounding a
one-pipeline solve (``solve_chain``'s ``period_bound``) lies under the classic optimum
``T_c``, no plan's ``T`` lies under the bound (none lies under ``T_c``), so the answer is
the classic plan, ``feasible``, with no period message sent; with the bound between
``T_c`` and the classic plan's ``T_e`` the period run still runs."""

from __future__ import annotations

import pytest
from test_cdynp_v3 import _crossing_instance

from chainpipe.deadline import Deadline
from chainpipe.plan import evaluate
from chainpipe.solvers.cdynp import LocalOwner, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options


def _period_messages(out) -> list:
    return [m for m in out.stats.get("messages", []) if m["file"].startswith("period/")]


def test_no_period_run_under_the_classic_optimum():
    skipped = ran = 0
    for seed in range(30):
        inst = _crossing_instance(seed)
        whole = LocalOwner(inst, False, 60).whole()
        free = solve_chain(whole, agent_options(), Deadline(None))
        T_c, T_e = free.stats.get("classic_s"), free.stats.get("classic_plan_s")
        if free.status != "optimal" or T_c is None or T_e <= T_c * (1 + 1e-6):
            continue  # no period run even without a bound
        assert _period_messages(free), seed
        cut = solve_chain(whole, agent_options(), Deadline(None), period_bound=T_c * (1 - 1e-6))
        assert cut.status == "feasible", seed
        assert evaluate(inst, cut.plan).iteration_time_s == pytest.approx(T_e, rel=1e-9)
        assert _period_messages(cut) == [], seed  # nothing ran below the classic optimum
        assert cut.stats["messages"] == free.stats["classic"]["messages"], seed
        skipped += 1
        between = solve_chain(whole, agent_options(), Deadline(None),
                              period_bound=T_c * (1 + 1e-6) + (T_e - T_c) / 2)
        assert _period_messages(between), seed  # a bound above T_c: the run is made
        ran += 1
    assert skipped >= 5 and ran >= 5, (skipped, ran)
