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
