"""``chainpipe generate`` writes contract version 3; the committed ``instances/v3`` sets.

The Python API keeps building version-2 problems unless asked (``version=3``), so the
older sets and every caller written before version 3 keep their meaning and optima.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from chainpipe.cli import main as cli_main
from chainpipe.instances import generate
from chainpipe.instances.generator import default_pipelines, versioned
from chainpipe.instances.sets import (
    FINDINGS,
    ROOT,
    SETS,
    V3_SETS,
    build,
    check_against_manifest,
    findings,
    generator_command,
    instance_text,
    verdicts,
)
from chainpipe.io import instance_from_dict, instance_to_dict, read, write
from chainpipe.solve import solve

CLUSTER = ROOT.parent / "examples" / "metro-cluster.toml"


def cli_generate(capsys, tmp_path, *argv):
    """Run ``chainpipe generate ARGV -o FILE``: (exit status, stderr lines, file or None)."""
    out = tmp_path / "g.json"
    code = cli_main(["generate", *map(str, argv), "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err, (read(out) if out.exists() else None)


# --------------------------------------------------------------------------- CLI defaults
def test_cli_writes_version_3_with_the_period_objective_and_pipelines(capsys, tmp_path):
    code, _, inst = cli_generate(capsys, tmp_path, "--preset", "hybrid")
    assert code == 0
    assert inst.training.objective == "period"
    assert inst.parallelism.pipelines == (1, 2, 4)  # 4 DCs
    assert inst.training.pipeline_sync_period == 1
    assert inst.training.microbatch_size == 8  # lcm of 1, 2, 4, 8
    assert inst == generate("hybrid", 0, version=3)
    doc = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))
    assert doc["format"] == "chainpipe-instance/3"
    assert doc["training"]["objective"] == "period"
    assert doc["training"]["microbatch_size"] == 8


def test_cli_stdout_is_version_3_too(capsys):
    assert cli_main(["generate", "--preset", "tiny", "--seed", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["training"]["objective"] == "period"
    assert doc["training"]["microbatch_size"] == 1  # version-1 figures: lcm of [1]
    assert doc["training"]["parallelism"]["pipelines"] == list(
        default_pipelines(len(doc["datacenters"]), doc["training"]["microbatches"]))


def test_a_single_dc_preset_offers_one_pipeline(capsys, tmp_path):
    code, _, inst = cli_generate(capsys, tmp_path, "--preset", "hybrid-small", "--seed", "1")
    assert code == 0 and inst.num_datacenters == 1
    assert inst.parallelism.pipelines == (1,)
    assert inst.training.microbatch_size == 6  # lcm of 1, 2, 3


@pytest.mark.parametrize("k, m, expected", [
    (1, 64, (1,)), (2, 64, (1, 2)), (3, 64, (1, 2)), (4, 64, (1, 2, 4)), (7, 64, (1, 2, 4)),
    (8, 128, (1, 2, 4, 8)), (16, 128, (1, 2, 4, 8)), (8, 2, (1, 2)), (4, 1, (1,)),
])
def test_default_pipelines_are_powers_of_two_up_to_the_dcs_and_m(k, m, expected):
    assert default_pipelines(k, m) == expected


def test_cli_microbatch_size_defaults_to_the_lcm_of_the_widths(capsys, tmp_path):
    code, _, inst = cli_generate(capsys, tmp_path, "--preset", "metro", "--data-parallel",
                                 "1,3,4", "--global-batch", "384")
    assert code == 0
    assert inst.training.microbatch_size == math.lcm(1, 3, 4) == 12
    assert inst.microbatches == 384 // 12


# --------------------------------------------------------------------------- CLI knobs
def test_cli_pipelines_sync_period_and_objective(capsys, tmp_path):
    code, _, inst = cli_generate(capsys, tmp_path, "--preset", "hybrid", "--pipelines", "1,4",
                                 "--sync-period", "8", "--objective", "classic",
                                 "--microbatch-size", "16")
    assert code == 0
    assert inst.parallelism.pipelines == (1, 4)
    assert inst.training.pipeline_sync_period == 8
    assert inst.training.objective == "classic"
    assert inst.training.microbatch_size == 16
    assert inst == generate("hybrid", 0, version=3, pipelines=(1, 4), sync_period=8,
                            objective="classic", microbatch_size=16)
    assert inst.name.endswith("-classic-p1-4-H8")


def test_cli_cluster_file_gets_the_version_3_fields(capsys, tmp_path):
    code, _, inst = cli_generate(capsys, tmp_path, "--cluster", CLUSTER, "--model",
                                 "gpt3-125m")
    assert code == 0 and inst.num_datacenters == 3
    assert inst.training.objective == "period" and inst.parallelism.pipelines == (1, 2)
    code, _, inst = cli_generate(capsys, tmp_path, "--cluster", CLUSTER, "--model",
                                 "gpt3-125m", "--pipelines", "3", "--sync-period", "2")
    assert code == 0
    assert inst.parallelism.pipelines == (3,) and inst.training.pipeline_sync_period == 2


@pytest.mark.parametrize("argv, message", [
    (["--pipelines", "0"], "argument --pipelines: must be comma-separated integers >= 1"),
    (["--pipelines", "1,1"], "argument --pipelines: must be comma-separated integers >= 1"),
    (["--pipelines", "1,two"], "argument --pipelines: must be comma-separated integers >= 1"),
    (["--pipelines", ""], "argument --pipelines: must be comma-separated integers >= 1"),
    (["--pipelines", "1,8"], "generate: pipelines: 8 pipelines need 8 datacenters and 8 "
                             "microbatches; the instance has 4 datacenter(s)"),
    (["--pipelines", "4", "--microbatches", "2"],
     "generate: pipelines: 4 pipelines need 4 datacenters and 4 microbatches; the instance "
     "has 2 microbatch(es)"),
    (["--sync-period", "0"], "argument --sync-period: must be an integer >= 1"),
    (["--sync-period", "1.5"], "argument --sync-period: must be an integer >= 1"),
    (["--objective", "fast"], "argument --objective: invalid choice: 'fast'"),
], ids=["zero", "repeat", "word", "empty", "beyond-dcs", "beyond-m", "sync-zero",
        "sync-float", "objective"])
def test_cli_bad_v3_values_exit_2_with_one_line(capsys, tmp_path, argv, message):
    code, err, inst = cli_generate(capsys, tmp_path, "--preset", "hybrid", *argv)
    assert code == 2 and inst is None
    assert len(err) == 1 and "Traceback" not in err[0]
    prefix = "chainpipe generate: " if message.startswith("argument") else ""
    assert err[0].startswith(prefix + message), err


def test_cli_cluster_refuses_too_many_pipelines_in_one_line(capsys, tmp_path):
    code, err, inst = cli_generate(capsys, tmp_path, "--cluster", CLUSTER, "--model",
                                   "gpt3-125m", "--pipelines", "1,4")
    assert code == 2 and inst is None and len(err) == 1
    assert "4 pipelines need 4 datacenters" in err[0]


# --------------------------------------------------------------------------- Python API
def test_python_default_is_still_the_version_2_problem():
    inst = generate("hybrid", 0)
    assert inst.training.objective == "classic"
    assert inst.parallelism.pipelines == (1,) and inst.training.pipeline_sync_period == 1
    assert inst.training.microbatch_size == 8


def test_version_3_changes_only_the_training_knobs_and_adds_the_shares():
    v2, v3 = generate("hybrid", 1), generate("hybrid", 1, version=3)
    assert v3.datacenters == v2.datacenters and v3.links == v2.links
    assert v3.name == v2.name
    # the layers gain their weight-gradient share from the model's shape, nothing else
    assert all(ly.weight_grad_share is None for ly in v2.layers)
    assert all(ly.weight_grad_share is not None for ly in v3.layers)
    unshared = tuple(dataclasses.replace(ly, weight_grad_share=None) for ly in v3.layers)
    assert unshared == v2.layers
    model = dataclasses.replace(v3.model, layers=unshared)
    assert versioned(v2) == dataclasses.replace(v3, model=model)
    assert v3.training.objective == "period" and v3.parallelism.pipelines == (1, 2, 4)


@pytest.mark.parametrize("kwargs, message", [
    ({"pipelines": (1, 2)}, "pipelines: needs version 3"),
    ({"sync_period": 2}, "sync_period: needs version 3"),
    ({"objective": "period"}, "objective: needs version 3"),
    ({"version": 1}, "version must be one of 2, 3, got 1"),
    ({"version": True}, "version must be one of 2, 3, got True"),
    ({"version": 3, "pipelines": ()}, "pipelines must be a non-empty list"),
    ({"version": 3, "pipelines": "12"}, "pipelines must be a non-empty list"),
    ({"version": 3, "pipelines": (1, 0)}, "pipelines must be an integer >= 1, got 0"),
    ({"version": 3, "pipelines": (2, 2)}, "pipelines must not repeat a count"),
    ({"version": 3, "sync_period": 0}, "sync_period must be an integer >= 1, got 0"),
    ({"version": 3, "objective": "fast"}, "objective must be one of period, classic"),
    ({"seq_len": 0}, "seq_len must be an integer >= 1, got 0"),
])
def test_python_api_refuses_bad_v3_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate("hybrid", 0, **kwargs)


def test_seq_len_override():
    base, long = generate("hybrid-small", 2), generate("hybrid-small", 2, seq_len=8192)
    assert long.name == base.name + "-seq8192"
    assert long.datacenters == base.datacenters
    assert long.layers[1].output_bytes == 2 * base.layers[1].output_bytes  # 4096 -> 8192


@pytest.mark.parametrize("preset", ["tiny", "metro", "hybrid-small", "hybrid"])
def test_version_3_round_trips_through_the_reader(tmp_path, preset):
    inst = generate(preset, 3, version=3, sync_period=2)
    again = instance_from_dict(json.loads(json.dumps(instance_to_dict(inst))))
    assert again == inst
    write(inst, tmp_path / "x.json")
    assert read(tmp_path / "x.json") == inst
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == instance_text(inst)


# --------------------------------------------------------------------------- v3 sets
def test_the_v3_sets_exist_with_their_command():
    assert list(V3_SETS) == ["v3/small", "v3/medium", "v3/large"]
    for name in V3_SETS:
        data = json.loads((ROOT / name / "manifest.json").read_text(encoding="utf-8"))
        assert data["set"] == name
        assert data["generator"] == generator_command(name) == \
            f"python -m chainpipe.instances.sets --sets {name}"
        assert 3 <= len(data["instances"]) <= 5
        for item in data["instances"]:
            assert item["version"] == 3 and item["objective"] == "period"
            assert item["dp"] == FINDINGS[item["name"]]


@pytest.mark.parametrize("set_name", list(V3_SETS))
def test_v3_set_rebuilds_byte_for_byte(set_name):
    directory = ROOT / set_name
    files = build(set_name)
    assert {p.name for p in directory.glob("*.json")} == set(files)
    for name, text in files.items():
        assert (directory / name).read_text(encoding="utf-8") == text, name
    assert check_against_manifest(directory) == []


def _v3_instances(set_name):
    return [(e, read(ROOT / set_name / f"{e.stem}.json")) for e in SETS[set_name]]


@pytest.mark.parametrize("set_name, dcs, gpus, layers, m, pipelines", [
    ("v3/medium", 4, 64, (40, 60), 64, (1, 2, 4)),
    ("v3/large", 8, 256, (60, 130), 128, (1, 2, 4, 8)),
])
def test_v3_medium_and_large_shapes(set_name, dcs, gpus, layers, m, pipelines):
    for _e, inst in _v3_instances(set_name):
        assert inst.num_datacenters == dcs and inst.num_devices == gpus
        assert layers[0] <= inst.num_layers <= layers[1] and inst.microbatches == m
        assert inst.parallelism.pipelines == pipelines
        assert inst.parallelism.data_parallel == inst.parallelism.tensor_parallel == (1, 2, 4, 8)
        assert all(g.devices_per_node == 8 for dc in inst.datacenters for g in dc.devices)
        if set_name == "v3/large":
            assert all(len(dc.devices) == 2 for dc in inst.datacenters)


def test_v3_small_shows_both_effects():
    """v3/small has instances where the period changes the optimum and where several
    pipelines win, as its manifest says (proven), GPipe and ``H > 1`` among them."""
    records = [FINDINGS[e.stem] for e in SETS["v3/small"]]
    assert any(r["period_changes_optimum"] for r in records)
    assert any(r["several_pipelines_win"] for r in records)
    assert any(not r["several_pipelines_win"] for r in records)
    small = _v3_instances("v3/small")
    assert {inst.training.schedule for _, inst in small} == {"1f1b", "gpipe"}
    assert any(inst.training.pipeline_sync_period > 1 for _, inst in small)


def test_recorded_verdicts_follow_from_the_recorded_searches():
    """Every v3 entry is measured; a verdict is ``None`` only where a search was cut."""
    for set_name in V3_SETS:
        for e in SETS[set_name]:
            record = FINDINGS[e.stem]
            assert {k: record[k] for k in ("period_changes_optimum", "several_pipelines_win")} \
                == verdicts(record), e.stem
            if record["optimum"]["status"] == record["one_pipeline"]["status"] == "optimal":
                assert None not in (record["period_changes_optimum"],
                                    record["several_pipelines_win"]), e.stem


@pytest.mark.parametrize("entry", V3_SETS["v3/small"], ids=lambda e: e.stem)
def test_v3_small_optima_match_the_manifest(entry):
    inst = read(ROOT / "v3" / "small" / f"{entry.stem}.json")
    found, recorded = findings(inst, time_limit=30), FINDINGS[entry.stem]
    for part in ("optimum", "one_pipeline", "classic"):
        assert found[part]["status"] == recorded[part]["status"] == "optimal"
        assert found[part]["iteration_time_s"] == pytest.approx(
            recorded[part]["iteration_time_s"], rel=1e-5)
    assert found["optimum"]["pipelines"] == recorded["optimum"]["pipelines"]
    assert found["classic"]["plan_under_objective_s"] == pytest.approx(
        recorded["classic"]["plan_under_objective_s"], rel=1e-5)
    for flag in ("period_changes_optimum", "several_pipelines_win"):
        assert found[flag] == recorded[flag]


def test_v3_small_is_fast_for_dp():
    for _e, inst in _v3_instances("v3/small"):
        res = solve(inst, solver="dp", time_limit=30)
        assert res.status == "optimal" and res.solve_time < 2.0  # measured 0.1-0.3 s


# --------------------------------------------------------------------------- older sets
OLDER = [n for n in SETS if n not in V3_SETS]


@pytest.mark.parametrize("set_name", OLDER)
def test_older_sets_stay_version_2_problems(set_name):
    data = json.loads((ROOT / set_name / "manifest.json").read_text(encoding="utf-8"))
    assert all("version" not in item and "dp" not in item for item in data["instances"])
    for e in SETS[set_name]:
        assert e.version == 2
        inst = read(ROOT / set_name / f"{e.stem}.json")
        assert inst.training.objective == "classic" and inst.parallelism.pipelines == (1,)
        assert inst.training.microbatch_size is None
        assert inst == e.instance()
    assert (ROOT / set_name / "manifest.json").read_text(encoding="utf-8") == \
        build(set_name)["manifest.json"]


@pytest.mark.parametrize("set_name, stem, optimum", [
    ("small", "small-03-mem-1f1b", 12.7348), ("hybrid/small", "hybrid-small-01", 0.1758),
    ("hybrid/small", "hybrid-small-05-mem", 3.2083),
])
def test_older_sets_keep_their_optima(set_name, stem, optimum):
    res = solve(read(ROOT / set_name / f"{stem}.json"), solver="dp", time_limit=60)
    assert res.status == "optimal"
    assert res.iteration_time == pytest.approx(optimum, abs=1e-4)
