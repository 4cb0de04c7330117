"""CDynP under contract version 3: the ``period`` objective and several pipelines.

Exactness against ``dp`` (itself checked against the brute-force enumerator) and the
enumerator on random small v3 instances (both objectives and schedules, loops that cross
DC boundaries, several pipelines), in process and in one process per agent; the
committed ``v3/small`` set and the contract's worked examples; the owner's split of ``M``;
the ``sync_cap`` option; the period points' decoder rules and the audit of forged
majorants; the refusals; and the privacy of every message.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from chainpipe.io import read
from chainpipe.plan import evaluate
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import agent, guarantee_factor, protocol
from chainpipe.solvers.cdynp.pipelines import partitions, split_microbatches
from chainpipe.support import refusal
from helpers import brute_force_v3, check_trace_private, random_v3_instance, v3_dp_reference

ROOT = Path(__file__).resolve().parents[1]
V3_SMALL = sorted((ROOT / "instances" / "v3" / "small").glob("v3-*.json"))
VALID = ROOT / "tests" / "data" / "valid"
RTOL = 1e-9


def _with(inst, **training):
    """``inst`` with some training fields replaced."""
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training, **training))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300)


def _check_equal(inst, res, ref, what):
    assert res.status == ref.status, (what, res.status, ref.status, res.message)
    if ref.status == "optimal":
        assert _same(res.iteration_time, ref.iteration_time), (
            what, res.iteration_time, ref.iteration_time)
        # the plan is a real one: re-evaluated by the one cost model, feasible
        ev = evaluate(inst, res.plan)
        assert ev.feasible and _same(ev.iteration_time_s, res.iteration_time), what
        assert len(res.plan.pipelines) in inst.parallelism.pipelines, what


def _loop_across_dcs(inst, plan) -> bool:
    """Whether a pipeline of ``plan`` is paced by a 1F1B loop whose stages sit in more
    than one DC (the loop the summaries' majorants carry upstream)."""
    from chainpipe import cost

    ev = evaluate(inst, plan)
    for pc in ev.pipelines:
        if pc.paced_by != "loop":
            continue
        C = [st.compute_time_s for st in pc.stages]
        Q = [bd.traversal_s for bd in pc.boundaries]
        _lam, s, t = cost.worst_loop(C, Q, pc.microbatches)
        if len({st.datacenter for st in pc.stages[s:t + 1]}) > 1:
            return True
    return False


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("block", range(4))
def test_exact_equals_dp_on_random_v3_instances(block):
    """>= 240 random small v3 instances (60 per block; ``period`` on about 80%): 1 to 3
    DCs with MAN latencies against stage times that make 1F1B loops pace many plans,
    GPipe's phases, pipeline lists with and without 1, ``H`` from 1 to 4, widths 1 and 2,
    tight memory. Several pipelines win on some in every block (counted)."""
    several = 0
    for seed in range(block * 60, block * 60 + 60):
        inst = random_v3_instance(seed)
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp")
        _check_equal(inst, res, ref, seed)
        several += res.plan is not None and len(res.plan.pipelines) > 1
    assert several >= 8, several


def _crossing_instance(seed: int):
    """A small 1F1B ``period`` instance whose plans must cross DC boundaries: one device
    per group that holds about ``L / K`` layers, MAN latencies of the order of the stage
    times, so that a loop over stages of several DCs paces many optima."""
    import random

    from chainpipe import (
        Datacenter,
        DeviceGroup,
        Instance,
        Layer,
        Link,
        Model,
        Parallelism,
        Training,
    )

    rng = random.Random(70_000 + seed)
    K = rng.choice([2, 3, 3])
    L = rng.choice([K, K + 1, K + 2])
    layers = tuple(Layer(f"l{i}", float(rng.randint(1, 6) * 10), float(rng.randint(2, 9) * 10),
                         rng.choice([0, 2]), 1.0, float(rng.choice([5, 10, 20])), 0.0)
                   for i in range(L))
    M = rng.randint(2, 9)
    per = -(-L // K)  # layers a device must hold
    mem_one = max(2 * ly.params + M * ly.activation_bytes for ly in layers)
    par = Parallelism((1,), (1,), False, rng.choice([(1,), (1,), (1, 2)]))
    training = Training(M, "1f1b", 2.0, 2.0, None, par, None, "period", 1)
    dcs = tuple(Datacenter(f"d{k}", tuple(
        DeviceGroup(f"g{g}", rng.choice([1, 2]), float(rng.choice([10, 20, 30])),
                    float(mem_one * per * rng.uniform(1.0, 1.3)), 1, None)
        for g in range(rng.choice([1, 1, 2]))),
        Link(float(rng.choice([20, 50])), rng.choice([0.0, 0.2]))) for k in range(K))
    links = tuple(Link(float(rng.choice([5, 10, 40])), rng.choice([0.5, 1.0, 2.0, 4.0]))
                  for _ in range(K - 1))
    return Instance(f"crossing-{seed}", Model("m", layers), training, dcs, links)


def test_exact_where_loops_cross_dc_boundaries():
    """80 instances built so that plans span DCs: CDynP equals ``dp``, and on many the
    optimum (10 of them) is paced by a loop whose stages sit in several DCs (the upstream DC closed it
    from the majorant in the downstream DC's summary)."""
    crossing = 0
    for seed in range(80):
        inst = _crossing_instance(seed)
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp")
        _check_equal(inst, res, ref, seed)
        crossing += res.plan is not None and _loop_across_dcs(inst, res.plan)
    assert crossing >= 8, crossing  # 10 of the 80


def test_exact_equals_dp_under_classic():
    """The same instances under ``classic`` (the version-2 points, several pipelines)."""
    several = 0
    for seed in range(240, 300):
        inst = _with(random_v3_instance(seed), objective="classic")
        ref = solve(inst, "dp")
        res = solve(inst, "cdynp")
        _check_equal(inst, res, ref, seed)
        several += res.plan is not None and len(res.plan.pipelines) > 1
    assert several >= 8, several


def test_exact_equals_brute_force_per_pipeline_count():
    """Against the enumerator itself, count by count: the best plan of each allowed count
    (the instance restricted to that count) is CDynP's."""
    checked = 0
    for seed in range(400, 440):
        inst = random_v3_instance(seed)
        if inst.num_datacenters < 2 or inst.microbatches < 2:
            continue
        brute = brute_force_v3(inst)
        for P, (T, _spec) in brute.items():
            one = _with(inst, parallelism=dataclasses.replace(inst.parallelism, pipelines=(P,)))
            res = solve(one, "cdynp")
            if math.isinf(T):
                assert res.status == "infeasible", (seed, P, res.status, res.message)
            else:
                assert res.status == "optimal" and _same(res.iteration_time, T), (
                    seed, P, res.iteration_time, T, res.message)
                checked += 1
    assert checked >= 25, checked


def test_exact_in_processes_equals_in_process():
    """One OS process per agent and run: the same plan time as in this process (instances
    with few range runs, several pipelines winning: ``period`` 1F1B and ``classic`` GPipe;
    and one pipeline on three DCs under ``period``)."""
    for seed in (20, 15):
        inst = random_v3_instance(seed)
        ref = solve(inst, "cdynp")
        res = solve(inst, "cdynp", processes=True)
        _check_equal(inst, res, ref, seed)
        assert len(res.plan.pipelines) == 2 and res.stats["range_runs"] >= 2  # each planned
        assert res.stats["mode"] == "processes"
    inst = next(i for i in map(random_v3_instance, range(100))
                if i.num_datacenters == 3 and i.parallelism.pipelines == (1,)
                and i.training.objective == "period")
    _check_equal(inst, solve(inst, "cdynp", processes=True), solve(inst, "dp"), inst.name)


def test_committed_v3_small_set():
    """``instances/v3/small`` as committed and under ``classic``: CDynP equals ``dp``."""
    assert V3_SMALL
    for path in V3_SMALL:
        for inst in (read(path), _with(read(path), objective="classic")):
            _check_equal(inst, solve(inst, "cdynp"), solve(inst, "dp"), path.name)


def test_worked_examples():
    """The contract's version-3 examples: 24 (1F1B, one stage), 21 (GPipe, two stages) and
    9 (two pipelines), each ``dp``'s optimum too."""
    for name, T in (("worked_example_v3_1f1b.json", 24.0), ("worked_example_v3_gpipe.json", 21.0),
                    ("worked_example_v3_pipelines.json", 9.0)):
        inst = read(VALID / name)
        res, ref = solve(inst, "cdynp"), solve(inst, "dp")
        _check_equal(inst, res, ref, name)
        if T is not None:
            assert _same(res.iteration_time, T), (name, res.iteration_time)


# ------------------------------------------------------------------ the owner's parts
def test_split_microbatches_is_the_least_max():
    """The split DP against enumeration, with ranges infeasible beyond some ``m``."""
    import itertools

    tables = {0: [3, 4, 9, 10, math.inf], 1: [1, 5, 6, 20, 30], 2: [2, 2, 2, math.inf, math.inf]}
    for P, M in ((2, 4), (3, 5), (3, 6), (2, 2), (3, 3)):
        def times(p, m):
            row = tables[p]
            return row[m - 1] if m <= len(row) else math.inf

        best = min((max(times(p, m) for p, m in enumerate(ms)), list(ms))
                   for ms in itertools.product(range(1, M + 1), repeat=P) if sum(ms) == M)
        got = split_microbatches(times, M, P)
        if math.isinf(best[0]):
            assert got is None
        else:
            assert got[0] == best[0] and sum(got[1]) == M and all(m >= 1 for m in got[1])
            assert max(times(p, m) for p, m in enumerate(got[1])) == got[0]


def test_partitions_are_every_consecutive_split():
    got = list(partitions(1, 4, 2))
    assert got == [[(1, 1), (2, 4)], [(1, 2), (3, 4)], [(1, 3), (4, 4)]]
    assert len(list(partitions(0, 4, 3))) == 6
    assert list(partitions(2, 2, 1)) == [[(2, 2)]]


def test_sync_cap_is_validated_and_drops_options():
    """The agent option: a positive finite number (the decoder's rule for options), and
    an option at or above the cap is never used."""
    assert protocol.option_problem("sync_cap", 0.0)
    assert protocol.option_problem("sync_cap", -1.0)
    assert protocol.option_problem("sync_cap", float("nan"))
    assert protocol.option_problem("sync_cap", 2.5) is None
    inst = random_v3_instance(1)
    from chainpipe.solvers.cdynp.public import PublicInstance

    public = PublicInstance.of(inst)
    dc = inst.datacenters[0]
    with pytest.raises(ValueError, match="sync_cap"):
        agent.DCAgent(public, 0, dc, sync_cap=0.0)
    plain = agent.DCAgent(public, 0, dc)
    capped = agent.DCAgent(public, 0, dc, sync_cap=1e-12)
    for g in range(plain.tables.G):
        a, b = plain.tables.options(g), capped.tables.options(g)
        assert not b.sync_time.any()
        used = b.max_in_flight >= 0
        assert (a.sync_time[used] < 1e-12).all()


# ------------------------------------------------------------------ refusals, decoder, audit
def test_refusals():
    """cdynp takes both version-3 features, compressed too; with several pipelines the
    option upper_bound is refused with one line (the owner's search sets each range
    run's own bound)."""
    inst = read(VALID / "worked_example_v3_pipelines.json")
    assert refusal(inst.training, "cdynp") is None
    r = solve(inst, "cdynp", upper_bound=1e6)
    assert r.status == "error" and "option upper_bound is not supported" in r.message
    for case, opts in ((inst, {"digits": 3}),
                       (read(VALID / "worked_example_v3_1f1b.json"), {"epsilon": 0.1}),
                       (_with(inst, objective="classic"), {"epsilon": 0.1})):
        r = solve(case, "cdynp", **opts)
        assert r.status == _compressed_status(case) and r.lower_bound <= r.iteration_time, \
            r.message


# ------------------------------------------------------------------ compression
def _compressed_status(inst) -> str:
    """A compressed solve's status: ``feasible``, but ``optimal`` on one DC under version
    3 (no summary is sent, so nothing is compressed; a version-2 solve keeps
    ``feasible``, as it always had)."""
    v3 = inst.training.objective == "period" and inst.microbatches > 1 \
        or inst.parallelism.pipelines != (1,)
    return "optimal" if inst.num_datacenters == 1 and v3 else "feasible"


@pytest.mark.parametrize("opts", [{"digits": 1}, {"epsilon": 0.3}, {"quantum": 0.2}])
def test_compressed_within_the_guarantee_on_random_v3_instances(opts):
    """Compression under ``period`` and with several pipelines: the plan is a real one,
    its ``T`` within the guarantee factor of dp's optimum (the realised gap measured),
    and the reported lower bound below the optimum. Coarse options, so that compression
    drops and rounds enough to show a gap."""
    gaps, several, period = [], 0, 0
    for seed in range(50):
        inst, ref = v3_dp_reference(seed)
        res = solve(inst, "cdynp", **opts)
        if ref.status != "optimal":
            assert res.status == ref.status, (seed, res.status, res.message)
            continue
        assert res.status == _compressed_status(inst), (seed, res.status, res.message)
        factor = guarantee_factor(inst.num_datacenters, **opts)
        T, opt = res.iteration_time, ref.iteration_time
        assert opt * (1 - RTOL) <= T <= factor * opt * (1 + RTOL), (seed, T, opt, factor)
        assert res.lower_bound <= opt * (1 + RTOL), (seed, res.lower_bound, opt)
        ev = evaluate(inst, res.plan)
        assert ev.feasible and _same(ev.iteration_time_s, T), seed
        gaps.append(T / opt - 1)
        several += len(res.plan.pipelines) > 1
        period += inst.training.objective == "period" and inst.microbatches > 1
    assert len(gaps) >= 30 and several >= 5 and period >= 20, (len(gaps), several, period)


def test_compression_shows_a_gap_within_the_guarantee_on_larger_chains():
    """Random version-2 chains of up to 4 DCs and 8 layers made version 3 (``period``,
    one or two pipelines): coarse compression loses something on some (a realised gap
    above 0), never more than the guarantee."""
    from helpers import hybrid_chain_as_period

    gaps = []
    for seed in range(12):
        inst = hybrid_chain_as_period(seed)
        ref = solve(inst, "dp")
        if ref.status != "optimal":
            continue
        for opts in ({"digits": 1}, {"quantum": 0.2}):
            res = solve(inst, "cdynp", **opts)
            factor = guarantee_factor(inst.num_datacenters, **opts)
            assert res.status == _compressed_status(inst), (seed, opts, res.message)
            T, opt = res.iteration_time, ref.iteration_time
            assert opt * (1 - RTOL) <= T <= factor * opt * (1 + RTOL), (seed, opts, T, opt)
            assert res.lower_bound <= opt * (1 + RTOL)
            gaps.append(T / opt - 1)
    assert len(gaps) >= 16 and max(gaps) > 0, gaps


def test_max_entries_under_v3_gives_real_plans_without_a_bound():
    for seed in range(20):
        inst, ref = v3_dp_reference(seed)
        res = solve(inst, "cdynp", max_entries=1)
        if ref.status == "optimal" and res.plan is not None and inst.num_datacenters > 1:
            # optimal only where the classic solve (never capped: it bounds the period
            # run) proved its plan optimal under period too
            assert res.status == "feasible" and res.lower_bound is None or (
                res.status == "optimal" and _same(res.iteration_time, ref.iteration_time))
            assert res.iteration_time >= ref.iteration_time * (1 - RTOL)
            assert evaluate(inst, res.plan).feasible


def test_exact_is_untouched_by_the_compression_code():
    """Exact mode: dp's optimum, status optimal, no rounding of any window."""
    for seed in range(20):
        inst, ref = v3_dp_reference(seed)
        res = solve(inst, "cdynp")
        _check_equal(inst, res, ref, seed)


def test_concave_majorant():
    from chainpipe.solvers.cdynp.period import concave_majorant

    assert concave_majorant(()) == ()
    assert concave_majorant((3.0,)) == (3.0,)
    assert concave_majorant((1.0, 5.0, 6.0, 9.0)) == (1.0, 5.0, 7.0, 9.0)  # the dent filled
    got = concave_majorant((2.0, 3.0, 3.5, 3.75))  # concave already: unchanged
    assert got == (2.0, 3.0, 3.5, 3.75)
    import random

    rng = random.Random(5)
    for _ in range(200):
        vals = [rng.uniform(0, 10) for _ in range(rng.randint(1, 8))]
        h = concave_majorant(vals)
        assert all(a >= b for a, b in zip(h, vals))
        assert all(h[i] - h[i - 1] >= h[i + 1] - h[i] - 1e-9 for i in range(1, len(h) - 1))


def _period_summary_bytes():
    """A real period summary (DC 2 -> DC 1 of a two-DC 1F1B instance), its receiver's
    expectations, and the instance."""
    from chainpipe.solvers.cdynp.public import PublicInstance

    inst = next(i for i in map(random_v3_instance, range(200))
                if i.num_datacenters == 2 and i.training.objective == "period"
                and i.training.schedule == "1f1b" and i.microbatches > 3 and i.num_layers >= 2)
    public = PublicInstance.of(inst)
    agents = [agent.DCAgent(public, k, dc) for k, dc in enumerate(inst.datacenters)]
    for k, a in enumerate(agents):
        a.prefix(None if k == 0 else {"bound": None})
    msg = agents[1].backward(None)
    return protocol.encode(msg), public.expect(1, 0), msg


def test_period_points_decode_and_bad_ones_are_refused():
    """Period points round-trip through the one decoder; a classic point in a period run,
    a majorant longer than the suffix's stages, a negative or non-finite window, and a
    majorant that is not a list are each refused with a ProtocolError."""
    import json

    data, expect, msg = _period_summary_bytes()
    assert protocol.decode(data, "summary", expect) == msg
    assert all(len(p) == 6 for e in msg["entries"] for p in e["points"])
    assert any(p[5] for e in msg["entries"] for p in e["points"])  # majorants are sent

    def mutated(fn):
        m = json.loads(data)
        fn(m["entries"][0]["points"][0])
        return json.dumps(m).encode()

    bad = [lambda p: p.__delitem__(slice(4, 6)),                        # classic shape
           lambda p: p[5].extend([1.0] * (p[0] + 1)),                   # too many windows
           lambda p: p[5].append(-1.0) if p[5] else p.__setitem__(5, [-1.0]),
           lambda p: p.__setitem__(5, 3.0),                             # not a list
           lambda p: p.__setitem__(1, -0.5)]
    for fn in bad:
        with pytest.raises(protocol.ProtocolError):
            protocol.decode(mutated(fn), "summary", expect)
    classic = dataclasses.replace(expect, period=False)
    with pytest.raises(protocol.ProtocolError, match="classic"):
        protocol.decode(data, "summary", classic)
    import jsonschema

    jsonschema.validate(msg, protocol.SCHEMA)


def test_a_forged_majorant_is_caught_by_the_audit():
    """A DC that claims smaller window sums (so that an upstream loop looks faster) is
    named by the owner's audit: its claim is not what the plan's stages take."""
    from chainpipe.solvers.cdynp import InstanceAgents
    from chainpipe.solvers.cdynp.audit import check_claims
    from chainpipe.solvers.cdynp.public import PublicInstance
    from chainpipe.solvers.cdynp.runner import AgentFailure, run_in_process

    for seed in range(300):
        inst = random_v3_instance(seed)
        if (inst.num_datacenters < 2 or inst.training.objective != "period"
                or inst.training.schedule != "1f1b" or inst.parallelism.pipelines != (1,)):
            continue
        public = PublicInstance.of(inst)
        res = run_in_process(public, list(inst.datacenters))
        plan = InstanceAgents(inst, False, 60.0).assemble(res, True)
        if plan is None:
            continue
        claims = [a.get("continues_with") for a in res.agents]
        k = next((i for i, c in enumerate(claims) if c is not None and c["point"][5]), None)
        if k is None:
            continue
        forged = [dict(a) for a in res.agents]
        point = list(claims[k]["point"])
        point[5] = [h * 0.5 for h in point[5]]
        forged[k]["continues_with"] = {**claims[k], "point": point}
        with pytest.raises(AgentFailure, match="window sums") as err:
            check_claims(public, evaluate(inst, plan), forged, exact=True)
        assert err.value.datacenter == inst.datacenters[k + 1].name
        return
    raise AssertionError("no instance with a majorant in a chosen point")


def _distinct(inst, seed: int):
    """``inst`` with private figures no public number shares (rates, memories, node
    bandwidths and internal links scaled by odd factors), so a trace can be searched."""
    from chainpipe.instance import Link

    dcs = []
    for k, dc in enumerate(inst.datacenters):
        groups = tuple(dataclasses.replace(
            g, flop_per_s=g.flop_per_s * 1.0123457 + k, memory_bytes=g.memory_bytes * 1.0003713,
            node_bandwidth_bytes_per_s=(None if g.node_bandwidth_bytes_per_s is None
                                        else g.node_bandwidth_bytes_per_s * 1.0417)) for g in
            dc.devices)
        link = Link(dc.link.bandwidth_bytes_per_s * 1.0291 + seed % 7,
                    dc.link.latency_s + 0.0123457 * (k + 1))
        dcs.append(dataclasses.replace(dc, devices=groups, link=link))
    return dataclasses.replace(inst, datacenters=tuple(dcs))


def test_range_runs_trace_is_private(tmp_path):
    """Every message of every range run follows the schema and carries no private field
    (types, rates, memories, node figures, internal links, device names), nor the words
    of widths and degrees; every ``bw`` is a public chain-link bandwidth."""
    checked = 0
    for seed in range(200):
        inst = _distinct(random_v3_instance(seed), seed)
        if inst.num_datacenters < 2 or inst.parallelism.pipelines == (1,):
            continue
        out = tmp_path / str(seed)
        res = solve(inst, "cdynp", trace_dir=str(out))
        assert res.status in ("optimal", "infeasible"), res.message
        files = sorted(out.rglob("*.json"))
        if not any(f.parent.name.startswith("range-") for f in files):
            continue
        check_trace_private(inst, files, protocol.SCHEMA)
        for f in files:
            text = f.read_text()
            assert "data_parallel" not in text and "tensor_parallel" not in text
            assert "node" not in text
        # the stats count every message of the solve, the one-pipeline solve's too
        assert sum(f.stat().st_size for f in files) == res.stats["message_bytes_total"]
        assert max(f.stat().st_size for f in files) == res.stats["message_bytes_max"]
        assert sorted(str(f.relative_to(out)) for f in files) == sorted(
            m["file"] for m in res.stats["messages"])
        checked += 1
        if checked == 6:
            break
    assert checked == 6


def _concave(h) -> bool:
    """A sequence whose second differences are all <= 0 (to rounding)."""
    scale = max(map(abs, h), default=1.0) or 1.0
    return all(h[i - 1] + h[i + 1] - 2 * h[i] <= 1e-9 * scale for i in range(1, len(h) - 1))


def test_period_traces_are_private_and_send_majorants_only(tmp_path):
    """Under ``period``: no private field in any message (the same check as version 2's),
    every point has the period shape, and every window list is a concave majorant: a
    window sum that lies below the majorant (a run of stage times) is never sent. On
    instances whose plans cross DCs, so that majorants with several windows are sent."""
    checked = windows = 0
    for seed in range(30):
        inst = _distinct(_crossing_instance(seed), seed)
        out = tmp_path / str(seed)
        res = solve(inst, "cdynp", trace_dir=str(out))
        assert res.status in ("optimal", "infeasible"), res.message
        files = sorted(out.rglob("*.json"))
        for f, msg in zip(files, check_trace_private(inst, files, protocol.SCHEMA)):
            if msg["kind"] != "summary":
                continue
            # the classic solve that bounds each period run, and range runs of one
            # microbatch (no period), send classic points
            one = "classic" in f.parts or any("-m1-" in part for part in f.parts)
            for e in msg["entries"]:
                for p in e["points"]:
                    assert len(p) == (4 if one else 6), (f, p)
                    if not one:
                        assert _concave(p[5]), p
                        windows += len(p[5]) >= 3
        checked += 1
    assert checked == 30 and windows >= 8, windows  # 11 points with 3+ windows


def test_the_majorant_hides_a_window_below_it():
    """A suffix of three stages whose middle window lies below the chord: the point
    sent carries the chord's value there, not the window sum (the upstream loops need
    only the majorant, ``docs/privacy.md``)."""
    from chainpipe.solvers.cdynp.period import PeriodDP, prepend

    lab = PeriodDP.end_label()[:6]
    C, Q = (1.0, 5.0, 9.0), (0.5, 0.5)  # windows from the first: 1, 6.5, 16 (not concave)
    for s in (2, 1, 0):
        lab = prepend(lab, (C[s], C[s], 0.0, 0.0), 0.0, Q[s] if s < 2 else 0.0, M=8,
                      gpipe=False, p_cap=7)
    hull = lab[5]
    assert hull[0] == 1.0 and hull[2] == 16.0  # W_1 and W_3, the vertices
    assert hull[1] == pytest.approx(8.5) and hull[1] != 1.0 + 0.5 + 5.0  # chord, not W_2


def test_a_range_holds_the_plans_of_the_ranges_inside_it():
    """What the owner's questions (:mod:`chainpipe.solvers.cdynp.questions`) rest on
    across ranges: ``g`` of a DC range is at most ``g`` of any range inside it (a range
    run's pipeline may leave DCs at either end unused), so a plan found inside a range
    bounds it from above and a floor proven on a range bounds the ranges inside it."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers.cdynp import LocalOwner
    from chainpipe.solvers.cdynp.drive import agent_options
    from chainpipe.solvers.cdynp.pipelines import RangeRuns

    checked = 0
    for seed in range(16):
        inst = random_v3_instance(seed)
        K = inst.num_datacenters
        if K < 2:
            continue
        runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
        for m in (1, 2):
            g = {}
            for i in range(K):
                for j in range(i, K):
                    got = runs.least(i, j, m, math.inf)
                    g[i, j] = math.inf if got is None else got.time
            for (i, j), inner in g.items():
                for (a, b), outer in g.items():
                    if a <= i and j <= b:
                        assert outer <= inner * (1 + 1e-9), (seed, m, (a, b), (i, j))
                        checked += 1
    assert checked > 50


def test_the_seed_bounds_the_period_run_only():
    """``solve_chain``'s ``period_bound`` (the owner's seed, :func:`.pipelines._seed`)
    bounds the period run of a one-pipeline solve: just above the optimum, the same
    optimum, proven; just below it (where the classic plan is not optimal under
    ``period``), nothing is searched below it, so the answer is the classic plan, as
    ``feasible``, above the bound."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers.cdynp import LocalOwner, solve_chain
    from chainpipe.solvers.cdynp.drive import agent_options

    below = 0
    for seed in range(40):
        inst = _crossing_instance(seed)
        whole = LocalOwner(inst, False, 60).whole()
        free = solve_chain(whole, agent_options(), Deadline(None))
        if free.status != "optimal":
            continue
        opt = evaluate(inst, free.plan).iteration_time_s
        above = solve_chain(whole, agent_options(), Deadline(None), period_bound=opt * (1 + 1e-6))
        assert above.status == "optimal", seed
        assert evaluate(inst, above.plan).iteration_time_s == pytest.approx(opt, rel=1e-12)
        T_e = free.stats.get("classic_plan_s")
        if T_e is None or T_e <= opt * (1 + 1e-6):
            continue  # the classic plan is optimal: no period run
        cut = solve_chain(whole, agent_options(), Deadline(None), period_bound=opt * (1 - 1e-6))
        assert cut.status == "feasible", seed
        assert evaluate(inst, cut.plan).iteration_time_s == pytest.approx(T_e, rel=1e-9)
        below += 1
    assert below >= 5, below
