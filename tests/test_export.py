"""``chainpipe export``: rank layouts, Megatron-Core arguments, TorchTitan job configurations,
and the nearest plan a framework can express.

Every Megatron layout is handed to Megatron-Core's own ``PipelineParallelLayerLayout``
(installed by ``make`` without PyTorch; the layout module needs none of it), and the batch
written is checked against the planned one. TorchTitan's configuration manager imports
``torch``, so its file is checked against :data:`TORCHTITAN_KEYS`, the fields of
``Parallelism`` and ``Training`` in torchtitan v0.2.2's ``torchtitan/config/job_config.py``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from chainpipe.cli import main
from chainpipe.export import Inexpressible, export, nearest_plan
from chainpipe.export.nearest import framework_units
from chainpipe.instance import Instance, InstanceError, Layer, Model, Parallelism
from chainpipe.instances import generate
from chainpipe.io import read, read_plan, write, write_plan
from chainpipe.plan import Plan, evaluate
from chainpipe.solve import solve
from helpers import brute_force_hybrid, random_hybrid_instance

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: torchtitan v0.2.2 job_config.py: the fields of Parallelism and Training this export sets
TORCHTITAN_KEYS = {
    "parallelism": {"pipeline_parallel_degree", "tensor_parallel_degree",
                    "enable_sequence_parallel", "data_parallel_replicate_degree",
                    "data_parallel_shard_degree", "context_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size",
                    "module_fqns_per_model_part"},
    "training": {"local_batch_size", "global_batch_size"},
}


@pytest.fixture(scope="module")
def megatron_layout_class():
    """Megatron-Core's own ``PipelineParallelLayerLayout``, from the installed package.

    ``make`` installs ``megatron-core`` without its dependencies; the layout module and its
    ``LayerType`` enum need none of them (``parallel_state`` is only used by methods that ask
    for a running job's ranks, stubbed here), so the class runs as in a launch.
    """
    import importlib.metadata
    import importlib.util
    import types

    try:
        dist = importlib.metadata.distribution("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("megatron-core is not installed: `make test` installs it (--no-deps)")
    saved = {k: sys.modules.get(k) for k in ("megatron", "megatron.core",
                                             "megatron.core.parallel_state",
                                             "megatron.core.transformer",
                                             "megatron.core.transformer.enums")}
    try:
        for name in saved:
            sys.modules[name] = types.ModuleType(name)
        sys.modules["megatron.core"].parallel_state = sys.modules["megatron.core.parallel_state"]
        modules = {}
        for name in ("enums", "pipeline_parallel_layer_layout"):
            path = dist.locate_file(f"megatron/core/transformer/{name}.py")
            spec = importlib.util.spec_from_file_location(f"megatron.core.transformer.{name}",
                                                          path)
            modules[name] = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = modules[name]
            spec.loader.exec_module(modules[name])
    finally:
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
        sys.modules.pop("megatron.core.transformer.pipeline_parallel_layer_layout", None)
    return modules["pipeline_parallel_layer_layout"].PipelineParallelLayerLayout


def megatron_args(text: str) -> dict:
    body = text[text.index("MODEL_PARALLEL_ARGS=(") + len("MODEL_PARALLEL_ARGS=("):text.rindex(")")]
    words = [w for w in shlex.split(body)
             if w not in ("--sequence-parallel", "--use-distributed-optimizer")]
    return dict(zip(words[::2], words[1::2]))


def megatron_parse(layout: str, pp: int, num_layers: int) -> list[list[str]]:
    """Megatron-Core's reading of a layout string, with the checks it makes."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)
    stages = [list(stage) for stage in text.split("|")]
    assert all(c in "ELtm" for s in stages for c in s)
    assert len(stages) % pp == 0
    flat = [c for s in stages for c in s]
    assert flat[0] == "E" and flat[-1] == "L"
    assert flat.count("E") == 1 and flat.count("L") == 1
    assert flat.count("t") == num_layers
    return stages


def _uniform_plan(inst: Instance, d: int, t: int) -> Plan:
    res = solve(dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=Parallelism((d,), (t,), inst.training.parallelism.zero))))
    return res.plan


@pytest.fixture(scope="module")
def hybrid():
    inst = generate("hybrid", 0, model="llama2-7b")
    plan = solve(inst).plan
    return inst, plan


def test_ranks_list_every_device_in_rank_order(hybrid):
    inst, plan = hybrid
    doc = json.loads(export(inst, plan, "ranks"))
    assert doc["format"] == "chainpipe-ranks/1"
    assert doc["iteration_time_s"] == evaluate(inst, plan).iteration_time_s
    ranks = doc["ranks"]
    assert [r["rank"] for r in ranks] == list(range(doc["world_size"]))
    assert sorted(r["device"] for r in ranks) == sorted(d for st in plan.stages
                                                        for d in st.devices)
    for r in ranks:
        st = plan.stages[r["stage"]]
        t = st.tensor_parallel
        assert st.devices[r["data_parallel_rank"] * t + r["tensor_parallel_rank"]] == r["device"]
        assert [r["layer_start"], r["layer_end"]] == [st.start, st.end]
        ref = inst.locate(r["device"])
        assert r["node"] == ref.index // inst.group(ref).devices_per_node
    rows = list(csv.DictReader(io.StringIO(export(inst, plan, "ranks", csv=True))))
    assert [row["device"] for row in rows] == [r["device"] for r in ranks]


def test_megatron_layout_follows_the_plan(hybrid, megatron_layout_class):
    inst, mixed = hybrid
    plan = _uniform_plan(inst, 2, 4)
    text = export(inst, plan, "megatron")
    args = megatron_args(text)
    assert args["--tensor-model-parallel-size"] == "4"
    assert args["--pipeline-model-parallel-size"] == str(plan.num_stages)
    b = inst.training.microbatch_size
    assert args["--global-batch-size"] == str(inst.microbatches * b)
    assert int(args["--micro-batch-size"]) * 2 == b  # per replica, times d
    # Megatron's own count of microbatches per iteration is the planned M
    assert int(args["--global-batch-size"]) // (int(args["--micro-batch-size"]) * 2) == \
        inst.microbatches
    layout = megatron_layout_class(args["--pipeline-model-parallel-layout"], plan.num_stages)
    layout.validate_layer_layout(int(args["--num-layers"]), None)
    blocks = inst.num_layers - 2
    stages = megatron_parse(args["--pipeline-model-parallel-layout"], plan.num_stages, blocks)
    assert int(args["--num-layers"]) == blocks
    for chars, st in zip(stages, plan.stages):
        assert len(chars) == st.end - st.start  # one character per layer of the stage
    assert "--sequence-parallel" in text and "--use-distributed-optimizer" in text


def test_torchtitan_config_names_each_stage_modules(hybrid):
    inst, _ = hybrid
    plan = _uniform_plan(inst, 4, 2)
    doc = tomllib.loads(export(inst, plan, "torchtitan"))
    for section, keys in doc.items():
        assert set(keys) <= TORCHTITAN_KEYS[section]
    par = doc["parallelism"]
    assert (par["pipeline_parallel_degree"], par["tensor_parallel_degree"],
            par["data_parallel_shard_degree"]) == (plan.num_stages, 2, 4)
    parts = par["module_fqns_per_model_part"]
    blocks = inst.num_layers - 2
    assert [m for p in parts for m in p] == (["tok_embeddings"]
                                             + [f"layers.{i}" for i in range(blocks)]
                                             + ["norm", "output"])
    for modules, st in zip(parts, plan.stages):
        assert len(modules) == st.end - st.start + (modules[-1] == "output")
    b, d = inst.training.microbatch_size, 4
    assert par["pipeline_parallel_microbatch_size"] * d == b
    assert doc["training"]["local_batch_size"] == inst.microbatches * b // d
    assert doc["training"]["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == \
        inst.microbatches
    assert doc["training"]["global_batch_size"] == inst.microbatches * b


def test_a_mixed_plan_names_the_nearest_expressible_plan(hybrid):
    inst, plan = hybrid
    assert len({(s.data_parallel, s.tensor_parallel) for s in plan.stages}) > 1
    for fmt in ("megatron", "torchtitan"):
        with pytest.raises(Inexpressible) as info:
            export(inst, plan, fmt)
        near = info.value.nearest
        best = min(evaluate(inst, p).iteration_time_s
                   for d in inst.training.parallelism.data_parallel
                   for t in inst.training.parallelism.tensor_parallel
                   if (p := _uniform_plan(inst, d, t)) is not None)
        assert near.evaluation.iteration_time_s == pytest.approx(best, rel=1e-12)
        assert near.evaluation.iteration_time_s >= evaluate(inst, plan).iteration_time_s
        assert str(info.value).startswith(f"{fmt} cannot express this plan: its stages use "
                                          f"different data-parallel widths")
        assert f"T = {near.evaluation.iteration_time_s:.6g} s" in str(info.value)
        export(inst, near.plan, fmt)  # the nearest plan is expressible


@pytest.mark.parametrize("seed", range(12))
def test_nearest_plan_is_the_best_uniform_plan_by_enumeration(seed):
    inst = random_hybrid_instance(seed)
    par = inst.training.parallelism
    best = float("inf")
    for d in par.data_parallel:
        for t in par.tensor_parallel:
            forced = dataclasses.replace(inst, training=dataclasses.replace(
                inst.training, parallelism=Parallelism((d,), (t,), par.zero)))
            best = min(best, brute_force_hybrid(forced)[0])
    near = nearest_plan(inst)
    if best == float("inf"):
        assert near is None
    else:
        assert near.evaluation.iteration_time_s == pytest.approx(best, rel=1e-9)


def test_sublayer_plans_cut_between_whole_blocks():
    inst = generate("hybrid-small", 2, granularity="sublayer")
    names = [ly.name for ly in inst.model.layers]
    assert "block0.attn" in names
    units = framework_units(inst)
    assert [u.kind for u in units] == ["E"] + ["t"] * 4 + ["L"]
    # a plan cutting inside a block is refused with the reason; the nearest one is not
    st = next(i for i, n in enumerate(names) if n == "block1.mlp")
    dc = inst.datacenters[0]
    group = dc.devices[0]
    devs = [f"{dc.name}/{group.type}/{i}" for i in range(2)]
    from chainpipe.plan import Stage
    plan = Plan((Stage(0, st, devs[0]), Stage(st, len(names), devs[1])))
    with pytest.raises(Inexpressible, match="stage 1 starts at layer .* \\(block1.mlp\\), "
                                            "inside a transformer block"):
        export(inst, plan, "megatron")
    near = nearest_plan(inst)
    starts = {u.start for u in units}
    assert all(s.start in starts for s in near.plan.stages)
    # the best plan over the merged blocks, by enumeration
    merged = []
    for u in units:
        part = inst.model.layers[u.start:u.end]
        merged.append(Layer(u.name, sum(x.fwd_flop for x in part),
                            sum(x.bwd_flop for x in part), sum(x.params for x in part),
                            sum(x.activation_bytes for x in part), part[-1].output_bytes,
                            sum(x.tp_allreduce_bytes for x in part)))
    coarse = dataclasses.replace(inst, model=Model("m", tuple(merged)))
    par = inst.training.parallelism
    best = min(brute_force_hybrid(dataclasses.replace(coarse, training=dataclasses.replace(
        coarse.training, parallelism=Parallelism((d,), (t,), par.zero))))[0]
        for d in par.data_parallel for t in par.tensor_parallel)
    assert near.evaluation.iteration_time_s == pytest.approx(best, rel=1e-9)


def test_an_infeasible_plan_is_bad_input(hybrid):
    inst, plan = hybrid
    broken = Plan(plan.stages[:1])  # the other layers are on no stage
    with pytest.raises(InstanceError) as info:
        export(inst, broken, "ranks")
    assert all(p.startswith("plan: ") for p in info.value.problems)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "chainpipe", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_cli_export(tmp_path, hybrid, capsys):
    inst, plan = hybrid
    write(inst, tmp_path / "inst.json")
    write_plan(plan, tmp_path / "plan.json", inst)
    # ranks to stdout
    assert main(["export", str(tmp_path / "inst.json"), str(tmp_path / "plan.json"),
                 "--to", "ranks"]) == 0
    assert json.loads(capsys.readouterr().out)["world_size"] == sum(s.width for s in plan.stages)
    # a mixed plan: exit 1, one line, the nearest plan written where asked
    out = tmp_path / "megatron.sh"
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", "megatron",
                "-o", out, "--nearest-out", tmp_path / "near.json")
    assert proc.returncode == 1 and proc.stdout == "" and not out.exists()
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("chainpipe export: megatron cannot express this plan")
    near = read_plan(tmp_path / "near.json")
    assert f"T = {evaluate(read(tmp_path / 'inst.json'), near).iteration_time_s:.6g} s" in line
    assert main(["export", str(tmp_path / "inst.json"), str(tmp_path / "near.json"),
                 "--to", "megatron", "-o", str(out)]) == 0
    assert "--pipeline-model-parallel-layout" in out.read_text()


@pytest.mark.parametrize("extra, needle", [
    (["--to", "megatron", "--csv"], "--csv: applies to --to ranks only"),
    (["--to", "ranks", "-o", "{plan}"], "is an input of this command; refusing to write over it"),
])
def test_cli_export_bad_options(tmp_path, hybrid, capsys, extra, needle):
    inst, plan = hybrid
    write(inst, tmp_path / "inst.json")
    write_plan(plan, tmp_path / "plan.json")
    before = (tmp_path / "plan.json").read_bytes()
    extra = [e.format(plan=tmp_path / "plan.json") for e in extra]
    assert main(["export", str(tmp_path / "inst.json"), str(tmp_path / "plan.json"),
                 *extra]) == 2
    _, err = capsys.readouterr()
    assert needle in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "plan.json").read_bytes() == before


def test_cli_export_of_a_plan_for_another_instance_is_bad_input(tmp_path, hybrid):
    inst, plan = hybrid
    write(generate("hybrid", 1), tmp_path / "other.json")
    write_plan(plan, tmp_path / "plan.json", inst)
    proc = _run("export", tmp_path / "other.json", tmp_path / "plan.json", "--to", "ranks")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "the plan was written for instance" in line and "--force" in line
    # --force: checked against the instance by the cost model, as a hand-written plan is
    proc = _run("export", tmp_path / "other.json", tmp_path / "plan.json", "--to", "ranks",
                "--force")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert all(line.startswith(("plan: ", "warning: "))
               for line in proc.stderr.strip().splitlines())


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_a_batch_format_needs_the_microbatch_size(tmp_path, hybrid, fmt):
    inst, _ = hybrid
    plan = _uniform_plan(inst, 2, 4)
    unstated = dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                      microbatch_size=None))
    write(unstated, tmp_path / "inst.json")
    write_plan(plan, tmp_path / "plan.json", unstated)
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", fmt)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("training.microbatch_size: missing") and "--microbatch-size" in line
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", fmt,
                "--microbatch-size", "3")
    assert proc.returncode == 2 and "cannot be split evenly over 2" in proc.stderr
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", fmt,
                "--microbatch-size", "8")
    assert proc.returncode == 0, proc.stderr
    assert "M = " in proc.stdout and f"{inst.microbatches * 8} sequences per iteration" in \
        proc.stdout
    # ranks need no batch
    assert _run("export", tmp_path / "inst.json", tmp_path / "plan.json",
                "--to", "ranks").returncode == 0
    # an instance that states it: a different --microbatch-size is refused
    write(inst, tmp_path / "stated.json")
    write_plan(plan, tmp_path / "plan2.json", inst)
    other = inst.training.microbatch_size * 2
    proc = _run("export", tmp_path / "stated.json", tmp_path / "plan2.json", "--to", fmt,
                "--microbatch-size", str(other))
    assert proc.returncode == 2 and "differs from the instance's training.microbatch_size" in \
        proc.stderr


@pytest.mark.parametrize("seed", range(6))
def test_every_layout_written_is_accepted_by_megatron_core(seed, megatron_layout_class):
    inst = generate("hybrid-small", seed, granularity="sublayer" if seed % 2 else "block")
    near = nearest_plan(inst)
    if near is None:
        pytest.skip("no uniform plan")
    args = megatron_args(export(inst, near.plan, "megatron"))
    pp = int(args["--pipeline-model-parallel-size"])
    layout = megatron_layout_class(args["--pipeline-model-parallel-layout"], pp)
    layout.validate_layer_layout(int(args["--num-layers"]), None)
    d = near.plan.stages[0].data_parallel
    assert int(args["--micro-batch-size"]) * d == inst.training.microbatch_size
    assert int(args["--global-batch-size"]) == inst.microbatches * inst.training.microbatch_size


def test_the_worked_example_of_the_docs_is_what_the_code_gives():
    from chainpipe.instances.cluster_file import cluster_instance, read_cluster
    from chainpipe.instances.hf_config import read_model_config

    doc = (ROOT / "docs" / "launch.md").read_text(encoding="utf-8")
    shape = read_model_config(ROOT / "tests" / "data" / "models" / "llama-3-8b", seq_len=4096)
    inst = cluster_instance(read_cluster(ROOT / "examples" / "metro-cluster.toml"), shape)
    plan = solve(inst).plan
    with pytest.raises(Inexpressible) as info:
        export(inst, plan, "megatron")
    near = info.value.nearest
    assert f"iteration time  {evaluate(inst, plan).iteration_time_s:.6g} s" in doc
    assert f"T = {near.evaluation.iteration_time_s:.6g} s (this plan: T = " \
           f"{evaluate(inst, plan).iteration_time_s:.6g} s)" in doc
    from chainpipe.export.frameworks import megatron_layout
    assert f"--pipeline-model-parallel-layout '{megatron_layout(inst, near.plan)}'" in doc


def test_torchtitan_names_fit_llama_style_models_only(tmp_path):
    from chainpipe.export import Unsupported

    gpt = generate("hybrid-small", 1, model="gpt3-1.3b")
    near = nearest_plan(gpt)
    with pytest.raises(Unsupported, match=r"model 'gpt3-1.3b\[4 blocks\]' is not recognised "
                                          r"as one: give --module-names llama"):
        export(gpt, near.plan, "torchtitan")
    forced = tomllib.loads(export(gpt, near.plan, "torchtitan", module_names="llama"))
    assert forced["parallelism"]["module_fqns_per_model_part"][0][0] == "tok_embeddings"
    export(gpt, near.plan, "megatron")  # Megatron's layout names no modules
    write(gpt, tmp_path / "inst.json")
    write_plan(near.plan, tmp_path / "plan.json", gpt)
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", "torchtitan")
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("chainpipe export: torchtitan's module names")
    proc = _run("export", tmp_path / "inst.json", tmp_path / "plan.json", "--to", "torchtitan",
                "--module-names", "llama")
    assert proc.returncode == 0 and "module_fqns_per_model_part" in proc.stdout
    llama = generate("hybrid-small", 1, model="llama2-7b")
    export(llama, nearest_plan(llama).plan, "torchtitan")  # recognised: no option needed
