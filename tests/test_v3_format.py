"""Contract version 3, format: the new fields with their version-dependent defaults, the
/3 writer, stable digests, both plan shapes, and the one refusal of solvers that do not
handle version 3 yet."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe.instance import InstanceError, Parallelism, Training
from chainpipe.io import instance_digest, instance_from_dict, instance_to_dict, load_json, read
from chainpipe.plan import Pipeline, Plan, Stage
from chainpipe.solve import SOLVERS, unsupported
from chainpipe.support import SUPPORTED, refusal

ROOT = Path(__file__).resolve().parents[1]
VALID = ROOT / "tests" / "data" / "valid"


def _with(inst, **training):
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training, **training))


# --------------------------------------------------------------------------- instances
@pytest.mark.parametrize("fmt,objective", [("chainpipe-instance/1", "classic"),
                                           ("chainpipe-instance/2", "classic"),
                                           ("chainpipe-instance/3", "period")])
def test_the_objective_defaults_by_the_files_version(fmt, objective):
    data = load_json(VALID / "worked_example_v2.json")
    data["format"] = fmt
    inst = instance_from_dict(data)
    assert inst.training.objective == objective
    assert (inst.training.pipeline_sync_period, inst.parallelism.pipelines) == (1, (1,))


def test_a_stated_objective_is_used_whatever_the_version():
    for fmt in ("chainpipe-instance/1", "chainpipe-instance/2", "chainpipe-instance/3"):
        for objective in ("period", "classic"):
            data = load_json(VALID / "worked_example_v2.json")
            data["format"] = fmt
            data["training"]["objective"] = objective
            assert instance_from_dict(data).training.objective == objective


def test_python_built_training_keeps_the_classic_meaning():
    t = Training(4, "1f1b", 16)
    assert (t.objective, t.pipeline_sync_period, t.parallelism.pipelines) == ("classic", 1, (1,))
    assert Parallelism().pipelines == (1,)
    with pytest.raises(InstanceError, match="objective: must be one of period, classic"):
        Training(4, "1f1b", 16, objective="makespan")
    with pytest.raises(InstanceError, match=r"pipeline_sync_period: must be an integer >= 1"):
        Training(4, "1f1b", 16, pipeline_sync_period=0)
    with pytest.raises(InstanceError, match=r"pipelines\[1\]: repeats 2"):
        Parallelism(pipelines=(2, 2))


def test_a_version_2_instance_written_as_version_3_states_classic(tmp_path):
    inst = read(VALID / "worked_example_v2.json")
    cp.write(inst, tmp_path / "v3.json")
    data = load_json(tmp_path / "v3.json")
    assert data["format"] == "chainpipe-instance/3"
    assert data["training"]["objective"] == "classic"
    assert data["training"]["pipeline_sync_period"] == 1
    assert data["training"]["parallelism"]["pipelines"] == [1]
    back = read(tmp_path / "v3.json")
    assert back == inst and back.training.objective == "classic"


def test_version_3_fields_round_trip(tmp_path):
    inst = read(VALID / "worked_example_v3_pipelines.json")
    assert inst.parallelism.pipelines == (1, 2) and inst.training.objective == "period"
    changed = _with(inst, pipeline_sync_period=3, objective="classic")
    cp.write(changed, tmp_path / "x.json")
    assert read(tmp_path / "x.json") == changed


def test_digests_of_version_2_instances_are_unchanged():
    """A plan written before version 3 still names its instance: the digest of a
    version-2 instance is that of its version-2 document."""
    inst = read(VALID / "worked_example_v2.json")
    doc = instance_to_dict(inst)
    doc["format"] = "chainpipe-instance/2"
    del doc["training"]["objective"], doc["training"]["pipeline_sync_period"]
    del doc["training"]["parallelism"]["pipelines"]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert instance_digest(inst) == hashlib.sha256(text.encode()).hexdigest()
    committed = load_json(VALID / "worked_example_v2.plan.json")["instance"]["sha256"]
    assert instance_digest(inst) == committed
    # a version-3 feature is part of what a plan is checked against
    for other in (_with(inst, objective="period"), _with(inst, pipeline_sync_period=2),
                  _with(inst, parallelism=dataclasses.replace(inst.parallelism,
                                                              pipelines=(1, 2)))):
        assert instance_digest(other) != instance_digest(inst)


# --------------------------------------------------------------------------- plans
def _two():
    return Plan(pipelines=[Pipeline([Stage(0, 1, "a/g/0")], 2), Pipeline([Stage(0, 1, "b/g/0")], 2)])


def test_plans_of_either_shape_round_trip():
    one = Plan([Stage(0, 1, "a/g/0"), Stage(1, 2, "a/g/1")])
    assert set(one.to_dict()) == {"stages"} and Plan.from_dict(one.to_dict()) == one
    assert one.single and one.num_pipelines == 1 and one.num_stages == 2
    two = _two()
    assert set(two.to_dict()) == {"pipelines"} and Plan.from_dict(two.to_dict()) == two
    assert [p["microbatches"] for p in two.to_dict()["pipelines"]] == [2, 2]
    assert len(two.all_stages) == 2 and not two.single
    with pytest.raises(ValueError, match="a plan of 2 pipelines has no single list of stages"):
        two.stages  # noqa: B018
    with pytest.raises(TypeError, match="states each one's microbatches"):
        Plan(pipelines=[Pipeline(two.all_stages[:1]), Pipeline(two.all_stages[1:], 2)])
    with pytest.raises(TypeError, match="stages .one pipeline. or pipelines"):
        Plan(two.all_stages, pipelines=two.pipelines)
    # one pipeline in the second form keeps its form (and its stated M_p)
    second = Plan(pipelines=[Pipeline(one.stages, 4)])
    assert second.stages == one.stages and not second.single
    assert Plan.from_dict(second.to_dict()) == second and "pipelines" in second.to_dict()


@pytest.mark.parametrize("data,lines", [
    ({"stages": [], "pipelines": []}, ["(plan): give 'stages' (one pipeline) or 'pipelines', "
                                       "not both"]),
    ({"pipelines": []}, ["pipelines: must be a non-empty list"]),
    ({"pipelines": [{"stages": [{"layers": [0, 1], "device": "a/g/0"}]}, 3]},
     ["pipelines[0].microbatches: missing field (required with 'pipelines')",
      "pipelines[1]: must be an object {\"microbatches\": M_p, \"stages\": [...]}"]),
    ({"pipelines": [{"microbatches": 1.5, "stages": [], "x": 0}]},
     ["pipelines[0].x: unknown field", "pipelines[0].microbatches: must be an integer, got 1.5",
      "pipelines[0].stages: must be a non-empty list"]),
])
def test_bad_plan_shapes_are_named_by_path(data, lines):
    with pytest.raises(InstanceError) as info:
        Plan.from_dict(data)
    assert info.value.problems == lines


def test_a_result_file_holding_a_pipelines_plan_is_read(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"plan": _two().to_dict()}))
    assert cp.read_plan(path) == _two()
    path.write_text(json.dumps(_two().to_dict()))
    assert cp.read_plan(path) == _two()


# --------------------------------------------------------------------------- solvers
EXACT = [name for name, info in SOLVERS.items() if info.exact]
#: the exact routes without the period yet (dp has it: tests/test_dp_v3.py; the ILPs and
#: cpsat: tests/test_formulations_v3.py)
REFUSING = [name for name in EXACT if "period" not in SUPPORTED.get(name, ())]
BASELINES = [name for name, info in SOLVERS.items() if not info.exact]


def test_every_exact_solver_refuses_the_period_objective_with_one_line():
    inst = read(VALID / "worked_example_v3_1f1b.json")
    assert set(EXACT) == {"dp", "cdynp", "ilp-assign", "ilp-path", "cpsat"}
    for name in REFUSING:
        r = cp.solve(inst, name)
        assert r.status == "error" and r.plan is None and r.iteration_time is None, name
        assert r.message == (f"{name} does not support contract version 3 yet: objective "
                             f"'period' (training.objective; 'classic' is supported)")


def test_every_solver_refuses_several_pipelines():
    inst = read(VALID / "worked_example_v3_pipelines.json")
    for name in REFUSING:
        r = cp.solve(_with(inst, objective="classic"), name)
        assert r.status == "error" and r.plan is None, name
        assert r.message == (f"{name} does not support contract version 3 yet: several "
                             f"pipelines (training.parallelism.pipelines = [1, 2]; [1] is "
                             f"supported)"), name
    both = refusal(inst.training, "an-exact-solver")  # one that handles neither feature
    assert both.startswith("an-exact-solver does not support contract version 3 yet: "
                           "objective 'period'")
    assert both.endswith("; several pipelines (training.parallelism.pipelines = [1, 2]; "
                         "[1] is supported)")


def test_baselines_plan_under_period_and_are_costed_by_it():
    inst = read(VALID / "worked_example_v3_1f1b.json")
    for name in BASELINES:
        r = cp.solve(inst, name)
        assert r.status in ("feasible", "infeasible", "no_solution"), (name, r.message)
        if r.plan is not None:
            assert r.iteration_time == cp.evaluate(inst, r.plan).iteration_time_s


def test_what_version_2_expresses_is_still_solved_in_a_version_3_file():
    """classic, pipelines [1] (and any H, which needs several pipelines to matter), or
    period with one microbatch: exactly the version-2 problem."""
    v2 = read(VALID / "worked_example_v2.json")
    for inst in (_with(v2, pipeline_sync_period=5),
                 _with(v2, objective="classic")):
        assert unsupported(inst, "dp") is None
        r = cp.solve(inst, "dp")
        assert (r.status, r.iteration_time) == ("optimal", 16.0)
    one = _with(read(VALID / "worked_example_v3_1f1b.json"), microbatches=1)
    assert unsupported(one, "dp") is None
    assert cp.solve(one, "dp").iteration_time == 6.0  # one microbatch: one stage, C = 6
