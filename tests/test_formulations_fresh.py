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


def test_a_cpu_limit_counts_the_runs_cpu_seconds(monkeypatch):
    """``--cpu-limit``: a run's deadline ends after ``--time-limit`` CPU seconds of the
    process, not wall-clock seconds: a solver that first waits 0.6 s (no CPU) and then
    works until its deadline has passed still gets its 0.4 CPU seconds (a wall-clock
    deadline of 0.4 s would have ended while it waited); its wall-clock cap is
    ``CPU_WALL_FACTOR`` times the limit; the header says so."""
    import importlib
    import time

    from chainpipe.result import Outcome

    bench = _bench()
    seen = {}

    def fake(instance, *, deadline, seed, threads, log):
        time.sleep(0.6)
        c0 = time.process_time()
        while not deadline.expired():
            sum(range(1000))
        seen["cpu"], seen["limit"] = time.process_time() - c0, deadline.limit
        return Outcome("no_solution")

    monkeypatch.setattr(importlib.import_module("chainpipe.solve"), "solver_function",
                        lambda name: fake)
    monkeypatch.setattr(bench, "CPU_WALL_FACTOR", 100.0)  # a loaded machine: 40 s of wall
    inst = read(ROOT / "instances" / "v3" / "small" / "v3-small-01-period.json")
    r = bench._solve_on_cpu(inst, "dp", 0.4, {})
    assert r.status.value == "no_solution"
    assert 0.2 <= seen["cpu"] <= 0.45, seen
    assert abs(seen["limit"] - bench.CPU_WALL_FACTOR * 0.4) < 0.1, seen
    args = bench._parser().parse_args(["--fresh", f"{ENTRY}:3", "--cpu-limit"])
    args.out = ROOT / "benchmarks" / "results" / "formulations_flow_fresh.md"
    assert "--cpu-limit" in bench._command(args)
    assert "CPU seconds of the run" in " ".join(bench._header(args))
