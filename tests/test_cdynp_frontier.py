"""CDynP's frontier runs: a range's ``T_p`` as a function of ``M_p`` without a run per ``M_p``.

The owner's :meth:`RangeRuns.time` takes ``g(i, j, m, theta)`` from one frontier run per
block ``[2^k, 2^(k+1) - 1]`` of ``M_p`` (the range's first DC reports the lines of its
complete plans, ``docs/privacy.md``, "T_p as a function of M_p"), and from a run at ``m``
only where the lines do not settle it. Checked here: every value equals the run at that
``M_p`` (itself exact: ``tests/test_cdynp_v3.py``) on random small v3 instances with
several pipelines, under finite bounds and ``theta``; whole solves equal ``dp``; the
lines themselves; the agents' refusals; the owner's check of a report across hosts.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from chainpipe.deadline import Deadline
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import LocalOwner
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.period import frontier_lines, frontier_value
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.cdynp.remote import _frontier_ok
from helpers import random_v3_instance

RTOL = 1e-9


def _same(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300)


def _period_several(inst) -> bool:
    """``period`` (either schedule), two DCs or more, several pipelines allowed."""
    tr = inst.training
    return (tr.objective == "period" and inst.num_datacenters >= 2
            and max(tr.parallelism.pipelines) >= 2)


def _longer(seed: int):
    """A random v3 instance with 5 or 6 layers and ``M`` from 9 to 16 (plans of up to 6
    stages, so that blocks from 8 on settle some values and not others)."""
    inst = random_v3_instance(seed)
    rng = random.Random(seed)
    base = inst.model.layers
    n = rng.choice([5, 6])
    layers = tuple(dataclasses.replace(base[i % len(base)], name=f"l{i}") for i in range(n))
    training = dataclasses.replace(inst.training, microbatches=rng.randint(9, 16))
    return dataclasses.replace(inst, model=dataclasses.replace(inst.model, layers=layers),
                               training=training)


def _compare_ranges(inst, frontier_from: int) -> tuple[int, int]:
    """Every ``time`` of every range, ``M_p``, ``theta`` and bound against a run at that
    ``M_p``; returns how many values the frontier runs settled and how many not."""
    owner = LocalOwner(inst, False, 60)
    opts = agent_options()
    fr = RangeRuns(owner, opts, Deadline(None))
    fr.frontier_from = frontier_from
    ref = RangeRuns(owner, opts, Deadline(None))
    ref.use_frontier = False
    M, K = inst.training.microbatches, inst.num_datacenters
    for i in range(K):
        for j in range(i, K):
            top = ref.least(i, j, M, math.inf)
            thetas = [math.inf] + ([top.sync] if top is not None and top.sync > 0 else [])
            bounds = [math.inf] + ([top.time * 0.7, top.time * 0.4] if top else [])
            for theta in thetas:
                for bound in bounds:
                    for m in range(1, M + 1):
                        got = fr.time(i, j, m, theta, bound)
                        want = ref.least(i, j, m, theta, bound)
                        want = math.inf if want is None else want.time
                        assert _same(got, want), (inst.name, i, j, m, theta, bound, got, want)
    return fr.settled, fr.unsettled


def test_frontier_values_equal_runs_per_microbatch_count():
    """On the ``period`` instances with several pipelines among 50 random small v3 ones
    (both schedules; blocks from 2 on), every value the owner asks equals a run at that
    ``M_p``; the frontier runs settle most of them (a settled line, or the line of the plan
    at the block's top, meets the least line) and some not (answered by a run)."""
    settled = unsettled = count = 0
    for seed in range(50):  # (24 of them: 930 values settled, 28 not; 100 seeds: 49, 1,659, 45)
        inst = random_v3_instance(seed)
        if not _period_several(inst):
            continue
        count += 1
        s, u = _compare_ranges(inst, 2)
        settled, unsettled = settled + s, unsettled + u
    assert count >= 20
    assert settled > 800 and unsettled > 20, (settled, unsettled)


def test_frontier_values_on_longer_chains():
    """Instances of 5 or 6 layers and ``M`` up to 16, the owner's own blocks (from 8 on)."""
    settled = count = 0
    for seed in range(24):  # (10 of them, 426 values settled; 36 seeds: 15, 702)
        inst = _longer(seed)
        if not _period_several(inst):
            continue
        count += 1
        settled += _compare_ranges(inst, RangeRuns.frontier_from)[0]
    assert count >= 9 and settled > 300, (count, settled)


@pytest.mark.parametrize("longer", [False, True])
def test_solves_with_frontier_runs_equal_dp(monkeypatch, longer):
    """Whole solves with several pipelines by the sweep (``pipelines.QUESTIONS`` off), the
    frontier runs on (blocks from 2 on for the small instances), against ``dp``: same
    status and ``T``."""
    from chainpipe.plan import evaluate
    from chainpipe.solvers.cdynp import pipelines

    monkeypatch.setattr(pipelines, "QUESTIONS", False)

    used = 0
    for seed in range(70 if not longer else 24):
        inst = _longer(seed) if longer else random_v3_instance(seed)
        if not _period_several(inst):
            continue
        monkeypatch.setattr(RangeRuns, "frontier_from", 8 if longer else 2)
        res = solve(inst, "cdynp")
        ref = solve(inst, "dp")
        assert res.status == ref.status, (seed, res.status, ref.status, res.message)
        if ref.status == "optimal":
            assert _same(res.iteration_time, ref.iteration_time), (
                seed, res.iteration_time, ref.iteration_time)
            assert evaluate(inst, res.plan).feasible
        used += bool(res.stats.get("frontier_runs"))
    assert used >= (3 if longer else 5), used


def test_frontier_lines_and_values():
    """The lines least somewhere in the interval, of every line and of the settled ones."""
    lines = [(10.0, 1.0, True), (4.0, 3.0, False), (20.0, 0.5, False), (30.0, 2.0, True),
             (11.0, 1.0, False), (6.0, 2.5, True)]
    got = frontier_lines(lines, 2, 9)
    # (30, 2) and (11, 1) are never least (below (10, 1) in both)
    assert [10.0, 1.0, True] in got and [4.0, 3.0, False] in got and [6.0, 2.5, True] in got
    assert [30.0, 2.0, True] not in got and [11.0, 1.0, False] not in got
    for m in range(2, 10):
        every, settled = frontier_value(got, m)
        assert every == min(f + (m - 1) * p for f, p, _s in lines)
        assert settled == min(f + (m - 1) * p for f, p, s in lines if s)
    assert frontier_value([], 3) == (math.inf, math.inf)


def test_agents_refuse_a_frontier_run_they_cannot_make():
    """Under ``classic``, compressed, below the run's ``M``, or out of range."""
    inst = next(random_v3_instance(s) for s in range(100)
                if _period_several(random_v3_instance(s)))
    public = PublicInstance.of(inst)
    dc = inst.datacenters[0]
    M = inst.training.microbatches
    DCAgent(public, 0, dc, frontier=M + 3)  # accepted
    for kwargs, words in [({"frontier": M - 1}, "m_hi >= M"),
                          ({"frontier": M + 1, "digits": 3}, "exact"),
                          ({"frontier": -1}, "frontier"),
                          ({"frontier": M + 1, "frontier_bound": 0.0}, "frontier_bound")]:
        with pytest.raises(ValueError, match=words):
            DCAgent(public, 0, dc, **kwargs)
    classic = PublicInstance.of(dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, objective="classic")))
    with pytest.raises(ValueError, match="period run"):
        DCAgent(classic, 0, dc, frontier=M + 1)


def test_a_frontier_report_is_checked_across_hosts():
    """The owner across hosts takes a report's lines only in their shape."""
    assert _frontier_ok({"first": 8, "last": 15, "lines": [[1.0, 0.5, True]]})
    for bad in [None, [], {"first": 8, "last": 15}, {"first": 9, "last": 8, "lines": []},
                {"first": 8, "last": 8, "lines": [[1.0, 0.5, True]] * 3},
                {"first": 8, "last": 15, "lines": [[1.0, -0.5, True]]},
                {"first": 8, "last": 15, "lines": [[1.0, float("inf"), True]]},
                {"first": 8, "last": 15, "lines": [[1.0, 0.5, 1]]},
                {"first": 8, "last": 15, "lines": [[1.0, 0.5]]},
                {"first": 8, "last": 15, "lines": [], "x": 1}]:
        assert not _frontier_ok(bad), bad



def test_frontier_runs_across_hosts_equal_in_process(monkeypatch, tmp_path):
    """The owner in this process with its agents on their own TLS servers (``chainpipe
    agent serve`` processes): with frontier runs (blocks from 2 on, so that ``M = 8``
    of ``v3-small-02`` uses them, and the owner's sweep, ``pipelines.QUESTIONS`` off), the
    same plan, ``T`` and byte-identical traces as in process, and frontier runs were made."""
    import json
    from pathlib import Path

    from test_cdynp_hosts import Cluster

    from chainpipe.io import read
    from chainpipe.solvers.cdynp import pipelines, tls
    from chainpipe.solvers.cdynp.remote import solve_remote
    from helpers import assert_same_trace_files

    path = Path(__file__).resolve().parents[1] / "instances/v3/small/v3-small-02-two-pipelines.json"
    monkeypatch.setattr(RangeRuns, "frontier_from", 2)
    monkeypatch.setattr(pipelines, "QUESTIONS", False)
    cluster = Cluster(path, tmp_path / "split")
    try:
        c = cluster.dir / "certs"
        ctx = tls.context("client", c / "ca.pem", c / "owner.pem", c / "owner.key")
        remote, _ev = solve_remote(json.loads(cluster.public.read_text()),
                                   json.loads(cluster.agents.read_text()), ctx,
                                   time_limit=120, trace_dir=tmp_path / "remote")
        local = solve(read(path), "cdynp", trace_dir=tmp_path / "local")
        assert remote.status == local.status == "optimal"
        assert remote.iteration_time == local.iteration_time
        assert remote.plan.to_dict() == local.plan.to_dict()
        assert remote.stats["frontier_runs"] == local.stats["frontier_runs"] > 0
        assert remote.stats["frontier_settled"] == local.stats["frontier_settled"] > 0
        assert_same_trace_files(tmp_path / "local", tmp_path / "remote")
        assert any(p.name.startswith("frontier-") for p in (tmp_path / "remote").iterdir())
    finally:
        cluster.stop()
