"""The cluster files and model configs of the "thousands of GPUs" benchmark
(``benchmarks/scale/``): they load with the package's readers and make instances of the
sizes ``benchmarks/dp_scaling.py --scale`` says they have (nothing is solved)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from chainpipe.instances.cluster_file import generate_for_cluster, read_cluster
from chainpipe.instances.hf_config import read_model_config

ROOT = Path(__file__).resolve().parents[1]
SCALE = ROOT / "benchmarks" / "scale"
#: cluster -> (DCs, GPU types per DC, GPUs)
CLUSTERS = {"chain-8x3": (8, 3, 768), "chain-16x2": (16, 2, 2048), "chain-16x3": (16, 3, 1536)}
#: model -> (blocks, hidden, heads, KV heads, FFN, vocab)
MODELS = {"llama-3-70b": (80, 8192, 64, 8, 28672, 128256),
          "llama-3.1-405b": (126, 16384, 128, 8, 53248, 128256)}


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_cluster_file_sizes(name):
    k, types, gpus = CLUSTERS[name]
    cluster = read_cluster(SCALE / f"{name}.toml")
    assert len(cluster.datacenters) == k and len(cluster.links) == k - 1
    assert sum(dc.device_count for dc in cluster.datacenters) == gpus
    for dc in cluster.datacenters:
        assert len({g.type for g in dc.devices}) == types
        assert {g.devices_per_node for g in dc.devices} == {8}
    assert cluster.microbatches == 128
    assert cluster.parallelism.data_parallel == (1, 2, 4, 8, 16)
    assert cluster.parallelism.tensor_parallel == (1, 2, 4, 8)
    assert cluster.parallelism.zero


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_cluster_files_are_what_the_script_writes(name):
    make = _module("make_clusters", SCALE / "make_clusters.py")
    assert (SCALE / f"{name}.toml").read_text() == make.cluster_text(name, *make.CLUSTERS[name])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_config_shape(name):
    shape = read_model_config(SCALE / "models" / name, seq_len=8192)
    blocks, hidden, heads, kv_heads, ffn, vocab = MODELS[name]
    assert (shape.name, shape.family, shape.blocks, shape.hidden, shape.heads) == (
        name, "llama", blocks, hidden, heads)
    assert (shape.kv_heads, shape.ffn, shape.vocab, shape.seq) == (kv_heads, ffn, vocab, 8192)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_instances_of_the_stated_sizes(cluster, model):
    shape = read_model_config(SCALE / "models" / model, seq_len=8192)
    inst = generate_for_cluster(SCALE / f"{cluster}.toml", shape)
    k, _, gpus = CLUSTERS[cluster]
    assert (inst.num_datacenters, inst.num_devices, inst.microbatches) == (k, gpus, 128)
    assert inst.num_layers == MODELS[model][0] + 2  # embedding and head
    assert inst.training.microbatch_size == 16  # the lcm of the data-parallel widths


def test_benchmark_sweep_instances():
    bench = _module("dp_scaling_bench", ROOT / "benchmarks" / "dp_scaling.py")
    one_type = bench.scale_instance(bench.cluster_spec("chain-8x3", "llama-3.1-405b", types=1,
                                                       blocks=32, dcs=4))
    assert (one_type.num_datacenters, one_type.num_devices, one_type.num_layers) == (4, 384, 34)
    assert all(len(dc.devices) == 1 and dc.device_count == 96 for dc in one_type.datacenters)
    lists = bench.scale_instance(bench.cluster_spec("chain-16x3", "llama-3-70b",
                                                    dp=(1, 2, 4, 8), tp=(1, 2, 4), mbs=16))
    assert lists.training.parallelism.data_parallel == (1, 2, 4, 8)
    assert lists.training.parallelism.tensor_parallel == (1, 2, 4)
    assert lists.training.microbatch_size == 16 and lists.num_devices == 1536
    assert bench.cluster_spec("chain-8x3", "llama-3-70b", mbs=16)["mbs"] is None
