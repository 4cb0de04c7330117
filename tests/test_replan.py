"""``chainpipe replan``: the new optimum, the old plan re-evaluated, the cost of moving and
the switch decision."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import chainpipe as cp
from chainpipe.cli import main
from chainpipe.instance import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.io import write, write_plan
from chainpipe.plan import Plan
from chainpipe.replan import move_cost, replan

PARAMS = 1000


def two_dcs(rate_a: float = 100.0, rate_b: float = 50.0, count_a: int = 1,
            bandwidth: float = 20.0, latency: float = 1.0, name: str = "two",
            count_b: int = 1) -> Instance:
    """Four layers of 1,000 parameters (2 bytes each); DC ``a`` then ``b``, one device group
    each, a chain link of ``bandwidth`` B/s and ``latency`` s."""
    layers = tuple(Layer(f"l{i}", 100.0, 200.0, PARAMS, 1.0, 1000.0) for i in range(4))
    return Instance(name, Model("m", layers), Training(4, "1f1b", 2.0),
                    (Datacenter("a", (DeviceGroup("g", count_a, rate_a, 1e9),), Link(1e3, 0.0)),
                     Datacenter("b", (DeviceGroup("g", count_b, rate_b, 1e9),),
                                Link(1e3, 0.0))),
                    (Link(bandwidth, latency),))


def test_the_same_instance_keeps_its_optimum_at_no_cost():
    inst = two_dcs()
    plan = cp.solve(inst, "dp").plan
    r = replan(inst, plan, inst)
    assert r.move_bytes == 0 and r.move_s == 0 and not r.transfers
    assert r.decision == "keep" and r.saved_s == pytest.approx(0.0)


def test_a_slower_dc_moves_every_layer_at_the_links_bandwidth():
    """The optimum runs on a's device; a becomes 10x slower, so the new optimum is on b
    (rate 50). Every layer's 2 x 1,000 bytes cross the link of 20 B/s with 1 s latency:
    8,000 B / 20 B/s + 1 s = 401 s."""
    old = two_dcs()
    plan = cp.solve(old, "dp").plan
    assert {st.devices[0].split("/")[0] for st in plan.stages} == {"a"}
    new = two_dcs(rate_a=10.0, name="slow-a")
    r = replan(old, plan, new, horizon=10)
    assert {st.devices[0].split("/")[0] for st in r.new_plan.stages} == {"b"}
    assert r.move_bytes == 4 * PARAMS * 2.0
    assert r.move_s == pytest.approx(8000 / 20 + 1.0)
    assert [(t.source, t.target) for t in r.transfers] == [("a", "b")]
    gain = r.old_on_new_s - r.new_time_s
    assert gain > 0 and r.saved_s == pytest.approx(10 * gain)
    assert r.decision == ("switch" if 10 * gain > 401 else "keep")
    need = math.ceil(401 / gain) + 1
    assert replan(old, plan, new, horizon=need).decision == "switch"
    assert replan(old, plan, new, horizon=max(1, math.floor(401 / gain) - 1)).decision == "keep"


def test_concurrent_transfers_share_a_link():
    """Two old stages on a, two new ones on b: both transfers cross the one link, so the
    move takes their summed bytes at its bandwidth (401 s), not the longer alone (201 s);
    a stage left on its devices moves nothing."""
    old = two_dcs(count_a=2, count_b=2)
    plan = Plan.from_tuples(old, [(0, 2, 0, 0), (2, 4, 0, 0)])
    target = Plan.from_tuples(old, [(0, 2, 1, 0), (2, 4, 1, 0)])
    transfers, nbytes, seconds, lost = move_cost(old, plan, old, target)
    assert [t.seconds for t in transfers] == pytest.approx([201.0, 201.0])
    assert nbytes == 8000.0 and seconds == pytest.approx(401.0) and not lost
    partly = Plan.from_tuples(old, [(0, 2, 0, 0), (2, 4, 1, 0)])  # stage 0 stays on a/g/0
    transfers, nbytes, seconds, _ = move_cost(old, plan, old, partly)
    assert [t.layers for t in transfers] == [(2, 3)] and seconds == pytest.approx(201.0)


def test_an_old_plan_on_a_device_that_is_gone_must_switch():
    old = two_dcs(count_a=2)
    plan = Plan.from_tuples(old, [(0, 2, 0, 0), (2, 4, 0, 0)])  # a/g/0 and a/g/1
    new = two_dcs(count_a=1, name="lost-one")
    r = replan(old, plan, new, horizon=1)
    assert r.old_violations and math.isinf(r.old_on_new_s)
    assert r.decision == "switch" and "no longer runs" in r.reason
    assert r.saved_s is None


def test_a_layer_whose_dc_is_gone_cannot_move_over_the_links():
    old = two_dcs()
    plan = Plan.from_tuples(old, [(0, 4, 0, 0)])
    layers = old.model.layers
    new = Instance("only-b", Model("m", layers), old.training,
                   (Datacenter("b", (DeviceGroup("g", 1, 50.0, 1e9),), Link(1e3, 0.0)),), ())
    r = replan(old, plan, new)
    assert r.lost_layers == (0, 1, 2, 3) and math.isinf(r.move_s)
    assert r.decision == "switch"  # the old plan no longer runs either
    assert r.to_dict()["move"]["seconds"] is None


def test_another_model_is_refused():
    old = two_dcs()
    other = dataclasses.replace(old, model=Model("m", old.model.layers[:3]))
    plan = Plan.from_tuples(old, [(0, 4, 0, 0)])
    with pytest.raises(ValueError, match="another model"):
        replan(old, plan, other)


def test_replan_command_json_table_and_plan_out(tmp_path, capsys):
    old = two_dcs()
    new = two_dcs(rate_a=10.0, name="slow-a")
    plan = cp.solve(old, "dp").plan
    write(old, tmp_path / "old.json")
    write(new, tmp_path / "new.json")
    write_plan(plan, tmp_path / "plan.json", old)
    args = [str(tmp_path / "old.json"), str(tmp_path / "plan.json"), str(tmp_path / "new.json")]
    assert main(["replan", *args, "--horizon", "100000", "--format", "json",
                 "--plan-out", str(tmp_path / "next.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decision"] == "switch" and data["move"]["bytes"] == 8000.0
    assert data["move"]["transfers"][0]["layers"] == [0, 4]
    assert cp.evaluate(new, cp.read_plan(tmp_path / "next.json")).feasible
    assert main(["replan", *args, "--horizon", "1"]) == 0
    out = capsys.readouterr().out
    assert "KEEP" in out and "a -> b" in out and "move" in out
    # never over an input; another model exits 2 in one line
    assert main(["replan", *args, "--plan-out", str(tmp_path / "plan.json")]) == 2
    other = dataclasses.replace(old, model=Model("m", old.model.layers[:3]), name="other")
    write(other, tmp_path / "other.json")
    assert main(["replan", args[0], args[1], str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err
    assert "another model" in err and "Traceback" not in err
