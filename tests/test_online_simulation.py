"""The online simulation: known blocking on hand-checkable scenarios, conservation of devices
and wavelengths, every plan timed by the one cost model, the CBA ILP's choice, determinism."""

from __future__ import annotations

import collections

import pytest

from chainpipe.instance import Datacenter, Instance, InstanceError, Link
from chainpipe.instances.gpus import gpu
from chainpipe.instances.network import GBIT
from chainpipe.online.command import run_policies
from chainpipe.online.jobs import model_of, training_of
from chainpipe.online.network import Network
from chainpipe.online.offers import Planner, split_budget
from chainpipe.online.policies import POLICIES
from chainpipe.online.presets import preset, preset_dict
from chainpipe.online.scenario import FORMAT, scenario_from_dict
from chainpipe.online.simulator import make_policy, simulate
from chainpipe.online.state import Placement
from chainpipe.plan import evaluate
from chainpipe.solve import solve


def trace_scenario(jobs, *, dcs=(("a", 8),), links=(), patience=0.0, max_wl=2, **planning):
    """A scenario of A100-80GB DCs, a job trace ``(arrival, model, M, iterations, gpus)``
    and no background traffic."""
    return scenario_from_dict({
        "format": FORMAT, "name": "hand",
        "network": {
            "datacenters": [{"name": n, "gpus": [{"type": "A100-80GB", "count": c}]}
                            for n, c in dcs],
            "links": [{"between": [a, b], "km": km, "wavelengths": w} for a, b, km, w in links]},
        "background": {"load": 0.0, "swing": 0.0, "change_s": 3600},
        "jobs": {"patience_s": patience, "max_wavelengths": max_wl,
                 "trace": [{"arrival_s": t, "model": m, "microbatches": M, "iterations": it,
                            "gpus": g} for t, m, M, it, g in jobs]},
        "planning": {"max_chain": 2, **planning},
    })


def one_run(scenario, policy, seed=0):
    network = Network(scenario)
    return simulate(scenario, make_policy(policy, Planner(network, scenario.planning)), seed)


def dp_time_on_one_dc(count: int, model="gpt3-1.3b", M=16) -> float:
    """The dp optimum on one DC of ``count`` A100-80GB, built by hand."""
    planning = preset("tiny").planning
    dc = Datacenter("a", (gpu("A100-80GB").group(count, nodes=True),), Link(200 * GBIT, 2e-6))
    inst = Instance("offer", model_of(model), training_of(planning, M), (dc,), ())
    return solve(inst, "dp").iteration_time


@pytest.mark.parametrize("policy", POLICIES)
def test_a_full_dc_blocks_jobs_without_patience(policy):
    jobs = [(0.0, "gpt3-1.3b", 16, 1000, 8), (10.0, "gpt3-1.3b", 16, 1000, 8),
            (20.0, "gpt3-1.3b", 16, 1000, 8), (30.0, "gpt3-1.3b", 16, 1000, 12)]
    run = one_run(trace_scenario(jobs), policy)
    assert [r.status for r in run.records] == ["accepted", "blocked", "blocked", "blocked"]
    assert "has 12 free GPUs" in run.records[3].reason
    assert all(r.wait_s == 0 for r in run.records)


def test_a_patient_job_waits_for_the_first_to_finish():
    jobs = [(0.0, "gpt3-1.3b", 16, 1000, 8), (10.0, "gpt3-1.3b", 16, 500, 8)]
    run = one_run(trace_scenario(jobs, patience=1e6), "chain-dp")
    T = dp_time_on_one_dc(8)
    first, second = run.records
    assert first.placement.iteration_time_s == pytest.approx(T, rel=1e-12)
    assert second.status == "accepted"
    assert second.start_s == pytest.approx(1000 * T)
    assert second.wait_s == pytest.approx(1000 * T - 10.0)
    assert run.end_s == pytest.approx(1500 * T)


def test_a_job_larger_than_a_dc_spans_the_link_and_reserves_its_wavelengths():
    links = [("a", "b", 20.0, 3)]
    jobs = [(0.0, "gpt3-1.3b", 16, 100, 16), (1.0, "gpt3-1.3b", 16, 100, 4)]
    run = one_run(trace_scenario(jobs, dcs=(("a", 8), ("b", 8)), links=links), "chain-dp")
    big, small = run.records
    assert big.placement.datacenters == ("a", "b")
    assert dict(big.placement.wavelengths) == {("a", "b"): 2}
    assert small.status == "blocked"  # every GPU is held
    link = big.placement.instance.links[0]
    assert link.bandwidth_bytes_per_s == 2 * 100 * GBIT
    assert link.latency_s == pytest.approx(20 * 5e-6)


def test_split_budget_water_fills():
    assert split_budget(10, [8, 2, 8]) == [4, 2, 4]
    assert split_budget(16, [8, 8]) == [8, 8]
    assert split_budget(5, [0, 3, 3]) == [0, 3, 2]
    assert split_budget(9, [2, 2]) == [2, 2]


@pytest.fixture(scope="module")
def busy_runs():
    """Every policy on a loaded two-DC scenario (the tiny preset, 30 jobs)."""
    scenario = preset("tiny").with_jobs(30).with_rate(4.0)
    return scenario, run_policies(scenario, POLICIES, seed=3)


def test_loaded_runs_block_some_jobs(busy_runs):
    _, runs = busy_runs
    for run in runs:
        counts = collections.Counter(r.status for r in run.records)
        assert counts["accepted"] > 0 and counts["blocked"] > 0, run.policy
        assert set(counts) == {"accepted", "blocked"}


def test_devices_and_wavelengths_are_never_over_allocated(busy_runs):
    """Rebuilt from the records alone: at every start, what the running jobs hold fits."""
    scenario, runs = busy_runs
    network = Network(scenario)
    totals = {(dc, g.type): g.count for dc, gs in network.groups.items() for g in gs}
    for run in runs:
        acc = [r for r in run.records if r.status == "accepted"]
        for r in acc:
            t = r.start_s
            live = [q for q in acc if q.start_s <= t < q.start_s + q.placement.duration_s]
            held = collections.Counter()
            wl = collections.Counter()
            for q in live:
                held.update(q.placement.devices)
                wl.update(q.placement.wavelengths)
            assert all(held[k] <= n for k, n in totals.items()), run.policy
            assert all(wl[s] <= network.wavelengths[s] for s in network.spans), run.policy
            assert r.placement.device_count <= r.job.gpus
            assert all(w <= r.job.max_wavelengths for w in r.placement.wavelengths.values())
        assert run.peak_gpus <= network.total_gpus()


def test_every_plan_is_timed_by_the_one_cost_model(busy_runs):
    scenario, runs = busy_runs
    network = Network(scenario)
    for run in runs:
        for r in run.records:
            p = r.placement
            if p is None:
                continue
            ev = evaluate(p.instance, p.plan)
            assert ev.feasible, (run.policy, ev.violations)
            assert p.iteration_time_s == ev.iteration_time_s
            # the instance's links carry exactly the reserved wavelengths
            for link in p.instance.links:
                assert link.bandwidth_bytes_per_s in {
                    w * network.wavelength_bytes_per_s for w in p.wavelengths.values()}


def test_chain_dp_is_the_dp_optimum_of_its_offer(busy_runs):
    _, runs = busy_runs
    run = next(r for r in runs if r.policy == "chain-dp")
    for r in run.records[:8]:
        if r.placement is not None:
            assert r.placement.iteration_time_s == pytest.approx(
                solve(r.placement.instance, "dp").iteration_time)


def test_cba_ilp_places_both_jobs_where_greedy_order_would_block_one():
    scenario = trace_scenario([(0.0, "gpt3-1.3b", 16, 10, 8)], dcs=(("a", 8), ("b", 8)),
                              links=[("a", "b", 10.0, 4)])
    network = Network(scenario)
    cba = make_policy("cba", Planner(network, scenario.planning))

    class Job:
        def __init__(self, i):
            self.id, self.arrival_s = i, float(i)

    def cand(job, dc, T):
        return Placement(job, (dc,), None, None, T, {(dc, "A100-80GB"): 8}, {})

    ja, jb = Job(0), Job(1)
    # job 0 prefers a (T = 1) but can use b; job 1 can only use a
    cands = {0: [cand(ja, "a", 1.0), cand(ja, "b", 1.5)], 1: [cand(jb, "a", 1.0)]}
    from chainpipe.online.state import ResourceState

    chosen = cba.solve_ilp(cands, {0: 1.0, 1: 1.0}, ResourceState(network))
    assert [(p.job.id, p.chain) for p in chosen] == [(0, ("b",)), (1, ("a",))]


def test_gmc_mdp_measures_its_forecasts(busy_runs):
    _, runs = busy_runs
    fc = next(r for r in runs if r.policy == "gmc-mdp").extra["forecast"]
    assert fc["gm11-markov"]["n"] > 0
    assert fc["gm11-markov"]["mae"] >= 0


def test_the_same_seed_gives_the_same_records_and_another_seed_does_not():
    scenario = preset("tiny").with_jobs(12)

    def rows(seed):
        runs = run_policies(scenario, ["chain-dp", "gmc-mdp"], seed)
        return [(r.job, r.status, r.start_s, r.placement and r.placement.plan)
                for run in runs for r in run.records]

    assert rows(1) == rows(1)
    assert rows(1) != rows(2)


def test_presets_validate_and_list():
    for name in ("tiny", "metro-ring", "metro-mesh"):
        s = scenario_from_dict(preset_dict(name))
        assert s.name == name
    mesh = Network(preset("metro-mesh"))
    assert len(mesh.datacenters) == 9 and len(mesh.spans) == 14
    assert mesh.chains[0].datacenters == ("dc1",)
    assert all(len(c.datacenters) <= 3 for c in mesh.chains)


def test_the_mdp_ranks_chains_away_from_loaded_dcs_and_spans():
    scenario = trace_scenario([(0.0, "gpt3-1.3b", 16, 10, 8)],
                              dcs=(("a", 8), ("b", 8), ("c", 8)),
                              links=[("a", "b", 10.0, 4), ("b", "c", 10.0, 4)])
    network = Network(scenario)
    policy = make_policy("gmc-mdp", Planner(network, scenario.planning))
    from chainpipe.online.state import ResourceState

    state = ResourceState(network)
    state.free[("a", "A100-80GB")] = 0  # a is full: load 1
    state.background[("b", "c")] = 3  # b-c carries 3 of 4 wavelengths
    ranked = [c.datacenters for c in policy.mdp_chains(state)]
    singles = [c for c in ranked if len(c) == 1]
    assert singles[-1] == ("a",)
    assert ranked[0] in {("b",), ("c",)}
    assert ranked.index(("b", "c")) < ranked.index(("a", "b"))  # span load 0.75 < DC load 1


def test_background_is_seeded_and_never_overfills_a_span():
    from chainpipe.online.state import ResourceState
    from chainpipe.online.traffic import BackgroundTraffic

    scenario = preset("metro-ring")
    network = Network(scenario)

    def steps(seed):
        t = BackgroundTraffic(network, scenario.background, seed)
        return [t.step() for _ in range(20)]

    assert steps(4) == steps(4) and steps(4) != steps(5)
    state = ResourceState(network)
    span = network.spans[0]
    state.reserved[span] = network.wavelengths[span] - 2
    for targets in steps(4):
        state.set_background(targets)
        assert 0 <= state.background[span] <= 2
        assert all(state.free_wavelengths(s) >= 0 for s in network.spans)


def test_time_average_of_a_step_function():
    from chainpipe.online.report import time_average
    from chainpipe.online.simulator import Sample

    samples = [Sample(0.0, 0.0, 0.2, 0.0), Sample(10.0, 0.0, 0.6, 0.0),
               Sample(10.0, 0.0, 1.0, 0.0), Sample(30.0, 0.0, 0.0, 0.0)]
    # 0.2 for 10 s, then 1.0 (the later sample at t = 10) for 20 s, then 0 for 10 s
    assert time_average(samples, "span_load", 40.0) == pytest.approx((2 + 20) / 40)
    assert time_average(samples, "span_load", 20.0) == pytest.approx((2 + 10) / 20)


def test_a_background_trace_sets_the_loads_it_names_and_holds_the_last():
    from chainpipe.online.traffic import BackgroundTraffic

    data = preset_dict("tiny")
    data["background"] = {"change_s": 60, "trace": [
        [{"between": ["b", "a"], "load": 0.5}], [], [{"between": ["a", "b"], "load": 1.0}]]}
    scenario = scenario_from_dict(data)
    t = BackgroundTraffic(Network(scenario), scenario.background, seed=0)
    assert [t.step()[("a", "b")] for _ in range(5)] == [2, 2, 4, 4, 4]  # 4 wavelengths
    data["background"]["trace"][1] = [{"between": ["a", "c"], "load": 0.2}]
    with pytest.raises(InstanceError, match=r"background.trace\[1\]\[0\].between: no link"):
        scenario_from_dict(data)


def test_a_job_placed_on_arrival_waits_zero_even_when_the_clock_rounds_below_it():
    # the clock reaches 0.9 as 0.2 + (0.9 - 0.2), one ulp below 0.9
    jobs = [(0.2, "gpt3-1.3b", 16, 10, 4), (0.9, "gpt3-1.3b", 16, 10, 4)]
    run = one_run(trace_scenario(jobs), "chain-dp")
    assert [r.status for r in run.records] == ["accepted", "accepted"]
    assert [r.wait_s for r in run.records] == [0.0, 0.0]
