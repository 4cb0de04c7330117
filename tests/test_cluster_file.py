"""Cluster files in human units (TOML read with pint): figures, errors that name their place,
the shipped example, the instance a cluster and a model make, and a fuzzed reader."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainpipe.cli import main
from chainpipe.instance import InstanceError, Parallelism
from chainpipe.instances.cluster_file import (
    BANDWIDTH,
    BYTES,
    RATE,
    TIME,
    cluster_instance,
    parse_cluster,
    quantity,
    read_cluster,
)
from chainpipe.instances.gpus import DEFAULT_MFU, GIB, GPUS
from chainpipe.instances.hf_config import read_model_config
from chainpipe.instances.models import model_layers
from chainpipe.io import read

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "metro-cluster.toml"
MODELS = ROOT / "tests" / "data" / "models"


@pytest.mark.parametrize("text, dim, value", [
    ("80 GiB", BYTES, 80 * 2**30),
    ("80 GB", BYTES, 80e9),
    ("400 Gbit/s", BANDWIDTH, 50e9),
    ("100 Gbps", BANDWIDTH, 12.5e9),
    ("450 GB/s", BANDWIDTH, 450e9),
    ("5 us", TIME, 5e-6),
    ("5 µs", TIME, 5e-6),
    ("2 ms", TIME, 2e-3),
    ("312 TFLOP/s", RATE, 312e12),
    ("312 TFLOPS", RATE, 312e12),
])
def test_quantities_in_human_units(text, dim, value):
    assert quantity(text, dim) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text, dim, needle", [
    ("80 GHz", BYTES, "expected a quantity of bytes such as '80 GiB', got '80 GHz'"),
    ("80 GiB", BANDWIDTH, "expected a quantity of a bandwidth"),
    (80, BYTES, "(a string with its unit), got 80"),
    ("400 Gbit", BANDWIDTH, "got '400 Gbit'"),
    ("nan GB", BYTES, "must be a finite quantity > 0"),
    ("-5 GB", BYTES, "must be a finite quantity > 0"),
    ("0 us", TIME, "must be a finite quantity > 0"),
    ("1e400 GB", BYTES, "must be a finite quantity > 0"),
    ("5 s**2", TIME, "expected a quantity of a time"),
])
def test_bad_quantities_say_what_was_expected(text, dim, needle):
    with pytest.raises(ValueError) as info:
        quantity(text, dim)
    assert needle in str(info.value)


def test_the_shipped_example_reads():
    c = read_cluster(EXAMPLE)
    assert [dc.name for dc in c.datacenters] == ["north", "centre", "south"]
    h100 = c.datacenters[0].devices[0]
    catalogue = GPUS["H100-SXM"]
    assert h100.flop_per_s == catalogue.peak_flop_per_s * DEFAULT_MFU
    assert h100.memory_bytes == 77 * GIB and h100.devices_per_node == 8
    a100 = c.datacenters[1].devices[0]
    assert a100.flop_per_s == pytest.approx(312e12 * 0.45)
    assert c.datacenters[1].devices[1].flop_per_s == 160e12
    assert c.datacenters[0].link.bandwidth_bytes_per_s == 50e9
    assert c.datacenters[0].link.latency_s == 5e-6
    assert c.links[0].latency_s == pytest.approx(35 * 5e-6)  # 35 km of fibre
    assert c.links[1].bandwidth_bytes_per_s == 5e9
    assert (c.microbatches, c.schedule) == (32, "1f1b")
    assert c.parallelism == Parallelism((1, 2, 4, 8), (1, 2, 4, 8), True)


def test_a_cluster_and_a_model_make_an_instance():
    shape = read_model_config(MODELS / "llama-3-8b", seq_len=4096)
    inst = cluster_instance(read_cluster(EXAMPLE), shape, microbatch_size=2, microbatches=8)
    assert inst.name == "metro3-llama-3-8b"
    assert inst.microbatches == 8 and inst.num_devices == 48
    assert inst.model.layers == model_layers(shape, microbatch_size=2, tensor_parallel=True)


BAD = """
[[datacenters]]
name = "a"
link = {bandwidth = "400 Gbit/s", latency = "5 us"}
[[datacenters.devices]]
type = "x"
count = 8
flop_per_s = "100 TFLOP/s"
memory = "80 GiB"
devices_per_node = 8
node_bandwidth = "300 GB/s"

[[datacenters]]
name = "b"
link = {bandwidth = "10 GHz", latency = "5 us"}
[[datacenters.devices]]
type = "y"
count = 4
flop_per_s = "100 TFLOP/s"
memory = "80 GHz"
memroy = "1 GiB"
devices_per_node = 3

[[links]]
bandwidth = "100 Gbit/s"
"""


def test_every_problem_names_its_place(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(BAD)
    with pytest.raises(InstanceError) as info:
        read_cluster(path)
    assert info.value.problems == [
        f"{path}: datacenters[1].link.bandwidth: expected a quantity of a bandwidth such as "
        f"'400 Gbit/s', got '10 GHz'",
        f"{path}: datacenters[1].devices[0].memroy: unknown key; did you mean 'memory'? "
        f"known: gpu, type, count, flop_per_s, peak_flop_per_s, mfu, memory, memory_reserve, "
        f"devices_per_node, node_bandwidth",
        f"{path}: datacenters[1].devices[0].memory: expected a quantity of bytes such as "
        f"'80 GiB', got '80 GHz'",
        f"{path}: datacenters[1].devices[0].devices_per_node: must be a power of two, got 3",
        f"{path}: links[0].latency: missing (or give distance)",
    ]


def test_rules_of_the_format_are_reported_with_the_file_keys(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(BAD.split("\n[[datacenters]]\nname = \"b\"")[0].replace(
        "count = 8", "count = 4"))
    with pytest.raises(InstanceError) as info:
        read_cluster(path)
    assert info.value.problems == [
        f"{path}: datacenters[0].devices[0].devices_per_node: must divide count (4) so that "
        f"nodes are whole, got 8"]


def test_invalid_toml_names_line_and_column(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\n[[datacenters]\n')
    with pytest.raises(InstanceError) as info:
        read_cluster(path)
    (line,) = info.value.problems
    assert line.startswith(f"{path}:2:") and "invalid TOML" in line


def test_cli_generate_from_a_cluster(tmp_path, capsys):
    out = tmp_path / "inst.json"
    assert main(["generate", "--cluster", str(EXAMPLE), "--model-config",
                 str(MODELS / "gpt2-xl"), "--microbatches", "16", "--tensor-parallel", "1,2",
                 "-o", str(out)]) == 0
    inst = read(out)
    assert inst.microbatches == 16
    assert inst.training.parallelism.tensor_parallel == (1, 2)
    assert inst.num_layers == 50


@pytest.mark.parametrize("args, needle", [
    (["--model-config", str(MODELS / "gpt2"), "--datacenters", "3"],
     "--datacenters: has no meaning with --cluster"),
    ([], "--cluster: needs the model"),
    (["--model-config", str(MODELS / "gpt2"), "-o", str(EXAMPLE)],
     "is an input of this command; refusing to write over it"),
])
def test_cli_cluster_misuse_is_one_line(capsys, args, needle):
    assert main(["generate", "--cluster", str(EXAMPLE), *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_cli_bad_cluster_exits_2_without_traceback(tmp_path, capsys):
    path = tmp_path / "cluster.toml"
    path.write_text(BAD)
    assert main(["generate", "--cluster", str(path), "--model", "gpt3-125m"]) == 2
    _, err = capsys.readouterr()
    assert "Traceback" not in err and len(err.strip().splitlines()) == 5
    assert f"{path}: datacenters[1].devices[0].memory: expected a quantity of bytes" in err


_scalars = st.one_of(st.text(max_size=12), st.integers(-3, 2**33), st.floats(),
                     st.booleans(), st.sampled_from(["80 GiB", "400 Gbit/s", "5 us",
                                                     "312 TFLOP/s", "H100-SXM", "40 km"]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["name", "link", "devices", "bandwidth", "latency",
                                     "distance", "gpu", "type", "count", "memory",
                                     "flop_per_s", "devices_per_node", "node_bandwidth",
                                     "microbatches", "zero", "data_parallel"]), inner,
                    max_size=5)), max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["name", "training", "datacenters", "links", "x"]),
                       _values, max_size=4))
def test_fuzzed_documents_give_a_cluster_or_path_named_problems(doc):
    try:
        parse_cluster(doc, "f.toml")
    except InstanceError as exc:
        assert exc.problems and all(p.startswith("f.toml") for p in exc.problems)
        assert all("\n" not in p for p in exc.problems)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=24))
def test_fuzzed_quantity_strings_never_escape_as_another_error(text):
    try:
        value = quantity(text, BYTES)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert value > 0


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_files_give_a_cluster_or_located_problems(text):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.toml"
        # surrogates become bytes that are not UTF-8: a file that cannot be read
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            read_cluster(path)
        except InstanceError as exc:
            assert exc.problems and all(p.startswith(str(path)) for p in exc.problems)


def test_cli_bad_cluster_in_a_subprocess_is_one_line_per_problem(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "cluster.toml"
    path.write_text(BAD)
    proc = subprocess.run([sys.executable, "-m", "chainpipe", "generate", "--cluster", str(path),
                           "--model-config", str(MODELS / "gpt2"), "-o", str(tmp_path / "o.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 5 and not (tmp_path / "o.json").exists()
