"""Instance I/O: every broken file reports exactly its problems, valid files round-trip,
writes are atomic, and the shipped JSON Schema agrees with chainpipe's own rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import chainpipe as cp
from chainpipe.instance import (
    MAX_COUNT,
    MAX_PARAMS,
    OBJECTIVES,
    InstanceError,
    Parallelism,
    default_objective,
)
from chainpipe.io import (
    instance_from_dict,
    instance_to_dict,
    load_json,
    load_schema,
    read,
    read_plan,
    write,
    write_json,
)
from helpers import random_instance

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
INVALID = DATA / "invalid"
VALID = DATA / "valid"
#: file -> the exact problem lines, without the "FILE: " prefix read() puts in front
EXPECTED: dict[str, list[str]] = json.loads(
    (INVALID / "expected.json").read_text(encoding="utf-8"))["files"]
#: problems found before any field is looked at: the file cannot be read or is not JSON
FILE_LEVEL = ("invalid JSON: ", "cannot read file: ")
#: instance files among the valid test data (plans and results are *.plan.json, *.result.json)
VALID_INSTANCES = sorted(p for p in VALID.glob("*.json") if p.name.count(".") == 1)


def _problems(fn, *args) -> list[str]:
    with pytest.raises(InstanceError) as info:
        fn(*args)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


# --------------------------------------------------------------------------- broken files
def test_every_invalid_file_has_expectations_and_vice_versa():
    on_disk = {p.name for p in INVALID.iterdir() if p.name != "expected.json"}
    assert on_disk == set(EXPECTED)
    assert all(EXPECTED.values()), "every file must expect at least one problem line"


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
def test_invalid_file_reports_exactly_its_problems(name):
    path = INVALID / name
    assert _problems(read, path) == [f"{path}: {line}" for line in EXPECTED[name]]


@pytest.mark.parametrize(
    "name",
    sorted(n for n, lines in EXPECTED.items() if not lines[0].startswith(FILE_LEVEL)),
    ids=lambda n: n.removesuffix(".json"),
)
def test_invalid_dict_reports_the_same_lines_without_file_prefix(name):
    data = load_json(INVALID / name)
    assert _problems(instance_from_dict, data) == EXPECTED[name]


def test_the_spec_example_line_is_produced_verbatim():
    # the README and the command-line contract quote this exact line; keep it so
    assert "datacenters[1].devices[0].count: must be an integer >= 1, got 0" in \
        EXPECTED["device_count_zero.json"]


def test_missing_file_and_directory_are_reported_not_raised(tmp_path):
    missing = tmp_path / "nope.json"
    assert _problems(read, missing) == [f"{missing}: cannot read file: No such file or directory"]
    assert _problems(read, tmp_path) == [f"{tmp_path}: cannot read file: Is a directory"]


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + (VALID / "worked_example.json").read_bytes())
    assert read(path) == read(VALID / "worked_example.json")


def test_huge_numbers_from_python_are_rejected_with_a_short_quote():
    data = load_json(VALID / "two_dcs.json")
    data["model"]["layers"][0]["fwd_flop"] = 10**400
    data["model"]["layers"][1]["params"] = 10**5000  # more digits than Python prints
    data["training"]["bytes_per_param"] = float("inf")
    assert _problems(instance_from_dict, data) == [
        "model.layers[0].fwd_flop: 1" + "0" * 55 + "... (401 characters) overflows a double",
        "model.layers[1].params: an integer of about 5001 digits overflows a double",
        "training.bytes_per_param: must be a finite number > 0, got inf",
    ]


def test_counts_are_capped_at_2_to_31_minus_1_and_params_at_2_to_53_minus_1():
    data = load_json(VALID / "two_dcs.json")
    data["training"]["microbatches"] = MAX_COUNT
    data["datacenters"][0]["devices"][0]["count"] = MAX_COUNT
    data["model"]["layers"][0]["params"] = MAX_PARAMS
    instance_from_dict(data)
    data["training"]["microbatches"] = MAX_COUNT + 1
    data["datacenters"][0]["devices"][0]["count"] = 2**53 - 1
    data["model"]["layers"][0]["params"] = MAX_PARAMS + 1
    assert _problems(instance_from_dict, data) == [
        f"model.layers[0].params: must be an integer <= {MAX_PARAMS} (2**53 - 1), "
        f"got {MAX_PARAMS + 1}",
        f"training.microbatches: must be an integer <= {MAX_COUNT} (2**31 - 1), got {MAX_COUNT + 1}",
        f"datacenters[0].devices[0].count: must be an integer <= {MAX_COUNT} (2**31 - 1), "
        f"got {2**53 - 1}",
    ]


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "[" * 100_000,
                                  '{"a": ' * 50_000 + "1" + "}" * 50_000],
                         ids=["arrays", "arrays_unclosed", "objects"])
def test_deep_nesting_is_refused_with_its_place_for_every_reader(tmp_path, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    expected = [f"{path}: invalid JSON: line 1, column {101 if text[0] == '[' else 601}: "
                "nested too deeply: more than 100 levels of arrays and objects"]
    for reader in (load_json, read, read_plan):
        assert _problems(reader, path) == expected


def test_deep_nesting_exits_2_on_the_command_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    proc = subprocess.run([sys.executable, "-m", "chainpipe", "validate", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        f"{path}: invalid JSON: line 1, column 101: nested too deeply: more than 100 levels of "
        "arrays and objects"]


def test_nesting_at_the_limit_is_read(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100 + "]" * 100)
    assert load_json(path) is not None


def test_python_values_nested_deeply_never_recurse():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    data = load_json(VALID / "two_dcs.json")
    data["name"] = deep
    data["model"]["layers"][0] = deep
    assert _problems(instance_from_dict, data) == [
        "name: must be a non-empty string, got array",
        "model.layers[0]: must be an object, got array",
    ]


def test_bad_utf8_is_placed_by_line_and_column(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('{\n  "name": "Zürich"}'.encode("latin-1"))
    assert _problems(read, path) == [
        f"{path}: invalid JSON: line 2, column 13: byte 0xfc is not UTF-8 (JSON text is UTF-8)"]


def test_every_quoted_value_is_at_most_about_80_characters():
    data = load_json(VALID / "two_dcs.json")
    data["format"] = "f" * 10_000
    data["name"] = "n\n" * 1_000
    data["training"]["schedule"] = "\x00" * 500
    data["datacenters"][0]["link"]["k" * 1_000] = 1
    problems = _problems(instance_from_dict, data)
    assert len(problems) == 4
    for line in problems:
        assert line.isprintable() and len(line) < 160, line


def test_python_constructors_enforce_the_same_rules():
    inst = read(VALID / "two_dcs.json")
    east, west = inst.datacenters
    with pytest.raises(InstanceError, match=r"count: must be an integer >= 1, got 0"):
        cp.DeviceGroup("x", 0, 1.0, 1.0)
    with pytest.raises(InstanceError, match=r"flop_per_s: must be a finite number > 0, got nan"):
        cp.DeviceGroup("x", 1, float("nan"), 1.0)
    with pytest.raises(InstanceError, match=r"device type 'a100' appears more than once"):
        cp.Datacenter("east", (east.devices[0], east.devices[0]), east.link)
    with pytest.raises(InstanceError, match=r"name: must not contain '/'"):
        cp.Datacenter("a/b", east.devices, east.link)
    with pytest.raises(InstanceError, match=r"name 'east' appears more than once"):
        cp.Instance("x", inst.model, inst.training, (east, east), inst.links)
    with pytest.raises(InstanceError, match=r"links: must have exactly 1 entries"):
        cp.Instance("x", inst.model, inst.training, (east, west), ())
    with pytest.raises(InstanceError, match=r"layers: must hold at least one layer"):
        cp.Model("m", ())
    with pytest.raises(InstanceError, match=r"name: must not be '.' or '..'"):
        cp.Model("..", inst.layers)
    with pytest.raises(InstanceError, match=r"name: must be printable: character 2 is U\+0000"):
        cp.Instance("x\x00", inst.model, inst.training, (east, west), inst.links)
    with pytest.raises(InstanceError, match=r"name: must be at most 64 characters"):
        cp.Layer("x" * 65, 1.0, 1.0, 1, 1.0, 1.0)
    with pytest.raises(InstanceError, match=r"schedule: must be one of 1f1b, gpipe"):
        cp.Training(4, "interleaved", 16.0)


def test_python_constructors_enforce_the_version_2_rules():
    with pytest.raises(InstanceError) as info:
        Parallelism(data_parallel=(1, 0), tensor_parallel=(1, 2, 2), zero=0)
    assert info.value.problems == [
        "data_parallel[1]: must be an integer >= 1, got 0",
        "tensor_parallel[2]: repeats 2 (also [1]); values must be distinct",
        "zero: must be true or false, got 0",
    ]
    with pytest.raises(InstanceError, match=r"^tensor_parallel\[0\]: must be a power of two"):
        Parallelism(tensor_parallel=(6,))
    with pytest.raises(InstanceError, match=r"^devices_per_node: must divide count \(6\)"):
        cp.DeviceGroup("x", 6, 1.0, 1.0, devices_per_node=4, node_bandwidth_bytes_per_s=1.0)
    with pytest.raises(InstanceError) as info:
        cp.DeviceGroup("x", 8, 1.0, 1.0, devices_per_node=8)
    assert info.value.problems == [
        "node_bandwidth_bytes_per_s: missing field (required when devices_per_node > 1; it is 8)"]
    with pytest.raises(InstanceError, match=r"^optimizer_bytes_per_param: must be at most "
                                            r"bytes_per_param \(2\), got 3"):
        cp.Training(4, "gpipe", 2, optimizer_bytes_per_param=3)
    with pytest.raises(InstanceError, match=r"^tp_allreduce_bytes: must be a finite number >= 0"):
        cp.Layer("l", 1.0, 1.0, 1, 1.0, 1.0, tp_allreduce_bytes=-1.0)


def test_rules_between_fields_are_judged_beside_other_problems():
    # a broken neighbour does not hide the rule between two good fields, nor the reverse
    data = load_json(VALID / "two_dcs_v2.json")
    data["training"]["microbatches"] = 0
    data["training"]["optimizer_bytes_per_param"] = 17
    group = data["datacenters"][0]["devices"][0]
    group["flop_per_s"] = -1
    group["count"] = 6
    del group["node_bandwidth_bytes_per_s"]
    data["datacenters"][1]["devices"][0]["count"] = "eight"  # nothing to divide
    assert _problems(instance_from_dict, data) == [
        "training.microbatches: must be an integer >= 1, got 0",
        "training.optimizer_bytes_per_param: must be at most bytes_per_param (16), got 17",
        "datacenters[0].devices[0].flop_per_s: must be a finite number > 0, got -1",
        "datacenters[0].devices[0].devices_per_node: must divide count (6) so that nodes are "
        "whole, got 4",
        "datacenters[0].devices[0].node_bandwidth_bytes_per_s: missing field (required when "
        "devices_per_node > 1; it is 4)",
        "datacenters[1].devices[0].count: must be an integer >= 1, got 'eight'",
    ]


# --------------------------------------------------------------------------- valid files
def test_a_version_1_file_takes_every_version_2_default():
    inst = read(VALID / "two_dcs.json")
    assert [ly.tp_allreduce_bytes for ly in inst.layers] == [
        4 * ly.output_bytes for ly in inst.layers]
    training = inst.training
    assert (training.gradient_bytes_per_param, training.optimizer_bytes_per_param) == (2, 12)
    assert inst.parallelism == Parallelism((1,), (1,), False)
    assert inst.parallelism.single_device and training.sharded_bytes_per_param == 0
    for group in (g for dc in inst.datacenters for g in dc.devices):
        assert (group.devices_per_node, group.node_bandwidth_bytes_per_s) == (1, None)
        assert group.node_bandwidth == float("inf")
    data = load_json(VALID / "two_dcs.json")
    data["training"]["bytes_per_param"] = 6  # less than 12: the optimizer state is all of it
    assert instance_from_dict(data).training.optimizer_bytes_per_param == 6


def test_a_version_1_file_carrying_version_2_fields_is_read_with_them():
    data = load_json(VALID / "v1_with_v2_fields.json")
    assert data["format"] == "chainpipe-instance/1"
    inst = read(VALID / "v1_with_v2_fields.json")
    assert inst.layers[0].tp_allreduce_bytes == 0
    assert inst.layers[1].tp_allreduce_bytes == 4 * inst.layers[1].output_bytes  # its default
    assert inst.training.gradient_bytes_per_param == 4
    assert inst.parallelism == Parallelism(data_parallel=(2,))
    a100 = inst.datacenters[0].devices[0]
    assert (a100.devices_per_node, a100.node_bandwidth_bytes_per_s) == (2, 3e11)
    assert instance_to_dict(inst)["format"] == "chainpipe-instance/3"
    assert instance_to_dict(inst)["training"]["objective"] == "classic"


def test_parallelism_keys_left_out_take_their_own_defaults():
    inst = read(VALID / "v2_partial_parallelism.json")
    assert inst.parallelism == Parallelism(data_parallel=(1,), tensor_parallel=(2, 4),
                                              zero=False)
    data = load_json(VALID / "v2_partial_parallelism.json")
    data["training"]["parallelism"] = {"zero": True}
    assert instance_from_dict(data).parallelism == Parallelism((1,), (1,), True)
    data["training"]["parallelism"] = {}
    assert instance_from_dict(data).parallelism == Parallelism()


def test_version_2_is_written_with_every_field_explicit(tmp_path):
    out = tmp_path / "v2.json"
    write(read(VALID / "two_dcs.json"), out)
    data = load_json(out)
    assert data["format"] == "chainpipe-instance/3"
    assert data["training"]["parallelism"] == {"data_parallel": [1], "tensor_parallel": [1],
                                               "zero": False, "pipelines": [1]}
    # a version-1 file's objective is classic: written out, so the /3 file keeps its meaning
    assert (data["training"]["objective"], data["training"]["pipeline_sync_period"]) == \
        ("classic", 1)
    assert read(out) == read(VALID / "two_dcs.json")
    assert data["model"]["layers"][0]["tp_allreduce_bytes"] == 1.6e7
    assert data["datacenters"][0]["devices"][0]["devices_per_node"] == 1
    assert "node_bandwidth_bytes_per_s" not in data["datacenters"][0]["devices"][0]


def _assert_contains(written, original, path):
    """Every value of ``original`` is in ``written`` (which may add keys), format aside."""
    if isinstance(original, dict):
        for key, value in original.items():
            if key != "format":
                _assert_contains(written[key], value, f"{path}.{key}")
    elif isinstance(original, list):
        assert len(written) == len(original), path
        for i, (w, o) in enumerate(zip(written, original)):
            _assert_contains(w, o, f"{path}[{i}]")
    else:
        assert written == original, path


@pytest.mark.parametrize("path", VALID_INSTANCES, ids=lambda p: p.stem)
def test_valid_file_reads_and_round_trips(path, tmp_path):
    inst = read(path)
    # the dict is the file, value for value, plus the version-2 defaults it left out
    written, original = instance_to_dict(inst), json.loads(path.read_text(encoding="utf-8"))
    assert written["format"] == "chainpipe-instance/3"
    _assert_contains(written, original, path="")
    out = tmp_path / "copy.json"
    write(inst, out)
    assert read(out) == inst
    assert instance_from_dict(json.loads(json.dumps(instance_to_dict(inst)))) == inst


@pytest.mark.parametrize("seed", range(25))
def test_random_instances_round_trip_through_json(seed):
    inst = random_instance(seed, max_dcs=4, max_types=3)
    text = json.dumps(instance_to_dict(inst), allow_nan=False)
    assert instance_from_dict(json.loads(text)) == inst


def test_devices_are_located_by_canonical_name_without_enumerating_them():
    inst = read(VALID / "unicode_names.json")  # a group of 2**31 - 1 devices
    ref = inst.locate(f"Zürich Nord/A100 80GB/{MAX_COUNT - 1}")
    assert (ref.dc, ref.group, ref.index) == (0, 0, MAX_COUNT - 1)
    assert inst.locate("Bern/MI250X/2").dc == 2
    for bad in (f"Zürich Nord/A100 80GB/{MAX_COUNT}", "Bern/MI250X/3", "Bern/MI250X/01",
                "Bern/MI250X/-1", "Bern/MI250X/+1", "Bern/MI250X/ 1", "Bern/MI250X/1.0",
                "Bern/MI250X", "Bern/MI250X/1/0", "Bern/A100 80GB/0", "bern/MI250X/0",
                "Bern/MI250X/\u0661", ""):
        with pytest.raises(KeyError, match="no device named"):
            inst.locate(bad)
    small = read(VALID / "worked_example.json")
    assert small.device_names() == ["a/g/0", "a/g/1"]
    assert [small.locate(n).index for n in small.device_names()] == [0, 1]


# --------------------------------------------------------------------------- atomic writes
def test_write_creates_parent_directories(tmp_path):
    inst = read(VALID / "worked_example.json")
    out = tmp_path / "a" / "b" / "inst.json"
    write(inst, out)
    assert read(out) == inst
    assert os.listdir(out.parent) == ["inst.json"]


def test_write_of_unserialisable_data_leaves_the_old_file_intact(tmp_path):
    out = tmp_path / "x.json"
    write_json({"ok": 1}, out)
    before = out.read_bytes()
    with pytest.raises(ValueError):
        write_json({"bad": float("nan")}, out)
    with pytest.raises(TypeError):
        write_json({"bad": object()}, out)
    assert out.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.json"]


def test_write_interrupted_midway_leaves_no_partial_file(tmp_path, monkeypatch):
    inst = read(VALID / "two_dcs.json")
    out = tmp_path / "inst.json"
    write(read(VALID / "worked_example.json"), out)
    before = out.read_bytes()
    real_write_text = Path.write_text

    def half_then_fail(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write(inst, out)
    monkeypatch.undo()
    assert out.read_bytes() == before
    assert os.listdir(tmp_path) == ["inst.json"]  # no temporary file left behind


def test_write_into_a_fresh_path_never_exposes_a_partial_target(tmp_path, monkeypatch):
    out = tmp_path / "new.json"

    def fail_replace(src, dst):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", fail_replace)
    with pytest.raises(OSError):
        write(read(VALID / "worked_example.json"), out)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- JSON Schema
#: files chainpipe rejects that the schema accepts, each for a rule JSON Schema cannot state
SCHEMA_CANNOT_EXPRESS = {
    "links_too_few.json": "links count = len(datacenters) - 1 relates two arrays",
    "links_too_many.json": "links count = len(datacenters) - 1 relates two arrays",
    "links_for_single_datacenter.json": "links count = len(datacenters) - 1 relates two arrays",
    "datacenter_name_duplicate.json": "uniqueness of one property across array items",
    "device_type_duplicate.json": "uniqueness of one property across array items",
    "layer_params_integral_float.json": "JSON Schema's integer admits 1000000.0; chainpipe "
                                        "requires an integer literal",
    "training_microbatches_float.json": "JSON Schema's integer admits 8.0; chainpipe requires "
                                        "an integer literal",
    "number_overflows_to_infinity.json": "1e999 parses to infinity, which every numeric "
                                         "bound in the schema admits",
    "number_huge_integer.json": "a 331-digit integer parses to infinity, which every "
                                "numeric bound in the schema admits",
    "number_two_to_1100.json": "2**1100 parses to infinity, which every numeric bound in "
                               "the schema admits",
    "device_type_format_character.json": "Unicode categories (format, private-use, "
                                         "unassigned) have no portable regex syntax",
    "device_devices_per_node_not_dividing.json": "devices_per_node dividing count relates "
                                                 "two fields' values",
    "training_optimizer_bytes_above_bytes_per_param.json": "optimizer_bytes_per_param <= "
                                                           "bytes_per_param relates two "
                                                           "fields' values",
}


@pytest.fixture(scope="module")
def validator():
    schema = load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _committed_instances() -> list[Path]:
    return sorted(p for p in (ROOT / "instances").glob("**/*.json") if p.name != "manifest.json")


def test_schema_accepts_every_committed_instance(validator):
    files = _committed_instances()
    if not files and not (ROOT / "instances" / "manifest.json").exists():
        pytest.skip("instances/ holds no instance set yet (no manifest.json, no instance file)")
    assert files, "instances/manifest.json exists but no instance file was found beside it"
    for path in files:
        data = load_json(path)
        errors = [e.message for e in validator.iter_errors(data)]
        assert not errors, (path, errors[:3])
        read(path)  # and chainpipe agrees


@pytest.mark.parametrize("path", VALID_INSTANCES, ids=lambda p: p.stem)
def test_schema_accepts_every_valid_test_file(validator, path):
    assert not list(validator.iter_errors(load_json(path)))


def test_schema_defaults_are_chainpipes():
    defs = load_schema()["$defs"]
    training = load_schema()["properties"]["training"]["properties"]
    assert training["gradient_bytes_per_param"]["default"] == \
        cp.Training(1, "gpipe", 16).gradient_bytes_per_param
    par = {k: v["default"] for k, v in defs["parallelism"]["properties"].items()}
    assert par == {k: (list(v) if isinstance(v, tuple) else v)
                   for k, v in vars(Parallelism()).items()}
    assert defs["device_group"]["properties"]["devices_per_node"]["default"] == \
        cp.DeviceGroup("x", 1, 1.0, 1.0).devices_per_node
    assert defs["power_of_two"]["enum"] == [2**i for i in range(31)]  # every one below 2**31
    # the schema describes a /3 file, whose objective defaults to period
    assert training["objective"]["default"] == default_objective("chainpipe-instance/3") \
        == "period"
    assert training["objective"]["enum"] == list(OBJECTIVES)
    assert training["pipeline_sync_period"]["default"] == \
        cp.Training(1, "gpipe", 16).pipeline_sync_period


def test_schema_exceptions_are_real_files():
    assert set(SCHEMA_CANNOT_EXPRESS) <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
def test_schema_rejects_what_chainpipe_rejects_where_it_can(validator, name):
    if EXPECTED[name][0].startswith(FILE_LEVEL):
        # not JSON (or not text) at all: rejected by the strict parser before any schema
        with pytest.raises(InstanceError):
            load_json(INVALID / name)
        return
    data = load_json(INVALID / name)
    accepted = validator.is_valid(data)
    if name in SCHEMA_CANNOT_EXPRESS:
        assert accepted, f"the schema now catches {name}: drop it from SCHEMA_CANNOT_EXPRESS"
    else:
        assert not accepted, f"the schema accepts {name}, which chainpipe rejects"
