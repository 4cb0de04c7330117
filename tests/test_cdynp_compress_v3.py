"""CDynP's compressed mode under contract version 3 (issue 32: every message under 16 KiB
at a realised gap under 1%).

The compressed solve runs the exact mode's search (the owner's seed, its ladder with the
prefix-curve pass, ``dp``'s questions for several pipelines) on compressed summaries and
a coarse prefix-curve table (``docs/privacy.md``, "Compressed mode under version 3").
Checked here: every message of a ``v3/medium`` solve under the size target, the coarse
table a floor under the exact one, the realised gap on random small v3 instances below
what ``docs/privacy.md`` states, and the status never ``optimal`` (nor a lower bound
claimed) without a proof.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chainpipe.io import read
from chainpipe.plan import evaluate
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import curve, guarantee_factor
from helpers import v3_dp_reference

ROOT = Path(__file__).resolve().parents[1]
MEDIUM = ROOT / "instances" / "v3" / "medium"
#: the issue's target for every message
TARGET_BYTES = 16 * 1024
#: the compressed options the benchmarks measure (``docs/privacy.md``)
OPTIONS = {"digits": 3, "max_entries": 4}
#: the realised gap stated for random small v3 instances under :data:`OPTIONS`
#: (``docs/privacy.md``): the largest of the seeds below
CLAIMED_GAP = 0.01
RTOL = 1e-9


def _sizes(res) -> list[int]:
    return [m["bytes"] for m in (res.stats or {}).get("messages", [])]


@pytest.mark.parametrize("name", ["v3-medium-01", "v3-medium-03-slow-sync8"])
def test_every_message_of_a_medium_solve_is_under_the_target(name, tmp_path):
    """Every message of every run (probes, classic and period runs, the ladder's runs with
    their prefix-curve tables, range runs) of a compressed ``v3/medium`` solve is below
    16 KiB, as written to the trace; the exact solve's largest is more than three times
    the compressed one's (so the compression is what keeps them small)."""
    inst = read(MEDIUM / f"{name}.json")
    res = solve(inst, "cdynp", trace_dir=str(tmp_path), **OPTIONS)
    assert res.status == "feasible" and res.plan is not None, res.message
    sizes = _sizes(res)
    files = [p for p in tmp_path.rglob("*.json")]
    assert len(files) == len(sizes) > 20
    assert max(p.stat().st_size for p in files) == max(sizes)
    assert max(sizes) < TARGET_BYTES, max(sizes)
    curves = [json.loads(p.read_bytes()) for p in files if "-prefix-" in p.name]
    curves = [m["curve"] for m in curves if m.get("curve")]
    # the prefix-curve pass runs under 1F1B (its tables one bucket wide, compressed)
    assert bool(curves) == (inst.training.schedule == "1f1b")
    assert all(len(row) == 1 for table in curves for cap in table for row in cap)
    exact = solve(inst, "cdynp")
    # (the exact solve's largest: 13,488 B on -01 and 57,219 B on -03 since the summaries'
    # curve cut, against 3,796 and 3,895 B compressed; 33,482 B on -01 before the cut)
    assert exact.status == "optimal" and max(_sizes(exact)) > 3 * max(sizes)


def test_the_coarse_table_is_a_floor_under_the_exact_one():
    """A compressed run's grid is :data:`.curve.COMPRESSED_CAP_STEPS` per doubling, and its
    table, sent as one bucket (the least over the excess buckets) and read back into every
    bucket, gives the next DC a table whose least over the buckets is at or below the exact
    run's, cap by cap and prefix end by prefix end; and the message is a few times
    smaller."""
    from chainpipe.solvers.cdynp.agent import DCAgent
    from chainpipe.solvers.cdynp.public import PublicInstance

    inst = read(MEDIUM / "v3-medium-01.json")
    public = PublicInstance.of(inst)
    low, top = 10.0, 11.5
    tables = {}
    for compressed in (False, True):
        opts = OPTIONS if compressed else {}
        a0 = DCAgent(public, 0, inst.datacenters[0], curve_low=low, curve_top=top,
                     upper_bound=top, **opts)
        msg = a0.prefix(None)
        a1 = DCAgent(public, 1, inst.datacenters[1], curve_low=low, curve_top=top,
                     upper_bound=top, **opts)
        a1.prefix(json.loads(json.dumps(msg)))
        tables[compressed] = (a1.curve_grid, a1.curve.table, len(json.dumps(msg)))
    grid_e, table_e, bytes_e = tables[False]
    grid_c, table_c, bytes_c = tables[True]
    steps = np.log2(grid_c[1:] / grid_c[:-1]) * curve.COMPRESSED_CAP_STEPS
    assert np.allclose(steps, 1.0)
    assert table_c.shape[2] == table_e.shape[2] == curve.BUCKETS
    matched = 0
    for i, lam in enumerate(grid_c):
        # the exact grid's table at the same cap (a coarse cap is an exact one, 2^(2n/32),
        # where both grids reach)
        j = int(np.argmin(np.abs(grid_e - lam)))
        if abs(grid_e[j] / lam - 1) > 1e-12:
            continue
        matched += 1
        # what the DCs' filters and the floor read: the least over the excess buckets (a
        # prefix read as of the least excess admits every continuation of its true one)
        least_c, least_e = table_c[i].min(axis=1), table_e[j].min(axis=1)
        assert np.all(least_c <= least_e * (1 + 1e-12)), i
    assert matched >= 3, matched
    assert bytes_c * 3 < bytes_e, (bytes_c, bytes_e)


def _compressed_v3(inst) -> bool:
    """Whether a solve of ``inst`` sends a summary that compression touches (a v3 chain of
    two DCs or more)."""
    return inst.num_datacenters > 1


def test_realised_gap_on_random_v3_instances_is_below_the_claim():
    """On 80 random small v3 instances (both objectives and schedules, several pipelines
    on many) the compressed plan is a real one, no faster than ``dp``'s optimum, and within
    :data:`CLAIMED_GAP` of it (the largest realised gap measured is what docs/privacy.md
    states)."""
    gaps = []
    for seed in range(80):
        inst, ref = v3_dp_reference(seed)
        res = solve(inst, "cdynp", **OPTIONS)
        if ref.status != "optimal":
            assert res.status in (ref.status, "no_solution"), (seed, res.status)
            continue
        assert res.plan is not None, (seed, res.status, res.message)
        ev = evaluate(inst, res.plan)
        assert ev.feasible and abs(ev.iteration_time_s - res.iteration_time) <= (
            RTOL * res.iteration_time)
        T, opt = res.iteration_time, ref.iteration_time
        assert T >= opt * (1 - RTOL), (seed, T, opt)
        gaps.append(T / opt - 1)
        assert T <= opt * (1 + CLAIMED_GAP), (seed, T, opt)
    assert len(gaps) >= 50, len(gaps)


def test_realised_gap_on_larger_random_chains_is_below_the_claim():
    """Random chains of up to 4 DCs and 8 layers made version 3 (``period``, one or two
    pipelines; with widths and degrees, so summaries hold many points): the compressed
    plan within :data:`CLAIMED_GAP` of ``dp``'s optimum on every one. (Coarser options,
    ``digits=1 max_entries=1``, lose up to 7.4% on these seeds: the compression binds.)"""
    from helpers import hybrid_chain_as_period

    checked = 0
    for seed in range(24):
        inst = hybrid_chain_as_period(seed)
        ref = solve(inst, "dp")
        if ref.status != "optimal":
            continue
        res = solve(inst, "cdynp", **OPTIONS)
        T, opt = res.iteration_time, ref.iteration_time
        assert opt * (1 - RTOL) <= T <= opt * (1 + CLAIMED_GAP), (seed, T, opt)
        assert evaluate(inst, res.plan).feasible
        checked += 1
    assert checked >= 20, checked


def test_status_is_never_optimal_without_a_proof():
    """Compressed: ``feasible`` on every chain of two DCs or more (``optimal`` only where
    nothing is compressed: one DC under version 3), no lower bound under ``max_entries``,
    and with ``digits`` alone a lower bound at or below ``dp``'s optimum and the plan
    within the guarantee factor of it."""
    checked = 0
    for seed in range(40):
        inst, ref = v3_dp_reference(seed)
        if ref.status != "optimal" or not _compressed_v3(inst):
            continue
        res = solve(inst, "cdynp", **OPTIONS)
        assert res.status == "feasible", (seed, res.status)
        assert res.lower_bound is None, (seed, res.lower_bound)
        res = solve(inst, "cdynp", digits=2)
        assert res.status == "feasible", (seed, res.status)
        factor = guarantee_factor(inst.num_datacenters, digits=2)
        opt = ref.iteration_time
        assert res.lower_bound is not None and res.lower_bound <= opt * (1 + RTOL), seed
        assert res.iteration_time <= factor * opt * (1 + RTOL), seed
        checked += 1
    assert checked >= 15, checked
