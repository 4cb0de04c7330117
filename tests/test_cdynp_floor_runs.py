"""A range's floor runs (agent option ``floors_only``, ``pipelines.RangeRuns.floors``):
the owner's floor under a range's ``T_p`` at any ``M_p``, as ``dp`` takes its prefix
curve's (``docs/privacy.md``, "Floor runs").

The floor read off the curve (``curve.least_time``) never lies above the range's least
``T_p`` (``dp``'s own answer), is close to it on many ranges (so a floor a tenth stronger
would be wrong somewhere), and the owner's search with the floors reaches ``dp``'s optimum;
a floor run that is not an exact period run under 1F1B of two DCs or more is refused."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from chainpipe.deadline import Deadline
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import LocalOwner, questions
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.curve import least_time
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns, _merged
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.cdynp.remote import _fills_ok
from chainpipe.solvers.dp_pipelines import shared_holds
from chainpipe.solvers.dp_ranges import RangeTimes
from chainpipe.tables import CostTables
from helpers import random_period_chains

ROOT = Path(__file__).resolve().parents[1]
MEDIUM = ROOT / "instances" / "v3" / "medium" / "v3-medium-03-slow-sync8.json"


def _instances(n: int, pipelines=(1,)):
    """Random period instances under 1F1B on 2 or 3 DCs, 5 to 12 layers, many microbatches
    (floors at many ``M_p``; rows of fewer than ``protocol.WITHHELD`` layers are not sent)."""
    return random_period_chains(n, first_seed=500, microbatches=(8, 12, 20),
                                pipelines=pipelines)


def _least(ref: RangeTimes, i: int, j: int, m: int) -> float:
    """``dp``'s least ``T_p`` on DCs ``i..j`` at ``M_p = m`` (every option), ``inf`` if none."""
    got = ref.at_most(i, j, m, 1e300, math.inf)
    return math.inf if got is None else got[0]


def _checked(inst, ms) -> list[tuple[float, float]]:
    """``(floor, least T_p)`` per range of two DCs or more and ``M_p`` of ``ms``, each floor
    checked to lie under its least."""
    tables = CostTables(inst)
    ref = RangeTimes(tables, Deadline(None), math.inf, shared_holds(tables, Deadline(None)))
    runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
    out = []
    K = inst.num_datacenters
    for i in range(K):
        for j in range(i + 1, K):
            curve = runs.floors(i, j)
            assert curve is not None, (i, j)
            grid, fills = curve
            assert len(grid) == len(fills) and np.all(np.diff(grid) > 0)
            for m in ms:
                floor, g = least_time(grid, fills, m), _least(ref, i, j, m)
                assert floor <= g * (1 + 1e-9), (i, j, m, floor, g)
                out.append((floor, g))
    assert runs.floor_runs >= 2 * K * (K - 1) // 2
    return out


def test_floors_lie_under_the_least_time_and_near_it():
    """Every range of ``v3-medium-03`` (4 DCs) at several ``M_p``: the floor is at most
    ``dp``'s least ``T_p`` and at least 0.9 of it on many (a floor 12% stronger would lie
    above it there)."""
    pairs = _checked(read(MEDIUM), (2, 9, 31))
    near = sum(f >= 0.9 * g for f, g in pairs if math.isfinite(g))
    assert len(pairs) == 18 and near >= 6, (len(pairs), near, pairs)


def test_floors_lie_under_the_least_time_on_random_instances():
    """Random chains of 2 or 3 DCs: every range's floor at ``M_p`` 2, 5 and ``M`` lies under
    ``dp``'s least ``T_p``, and is above half of it on many."""
    pairs = []
    for _seed, inst in _instances(12):
        pairs += _checked(inst, sorted({2, 5, inst.microbatches}))
    finite = [(f, g) for f, g in pairs if math.isfinite(g)]
    assert len(finite) >= 30 and sum(f >= 0.5 * g for f, g in finite) >= 10, finite


def test_the_owner_with_floor_runs_reaches_dps_optimum():
    """Random chains allowing 1 to 3 pipelines: ``cdynp`` (floor runs on) proves ``dp``'s
    optimum, and the floors were made and read."""
    made = 0
    for _seed, inst in _instances(10, pipelines=(1, 2, 3)):
        want, got = solve(inst, "dp"), solve(inst, "cdynp")
        assert got.status == want.status
        if want.iteration_time is not None:
            assert math.isclose(got.iteration_time, want.iteration_time, rel_tol=1e-9)
        made += got.stats.get("floor_runs", 0) > 0
    assert made >= 3, made


def test_merged_curves_keep_the_larger_fill():
    grid, fills = _merged((np.array([1.0, 2.0, 4.0]), np.array([np.inf, 5.0, 3.0])),
                          (np.array([1.5, 2.0]), np.array([np.inf, 6.0])))
    assert grid.tolist() == [1.0, 1.5, 2.0, 4.0]
    assert fills.tolist() == [np.inf, np.inf, 6.0, 3.0]


def test_least_time_reads_the_cap_below_the_first_fit():
    """A plan with period in ``(1, 2]`` has fill at least 5 and ``m - 1`` periods above 1;
    one past the grid's top has ``m - 1`` periods above 4 (and a fill the curve does not
    bound: with one microbatch, nothing is known)."""
    grid, fills = np.array([1.0, 2.0, 4.0]), np.array([np.inf, 5.0, 3.0])
    assert least_time(grid, fills, 11) == min(5.0 + 10 * 1.0, 3.0 + 10 * 2.0, 10 * 4.0)
    assert least_time(grid, fills, 1) == 0.0


def test_a_floor_run_outside_its_kind_is_refused():
    inst = read(MEDIUM)
    public = PublicInstance.of(inst)
    dc = inst.datacenters[0]
    DCAgent(public, 0, dc, floors_only=1)  # a period run under 1F1B of 4 DCs
    with pytest.raises(ValueError, match="floors_only"):
        DCAgent(public, 0, dc, floors_only=1, epsilon=0.1)
    with pytest.raises(ValueError, match="floors_only"):
        DCAgent(public, 0, dc, floors_only=2)
    with pytest.raises(ValueError, match="curve_steps"):
        DCAgent(public, 0, dc, curve_low=1.0, curve_top=2.0, curve_steps=4)
    classic = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, objective="classic"))
    with pytest.raises(ValueError, match="floors_only"):
        DCAgent(PublicInstance.of(classic), 0, dc, floors_only=1)


def test_a_bad_fills_report_is_refused():
    assert _fills_ok([None, 1.5, 0.0])
    for bad in ([], [None] * 65, [-1.0], [math.inf], ["1"], [True], None, {"a": 1}):
        assert not _fills_ok(bad), bad


def test_the_floors_can_be_turned_off(monkeypatch):
    """``questions.FLOOR_RUNS = False``: no floor run, the same optimum."""
    _seed, inst = next(_instances(1, pipelines=(1, 2)))
    want = solve(inst, "dp")
    monkeypatch.setattr(questions, "FLOOR_RUNS", False)
    got = solve(inst, "cdynp")
    assert got.stats.get("floor_runs", 0) == 0
    assert math.isclose(got.iteration_time, want.iteration_time, rel_tol=1e-9)


def test_without_the_knapsack_the_period_floor_is_the_flops_one(monkeypatch):
    """Where a DC's knapsack is too large (``Floors.affordable`` false), a floor run's last
    DC still reports a floor under the range's period, from which the grid starts: the
    whole model over the FLOP/s bound of every device of the range, at most ``dp``'s own
    floor (the knapsack's); the range's floors stay under its least ``T_p``."""
    from chainpipe.solvers.cdynp import agent, floors

    monkeypatch.setattr(floors.Floors, "affordable", staticmethod(lambda tables: False))
    agent.forget()
    inst = read(MEDIUM)
    tables = CostTables(inst)
    ref = RangeTimes(tables, Deadline(None), math.inf, shared_holds(tables, Deadline(None)))
    runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
    for i, j in ((0, 1), (1, 3)):
        got = runs._floor_run(i, j, {})[-1].get("period_floor_s", 0.0)
        assert 0 < got <= ref._period_floor(i, j, 2) * (1 + 1e-9), (i, j, got)
        grid, fills = runs.floors(i, j)
        for m in (2, 31):
            assert least_time(grid, fills, m) <= _least(ref, i, j, m) * (1 + 1e-9)
    agent.forget()


def test_floor_runs_traces_are_private(tmp_path):
    """A solve's floor runs (``floors-<i>-<j>-<n>/`` in its trace) send messages that
    follow the schema and carry no private figure of any DC nor a device name (the check
    of every other run's); their prefix messages carry the curve's tables, as a period
    run's do."""
    import json

    from test_cdynp_v3 import _distinct

    from chainpipe.solvers.cdynp import protocol
    from helpers import check_trace_private

    seen = 0
    for seed, inst in _instances(10, pipelines=(1, 2, 3)):  # (not every one asks a range)
        inst = _distinct(inst, seed)
        out = tmp_path / str(seed)
        solve(inst, "cdynp", trace_dir=str(out))
        files = sorted(f for f in out.rglob("*.json")
                       if f.relative_to(out).parts[0].startswith("floors-"))
        if not files:
            continue
        check_trace_private(inst, files, protocol.SCHEMA)
        assert any(json.loads(f.read_text()).get("curve") for f in files)
        seen += 1
    assert seen >= 2, seen


def test_without_prefix_bounds_no_floor_curve_and_the_same_optimum():
    """Agents that share no prefix bound (``prefix_bound=false``) report no period floor,
    so a range's floor runs stop after the first (no curve is asked for) and the owner
    searches with its proven floors alone: ``dp``'s optimum still."""
    checked = 0
    for _seed, inst in _instances(10, pipelines=(1, 2, 3)):
        runs = RangeRuns(LocalOwner(inst, False, 60), {**agent_options(), "prefix_bound": False},
                         Deadline(None))
        assert runs.floors(0, 1) is None and runs.floor_runs == 1
        want, got = solve(inst, "dp"), solve(inst, "cdynp", prefix_bound=False)
        assert got.status == want.status
        if want.iteration_time is not None:
            assert math.isclose(got.iteration_time, want.iteration_time, rel_tol=1e-9)
        checked += got.stats.get("floor_runs", 0) > 0
    assert checked >= 3, checked


@pytest.mark.parametrize("below", [4.0, 0.01])
def test_floors_stay_floors_whatever_the_coarse_start(monkeypatch, below):
    """The coarse pass started far above where the model fits (it fits under every coarse
    cap: the fine caps go below the first) or far below it (it fits under none: the fine
    caps go on from the last): every floor still lies under ``dp``'s least ``T_p``."""
    from chainpipe.solvers.cdynp import pipelines

    monkeypatch.setattr(pipelines, "FLOOR_BELOW", below)
    inst = read(MEDIUM)
    tables = CostTables(inst)
    ref = RangeTimes(tables, Deadline(None), math.inf, shared_holds(tables, Deadline(None)))
    runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
    grid, fills = runs.floors(1, 2)
    # far above: the top caps fit; far below: none does (the floor is the one past the grid)
    assert np.isfinite(fills[-1]) if below > 1 else not np.isfinite(fills).any()
    for m in (2, 9, 31):
        assert least_time(grid, fills, m) <= _least(ref, 1, 2, m) * (1 + 1e-9)


def test_a_last_dc_that_shares_no_prefix_bound_reports_no_fills():
    """A floor run's last DC reports the fills only when it shares its prefix bounds (its
    agent's ``prefix_bound``, which also keeps its period floor to itself): with it off,
    whatever the owner asks, no ``curve_fills``."""
    from chainpipe.solvers.cdynp import protocol

    inst = read(MEDIUM)
    public = PublicInstance.of(inst)
    K = inst.num_datacenters
    opts = {"floors_only": 1, "curve_low": 1.0, "curve_top": 2.0, "curve_steps": 4,
            "sync_cap": 1e300}
    for share, want in ((True, True), (False, False)):
        agents = [DCAgent(public, k, dc, prefix_bound=share or k < K - 1, **opts)
                  for k, dc in enumerate(inst.datacenters)]
        got = None
        for a in agents:
            sent = a.prefix(got)
            got = None if sent is None else protocol.decode(
                protocol.encode(sent), "prefix", public.expect(a.k, a.k + 1))
        agents[-1].backward(None)
        assert ("curve_fills" in agents[-1].stats) == want
        assert ("period_floor_s" in agents[-1].stats) == want


def test_a_floor_run_is_its_prefix_pass_alone():
    """A floor run ends with its prefix pass (``session``, ``runner``): ``K - 1`` prefixes
    and no summary or ``assemble``, in process and with each agent in its own process
    alike, and its last DC reports the same floors either way."""
    from chainpipe.solvers.cdynp import InstanceAgents

    inst = read(MEDIUM)
    K = inst.num_datacenters
    opts = {**agent_options(), "upper_bound": None, "sync_cap": 1e300, "floors_only": 1,
            "curve_low": 0.5, "curve_top": 3.0, "curve_steps": 4}
    got = {}
    for processes in (False, True):
        agents = InstanceAgents(inst, processes, 60)
        res = agents.one_run(opts, None, Deadline(60))
        assert [m["kind"] for m in res.messages] == ["prefix"] * (K - 1)
        assert res.stages == [] and not math.isfinite(res.estimate)
        last = res.agents[-1]
        assert "period_floor_s" in last and "curve_fills" in last
        got[processes] = (last["period_floor_s"], last["curve_fills"])
    assert got[False] == got[True]


class _AcrossHosts(LocalOwner):
    """An owner whose agents are in this process but which says it is across hosts
    (``mode = "tls"``): its range runs make the floor curves ahead."""

    def __init__(self, inst):
        super().__init__(inst, False, 60)
        self.mode = "tls"


def _alive_ahead() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("chainpipe-floors")]


def test_floor_curves_made_ahead_across_hosts_are_those_made_on_need():
    """Across hosts the owner makes the floor curves of every range of two DCs or more but
    the whole chain ahead, in threads beside its own runs (``RangeRuns.start_floors_ahead``):
    each curve it takes is the one made on need in process, and no thread outlives
    ``stop_ahead``; in process, traced, or with no worker, none is made ahead."""
    inst = read(MEDIUM)
    K = inst.num_datacenters
    ref = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
    runs = RangeRuns(_AcrossHosts(inst), agent_options(), Deadline(None))
    runs.start_floors_ahead(2)
    try:
        assert sorted(runs._ahead) == sorted((i, j) for i in range(K) for j in range(i + 1, K)
                                            if (i, j) != (0, K - 1))
        for i, j in ((2, 3), (0, 2), (1, 2)):
            (grid, fills), (want_grid, want_fills) = runs.floors(i, j), ref.floors(i, j)
            np.testing.assert_array_equal(grid, want_grid)
            np.testing.assert_array_equal(fills, want_fills)
            assert (i, j) not in runs._ahead
    finally:
        runs.stop_ahead()
    assert not _alive_ahead() and not runs._ahead
    assert runs.floor_curves_unused <= 2 and runs.floor_runs >= 9
    names = [m["file"].split("/")[0] for m in runs.messages]
    assert len(set(names)) == runs.floor_runs  # every run its own name, counted once
    for owner, trace, workers in ((LocalOwner(inst, False, 60), None, 2),
                                  (_AcrossHosts(inst), "trace", 2),
                                  (_AcrossHosts(inst), None, 0)):
        other = RangeRuns(owner, agent_options(), Deadline(None), trace)
        other.start_floors_ahead(workers)
        assert not other._ahead and other._pool is None


def test_a_floor_curve_made_ahead_that_failed_fails_where_it_is_taken(monkeypatch):
    """A floor run made ahead that fails (an agent gone) fails the solve only where its
    curve is taken, with the same error as a run made there; the other curves stand."""
    from chainpipe.solvers.cdynp.runner import AgentFailure

    inst = read(MEDIUM)
    made = RangeRuns._floor_run

    def gone(self, i, j, extra):
        if (i, j) == (1, 2):
            raise AgentFailure("the agent of DC 'x' is gone", "x")
        return made(self, i, j, extra)

    monkeypatch.setattr(RangeRuns, "_floor_run", gone)
    runs = RangeRuns(_AcrossHosts(inst), agent_options(), Deadline(None))
    runs.start_floors_ahead(1)
    try:
        assert runs.floors(0, 1) is not None
        with pytest.raises(AgentFailure, match="is gone"):
            runs.floors(1, 2)
    finally:
        runs.stop_ahead()
    assert not _alive_ahead()


def test_an_owner_across_hosts_with_floors_ahead_reaches_dps_optimum():
    """The owner's whole search with its floor curves made ahead (an owner that says it is
    across hosts, agents in this process) proves ``dp``'s optimum on random chains."""
    from chainpipe.solvers.cdynp.pipelines import solve_several

    checked = 0
    for _seed, inst in _instances(10, pipelines=(1, 2, 3)):
        want = solve(inst, "dp")
        got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
        assert got.status == want.status.value
        if want.iteration_time is not None:
            T = LocalOwner(inst, False, 60).evaluation(got.plan).iteration_time_s
            assert math.isclose(T, want.iteration_time, rel_tol=1e-9)
        checked += got.stats.get("floor_runs", 0) > 0
        assert not _alive_ahead()
    assert checked >= 3, checked
