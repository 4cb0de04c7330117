"""The helpers of experiments/what_runs.py (issue 30, item 7): version-3 copies, MAN
overrides, cuts of the chain and the split plans built from per-range classic optima."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

what_runs = pytest.importorskip("what_runs")

from chainpipe.instances import generate  # noqa: E402
from chainpipe.plan import evaluate  # noqa: E402


def small():
    return generate("hybrid-small", 1, datacenters=3, microbatches=8)


def test_ranges_are_every_contiguous_cut():
    cuts = [[(r.start, r.stop) for r in g] for g in what_runs.ranges(4, 2)]
    assert cuts == [[(0, 1), (1, 4)], [(0, 2), (2, 4)], [(0, 3), (3, 4)]]
    assert len(list(what_runs.ranges(4, 3))) == 3
    assert [[(r.start, r.stop) for r in g] for g in what_runs.ranges(3, 3)] == [
        [(0, 1), (1, 2), (2, 3)]]


def test_v3_copy_and_with_man_change_only_what_they_say():
    inst = small()
    v3 = what_runs.v3_copy(inst, "classic", (1, 2), sync_period=8, microbatches=4)
    assert v3.training.objective == "classic" and v3.parallelism.pipelines == (1, 2)
    assert v3.training.pipeline_sync_period == 8 and v3.microbatches == 4
    assert v3.datacenters == inst.datacenters and v3.layers == inst.layers
    fast = what_runs.with_man(inst, gbit=400, latency_s=1e-3)
    assert all(link.bandwidth_bytes_per_s == 400e9 / 8 and link.latency_s == 1e-3
               for link in fast.links)
    assert what_runs.with_man(inst).links == inst.links


@pytest.mark.parametrize("shares", ["even", "speed"])
def test_split_plans_are_feasible_and_share_every_microbatch(shares):
    inst = what_runs.v3_copy(small(), "period", (2,))
    found = what_runs.best_split(inst, 2, shares)
    assert found is not None
    ev, plan, groups = found
    assert plan.num_pipelines == 2 and len(groups) == 2
    assert sum(p.microbatches for p in plan.pipelines) == inst.microbatches
    again = evaluate(inst, plan)
    assert again.feasible and again.iteration_time_s == ev.iteration_time_s
    # T = max T_p + max R + R_X / H, the contract's section 4.4
    assert ev.iteration_time_s == pytest.approx(
        max(p.time_s for p in ev.pipelines) + ev.sync_s + ev.cross_sync_s)
    if shares == "even":
        assert sorted(p.microbatches for p in plan.pipelines) == [4, 4]
