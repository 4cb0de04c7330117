"""CDynP under contract version 2: each DC chooses its widths and degrees privately.

Exactness against ``dp`` (itself checked against the brute-force enumerator) and the
enumerator, on random small v2 instances and the committed hybrid set; compression
guarantees; the same bytes across processes; and the privacy of the v2 fields.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Parallelism, Training
from chainpipe.io import read
from chainpipe.plan import evaluate
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import agent, guarantee_factor, protocol
from helpers import brute_force_hybrid, check_trace_private, random_hybrid_instance

ROOT = Path(__file__).resolve().parents[1]
HYBRID_SMALL = sorted((ROOT / "instances" / "hybrid" / "small").glob("hybrid-*.json"))
RTOL = 1e-9


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300)


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("block", range(4))
def test_exact_equals_dp_on_random_v2_instances(block):
    """>= 200 random small v2 instances (60 per block): nodes of 1, 2 and 4, widths with
    3, lists without 1, ZeRO on and off, both schedules, tight memory, 1 to 3 DCs."""
    for seed in range(block * 60, block * 60 + 60):
        inst = random_hybrid_instance(seed)
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp")
        assert res.status == ref.status, (seed, res.status, ref.status, res.message)
        if ref.iteration_time is not None:
            assert _same(res.iteration_time, ref.iteration_time), (seed, res.iteration_time,
                                                                   ref.iteration_time)
            assert _same(res.stats["estimate_s"], ref.iteration_time), seed


def test_exact_equals_brute_force_on_four_datacenters():
    """Longer chains than the random set above, against the enumerator directly."""
    for seed in range(500, 530):
        inst = random_hybrid_instance(seed, max_layers=4, max_dcs=4)
        T_best, _ = brute_force_hybrid(inst)
        res = solve(inst, "cdynp")
        if math.isinf(T_best):
            assert res.status == "infeasible", (seed, res.status)
        else:
            assert res.status == "optimal", (seed, res.status, res.message)
            assert _same(res.iteration_time, T_best), (seed, res.iteration_time, T_best)


@pytest.mark.parametrize("path", HYBRID_SMALL, ids=lambda p: p.stem)
def test_exact_on_the_committed_hybrid_small_set(path):
    inst = read(path)
    ref, res = solve(inst, "dp"), solve(inst, "cdynp")
    assert res.status == ref.status == "optimal"
    assert _same(res.iteration_time, ref.iteration_time)


def test_worked_example_v2():
    inst = read(ROOT / "tests" / "data" / "valid" / "worked_example_v2.json")
    res = solve(inst, "cdynp")
    assert res.status == "optimal" and _same(res.iteration_time, 16.0)


def test_the_dcs_use_widths_and_degrees():
    """Not a one-device answer in disguise: on these instances the optimum needs
    ``d * t > 1`` somewhere, and cdynp's plan has it too."""
    wide = 0
    for seed in range(60):
        inst = random_hybrid_instance(seed)
        res = solve(inst, "cdynp")
        if res.plan is not None and any(s.width > 1 for s in res.plan.stages):
            wide += 1
    assert wide >= 20


# ------------------------------------------------------------------ compression
@pytest.mark.parametrize("eps,quantum,digits", [(0.05, 0.0, 0), (0.3, 0.0, 0), (0.0, 0.1, 0),
                                                (0.1, 0.0, 3)])
def test_compression_guarantee_holds_under_v2(eps, quantum, digits):
    for seed in range(700, 760):
        inst = random_hybrid_instance(seed, max_dcs=3)
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp", epsilon=eps, quantum=quantum, digits=digits)
        if ref.status == "infeasible":
            assert res.status == "infeasible", seed
            continue
        T_best = ref.iteration_time
        factor = guarantee_factor(inst.num_datacenters, eps, quantum, digits)
        assert res.status in ("feasible", "optimal"), (seed, res.status)
        assert res.iteration_time <= factor * T_best * (1 + RTOL), (seed, res.iteration_time)
        assert res.lower_bound <= T_best * (1 + RTOL), seed


# ------------------------------------------------------------------ privacy
def _distinctive_hybrid() -> Instance:
    """Three DCs in nodes, whose private numbers and names appear nowhere else, and a
    training that lets them use data and tensor parallelism with ZeRO-1."""
    layers = tuple(Layer(f"blk{i}", 3.0e12 + i * 7.0e10, 6.0e12 + i * 3.0e10, 50_000_000 + i,
                         2.0e8 + i, 4.0e7 + 1000 * i, 1.6e8 + 1000 * i) for i in range(8))
    dcs = (
        Datacenter("north", (DeviceGroup("ZetaSecretGPU", 8, 123456789012345.0, 9.87654321e10,
                                         4, 3.3333333e11),
                             DeviceGroup("OmegaHidden", 2, 77777777777777.5, 1.1223344e11)),
                   Link(3.1415926e10, 2.71828e-6)),
        Datacenter("centre", (DeviceGroup("KappaCovert", 6, 99999999999991.0, 6.6666666e10,
                                          2, 2.7182818e11),),
                   Link(1.6180339e10, 1.41421e-6)),
        Datacenter("south", (DeviceGroup("SigmaPrivate", 4, 250000000000003.0, 8.0808080e10,
                                          4, 4.4142135e11),
                             DeviceGroup("ThetaMasked", 2, 55555555555555.0, 4.4444444e10)),
                   Link(2.2360679e10, 1.73205e-6)),
    )
    links = (Link(2.5e9, 5.0e-4), Link(1.25e9, 3.0e-4))
    training = Training(16, "1f1b", 16.0, 2.0, 12.0, Parallelism((1, 2, 3, 4), (1, 2, 4), True))
    return Instance("distinct-v2", Model("m", layers), training, dcs, links)


def test_v2_trace_has_no_private_data(tmp_path):

    inst = _distinctive_hybrid()
    res = solve(inst, "cdynp", trace_dir=tmp_path)
    assert res.status == "optimal"
    ref = solve(inst, "dp")
    assert _same(res.iteration_time, ref.iteration_time)
    # the optimum does use the v2 freedoms, in more than one DC
    widths = {s.devices[0].split("/")[0]: s.width for s in res.plan.stages if s.width > 1}
    assert len(widths) >= 2, res.plan
    # the probe's messages, then the exact run's: every one written, as sent
    files = sorted(tmp_path.rglob("*.json"))
    names = [m["file"] for m in res.stats["messages"]]
    assert sorted(str(f.relative_to(tmp_path)) for f in files) == sorted(names)
    assert sum(n.startswith("probe/") for n in names) == 3 * (inst.num_datacenters - 1)
    assert sum(f.stat().st_size for f in files) == res.stats["message_bytes_total"]
    for f, msg in zip(files, check_trace_private(inst, files, protocol.SCHEMA)):
        for word in ("data_parallel", "tensor_parallel", "devices_per_node", "node", "width"):
            assert word not in f.read_text()
        if msg["kind"] == "summary":
            # each point is [r, bottleneck, total, sync]: stage counts and costs only
            assert all(len(p) == 4 and isinstance(p[0], int)
                       for e in msg["entries"] for p in e["points"])


def test_each_dc_names_only_its_own_devices_and_packs_nodes():
    inst = _distinctive_hybrid()
    res = solve(inst, "cdynp")
    names = [dc.name for dc in inst.datacenters]
    for k, rep in enumerate(res.stats["agents"]):
        for stage in rep["stages"]:
            assert all(d.split("/")[0] == names[k] for d in stage["devices"])
            assert len(stage["devices"]) == stage["data_parallel"] * stage["tensor_parallel"]
    # the assembled plan passes every v2 rule (a TP group inside one node among them)
    from chainpipe.plan import evaluate

    assert evaluate(inst, res.plan).feasible


def test_processes_equal_in_process_under_v2(tmp_path):
    inst = _distinctive_hybrid()
    a = solve(inst, "cdynp", trace_dir=tmp_path / "in")
    b = solve(inst, "cdynp", processes=True, trace_dir=tmp_path / "proc")
    assert (a.status, a.plan) == (b.status, b.plan)
    assert a.stats["messages"] == b.stats["messages"]
    for m in a.stats["messages"]:
        assert (tmp_path / "in" / m["file"]).read_bytes() == \
            (tmp_path / "proc" / m["file"]).read_bytes()


def test_a_forged_synchronisation_is_named(monkeypatch):
    """A DC that understates the synchronisation of its suffix is caught by the owner's
    audit, like a forged bottleneck or total."""
    inst = _distinctive_hybrid()
    honest = solve(inst, "cdynp")
    synced = [s for s in honest.plan.stages
              if s.data_parallel > 1 and s.devices[0].startswith("south/")]
    assert synced, "the test needs a plan whose south stages synchronise"
    real = agent.DCAgent._summary

    def forged(self, own_pts, ub):
        msg = real(self, own_pts, ub)
        if self.name == "south":
            for e in msg["entries"]:
                e["points"] = [[r, bn, sm, sy / 2] for r, bn, sm, sy in e["points"]]
        return msg

    monkeypatch.setattr(agent.DCAgent, "_summary", forged)
    res = solve(inst, "cdynp")
    assert res.status == "error" and res.plan is None
    assert res.message.startswith("cdynp: DC 'south' sent a forged summary"), res.message
    assert "synchronisation" in res.message


# ------------------------------------------------------------------ the probe
def test_the_probe_changes_the_work_not_the_answer():
    """With or without the probe run, the same optimum; the probe's estimate is the T of
    a real plan, so never below it; a v1 instance runs no probe unless asked."""
    probed = 0
    for seed in range(300, 360):
        inst = random_hybrid_instance(seed)
        a = solve(inst, "cdynp")
        b = solve(inst, "cdynp", probe=False)
        assert a.status == b.status, seed
        if a.iteration_time is None:
            continue
        assert _same(a.iteration_time, b.iteration_time), seed
        if "probe" in a.stats and a.stats["probe"]["estimate_s"] is not None:
            probed += 1
            assert a.stats["probe"]["estimate_s"] >= a.iteration_time * (1 - RTOL), seed
        assert "probe" not in b.stats
    assert probed >= 15
    v1 = read(ROOT / "instances" / "small" / "small-08-three-dc.json")
    assert "probe" not in solve(v1, "cdynp").stats
    assert "probe" in solve(v1, "cdynp", probe=True).stats


def test_the_fine_probe_bounds_the_exact_run_below_the_coarse_one():
    """The fine probe (no grid) runs under the coarse probe's T and the exact run under
    the better of the two: on hybrid-medium-04-degraded the fine one is strictly better."""
    from chainpipe.solvers.cdynp import PROBE_BEAM, PROBE_ENTRIES, PROBE_LAYERS_PER_PART
    from chainpipe.solvers.cdynp.public import PublicInstance
    from chainpipe.solvers.cdynp.runner import run_in_process

    inst = read(ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-04-degraded.json")
    coarse = run_in_process(PublicInstance.of(inst), list(inst.datacenters), beam=PROBE_BEAM,
                            grid=math.ceil(inst.num_layers / PROBE_LAYERS_PER_PART),
                            max_entries=PROBE_ENTRIES).estimate
    res = solve(inst, "cdynp")
    ref = solve(inst, "dp")
    assert res.status == "optimal" and _same(res.iteration_time, ref.iteration_time)
    probe_T = res.stats["probe"]["estimate_s"]
    assert ref.iteration_time * (1 - RTOL) <= probe_T < coarse * (1 - 1e-6)
    for a in res.stats["agents"]:  # every trial of the exact run is within the probe's T
        assert all(t["upper_bound"] <= probe_T * (1 + 1e-6) for t in a["trials"])
    names = [m["file"] for m in res.stats["messages"]]
    assert sum(n.startswith("probe-fine/") for n in names) == 3 * (inst.num_datacenters - 1)


def test_probe_option_is_a_boolean():
    from chainpipe.result import OptionError

    with pytest.raises(OptionError, match="option 'probe' must be true or false"):
        solve(random_hybrid_instance(1), "cdynp", probe="yes")


# ------------------------------------------------------------------ the prefix pass
def _prefix_messages(inst: Instance, share=True) -> list[dict]:
    """The ``prefix`` messages of a run, DC 1's first, as each DC would send them."""
    from chainpipe.solvers.cdynp.public import PublicInstance

    public = PublicInstance.of(inst)
    agents = [agent.DCAgent(public, k, dc, prefix_bound=share)
              for k, dc in enumerate(inst.datacenters)]
    out, msg = [], None
    for a in agents[:-1]:
        msg = a.prefix(msg)
        out.append(msg)
    return out


def test_the_prefix_bounds_bound_every_plan_on_the_dcs_upstream():
    """Each DC's message bounds a whole-model plan on DC 1..k from below: the dp optimum
    of those DCs alone has a bottleneck and a sum of C no smaller, and no single stage of
    the whole model on any group and pair is faster than ``total_s``. Both values are
    powers of the public grid."""
    from chainpipe.tables import CostTables

    checked = 0
    for seed in range(500, 560):
        inst = random_hybrid_instance(seed, max_dcs=3)
        if inst.num_datacenters < 2:
            continue
        for k, msg in enumerate(_prefix_messages(inst)):
            bound = msg["bound"]
            for v in bound.values():  # 0: no bound (no device up to DC k runs a stage)
                n = math.log2(v) * protocol.PREFIX_STEPS if v > 0 else 0.0
                assert abs(n - round(n)) < 1e-6, (seed, v)
            sub = Instance("up", inst.model, inst.training, inst.datacenters[:k + 1],
                           inst.links[:k])
            tables = CostTables(sub)
            for g in range(tables.G):
                whole = tables.options(g).compute_time[:, 0, inst.num_layers]
                assert (whole >= bound["total_s"]).all(), (seed, k)
            best = solve(sub, "dp")
            if best.plan is not None:
                ev = evaluate(sub, best.plan)
                assert ev.bottleneck_s >= bound["bottleneck_s"], (seed, k)
                assert sum(s.compute_time_s for s in ev.stages) >= bound["total_s"], (seed, k)
                checked += 1
    assert checked >= 30


def test_the_prefix_pass_changes_the_work_not_the_answer():
    """With the prefix bounds or without (every DC sends null, or a DC keeps its own and
    the DCs after it pass null on), dp's optimum; on hybrid-medium-05-mem the bounds cut
    the labels the DCs keep."""
    for seed in range(600, 640):
        inst = random_hybrid_instance(seed)
        ref = solve(inst, "dp")
        b = solve(inst, "cdynp", prefix_bound=False)
        assert b.status == ref.status, seed
        if ref.iteration_time is not None:
            assert _same(b.iteration_time, ref.iteration_time), seed
        if inst.num_datacenters >= 3:
            assert all(m["bound"] is None for m in _prefix_messages(inst, share=False))
    inst = read(ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-05-mem.json")
    on, off = solve(inst, "cdynp"), solve(inst, "cdynp", prefix_bound=False)
    assert on.iteration_time == off.iteration_time
    labels = [sum(a["labels"] for a in r.stats["agents"]) for r in (on, off)]
    assert labels[0] < labels[1], labels


def test_prefix_bound_option_is_a_boolean():
    from chainpipe.result import OptionError

    with pytest.raises(OptionError, match="option 'prefix_bound' must be true or false"):
        solve(random_hybrid_instance(1), "cdynp", prefix_bound="no")
