"""``benchmarks/formulations.py --fresh``: a committed set entry drawn again at other
seeds (instances the formulations were never tuned on), named as
``benchmarks/dp_scaling.py`` names them."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from chainpipe.instances import generate
from chainpipe.io import read

ROOT = Path(__file__).resolve().parent.parent
ENTRY = "v3-medium-02-small-model"


def _bench():
    spec = importlib.util.spec_from_file_location(
        "formulations_bench", ROOT / "benchmarks" / "formulations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_lists():
    bench = _bench()
    assert bench.fresh_seeds("3-8") == [3, 4, 5, 6, 7, 8]
    assert bench.fresh_seeds("3,5,7") == [3, 5, 7]
    assert bench.fresh_seeds("4") == [4]


def test_fresh_instances_are_the_entry_at_each_seed():
    bench = _bench()
    name, instances = bench.fresh_instances(f"{ENTRY}:3-4")
    assert name == f"fresh/{ENTRY}"
    assert [i.name for i in instances] == [f"{ENTRY}-like-s3", f"{ENTRY}-like-s4"]
    committed = read(ROOT / "instances" / "v3" / "medium" / f"{ENTRY}.json")
    for seed, inst in zip((3, 4), instances):
        drawn = generate("hybrid", seed, version=3, model="gpt3-1.3b", granularity="sublayer")
        assert inst == dataclasses.replace(drawn, name=inst.name)
        assert inst.datacenters != committed.datacenters  # another cluster than the set's
        assert inst.training == committed.training and inst.model == committed.model
    assert instances[0].datacenters != instances[1].datacenters


def test_the_committed_seed_and_unknown_entries_are_refused():
    bench = _bench()
    with pytest.raises(SystemExit, match="committed instance's own"):
        bench.fresh_instances(f"{ENTRY}:0-2")
    with pytest.raises(SystemExit, match="ENTRY:SEEDS"):
        bench.fresh_instances("no-such-entry:3")
    with pytest.raises(SystemExit, match="ENTRY:SEEDS"):
        bench.fresh_instances(ENTRY)


def test_the_command_line_names_the_draws():
    bench = _bench()
    args = bench._parser().parse_args(["--fresh", f"{ENTRY}:3-8", "--device-states",
                                       "--no-lp", "--solvers", "ilp-path"])
    args.out = ROOT / "benchmarks" / "results" / "formulations_flow_fresh.md"
    command = bench._command(args)
    assert f"--fresh {ENTRY}:3-8" in command and "--sets" not in command
    assert "--no-lp" in command and "--device-states" in command
