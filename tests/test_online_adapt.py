"""Link events under running jobs: the scenario's ``events``, every policy keeping its plans
on the changed links, and ``chain-dp-replan`` keeping, re-planning or moving a job through
:mod:`chainpipe.replan` when the time saved over its remaining iterations exceeds the move."""

from __future__ import annotations

import dataclasses

import pytest

from chainpipe.instance import InstanceError
from chainpipe.online.adapt import pricing_instance
from chainpipe.online.command import parse_policies
from chainpipe.online.network import Network
from chainpipe.online.offers import Planner
from chainpipe.online.scenario import FORMAT, scenario_from_dict
from chainpipe.online.simulator import make_policy, simulate
from chainpipe.plan import evaluate
from chainpipe.replan import move_cost, replan
from chainpipe.solve import solve

LINE = (("a", 8), ("b", 8), ("c", 8))


def scenario(jobs, events=(), *, dcs=LINE, max_chain=3, devices=()):
    """A100-80GB DCs ``a - b - c`` on 20 km spans of 4 wavelengths, a job trace
    ``(arrival, model, M, iterations, gpus)``, no background traffic, link ``events``
    ``(at_s, a, b, bandwidth, latency)`` and device events ``(at_s, dc, speed)``."""
    names = [n for n, _ in dcs]
    return scenario_from_dict({
        "format": FORMAT, "name": "events",
        "network": {
            "datacenters": [{"name": n, "gpus": [{"type": "A100-80GB", "count": c}]}
                            for n, c in dcs],
            "links": [{"between": [names[i], names[i + 1]], "km": 20, "wavelengths": 4}
                      for i in range(len(names) - 1)]},
        "background": {"load": 0.0, "swing": 0.0, "change_s": 3600},
        "jobs": {"patience_s": 0, "max_wavelengths": 2,
                 "trace": [{"arrival_s": t, "model": m, "microbatches": M, "iterations": it,
                            "gpus": g} for t, m, M, it, g in jobs]},
        "planning": {"max_chain": max_chain},
        "events": [{"at_s": t, "between": [a, b], "bandwidth": bw, "latency": lat}
                   for t, a, b, bw, lat in events]
        + [{"at_s": t, "datacenter": dc, "gpu": "A100-80GB", "speed": x}
           for t, dc, x in devices],
    })


def run(sc, policy):
    pol = make_policy(policy, Planner(Network(sc), sc.planning))
    return simulate(sc, pol, 0), pol


BIG = [(0, "gpt3-2.7b", 16, 40000, 12)]  # on a + b + c (4 each): two spans
TWO = [(0, "gpt3-1.3b", 16, 20000, 12), (10, "gpt3-1.3b", 16, 20000, 4)]  # a + b, then c


# --------------------------------------------------------------------------- the format
def test_events_are_read_sorted_and_bad_ones_named_one_line_each():
    sc = scenario(BIG, [(900, "b", "c", 0.5, 1), (600, "a", "b", 0.1, 3)])
    assert [(e.at_s, e.between, e.bandwidth, e.latency) for e in sc.events] == [
        (600.0, ("a", "b"), 0.1, 3.0), (900.0, ("b", "c"), 0.5, 1.0)]
    with pytest.raises(InstanceError) as exc:
        scenario(BIG, [(-1, "a", "b", 0.5, 1), (5, "a", "c", 1.5, 0.5)])
    assert exc.value.problems == [
        "events[0].at_s: must be a finite number >= 0, got -1",
        "events[1].bandwidth: must be at most 1 (a share of the nominal rate), got 1.5",
        "events[1].latency: must be a finite number >= 1, got 0.5",
        "events[1].between: no link of network.links joins 'a' and 'c'"]


def test_chain_dp_replan_is_named_only_on_request():
    assert "chain-dp-replan" not in parse_policies(None)
    assert parse_policies("chain-dp,chain-dp-replan") == ["chain-dp", "chain-dp-replan"]
    with pytest.raises(InstanceError, match="chain-dp-replan"):
        parse_policies("chain-dp-replam")


# --------------------------------------------------------------------------- keep
def test_without_events_the_adapting_policy_is_chain_dp():
    a, _ = run(scenario(TWO), "chain-dp")
    b, pol = run(scenario(TWO), "chain-dp-replan")
    assert [(r.start_s, r.end_s, r.placement.plan) for r in a.records] == \
        [(r.start_s, r.end_s, r.placement.plan) for r in b.records]
    assert pol.adaptations == [] and b.extra == {}


def test_a_kept_job_runs_its_remaining_iterations_at_the_plans_new_time():
    """``chain-dp`` keeps: from the event on, the iterations left run at ``T`` of the same
    plan on the re-priced links; the job's finish moves by exactly that."""
    t = 600.0
    res, pol = run(scenario(TWO, [(t, "a", "b", 0.02, 20)], max_chain=2), "chain-dp")
    job = res.records[0]
    (a,) = pol.adaptations
    assert a.decision == "keep" and a.job == 0 and a.move_s == a.gain_s == 0.0
    T0 = job.placement.iteration_time_s
    assert a.before_s == T0 and a.kept_s > T0
    assert a.left == pytest.approx(20000 - t / T0)
    assert job.end_s == pytest.approx(t + a.left * a.kept_s)
    assert job.final.plan == job.placement.plan
    assert job.final.iteration_time_s == evaluate(job.final.instance, job.placement.plan
                                                  ).iteration_time_s
    assert res.records[1].end_s == pytest.approx(10 + 20000 * res.records[1]
                                                 .placement.iteration_time_s)  # not touched
    assert res.extra["keep_count"] == 1


# --------------------------------------------------------------------------- re-plan, move
def test_replan_in_place_when_the_saving_exceeds_the_move():
    """Two DCs: nowhere else to go, so the job re-plans on its own devices."""
    events, dcs = [(600.0, "a", "b", 0.005, 100)], LINE[:2]
    kept, _ = run(scenario(TWO[:1], events, dcs=dcs), "chain-dp")
    res, pol = run(scenario(TWO[:1], events, dcs=dcs), "chain-dp-replan")
    (a,) = pol.adaptations
    assert a.decision == "replan"
    job = res.records[0]
    assert job.final.note == "re-planned"  # on (some of) its own devices, not elsewhere
    assert all(n <= job.placement.devices.get(k, 0) for k, n in job.final.devices.items())
    # the move's price is replan()'s on the job's own re-priced offer
    old, new = job.placement, job.final
    r = replan(old.instance, old.plan, new.instance, horizon=round(a.left))
    assert r.decision == "switch" and a.move_s == pytest.approx(r.move_s) and a.move_s > 0
    assert a.after_s == pytest.approx(r.new_time_s)
    assert a.gain_s == pytest.approx(a.left * (a.kept_s - a.after_s) - a.move_s)
    # and the job ends exactly that much earlier than kept
    assert kept.records[0].end_s - job.end_s == pytest.approx(a.gain_s, rel=1e-9)
    assert res.extra["replan_count"] == 1


def test_move_to_other_dcs_priced_over_the_fibre_path():
    events = [(600.0, "a", "b", 0.005, 100)]
    kept, _ = run(scenario(BIG, events), "chain-dp")
    res, pol = run(scenario(BIG, events), "chain-dp-replan")
    (a,) = pol.adaptations
    job = res.records[0]
    assert job.placement.datacenters == ("a", "b", "c")
    assert a.decision == "move" and job.final.datacenters == ("b", "c")
    assert a.move_s > 0 and a.gain_s > 0
    assert kept.records[0].end_s - job.end_s == pytest.approx(a.gain_s, rel=1e-9)
    assert res.extra["move_count"] == 1 and res.extra["adapt_move_s"] == a.move_s


def test_the_move_cannot_be_priced_on_the_new_offer_alone():
    """Without the pricing instance the abandoned DC's state has no path: ``move_cost`` on
    the new placement's own offer is infinite, which is why the move is priced on the
    fibre path through both placements (``pricing_instance``)."""
    sc = scenario(BIG, [(600.0, "a", "b", 0.005, 100)])
    res, pol = run(sc, "chain-dp-replan")
    old, new = res.records[0].placement, res.records[0].final
    assert move_cost(old.instance, old.plan, new.instance, new.plan)[2] == float("inf")
    from chainpipe.online.state import ResourceState

    state = ResourceState(pol.planner.network)
    state.impair(("a", "b"), 0.005, 100)
    state.allocate(new)
    pricing = pricing_instance(pol.planner, old, new, state)
    assert [dc.name for dc in pricing.datacenters] == ["a", "b", "c"]
    nbytes, seconds = move_cost(old.instance, old.plan, pricing, new.plan)[1:3]
    assert seconds == pytest.approx(pol.adaptations[0].move_s)
    assert nbytes > 0


def test_keep_when_too_few_iterations_are_left_to_pay_for_the_move():
    """The same degradation a few iterations before the job ends: nothing pays back."""
    T0 = run(scenario(BIG), "chain-dp")[0].records[0].placement.iteration_time_s
    at = 40000 * T0 - 5 * T0
    res, pol = run(scenario(BIG, [(at, "a", "b", 0.005, 100)]), "chain-dp-replan")
    (a,) = pol.adaptations
    assert a.decision == "keep" and a.left == pytest.approx(5, rel=1e-6)
    assert res.extra["keep_count"] == 1 and res.extra["adapt_gain_s"] == 0


def test_a_restored_link_brings_the_kept_plan_back_to_its_time():
    T0 = run(scenario(BIG), "chain-dp")[0].records[0]
    events = [(600.0, "a", "b", 0.02, 20), (1200.0, "a", "b", 1, 1)]
    res, pol = run(scenario(BIG, events), "chain-dp")
    assert [a.decision for a in pol.adaptations] == ["keep", "keep"]
    assert pol.adaptations[1].after_s == pytest.approx(T0.placement.iteration_time_s)
    slow = pol.adaptations[0]
    assert res.records[0].end_s == pytest.approx(
        T0.end_s + 600.0 * (1 - T0.placement.iteration_time_s / slow.kept_s))


def test_replan_reuses_a_given_result():
    sc = scenario(TWO[:1], [(600.0, "a", "b", 0.005, 100)], dcs=LINE[:2])
    res, _ = run(sc, "chain-dp-replan")
    old, new = res.records[0].placement, res.records[0].final
    given = solve(new.instance, "dp")
    a = replan(old.instance, old.plan, new.instance, result=given)
    b = replan(old.instance, old.plan, new.instance)
    assert dataclasses.asdict(a)["new_plan"] == dataclasses.asdict(b)["new_plan"]
    assert (a.decision, a.move_s) == (b.decision, b.move_s)


@pytest.mark.parametrize("policy", ["first-fit", "comm-unaware", "chain-dp", "cba", "gmc-mdp"])
def test_every_default_policy_keeps_its_plans_at_their_new_time(policy):
    """A link event under every default policy: each job it touches keeps its plan, timed by
    the one cost model on the re-priced links; devices and wavelengths are conserved (the
    run ends idle)."""
    events = [(600.0, "a", "b", 0.05, 10), (900.0, "b", "c", 0.2, 2)]
    res, pol = run(scenario(TWO, events), policy)
    assert pol.adaptations and all(a.decision == "keep" for a in pol.adaptations)
    for r in res.records:
        if r.status == "accepted":
            assert r.final.plan == r.placement.plan
            assert r.final.iteration_time_s == evaluate(r.final.instance, r.final.plan
                                                        ).iteration_time_s
    assert res.extra["keep_count"] == len(pol.adaptations)


def test_simulate_command_runs_the_adapting_policy_and_reports_the_events(tmp_path, capsys):
    import json

    from chainpipe.cli import main

    data = {"format": FORMAT, "name": "events",
            "network": {"datacenters": [{"name": n, "gpus": [{"type": "A100-80GB", "count": 8}]}
                                        for n in "abc"],
                        "links": [{"between": ["a", "b"], "km": 20, "wavelengths": 4},
                                  {"between": ["b", "c"], "km": 20, "wavelengths": 4}]},
            "background": {"load": 0.0, "swing": 0.0, "change_s": 3600},
            "jobs": {"patience_s": 0, "max_wavelengths": 2,
                     "trace": [{"arrival_s": 0, "model": "gpt3-2.7b", "microbatches": 16,
                                "iterations": 40000, "gpus": 12}]},
            "events": [{"at_s": 600, "between": ["a", "b"], "bandwidth": 0.005,
                        "latency": 100}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["simulate", str(path), "--policies", "chain-dp,chain-dp-replan", "--out",
                 str(out), "-q"]) == 0
    summary = (out / "summary.md").read_text()
    assert "## Link events" in summary
    assert "| chain-dp | 1 | 1 | 0 | 0 | 0.000 | 0.0 |" in summary
    assert "| chain-dp-replan | 1 | 0 | 0 | 1 |" in summary
    data["events"][0]["bandwidth"] = 0
    path.write_text(json.dumps(data))
    assert main(["simulate", str(path), "--out", str(tmp_path / "o2"), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{path}: events[0].bandwidth: must be a finite number > 0, got 0"]


# --------------------------------------------------------------------------- device events
def test_device_events_are_read_and_bad_ones_named():
    sc = scenario(BIG, [(900, "b", "c", 0.5, 1)], devices=[(600, "a", 0.3)])
    assert [type(e).__name__ for e in sc.events] == ["DeviceEvent", "LinkEvent"]
    assert (sc.events[0].datacenter, sc.events[0].gpu, sc.events[0].speed) == \
        ("a", "A100-80GB", 0.3)
    with pytest.raises(InstanceError) as exc:
        scenario(BIG, devices=[(600, "z", 0.3), (700, "a", 0)])
    assert exc.value.problems == [
        "events[0]: datacenter 'z' has no GPUs of type 'A100-80GB' in network.datacenters",
        "events[1].speed: must be a finite number > 0, got 0"]


def test_a_slowed_dc_slows_a_kept_job_and_the_adapting_policy_moves_off_it():
    """``a``'s GPUs at 30% of their rate: ``chain-dp`` keeps the plan at its new ``T`` (the
    cost model's on the re-priced groups); ``chain-dp-replan`` moves the job to ``b + c``,
    ending earlier by exactly its gain."""
    devices = [(600.0, "a", 0.3)]
    kept, kpol = run(scenario(BIG, devices=devices), "chain-dp")
    moved, mpol = run(scenario(BIG, devices=devices), "chain-dp-replan")
    (k,), (m,) = kpol.adaptations, mpol.adaptations
    job = kept.records[0]
    assert k.decision == "keep" and k.kept_s > 2 * k.before_s
    assert k.kept_s == evaluate(job.final.instance, job.placement.plan).iteration_time_s
    assert {g.flop_per_s for dc in job.final.instance.datacenters if dc.name == "a"
            for g in dc.devices} == {0.3 * g.flop_per_s for dc in job.placement.instance
                                     .datacenters if dc.name == "a" for g in dc.devices}
    assert job.end_s == pytest.approx(600.0 + k.left * k.kept_s)
    assert m.decision == "move" and moved.records[0].final.datacenters == ("b", "c")
    assert kept.records[0].end_s - moved.records[0].end_s == pytest.approx(m.gain_s, rel=1e-9)


def test_a_device_event_elsewhere_touches_no_job():
    res, pol = run(scenario(TWO[:1], dcs=LINE[:2] + (("c", 8),), max_chain=2,
                            devices=[(600.0, "c", 0.3)]), "chain-dp")
    assert "c" not in res.records[0].placement.datacenters and pol.adaptations == []
    assert res.records[0].end_s == pytest.approx(
        20000 * res.records[0].placement.iteration_time_s)
