"""Plausibility warnings: unit slips are caught, real instances are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from chainpipe.io import instance_from_dict, load_json, read
from chainpipe.plausibility import RANGES, plausibility_warnings

ROOT = Path(__file__).resolve().parents[1]
TWO_DCS = ROOT / "tests" / "data" / "valid" / "two_dcs.json"
COMMITTED = sorted(p for p in (ROOT / "instances").glob("*/*.json") if p.name != "manifest.json")

#: (JSON path as steps, range name) for one field of every kind in two_dcs.json
FIELDS = [
    (("training", "bytes_per_param"), "bytes_per_param"),
    (("datacenters", 0, "devices", 1, "flop_per_s"), "flop_per_s"),
    (("datacenters", 1, "devices", 0, "memory_bytes"), "memory_bytes"),
    (("datacenters", 0, "link", "bandwidth_bytes_per_s"), "bandwidth_bytes_per_s"),
    (("links", 0, "bandwidth_bytes_per_s"), "bandwidth_bytes_per_s"),
    (("datacenters", 1, "link", "latency_s"), "latency_s"),
    (("links", 0, "latency_s"), "latency_s"),
]


def _path(steps) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps).lstrip(".")


def _with(steps, value) -> list[str]:
    """The warnings of two_dcs.json with one value replaced."""
    data = load_json(TWO_DCS)
    node = data
    for s in steps[:-1]:
        node = node[s]
    node[steps[-1]] = value
    return plausibility_warnings(instance_from_dict(data))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_committed_instances_raise_no_warning(path):
    assert plausibility_warnings(read(path)) == []


def test_the_base_file_raises_no_warning():
    assert plausibility_warnings(read(TWO_DCS)) == []


def test_memory_in_gigabytes_warns_once():
    # the case that solved as "optimal" while silently never using that datacenter
    assert _with(("datacenters", 1, "devices", 0, "memory_bytes"), 80) == [
        "datacenters[1].devices[0].memory_bytes: 80 is below the plausible range 1e+08 to "
        "1e+13; the unit is bytes per device (80 GB is 8e10)"]


def test_bandwidth_of_100_warns():
    assert _with(("links", 0, "bandwidth_bytes_per_s"), 100) == [
        "links[0].bandwidth_bytes_per_s: 100 is below the plausible range 1e+06 to 1e+13; "
        "the unit is bytes per second (100 Gbit/s is 1.25e10)"]


@pytest.mark.parametrize("steps,field", FIELDS, ids=lambda x: _path(x) if isinstance(x, tuple)
                         else None)
def test_bounds_are_plausible_and_far_outside_is_not(steps, field):
    r = RANGES[field]
    assert _with(steps, r.low) == []
    assert _with(steps, r.high) == []
    outside = [r.high * 10] + ([r.low / 10] if r.low > 0 else [])
    for value in outside:
        (line,) = _with(steps, value)
        assert line.startswith(f"{_path(steps)}: {value:.6g} is ")
        assert "plausible range" in line


def test_memory_in_range_that_holds_no_layer_still_warns():
    data = load_json(TWO_DCS)
    data["model"]["layers"][0]["params"] = 10**9  # 16 GB of weights alone
    data["model"]["layers"][1]["params"] = 10**9
    data["datacenters"][0]["devices"][1]["memory_bytes"] = 1.6e10
    assert plausibility_warnings(instance_from_dict(data)) == [
        "datacenters[0].devices[1].memory_bytes: 1.6e+10 bytes cannot hold even the smallest "
        "layer (1.6001e+10 bytes); is the unit bytes?"]


def test_warnings_come_in_document_order():
    data = load_json(TWO_DCS)
    data["links"][0]["latency_s"] = 250  # milliseconds, meant
    data["training"]["bytes_per_param"] = 128  # bits, meant
    data["datacenters"][1]["devices"][0]["flop_per_s"] = 400  # TFLOP/s, meant
    data["datacenters"][0]["link"]["bandwidth_bytes_per_s"] = 1e300
    lines = plausibility_warnings(instance_from_dict(data))
    assert [line.partition(":")[0] for line in lines] == [
        "training.bytes_per_param",
        "datacenters[0].link.bandwidth_bytes_per_s",
        "datacenters[1].devices[0].flop_per_s",
        "links[0].latency_s",
    ]


# --------------------------------------------------------------------------- version 2
TWO_DCS_V2 = ROOT / "tests" / "data" / "valid" / "two_dcs_v2.json"


def _v2(**changes) -> list[str]:
    """The warnings of two_dcs_v2.json with values replaced: ``"a.b.0.c": value``."""
    data = load_json(TWO_DCS_V2)
    for dotted, value in changes.items():
        *steps, last = [int(x) if x.isdigit() else x for x in dotted.split(".")]
        node = data
        for s in steps:
            node = node[s]
        node[last] = value
    return plausibility_warnings(instance_from_dict(data))


def test_the_v2_base_file_raises_no_warning():
    assert plausibility_warnings(read(TWO_DCS_V2)) == []


@pytest.mark.parametrize("dotted,field", [
    ("training.gradient_bytes_per_param", "gradient_bytes_per_param"),
    ("datacenters.0.devices.0.node_bandwidth_bytes_per_s", "node_bandwidth_bytes_per_s"),
    ("datacenters.1.devices.0.node_bandwidth_bytes_per_s", "node_bandwidth_bytes_per_s"),
])
def test_v2_bounds_are_plausible_and_far_outside_is_not(dotted, field):
    r = RANGES[field]
    assert _v2(**{dotted: r.low}) == [] and _v2(**{dotted: r.high}) == []
    path = dotted.replace(".0", "[0]").replace(".1", "[1]")
    for value in (r.low / 10, r.high * 10):
        (line,) = _v2(**{dotted: value})
        assert line.startswith(f"{path}: {value:.6g} is ") and "plausible range" in line


def test_node_bandwidth_in_gigabytes_per_second_warns():
    assert _v2(**{"datacenters.1.devices.0.node_bandwidth_bytes_per_s": 900}) == [
        "datacenters[1].devices[0].node_bandwidth_bytes_per_s: 900 is below the plausible "
        "range 1e+08 to 1e+13; the unit is bytes per second per device inside a node "
        "(NVLink 4 is 4.5e11, PCIe 5 x16 is 6.4e10)"]


def test_gradient_bytes_in_bits_warn():
    assert _v2(**{"training.gradient_bytes_per_param": 16}) == [
        "training.gradient_bytes_per_param: 16 is above the plausible range 0.125 to 8; the "
        "unit is bytes per parameter the gradient all-reduce sends (2 for 16-bit gradients)"]


def test_a_node_larger_than_any_real_one_warns():
    assert _v2(**{"datacenters.1.devices.0.count": 64,
                  "datacenters.1.devices.0.devices_per_node": 64}) == []
    assert _v2(**{"datacenters.1.devices.0.count": 128,
                  "datacenters.1.devices.0.devices_per_node": 128}) == [
        "datacenters[1].devices[0].devices_per_node: 128 is above the plausible range 1 to 64; "
        "the unit is devices in one node, joined by NVLink or PCIe (a DGX H100 holds 8)"]


def test_a_tensor_parallel_degree_no_node_holds_warns():
    assert _v2(**{"training.parallelism.tensor_parallel": [1, 8]}) == []  # west has nodes of 8
    assert _v2(**{"training.parallelism.tensor_parallel": [1, 2, 16]}) == [
        "training.parallelism.tensor_parallel: degree 16 allowed but no device group has 16 "
        "devices per node (the most is 8); no stage can use it"]
    assert _v2(**{"training.parallelism.tensor_parallel": [1, 32, 4, 16],
                  "datacenters.1.devices.0.devices_per_node": 2}) == [
        "training.parallelism.tensor_parallel: degrees 32, 16 allowed but no device group has "
        "that many devices per node (the most is 4); no stage can use it"]


def test_a_group_no_allowed_width_fits_warns():
    assert _v2(**{"training.parallelism.data_parallel": [16]}) == [
        f"datacenters[{k}].devices[{g}].count: {n} device(s) in nodes of {node} cannot run "
        f"any allowed stage (data_parallel [16], tensor_parallel [1, 2, 4])"
        for k, g, n, node in [(0, 0, 8, 4), (0, 1, 1, 1), (1, 0, 8, 8)]]


def test_memory_counts_the_widest_stage_a_group_allows():
    big = {"model.layers.0.params": 10**10, "model.layers.1.params": 10**10}
    # one device per stage: 16 bytes x 1e10 parameters fit no group
    single = _v2(**big, **{"training.parallelism": {}})
    assert [line.partition(":")[0] for line in single] == [
        "datacenters[0].devices[0].memory_bytes", "datacenters[0].devices[1].memory_bytes",
        "datacenters[1].devices[0].memory_bytes"]
    assert single[1] == ("datacenters[0].devices[1].memory_bytes: 3.2e+10 bytes cannot hold "
                         "even the smallest layer (1.60001e+11 bytes); is the unit bytes?")
    # d = 2, t = 4 with ZeRO-1: (4 + 12 / 2) * 1e10 / 4 + 1e6 / 8 bytes per device fit the
    # 8-GPU groups; the single V100 still holds nothing
    assert _v2(**big) == [single[1]]
    assert _v2(**big, **{"datacenters.0.devices.0.memory_bytes": 2e10}) == [
        "datacenters[0].devices[0].memory_bytes: 2e+10 bytes cannot hold even the smallest "
        "layer (2.50001e+10 bytes per device, on the widest stage d = 2, t = 4); is the unit "
        "bytes?", single[1]]


def test_v2_warnings_come_in_document_order():
    lines = _v2(**{"training.gradient_bytes_per_param": 32,
                   "training.parallelism.tensor_parallel": [1, 256],
                   "training.parallelism.data_parallel": [2],
                   "datacenters.0.devices.0.node_bandwidth_bytes_per_s": 64,
                   "datacenters.0.devices.0.flop_per_s": 400,
                   "datacenters.0.devices.1.flop_per_s": 400,
                   "datacenters.1.devices.0.count": 128,
                   "datacenters.1.devices.0.devices_per_node": 128})
    assert [line.partition(":")[0] for line in lines] == [
        "training.gradient_bytes_per_param",
        "training.parallelism.tensor_parallel",
        "datacenters[0].devices[0].flop_per_s",
        "datacenters[0].devices[0].node_bandwidth_bytes_per_s",
        "datacenters[0].devices[1].count",  # d = 2 needs two of its one device
        "datacenters[0].devices[1].flop_per_s",
        "datacenters[1].devices[0].devices_per_node",
    ]
