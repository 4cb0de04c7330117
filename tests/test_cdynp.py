"""CDynP: exactness (brute force, dp), isolation, split files, trace privacy, compression."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.io import read
from chainpipe.plan import Plan, evaluate
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import agent, guarantee_factor, protocol, split_instance
from chainpipe.solvers.cdynp.runner import run_split
from chainpipe.solvers.cdynp.summary import (
    cap_keep,
    epsilon_keep,
    frontier,
    round_digits,
    round_down,
)
from helpers import (
    brute_force,
    check_cdynp_equals_dp,
    check_trace_private,
    private_strings,
    random_instance,
)

ROOT = Path(__file__).resolve().parents[1]
SMALL = sorted(p for p in (ROOT / "instances" / "small").glob("*.json")
               if p.name != "manifest.json")
RTOL = 1e-9


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300)


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("block", range(4))
def test_exact_equals_brute_force_on_random_instances(block):
    """>= 200 random small instances (50 per block), 1 to 3 DCs, tight and loose memory."""
    for seed in range(block * 50, block * 50 + 50):
        inst = random_instance(seed, max_layers=5)
        T_best, _ = brute_force(inst)
        res = solve(inst, "cdynp")
        if math.isinf(T_best):
            assert res.status == "infeasible", (seed, res.status, res.message)
            continue
        assert res.status == "optimal", (seed, res.status, res.message)
        assert _same(res.iteration_time, T_best), (seed, res.iteration_time, T_best)
        assert _same(res.stats["estimate_s"], T_best), seed


@pytest.mark.parametrize("block", range(2))
def test_vectorised_engine_equals_brute_force(block, monkeypatch):
    """DC 2..K run WideDP on wide DPs only (large/); force it on 100 small instances."""
    monkeypatch.setattr(agent, "_WIDE_SIZE", 0)
    for seed in range(3000 + block * 50, 3000 + block * 50 + 50):
        inst = random_instance(seed, max_layers=5, max_dcs=4)
        T_best, _ = brute_force(inst)
        res = solve(inst, "cdynp")
        if math.isinf(T_best):
            assert res.status == "infeasible", (seed, res.status, res.message)
        else:
            assert _same(res.iteration_time, T_best), (seed, res.iteration_time, T_best)


@pytest.mark.parametrize("wide", [False, True], ids=["label-loop", "vectorised"])
@pytest.mark.parametrize("block", range(5))
def test_exact_equals_dp_on_generated_instances(block, wide, monkeypatch):
    """Real model shapes and GPUs, 6 to 26 layers, 2 to 4 DCs: large enough for the trial
    bounds, the prefix cost and the probe to cut, unlike the brute-force instances."""
    from chainpipe.instances.generator import generate

    if wide:
        monkeypatch.setattr(agent, "_WIDE_SIZE", 0)
    for seed in range(block * 12, block * 12 + 12):
        inst = generate(("metro", "pool", "tiny")[seed % 3], seed, datacenters=2 + seed % 3,
                        gpus_per_dc=(4, 8, 16)[seed % 3], blocks=(2, 4, 8, 12)[seed % 4],
                        schedule=("1f1b", "gpipe")[seed % 2], microbatches=(4, 16, 32)[seed % 3],
                        degrade=(None, 0.1)[(seed // 2) % 2])
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp")
        assert res.status == ref.status, (seed, res.status, ref.status)
        if ref.iteration_time is not None:
            assert _same(res.iteration_time, ref.iteration_time), (seed, res.iteration_time,
                                                                   ref.iteration_time)


def test_exact_on_four_datacenters_and_scarce_devices():
    for seed in range(1000, 1040):
        inst = random_instance(seed, max_layers=5, max_dcs=4, max_count=1)
        T_best, _ = brute_force(inst)
        res = solve(inst, "cdynp")
        if math.isinf(T_best):
            assert res.status == "infeasible", seed
        else:
            assert _same(res.iteration_time, T_best), (seed, res.iteration_time, T_best)


@pytest.mark.skipif(not SMALL, reason="instances/small not generated")
@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_exact_equals_dp_on_small_set(path):
    check_cdynp_equals_dp(read(path), RTOL)


def test_worked_example():
    inst = read(ROOT / "tests" / "data" / "valid" / "worked_example.json")
    res = solve(inst, "cdynp")
    assert res.status == "optimal" and _same(res.iteration_time, 32.0)


# ------------------------------------------------------------------ isolation
def test_processes_equal_in_process(tmp_path):
    chosen = [s for s in range(7, 100)
              if random_instance(s, max_layers=6, max_dcs=3).num_datacenters == 3][:2]
    assert len(chosen) == 2
    for seed in chosen:
        inst = random_instance(seed, max_layers=6, max_dcs=3)
        a = solve(inst, "cdynp", trace_dir=tmp_path / f"in{seed}")
        b = solve(inst, "cdynp", processes=True, trace_dir=tmp_path / f"proc{seed}")
        assert b.stats["mode"] == "processes"
        assert a.status == b.status
        assert a.plan == b.plan
        assert a.stats["messages"] == b.stats["messages"]
        # identical bytes on the wire
        for m in a.stats["messages"]:
            assert (tmp_path / f"in{seed}" / m["file"]).read_bytes() == \
                (tmp_path / f"proc{seed}" / m["file"]).read_bytes()


def _distinctive_instance() -> Instance:
    """Three DCs whose private numbers and names appear nowhere else."""
    layers = tuple(Layer(f"blk{i}", 1.0e12 + i * 7.0e10, 2.0e12 + i * 3.0e10, 5_000_000 + i,
                         2.0e8 + i, 4.0e7 + 1000 * i) for i in range(7))
    dcs = (
        Datacenter("north", (DeviceGroup("ZetaSecretGPU", 2, 123456789012345.0, 9.87654321e10),
                             DeviceGroup("OmegaHidden", 1, 77777777777777.5, 1.1223344e11)),
                   Link(3.1415926e11, 2.71828e-6)),
        Datacenter("centre", (DeviceGroup("KappaCovert", 3, 99999999999991.0, 6.6666666e10),),
                   Link(1.6180339e11, 1.41421e-6)),
        Datacenter("south", (DeviceGroup("SigmaPrivate", 2, 250000000000003.0, 8.0808080e10),
                             DeviceGroup("ThetaMasked", 1, 55555555555555.0, 4.4444444e10)),
                   Link(2.2360679e11, 1.73205e-6)),
    )
    links = (Link(2.5e9, 5.0e-4), Link(1.25e9, 3.0e-4))
    return Instance("distinct", Model("m", layers), Training(8, "1f1b", 16.0), dcs, links)


def test_trace_has_no_private_data(tmp_path):

    inst = _distinctive_instance()
    res = solve(inst, "cdynp", trace_dir=tmp_path)
    assert res.status == "optimal"
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == [m["file"] for m in res.stats["messages"]]
    assert len(files) == 3 * (inst.num_datacenters - 1)  # prefix, summary, assemble
    assert sum(f.stat().st_size for f in files) == res.stats["message_bytes_total"]
    # numbers carried are layer boundaries, stage counts, public bandwidths and costs
    check_trace_private(inst, files, protocol.SCHEMA)


def test_split_files_alone_run_the_protocol(tmp_path):
    inst = _distinctive_instance()
    paths = split_instance(inst, tmp_path / "split")
    assert paths[0].name == "public.json" and len(paths) == 1 + inst.num_datacenters
    public_text = paths[0].read_text()
    for s in private_strings(inst):
        assert s not in public_text
    for k, p in enumerate(paths[1:]):
        own = json.loads(p.read_text())["datacenter"]
        assert own["name"] == inst.datacenters[k].name
        other = [d.devices[0].type for j, d in enumerate(inst.datacenters) if j != k]
        assert not any(t in p.read_text() for t in other)
    run = run_split(tmp_path / "split")
    ref = solve(inst, "cdynp")
    assert run.stages == [s.to_dict() for s in ref.plan.stages]
    assert _same(run.estimate, ref.iteration_time)


def test_each_dc_learns_only_its_own_stages():
    inst = _distinctive_instance()
    res = solve(inst, "cdynp")
    names = [dc.name for dc in inst.datacenters]
    for k, rep in enumerate(res.stats["agents"]):
        for stage in rep["stages"]:
            assert all(device.split("/")[0] == names[k] for device in stage["devices"])


# ------------------------------------------------------------------ compression
def test_compression_reports_bytes_and_gap():
    inst = _distinctive_instance()
    exact = solve(inst, "cdynp", compare_dp=True)
    assert exact.stats["gap_vs_dp"] == pytest.approx(0.0, abs=1e-9)
    comp = solve(inst, "cdynp", epsilon=0.2, max_entries=2, compare_dp=True)
    assert comp.status in ("feasible", "no_solution")
    sizes = [m["bytes"] for m in comp.stats["messages"]]
    assert comp.stats["message_bytes_total"] == sum(sizes)
    assert comp.stats["message_bytes_max"] == max(sizes)
    assert comp.stats["message_bytes_total"] <= exact.stats["message_bytes_total"]
    if comp.plan is not None:
        assert comp.stats["gap_vs_dp"] >= -1e-12


@pytest.mark.parametrize("eps,quantum,digits", [(0.05, 0.0, 0), (0.3, 0.0, 0), (0.0, 0.1, 0), (0.2, 0.05, 0), (0.0, 0.0, 2), (0.1, 0.0, 3)])
def test_epsilon_guarantee_holds(eps, quantum, digits):
    for seed in range(300, 360):
        inst = random_instance(seed, max_layers=5, max_dcs=3)
        T_best, _ = brute_force(inst)
        res = solve(inst, "cdynp", epsilon=eps, quantum=quantum, digits=digits)
        if math.isinf(T_best):
            assert res.status == "infeasible", seed
            continue
        factor = guarantee_factor(inst.num_datacenters, eps, quantum, digits)
        assert res.status in ("feasible", "optimal")
        assert res.iteration_time <= factor * T_best * (1 + RTOL), (seed, res.iteration_time, T_best)
        assert res.lower_bound <= T_best * (1 + RTOL), seed


def test_max_entries_never_reports_a_false_bound():
    for seed in range(400, 430):
        inst = random_instance(seed, max_layers=5)
        T_best, _ = brute_force(inst)
        res = solve(inst, "cdynp", max_entries=1)
        assert res.lower_bound is None
        if res.plan is not None:
            assert res.iteration_time >= T_best * (1 - RTOL)
        else:
            assert res.status in ("no_solution", "infeasible")
            if res.status == "infeasible":
                assert math.isinf(T_best)


def test_frontier_filters():
    pts = [(0, 1.0, 5.0, 0.0), (0, 2.0, 4.0, 0.0), (1, 0.5, 9.0, 0.0), (0, 1.0, 5.0, 0.0),
           (1, 3.0, 1.0, 0.0)]
    assert frontier(pts) == [0, 1, 2, 4]  # the duplicate is dropped
    assert frontier(pts, kept=[(0, 1.0, 5.0, 0.0)]) == [1, 2, 4]  # equal to a kept point
    # the synchronisation is a criterion: a point with a smaller one survives
    assert frontier([(0, 1.0, 5.0, 2.0), (0, 1.0, 6.0, 1.0), (0, 1.0, 6.0, 3.0)]) == [0, 1]
    # epsilon: (1.05, 1.99) is within 1 + 0.1 of (1.0, 2.0), and so is each sync
    assert epsilon_keep([(0, 1.0, 2.0, 1.0), (0, 1.05, 1.99, 1.05)], 0.1) == [0]
    assert epsilon_keep([(0, 1.0, 2.0, 1.2), (0, 1.05, 1.99, 1.0)], 0.1) == [0, 1]
    assert cap_keep([(0, 1.0, 9.0, 0.0), (0, 2.0, 1.0, 0.0), (0, 0.5, 0.5, 0.0)], 4, 2) == [1, 2]
    # T = total + (M - 1) bottleneck + sync: the sync decides here
    assert cap_keep([(0, 1.0, 1.0, 9.0), (0, 2.0, 1.0, 0.0), (0, 0.5, 0.5, 0.0)], 4, 2) == [1, 2]
    # the estimate of a whole plan: the suffix's total scaled up to the model (7 vs 8 for
    # the suffix alone, 15 vs 12 at scale 3), the boundary into it paid (occupancy 2 lifts
    # the first bottleneck, and both totals gain a traversal of 4: 14 vs 12)
    pts = [(0, 1.0, 4.0, 0.0), (0, 2.0, 2.0, 0.0)]
    assert cap_keep(pts, 4, 1) == [0]
    assert cap_keep(pts, 4, 1, scale=3.0) == [1]
    assert cap_keep(pts, 4, 1, occupancy=2.0) == [1]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("sync", [False, True])
def test_frontier_equals_pairwise_dominance(seed, sync):
    rng = random.Random(seed)
    # few distinct values, so ties and duplicates are common

    def point():
        return (rng.randint(0, 3), float(rng.randint(1, 5)), float(rng.randint(1, 5)),
                float(rng.randint(0, 3)) if sync else 0.0)

    pts = [point() for _ in range(rng.randint(1, 40))]
    kept = [point() for _ in range(rng.randint(0, 5))]

    def dominates(q, p):
        return all(a <= b for a, b in zip(q, p))

    expect = [i for i, p in enumerate(pts)
              if not any(dominates(q, p) for q in kept)
              and not any(dominates(q, p) and (q != p or j < i) for j, q in enumerate(pts) if j != i)]
    assert frontier(pts, kept) == expect


@pytest.mark.parametrize("value", [1e-9, 0.0123456, 1.0, 3.14159, 99.95, 12345.678, 7e15])
@pytest.mark.parametrize("digits", [1, 3, 4, 6])
def test_round_digits_is_the_next_short_decimal(value, digits):
    v = round_digits(value, digits)
    assert v >= value
    mantissa = repr(v).split("e")[0].replace(".", "").replace("-", "").strip("0")
    assert len(mantissa) <= digits
    assert v <= value * (1 + 10.0 ** (1 - digits))


@pytest.mark.parametrize("value", [1e-300, 1e-9, 0.0123456, 0.25, 1.0, 3.14159, 2.0 ** 0.75,
                                   12345.678, 7e15, 1.7e308])
@pytest.mark.parametrize("steps", [1, 4, 7])
def test_round_down_is_the_grid_point_below(value, steps):
    v = round_down(value, steps)
    assert v <= value < v * 2.0 ** (1 / steps) * (1 + 1e-12)
    n = math.log2(v) * steps
    assert abs(n - round(n)) < 1e-9 and v == 2.0 ** (round(n) / steps)
    assert round_down(0.0, steps) == 0.0


def test_unknown_option_is_refused():
    inst = random_instance(3)
    with pytest.raises(ValueError, match="unknown option"):
        solve(inst, "cdynp", epsilonn=0.1)


def test_cli_trace_and_split(tmp_path, capsys):
    from chainpipe.cli import main
    from chainpipe.io import write

    inst = _distinctive_instance()
    path = tmp_path / "inst.json"
    write(inst, path)
    assert main(["solve", str(path), "--solver", "cdynp", "--trace", str(tmp_path / "tr"),
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal"
    assert len(list((tmp_path / "tr").iterdir())) == 6  # prefix, summary and assemble per link
    assert main(["split", str(path), str(tmp_path / "sp")]) == 0
    assert (tmp_path / "sp" / "public.json").exists()
    assert len(list((tmp_path / "sp").glob("private-*.json"))) == 3


def test_upper_bound_option_prunes_but_stays_exact():
    for seed in range(500, 540):
        inst = random_instance(seed, max_layers=5)
        T_best, _ = brute_force(inst)
        if math.isinf(T_best):
            continue
        loose = solve(inst, "cdynp", upper_bound=T_best * 1.01)
        assert loose.status == "optimal" and _same(loose.iteration_time, T_best), seed
        tight = solve(inst, "cdynp", upper_bound=T_best * 0.99)
        assert tight.status == "no_solution" and tight.plan is None, seed
        assert tight.lower_bound <= T_best


def test_time_limit_gives_no_solution_not_a_wrong_answer():
    inst = _distinctive_instance()
    res = solve(inst, "cdynp", time_limit=0.0)
    assert res.status == "no_solution" and res.plan is None


# ------------------------------------------------------------------ forged summaries
def _forging(monkeypatch, forger: str, factor: float) -> None:
    """DC ``forger`` claims every point of its summary costs ``factor`` times what it does."""
    honest = agent.DCAgent._summary

    def forged(self, own_pts, ub):
        msg = honest(self, own_pts, ub)
        if self.name == forger:
            for e in msg["entries"]:
                e["points"] = [[r, bn * factor, sm * factor, sy] for r, bn, sm, sy in e["points"]]
        return msg

    monkeypatch.setattr(agent.DCAgent, "_summary", forged)


@pytest.mark.parametrize("forger,factor,options", [
    ("south", 0.5, {}), ("centre", 0.5, {}), ("south", 0.99, {}),
    # with compression only a claim below the true cost is a lie (rounding goes up)
    ("south", 0.5, {"quantum": 0.1}), ("centre", 0.5, {"digits": 3}),
])
def test_a_forged_summary_fails_the_run_naming_its_sender(monkeypatch, forger, factor, options):
    _forging(monkeypatch, forger, factor)
    res = solve(_distinctive_instance(), "cdynp", **options)
    assert res.status == "error" and res.plan is None, (res.status, res.message)
    assert res.message.startswith(f"cdynp: DC '{forger}' sent a forged summary"), res.message


def test_an_exact_run_refuses_an_overstated_summary(monkeypatch):
    _forging(monkeypatch, "south", 1.01)
    res = solve(_distinctive_instance(), "cdynp")
    assert res.status == "error" and res.plan is None
    assert res.message.startswith("cdynp: DC 'south' sent a forged summary"), res.message


def test_a_time_limit_inside_an_agent_names_no_culprit():
    res = solve(_distinctive_instance(), "cdynp", time_limit=0.0)
    assert res.status == "no_solution" and "time limit reached in" in res.message


# ------------------------------------------------------------------ split documents
def test_split_documents_are_validated_naming_file_and_path(tmp_path):
    from chainpipe.instance import InstanceError
    from chainpipe.solvers.cdynp.public import read_split

    paths = split_instance(_distinctive_instance(), tmp_path)
    pub, priv = (json.loads(p.read_text()) for p in (paths[0], paths[2]))
    priv["datacenter"]["devices"][0]["count"] = 0
    priv["datacenter"]["link"]["latency_s"] = "fast"
    paths[2].write_text(json.dumps(priv))
    with pytest.raises(InstanceError) as info:
        read_split(tmp_path)
    assert info.value.problems == [
        f"{paths[2]}: datacenter.devices[0].count: must be an integer >= 1, got 0",
        f"{paths[2]}: datacenter.link.latency_s: must be a finite number >= 0, got 'fast'",
    ]
    paths[2].write_text(json.dumps(json.loads(paths[1].read_text())))  # north's, twice
    pub["links"][1]["bandwidth_bytes_per_s"] = -1
    paths[0].write_text(json.dumps(pub))
    with pytest.raises(InstanceError) as info:
        read_split(tmp_path)
    assert info.value.problems == [
        f"{tmp_path / 'public.json'}: links[1].bandwidth_bytes_per_s: must be a finite "
        f"number > 0, got -1"]
    pub["links"][1]["bandwidth_bytes_per_s"] = 1e9
    paths[0].write_text(json.dumps(pub))
    with pytest.raises(InstanceError, match="no private file for centre"):
        read_split(tmp_path)


# ------------------------------------------------------------------ split documents, version 2
def _v2_instance() -> Instance:
    """Three DCs with nodes, node bandwidths, ZeRO and widths: every v2 field not its default."""
    import dataclasses

    from chainpipe.instance import Parallelism

    base = _distinctive_instance()
    layers = tuple(dataclasses.replace(ly, tp_allreduce_bytes=3.0e7 + i)
                   for i, ly in enumerate(base.model.layers))
    training = Training(8, "1f1b", 16.0, gradient_bytes_per_param=4.0,
                        optimizer_bytes_per_param=10.0,
                        parallelism=Parallelism((1, 3, 4), (2, 4), True))
    nodes = {"ZetaSecretGPU": (2, 4.44e11), "KappaCovert": (1, None), "SigmaPrivate": (2, 3.33e11)}
    dcs = tuple(dataclasses.replace(dc, devices=tuple(
        dataclasses.replace(g, count=4, devices_per_node=nodes[g.type][0],
                            node_bandwidth_bytes_per_s=nodes[g.type][1])
        if g.type in nodes else g for g in dc.devices)) for dc in base.datacenters)
    return dataclasses.replace(base, model=Model("m", layers), training=training,
                               datacenters=dcs)


def _join(public: dict, private: list[dict]) -> Instance:
    """The instance the split documents describe, put back together."""
    from chainpipe.io import instance_from_dict

    return instance_from_dict({"format": "chainpipe-instance/2", "name": public["name"],
                               "model": public["model"], "training": public["training"],
                               "datacenters": [p["datacenter"] for p in private],
                               "links": public["links"]})


def test_split_of_a_v2_instance_reassembles_to_it_and_keeps_nodes_private(tmp_path):
    """The public file carries the model (with tp_allreduce_bytes) and training (gradient and
    optimizer bytes, parallelism: public by the contract); each DC's private file its groups
    with their node sizes and node bandwidths, and nothing of these reaches public.json."""
    from chainpipe.solvers.cdynp.public import read_split, read_view

    inst = _v2_instance()
    paths = split_instance(inst, tmp_path)
    public, private = read_split(tmp_path)
    assert _join(public, private) == inst
    assert public["training"]["parallelism"] == {"data_parallel": [1, 3, 4],
                                                 "tensor_parallel": [2, 4], "zero": True,
                                                 "pipelines": [1]}
    assert (public["training"]["gradient_bytes_per_param"],
            public["training"]["optimizer_bytes_per_param"]) == (4.0, 10.0)
    assert [ly["tp_allreduce_bytes"] for ly in public["model"]["layers"]] == [
        ly.tp_allreduce_bytes for ly in inst.layers]
    public_text = paths[0].read_text()
    for secret in ("devices_per_node", "node_bandwidth", "4.44e+11", "444000000000",
                   "3.33e+11", "333000000000"):
        assert secret not in public_text
    north = private[0]["datacenter"]["devices"][0]
    assert (north["devices_per_node"], north["node_bandwidth_bytes_per_s"]) == (2, 4.44e11)
    for k, doc in enumerate(private):  # what each DC's agent holds
        view, index, dc = read_view(public, doc)
        assert (index, dc, view.training, view.model) == (k, inst.datacenters[k],
                                                          inst.training, inst.model)


def test_split_files_written_before_version_2_still_read(tmp_path):
    """Documents without the v2 fields (as chainpipe wrote them for version 1) read with the
    defaults: the same instance as the version-1 file."""
    from chainpipe.solvers.cdynp.public import read_split

    inst = _distinctive_instance()
    paths = split_instance(inst, tmp_path)
    v2_keys = ("tp_allreduce_bytes", "gradient_bytes_per_param", "optimizer_bytes_per_param",
               "parallelism", "devices_per_node", "node_bandwidth_bytes_per_s")

    def strip(node):
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in v2_keys}
        return [strip(v) for v in node] if isinstance(node, list) else node

    for p in paths:
        p.write_text(json.dumps(strip(json.loads(p.read_text()))))
    assert "parallelism" not in paths[0].read_text()
    assert _join(*read_split(tmp_path)) == inst


def test_split_files_of_a_v2_instance_run_the_protocol(tmp_path):
    """Split files run directly (no solve facade) plan the worked v2 example: each DC
    chooses its widths and degrees, and the optimum is dp's (T = 16)."""
    inst = read(Path(__file__).parent / "data" / "valid" / "worked_example_v2.json")
    split_instance(inst, tmp_path / "split")
    run = run_split(tmp_path / "split")
    assert _same(run.estimate, 16.0)
    ref = solve(inst, "dp")
    assert _same(ref.iteration_time, 16.0)
    plan = Plan.from_dict({"stages": run.stages})
    assert _same(evaluate(inst, plan).iteration_time_s, 16.0)




@pytest.mark.parametrize("seed", range(12))
def test_cached_candidates_equal_direct(seed):
    """A DC's candidate runs under a bound, cut from the unbounded ones it keeps, equal
    those computed from the options under that bound (and the bound cuts the same)."""
    from chainpipe.solvers.cdynp.local import LocalDP
    from chainpipe.tables import CostTables

    inst = random_instance(seed, max_layers=6, max_dcs=1)
    rng = random.Random(seed)
    tables = CostTables(inst)
    full = LocalDP(tables, position_cap=3)._direct_candidates(math.inf)
    alone = [t for per_g in full for per in per_g for _w, _c, lst in per
             for _a, C, _n, R in lst for t in (tables.M * C + R,)]
    ubs = [rng.choice(alone) * rng.uniform(0.7, 1.3) for _ in range(6)] if alone else [1.0]
    for ub in [math.inf, *ubs]:
        cached, direct = (LocalDP(tables, position_cap=3) for _ in range(2))
        for grid in (None, {0, 2, 3, tables.L}):
            assert cached._candidates(ub, grid) == direct._direct_candidates(ub, grid)
        assert cached.bound_cut == direct.bound_cut
