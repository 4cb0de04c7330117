"""The instance generator, its published figures, and the committed instance sets."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections import Counter

import pytest

from chainpipe.cli import main as cli_main
from chainpipe.instance import Parallelism
from chainpipe.instances import GPUS, MODELS, PRESETS, generate
from chainpipe.instances.generator import PARALLELISM_ON, PRESETS_SPEC
from chainpipe.instances.gpus import GIB, gpu
from chainpipe.instances.models import block_figures, model_layers, model_shape
from chainpipe.instances.sets import (
    ROOT,
    SETS,
    build,
    check_against_manifest,
    instance_text,
    witness_plan,
)
from chainpipe.instances.sets import main as sets_main
from chainpipe.instances.witness import balanced_cuts, hybrid_witness
from chainpipe.io import instance_from_dict, instance_to_dict, read, write
from chainpipe.plan import Plan, evaluate
from chainpipe.tables import CostTables


def text(inst) -> str:
    return json.dumps(instance_to_dict(inst), indent=1)


def groups(inst):
    return [(g.type, g.count) for dc in inst.datacenters for g in dc.devices]


# --------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("preset", list(PRESETS))
def test_same_arguments_same_instance(preset):
    a = generate(preset, 5, degrade=0.5)
    b = generate(preset, 5, degrade=0.5)
    assert text(a) == text(b)


def test_seeds_differ():
    drawn = {text(generate("metro", s)) for s in range(6)}
    assert len(drawn) == 6


def test_generator_leaves_global_random_state_alone():
    import random

    random.seed(123)
    before = random.random()
    random.seed(123)
    generate("metro", 1)
    assert random.random() == before


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_round_trips(preset):
    inst = generate(preset, 0)
    again = instance_from_dict(json.loads(text(inst)))
    assert again == inst
    assert text(again) == text(inst)


# --------------------------------------------------------------------------- errors
def test_unknown_preset_lists_known_names():
    with pytest.raises(KeyError) as err:
        generate("nope")
    msg = err.value.args[0]
    assert "nope" in msg and all(p in msg for p in PRESETS)


def test_unknown_model_lists_known_names():
    with pytest.raises(KeyError) as err:
        generate("tiny", model="gpt5")
    assert all(m in err.value.args[0] for m in MODELS)


@pytest.mark.parametrize("lookup, message", [
    (lambda: generate("metr"), "unknown preset 'metr'; did you mean 'metro'? known: tiny, "),
    (lambda: generate("tiny", model="lama2-7b"),
     "unknown model 'lama2-7b'; did you mean 'llama2-7b'? known: gpt3-125m, "),
    (lambda: gpu("H100"), "unknown GPU 'H100'; did you mean 'H100-SXM'? known: V100-32GB, "),
], ids=["preset", "model", "gpu"])
def test_unknown_names_suggest_the_close_one(lookup, message):
    with pytest.raises(KeyError) as err:
        lookup()
    assert err.value.args[0].startswith(message)


@pytest.mark.parametrize("bad", [
    {"degrade": 0.0}, {"degrade": 1.5}, {"degrade": -0.1}, {"datacenters": 0},
    {"gpus_per_dc": 0}, {"microbatches": 0}, {"schedule": "zb-h1"}, {"blocks": 0},
    {"model": "gpt3-125m", "blocks": 13},
])
def test_bad_overrides_raise_value_error(bad):
    with pytest.raises(ValueError):
        generate("metro", 0, **bad)


# --------------------------------------------------------------------------- overrides
@pytest.mark.parametrize("preset", list(PRESETS))
def test_overrides_take_effect_on_every_preset(preset):
    inst = generate(preset, 2, model="llama2-7b", datacenters=3, gpus_per_dc=4,
                    microbatches=7, schedule="gpipe", degrade=0.5)
    assert inst.model.name.startswith("llama2-7b")
    assert inst.num_datacenters == 3 and len(inst.links) == 2
    assert inst.num_devices == 12
    if preset != "pool":
        assert all(dc.device_count == 4 for dc in inst.datacenters)
    assert inst.microbatches == 7
    assert inst.training.schedule == "gpipe"
    b = inst.training.microbatch_size  # the lcm of the widths, so every width divides it
    assert b == math.lcm(*inst.parallelism.data_parallel)
    assert inst.layers[1].output_bytes == 2 * b * 4096 * 4096  # 2 b s h of Llama-2 7B


@pytest.mark.parametrize("preset", list(PRESETS))
def test_degrade_scales_metro_links_only(preset):
    base = generate(preset, 3, datacenters=3)
    slow = generate(preset, 3, datacenters=3, degrade=0.25)
    for a, b in zip(base.links, slow.links):
        assert b.bandwidth_bytes_per_s == pytest.approx(a.bandwidth_bytes_per_s * 0.25)
        assert b.latency_s == pytest.approx(a.latency_s / 0.25)
    assert [dc.link for dc in base.datacenters] == [dc.link for dc in slow.datacenters]
    assert groups(base) == groups(slow) and base.layers == slow.layers


def test_metro_latency_is_fibre_distance():
    for lk in generate("metro", 1, datacenters=4).links:
        km = lk.latency_s / 5e-6
        assert 10 - 1e-9 <= km <= 100 + 1e-9
        assert lk.bandwidth_bytes_per_s * 8 / 1e9 in (10, 40, 100, 200, 400)


def test_adding_a_datacenter_keeps_the_others():
    three = generate("metro", 4, datacenters=3)
    four = generate("metro", 4, datacenters=4)
    assert four.datacenters[:3] == three.datacenters
    assert four.links[:2] == three.links


@pytest.mark.parametrize("seed", [0, 1])
def test_pool_keeps_the_same_gpus_for_one_to_four_dcs(seed):
    pools = []
    for k in range(1, 5):
        inst = generate("pool", seed, datacenters=k)
        assert inst.num_datacenters == k
        sizes = [dc.device_count for dc in inst.datacenters]
        assert max(sizes) - min(sizes) <= 1
        c = Counter()
        for t, n in groups(inst):
            c[t] += n
        pools.append(c)
        assert inst.layers == generate("pool", seed, datacenters=1).layers
    assert all(p == pools[0] for p in pools) and sum(pools[0].values()) == 32


def test_metro_large_shape():
    inst = generate("metro-large", 0)
    assert inst.num_datacenters == 8 and inst.num_devices == 256
    assert all(len(dc.devices) == 2 for dc in inst.datacenters)
    assert len({g.type for dc in inst.datacenters for g in dc.devices}) >= 5
    assert 100 <= inst.num_layers <= 130 and inst.microbatches == 128


# --------------------------------------------------------------------------- published figures
def test_gpt3_13b_block_by_hand():
    # Brown et al. table 2.1: d_model 5140, n_ctx 2048; b = 1
    ly = model_layers(model_shape("gpt3-13b"))[1]
    h, s = 5140, 2048
    assert ly.fwd_flop == 24 * s * h**2 * (1 + s / (6 * h))
    assert ly.fwd_flop == 1_384_811_069_440.0  # 24 s h^2 + 4 s^2 h, worked by hand
    assert ly.bwd_flop == 2 * ly.fwd_flop
    assert ly.params == 12 * h**2 + 13 * h == 317_102_020
    assert ly.activation_bytes == 34 * s * h == 357_908_480
    assert ly.output_bytes == 2 * s * h


@pytest.mark.parametrize("name, published", [
    ("gpt3-125m", 125e6), ("gpt3-13b", 13.0e9), ("gpt3-175b", 175.0e9),
    ("llama2-7b", 6.74e9), ("llama2-13b", 13.02e9), ("llama2-70b", 68.98e9),
    ("megatron-76b", 76.1e9),
])
def test_parameter_counts_match_published_sizes(name, published):
    layers = model_layers(model_shape(name))
    total = sum(ly.params for ly in layers)
    untied = model_shape(name).vocab * model_shape(name).hidden  # the head's own copy
    # GPT-3 and Megatron tie embedding and head; Llama 2 does not
    counted = total - untied if not name.startswith("llama") else total
    assert counted == pytest.approx(published, rel=0.02)


def test_llama_forward_flop_is_the_exact_matmul_count():
    m = model_shape("llama2-70b")
    h, s, kv, f = 8192, 4096, 1024, 28672
    per_token = 2 * (h * h + h * kv + h * kv + h * h) + 2 * 3 * h * f
    assert block_figures(m).fwd_flop == s * per_token + 4 * s * s * h
    head = model_layers(m)[-1]
    assert head.fwd_flop == 2 * s * h * 32000 and head.params == 32000 * h + h


def test_sublayers_add_up_to_blocks():
    blocks = model_layers(model_shape("megatron-76b"))
    subs = model_layers(model_shape("megatron-76b"), granularity="sublayer")
    assert len(subs) == 2 * len(blocks) - 2 == 122
    for field in ("fwd_flop", "params", "activation_bytes"):
        assert sum(getattr(x, field) for x in subs) == sum(getattr(x, field) for x in blocks)


def test_gpu_catalogue_figures():
    assert GPUS["H100-SXM"].peak_flop_per_s == 989e12
    assert GPUS["A100-40GB"].peak_flop_per_s == GPUS["A100-80GB"].peak_flop_per_s == 312e12
    inst = generate("tiny", 0, datacenters=1, gpus_per_dc=1)
    g = inst.datacenters[0].devices[0]
    cat = GPUS[g.type]
    assert g.flop_per_s == cat.peak_flop_per_s * 0.45
    assert g.memory_bytes == cat.memory_bytes - 3 * GIB


# --------------------------------------------------------------------------- committed sets
@pytest.mark.parametrize("set_name", list(SETS))
def test_committed_set_matches_its_manifest(set_name):
    directory = ROOT / set_name
    assert check_against_manifest(directory) == []
    files = build(set_name)
    on_disk = {p.name for p in directory.glob("*.json")}
    assert on_disk == set(files)
    assert (directory / "manifest.json").read_text(encoding="utf-8") == files["manifest.json"]


def test_set_text_is_what_io_writes(tmp_path):
    entry = SETS["small"][0]
    write(entry.instance(), tmp_path / "x.json")
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == instance_text(entry.instance())


def _sized(set_name):
    return [(e, read(ROOT / set_name / f"{e.stem}.json")) for e in SETS[set_name]]


def test_set_sizes():
    for _e, inst in _sized("small"):
        assert inst.num_layers <= 16 and inst.num_devices <= 8 and 1 <= inst.num_datacenters <= 3
    assert {inst.training.schedule for _, inst in _sized("small")} == {"1f1b", "gpipe"}
    for _e, inst in _sized("medium"):
        assert 2 <= inst.num_datacenters <= 4 and 16 <= inst.num_devices <= 64
        assert 24 <= inst.num_layers <= 100
    large = _sized("large")
    assert len(large) == 3
    for _e, inst in large:
        assert inst.num_datacenters == 8 and inst.num_devices == 256 and inst.microbatches == 128
        assert all(len(dc.devices) == 2 for dc in inst.datacenters)
        assert len({g.type for dc in inst.datacenters for g in dc.devices}) >= 5
        assert 100 <= inst.num_layers <= 130


@pytest.mark.parametrize("set_name", ["small", "medium"])
def test_committed_sets_are_feasible_except_the_marked_one(set_name):
    from chainpipe.solve import solve

    for e, inst in _sized(set_name):
        reason = CostTables(inst).infeasibility_reason()
        if not e.feasible:
            assert reason is not None and "infeasible" in e.stem
            continue
        assert reason is None
        plan = witness_plan(inst) or solve(inst, solver="dp", time_limit=60).plan
        assert plan is not None and evaluate(inst, plan).feasible, e.stem


def test_large_set_has_feasible_witnesses():
    for _e, inst in _sized("large"):
        plan = witness_plan(inst)
        assert plan is not None and evaluate(inst, plan).feasible


def _unlimited_memory(inst):
    import dataclasses

    return dataclasses.replace(inst, datacenters=tuple(
        dataclasses.replace(dc, devices=tuple(
            dataclasses.replace(g, memory_bytes=1e18) for g in dc.devices))
        for dc in inst.datacenters))


@pytest.mark.parametrize("set_name, stem", [
    ("small", "small-03-mem-1f1b"), ("small", "small-04-mem-gpipe"),
    ("medium", "medium-02-llama70b"), ("hybrid/small", "hybrid-small-05-mem"),
    ("hybrid/medium", "hybrid-medium-05-mem"),
])
def test_memory_binds_in_the_memory_tight_instances(set_name, stem):
    from chainpipe.solve import solve

    inst = read(ROOT / set_name / f"{stem}.json")
    with_memory = solve(inst, solver="dp", time_limit=60)
    without = solve(_unlimited_memory(inst), solver="dp", time_limit=60)
    assert with_memory.status == without.status == "optimal"
    assert with_memory.iteration_time > 1.02 * without.iteration_time


def test_sets_check_detects_an_edited_file(tmp_path, capsys):
    shutil.copytree(ROOT / "small", tmp_path / "small")
    assert sets_main(["--root", str(tmp_path), "--sets", "small", "--check"]) == 0
    victim = tmp_path / "small" / "small-01-tiny.json"
    data = json.loads(victim.read_text())
    data["training"]["microbatches"] += 1
    victim.write_text(json.dumps(data, indent=1) + "\n")
    assert sets_main(["--root", str(tmp_path), "--sets", "small", "--check"]) == 1
    assert "small-01-tiny.json" in capsys.readouterr().err


# --------------------------------------------------------------------------- CLI
def test_cli_generate_writes_a_valid_file(tmp_path, capsys):
    out = tmp_path / "g.json"
    code = cli_main(["generate", "--preset", "metro", "--seed", "3", "-o", str(out),
                     "--model", "llama2-13b", "--datacenters", "3", "--gpus-per-dc", "8",
                     "--microbatches", "16", "--schedule", "gpipe", "--degrade", "0.5"])
    assert code == 0
    inst = read(out)
    assert inst == generate("metro", 3, model="llama2-13b", datacenters=3, gpus_per_dc=8,
                            microbatches=16, schedule="gpipe", degrade=0.5, version=3)
    assert out.read_text() == instance_text(inst)


def test_cli_generate_unknown_preset_exits_2_with_one_line(capsys):
    assert cli_main(["generate", "--preset", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0] and "metro-large" in err[0]


@pytest.mark.parametrize("argv, message", [
    (["--preset", "metr"], "argument --preset: unknown preset 'metr'; did you mean 'metro'?"),
    (["--preset", "tiny", "--model", "gpt3-13"],
     "argument --model: unknown model 'gpt3-13'; did you mean 'gpt3-13b'?"),
    (["--preset", "tiny", "--datacenters", "0"], "argument --datacenters: must be an integer >= 1"),
    (["--preset", "tiny", "--gpus-per-dc", "-2"], "argument --gpus-per-dc: must be an integer >= 1"),
    (["--preset", "tiny", "--microbatches", "x"], "argument --microbatches: must be an integer >= 1"),
    (["--preset", "tiny", "--degrade", "nan"], "argument --degrade: must be a number in (0, 1]"),
    (["--preset", "tiny", "--degrade", "1.5"], "argument --degrade: must be a number in (0, 1]"),
], ids=["preset", "model", "datacenters", "gpus", "microbatches", "degrade-nan", "degrade-big"])
def test_cli_generate_bad_option_exits_2_with_one_line_before_writing(capsys, tmp_path, argv,
                                                                      message):
    out = tmp_path / "g.json"
    assert cli_main(["generate", *argv, "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"chainpipe generate: {message}")


def test_cli_generate_output_on_a_directory_exits_2(capsys, tmp_path):
    assert cli_main(["generate", "--preset", "tiny", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"-o/--output: {tmp_path} is a directory; give a file name"]


# --------------------------------------------------------------------------- version 2
V1_PRESETS = [p for p, spec in PRESETS_SPEC.items() if not spec.parallel_by_default]
HYBRID_PRESETS = [p for p, spec in PRESETS_SPEC.items() if spec.parallel_by_default]


def _v1_view(inst):
    """``inst`` with every version-2 field back at its default."""
    layers = tuple(dataclasses.replace(ly, tp_allreduce_bytes=4 * ly.output_bytes)
                   for ly in inst.layers)
    dcs = tuple(dataclasses.replace(dc, devices=tuple(
        dataclasses.replace(g, devices_per_node=1, node_bandwidth_bytes_per_s=None)
        for g in dc.devices)) for dc in inst.datacenters)
    return dataclasses.replace(
        inst, name="x", model=dataclasses.replace(inst.model, layers=layers),
        training=dataclasses.replace(inst.training, parallelism=Parallelism()), datacenters=dcs)


def test_presets_are_split_into_v1_and_hybrid():
    assert set(V1_PRESETS) == {"tiny", "metro", "metro-large", "pool"}
    assert set(HYBRID_PRESETS) == {"hybrid-small", "hybrid", "hybrid-large"}


@pytest.mark.parametrize("preset", V1_PRESETS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_v1_presets_give_v1_instances_with_parallelism_off(preset, seed):
    inst = generate(preset, seed)
    assert generate(preset, seed, parallelism="off") == inst
    assert generate(preset, seed, zero=False) == inst
    assert inst.parallelism == Parallelism()
    assert all(ly.tp_allreduce_bytes == 4 * ly.output_bytes for ly in inst.layers)
    assert all(g.devices_per_node == 1 and g.node_bandwidth_bytes_per_s is None
               for dc in inst.datacenters for g in dc.devices)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("seed", [0, 3])
def test_parallelism_on_only_adds_the_v2_figures(preset, seed):
    # one sequence per microbatch on both sides (the default is the widths' lcm)
    on = generate(preset, seed, parallelism="on", microbatch_size=1)
    off = generate(preset, seed, parallelism="off", microbatch_size=1)
    assert _v1_view(on) == dataclasses.replace(off, name="x")
    assert not on.parallelism.single_device and off.parallelism == Parallelism()
    assert on.name != off.name or preset in HYBRID_PRESETS


def test_parallelism_switch_and_lists():
    assert generate("metro", 1, parallelism="on").parallelism == PARALLELISM_ON
    assert generate("hybrid", 1).parallelism == PARALLELISM_ON
    assert generate("hybrid-small", 1).parallelism == Parallelism((1, 2, 3), (1, 2), True)
    lists = generate("metro", 1, data_parallel=[1, 3], tensor_parallel=(2,))
    assert lists.parallelism == Parallelism((1, 3), (2,), True)  # lists imply "on"
    assert generate("hybrid", 1, zero=False).parallelism == Parallelism(
        (1, 2, 4, 8), (1, 2, 4, 8), False)
    assert generate("tiny", 0, zero=True).parallelism == PARALLELISM_ON
    for bad in ({"parallelism": "off", "zero": True}, {"parallelism": "off", "data_parallel": [2]},
                {"parallelism": "maybe"}, {"tensor_parallel": [3]}, {"data_parallel": [1, 1]},
                {"data_parallel": []}, {"granularity": "token"}, {"man_gbit": 0},
                {"gpu_types": []}):
        with pytest.raises(ValueError):
            generate("metro", 0, **bad)
    with pytest.raises(KeyError):
        generate("metro", 0, gpu_types=["H100"])


@pytest.mark.parametrize("preset", HYBRID_PRESETS)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_v2_figures_come_from_the_catalogue(preset, seed):
    inst = generate(preset, seed)
    t = inst.training
    assert (t.bytes_per_param, t.gradient_bytes_per_param, t.optimizer_bytes_per_param) == (
        16.0, 2.0, 12.0)
    assert t.gradient_bytes_per_param + t.optimizer_bytes_per_param + 2 == t.bytes_per_param
    for dc in inst.datacenters:
        assert dc.link.bandwidth_bytes_per_s * 8 / 1e9 in (100, 200, 400)
        for g in dc.devices:
            cat = GPUS[g.type]
            n = g.devices_per_node
            assert n & (n - 1) == 0 and g.count % n == 0 and n <= cat.devices_per_node
            if n > 1:
                assert g.node_bandwidth_bytes_per_s == cat.link_bytes_per_s
            else:
                assert g.node_bandwidth_bytes_per_s is None


def test_catalogue_node_links():
    # per direction: half the datasheets' bidirectional totals
    assert GPUS["V100-32GB"].link_bytes_per_s == 300e9 / 2
    assert GPUS["A100-40GB"].link_bytes_per_s == GPUS["A100-80GB"].link_bytes_per_s == 600e9 / 2
    assert GPUS["H100-SXM"].link_bytes_per_s == 900e9 / 2
    assert GPUS["L40S"].link_bytes_per_s == GPUS["RTX4090"].link_bytes_per_s == 64e9 / 2
    assert all(g.devices_per_node == 8 for g in GPUS.values())
    assert all(("NVLink" in g.link) != ("PCIe" in g.link) for g in GPUS.values())
    h100 = gpu("H100-SXM")
    assert [h100.node_size(n) for n in (1, 2, 3, 12, 16, 24, 64)] == [1, 2, 1, 4, 8, 8, 8]
    assert h100.node_size(16, largest=2) == 2 and h100.node_size(6, largest=4) == 2
    assert h100.group(16).devices_per_node == 1  # a version-1 group unless asked
    grp = h100.group(12, nodes=True)
    assert (grp.devices_per_node, grp.node_bandwidth_bytes_per_s) == (4, 450e9)


def test_docs_source_every_node_link():
    doc = (ROOT.parent / "docs" / "instances.md").read_text(encoding="utf-8")
    for g in GPUS.values():
        rows = [r for r in doc.splitlines() if r.startswith(f"| {g.type} |") and "GB/s" in r]
        assert any(f"{g.link_bytes_per_s / 1e9:g} GB/s" in r for r in rows), g.type
    for ref in ("Shoeybi", "Rajbhandari", "Korthikanti", "ConnectX"):
        assert ref in doc


@pytest.mark.parametrize("name", ["gpt3-125m", "gpt3-13b", "llama2-7b", "llama2-70b"])
def test_tp_allreduce_bytes_from_the_model_shape(name):
    m = model_shape(name)
    s, h = m.seq, m.hidden
    layers = model_layers(m, blocks=3, tensor_parallel=True)
    emb, *blocks, head = layers
    assert emb.tp_allreduce_bytes == emb.output_bytes == 2 * s * h  # once, forward
    assert all(b.tp_allreduce_bytes == 4 * b.output_bytes == 4 * 2 * s * h for b in blocks)
    assert head.tp_allreduce_bytes == 2 * s * h + 3 * 4 * s  # input grad + cross-entropy
    halves = model_layers(m, blocks=3, granularity="sublayer", tensor_parallel=True)
    assert all(x.tp_allreduce_bytes == 2 * x.output_bytes for x in halves[1:-1])
    assert sum(x.tp_allreduce_bytes for x in halves) == sum(x.tp_allreduce_bytes for x in layers)
    plain = model_layers(m, blocks=3)
    assert [dataclasses.replace(x, tp_allreduce_bytes=4 * x.output_bytes) for x in layers] == \
        list(plain)


def test_generator_overrides_of_what_is_drawn():
    a = generate("hybrid", 2, man_gbit=100)
    b = generate("hybrid", 2, man_gbit=400)
    assert [lk.bandwidth_bytes_per_s for lk in a.links] == [100 * 1e9 / 8] * 3
    assert [lk.latency_s for lk in a.links] == [lk.latency_s for lk in b.links]
    assert a.datacenters == b.datacenters
    types = generate("hybrid", 0, gpu_types=["L40S"])
    assert {g.type for dc in types.datacenters for g in dc.devices} == {"L40S"}
    assert generate("hybrid", 0, granularity="sublayer", model="gpt3-1.3b").num_layers == 50


def test_balanced_cuts():
    assert balanced_cuts([1.0] * 8, [1.0] * 4) == [0, 2, 4, 6, 8]
    assert balanced_cuts([1.0] * 9, [2.0, 1.0]) == [0, 6, 9]
    assert balanced_cuts([100.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == [0, 1, 2, 4]
    assert balanced_cuts([1.0] * 2, [1.0] * 3) is None


# --------------------------------------------------------------------------- hybrid sets
HYBRID_SETS = [n for n in SETS if n.startswith("hybrid/")]


def test_hybrid_sets_exist():
    assert HYBRID_SETS == ["hybrid/small", "hybrid/medium", "hybrid/large"]
    for name in HYBRID_SETS:
        data = json.loads((ROOT / name / "manifest.json").read_text(encoding="utf-8"))
        assert data["set"] == name
        assert data["generator"] == f"python -m chainpipe.instances.sets --sets {name}"


def _groups(inst):
    return [g for dc in inst.datacenters for g in dc.devices]


def test_hybrid_small_shape():
    insts = [inst for _e, inst in _sized("hybrid/small")]
    assert 4 <= len(insts) <= 6
    for inst in insts:
        assert 1 <= inst.num_datacenters <= 3 and inst.num_devices <= 8
        assert all(2 <= dc.device_count <= 8 for dc in inst.datacenters)
        assert all(g.devices_per_node in (1, 2, 4) for g in _groups(inst))
        assert 4 <= inst.num_layers <= 8
        assert set(inst.parallelism.data_parallel) == {1, 2, 3}
        assert set(inst.parallelism.tensor_parallel) == {1, 2}
    assert {inst.parallelism.zero for inst in insts} == {True, False}
    assert {inst.training.schedule for inst in insts} == {"1f1b", "gpipe"}
    assert {inst.num_datacenters for inst in insts} == {1, 2, 3}
    assert {g.devices_per_node for inst in insts for g in _groups(inst)} == {1, 2, 4}


@pytest.mark.parametrize("set_name, dcs, per_dc, layers, m", [
    ("hybrid/medium", 4, 16, (34, 60), 64), ("hybrid/large", 8, 32, (80, 130), 128),
])
def test_hybrid_medium_and_large_shape(set_name, dcs, per_dc, layers, m):
    insts = [inst for _e, inst in _sized(set_name)]
    assert 3 <= len(insts) <= 6
    for inst in insts:
        assert inst.num_datacenters == dcs and inst.num_devices == dcs * per_dc
        assert all(dc.device_count == per_dc for dc in inst.datacenters)
        assert all(g.devices_per_node == 8 for g in _groups(inst))
        assert layers[0] <= inst.num_layers <= layers[1] and inst.microbatches == m
        assert inst.parallelism.data_parallel == inst.parallelism.tensor_parallel == (1, 2, 4, 8)
        if set_name == "hybrid/large":
            assert all(len(dc.devices) == 2 and {g.count for g in dc.devices} == {16}
                       for dc in inst.datacenters)
    types = {g.type for inst in insts for g in _groups(inst)}
    assert {"A100-40GB", "H100-SXM", "L40S"} <= types
    assert {inst.parallelism.zero for inst in insts} == {True, False}


@pytest.mark.parametrize("set_name", HYBRID_SETS)
def test_hybrid_witnesses_are_feasible_plans(set_name):
    data = json.loads((ROOT / set_name / "manifest.json").read_text(encoding="utf-8"))
    for item in data["instances"]:
        inst = read(ROOT / set_name / item["file"])
        ev = evaluate(inst, Plan.from_tuples(inst, item["witness"]["stages"]))
        assert ev.feasible, item["file"]
        assert ev.iteration_time_s == pytest.approx(item["witness"]["iteration_time_s"],
                                                    rel=1e-5)
        assert sum(st.devices.__len__() for st in ev.stages) == item["witness"]["devices"]


@pytest.mark.parametrize("set_name, stem", [("hybrid/large", "hybrid-large-02-nozero")])
def test_memory_excludes_the_best_regular_plan(set_name, stem):
    """The large memory-tight instance, where the DP takes 15 s (too long for the suite;
    measured: its optimum is 1.6% above the one with unlimited memory): the best regular
    plan with unlimited memory does not fit. The small and medium ones are checked with
    the DP itself (``test_memory_binds_in_the_memory_tight_instances``)."""
    inst = read(ROOT / set_name / f"{stem}.json")
    free = hybrid_witness(_unlimited_memory(inst))
    assert not evaluate(inst, free).feasible
    assert any("microbatches in flight" in v for v in evaluate(inst, free).violations)
    bound = evaluate(inst, hybrid_witness(inst)).iteration_time_s
    assert evaluate(_unlimited_memory(inst), free).iteration_time_s < bound


def test_check_detects_an_infeasible_witness(tmp_path):
    shutil.copytree(ROOT / "hybrid" / "small", tmp_path / "small")
    path = tmp_path / "small" / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["instances"][0]["witness"]["stages"][0][4] = 8  # d = 8 on a group of 2
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    problems = check_against_manifest(tmp_path / "small")
    assert len(problems) == 1 and "witness of hybrid-small-01.json" in problems[0]


def test_writing_a_set_keeps_files_that_hold_their_instance(tmp_path, capsys):
    shutil.copytree(ROOT / "small", tmp_path / "small")
    before = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "small").iterdir()}
    assert json.loads(before["small-01-tiny.json"])["format"] == "chainpipe-instance/1"
    (tmp_path / "small" / "small-02-gpipe.json").unlink()
    assert sets_main(["--root", str(tmp_path), "--sets", "small"]) == 0
    after = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "small").iterdir()}
    assert set(after) == set(before)
    assert {n for n in after if after[n] != before[n]} == {"small-02-gpipe.json"}
    assert "wrote 1 files" in capsys.readouterr().out


def test_sets_refuses_an_unknown_set(capsys):
    with pytest.raises(SystemExit) as exit_:
        sets_main(["--sets", "hybrid/tiny", "--check"])
    assert exit_.value.code == 2
    assert "unknown set 'hybrid/tiny'" in capsys.readouterr().err


def test_cli_generate_parallelism_options(tmp_path):
    out = tmp_path / "g.json"
    assert cli_main(["generate", "--preset", "metro", "--seed", "2", "-o", str(out),
                     "--data-parallel", "1,3", "--tensor-parallel", "1,2", "--no-zero"]) == 0
    assert read(out) == generate("metro", 2, data_parallel=(1, 3), tensor_parallel=(1, 2),
                                 zero=False, version=3)
    assert cli_main(["generate", "--preset", "hybrid", "-o", str(out),
                     "--parallelism", "off"]) == 0
    assert read(out) == generate("hybrid", 0, parallelism="off", version=3)
    # off: one device a stage; replication across DCs (pipelines) stays a choice
    assert read(out).parallelism == Parallelism(pipelines=read(out).parallelism.pipelines)


@pytest.mark.parametrize("argv, message", [
    (["--parallelism", "maybe"], "argument --parallelism: invalid choice: 'maybe'"),
    (["--data-parallel", "1,1"], "argument --data-parallel: must be comma-separated integers"),
    (["--data-parallel", "0"], "argument --data-parallel: must be comma-separated integers"),
    (["--tensor-parallel", "1,3"], "argument --tensor-parallel: must be comma-separated powers"),
    (["--parallelism", "off", "--zero"], "generate: parallelism 'off' contradicts zero"),
], ids=["switch", "repeat", "zero-width", "not-power", "off-and-zero"])
def test_cli_generate_bad_parallelism_exits_2_with_one_line(capsys, tmp_path, argv, message):
    out = tmp_path / "g.json"
    assert cli_main(["generate", "--preset", "tiny", *argv, "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    (line,) = captured.err.splitlines()
    assert message in line
