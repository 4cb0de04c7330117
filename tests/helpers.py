"""Test helpers: random small instances and a brute-force enumerator.

The enumerator is written independently of chainpipe's solvers and tables: it
walks every partition of the layers into contiguous stages and every chain-ordered
assignment of device groups, and computes T straight from the contract
(``docs/model.md``). Its best plan is checked with ``chainpipe.evaluate``.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import signal
from pathlib import Path

from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Plan, Training
from chainpipe.numeric import MEMORY_RTOL
from chainpipe.plan import Stage


def random_instance(seed: int, *, max_layers: int = 6, max_dcs: int = 3, max_types: int = 2,
                    max_count: int = 3, schedule: str | None = None,
                    microbatches: int | None = None) -> Instance:
    """A small random instance; about a third have tight memory."""
    rng = random.Random(seed)
    L = rng.randint(1, max_layers)
    tight = rng.random() < 0.35
    layers = []
    for i in range(L):
        layers.append(Layer(
            name=f"l{i}",
            fwd_flop=float(rng.choice([0, 1, 2, 3, 5, 8]) * 10 + rng.randint(0, 9)),
            bwd_flop=float(rng.randint(0, 40)),
            params=rng.randint(0, 10),
            activation_bytes=float(rng.randint(0, 4)),
            output_bytes=float(rng.choice([0, 1, 5, 20, 50])),
        ))
    M = microbatches or rng.choice([1, 2, 3, 4, 8, 16, 64])
    sched = schedule or rng.choice(["1f1b", "gpipe"])
    bpp = float(rng.choice([1, 2]))
    total_mem = sum(bpp * ly.params + M * ly.activation_bytes for ly in layers)
    K = rng.randint(1, max_dcs)
    dcs = []
    for k in range(K):
        groups = []
        for t in range(rng.randint(1, max_types)):
            if tight:
                mem = max(1.0, round(total_mem * rng.uniform(0.15, 0.6)))
            else:
                mem = float(total_mem * 2 + 100)
            groups.append(DeviceGroup(f"t{t}", rng.randint(1, max_count),
                                      float(rng.choice([5, 10, 20, 40])), mem))
        dcs.append(Datacenter(f"dc{k}", tuple(groups),
                              Link(float(rng.choice([10, 50, 200])), rng.choice([0.0, 0.1, 0.5]))))
    links = tuple(Link(float(rng.choice([1, 5, 20])), rng.choice([0.0, 0.5, 1.0, 3.0]))
                  for _ in range(K - 1))
    return Instance(f"rand{seed}", Model("m", tuple(layers)), Training(M, sched, bpp),
                    tuple(dcs), links)


def _path(inst: Instance, k1: int, k2: int) -> tuple[float, float]:
    """Bandwidth (the minimum) and latency (the sum) between DCs ``k1 <= k2``, straight
    from the contract: a DC's own link inside it, the chain links between two."""
    if k1 == k2:
        lk = inst.datacenters[k1].link
        return lk.bandwidth_bytes_per_s, lk.latency_s
    seg = inst.links[k1:k2]
    return min(x.bandwidth_bytes_per_s for x in seg), sum(x.latency_s for x in seg)


def _compositions(L: int):
    """All ways to cut ``range(L)`` into contiguous non-empty stages."""
    for cuts in itertools.product((False, True), repeat=L - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [L]
        yield list(zip(bounds[:-1], bounds[1:]))


def brute_force(inst: Instance) -> tuple[float, Plan | None]:
    """The optimal iteration time and one optimal plan, by enumeration (``inf, None`` if none)."""
    layers = inst.layers
    M, sched, bpp = inst.microbatches, inst.training.schedule, inst.training.bytes_per_param
    groups = [(k, g, grp) for k, dc in enumerate(inst.datacenters) for g, grp in enumerate(dc.devices)]

    def path(k1, k2):
        return _path(inst, k1, k2)

    best, best_plan = float("inf"), None
    for stages in _compositions(len(layers)):
        S = len(stages)
        flop = [sum(ly.fwd_flop + ly.bwd_flop for ly in layers[a:b]) for a, b in stages]
        mem_fixed = [bpp * sum(ly.params for ly in layers[a:b]) for a, b in stages]
        act = [sum(ly.activation_bytes for ly in layers[a:b]) for a, b in stages]
        out = [layers[b - 1].output_bytes for a, b in stages]
        for assign in itertools.product(range(len(groups)), repeat=S):
            if any(groups[assign[s]][0] > groups[assign[s + 1]][0] for s in range(S - 1)):
                continue
            if any(assign.count(g) > groups[g][2].count for g in set(assign)):
                continue
            ok = True
            for s in range(S):
                n = M if sched == "gpipe" else min(M, S - s)
                if mem_fixed[s] + n * act[s] > groups[assign[s]][2].memory_bytes * (1 + MEMORY_RTOL):
                    ok = False
                    break
            if not ok:
                continue
            C = [flop[s] / groups[assign[s]][2].flop_per_s for s in range(S)]
            total, peak = sum(C), max(C)
            for s in range(S - 1):
                bw, lat = path(groups[assign[s]][0], groups[assign[s + 1]][0])
                u = out[s] / bw
                total += 2 * (lat + u)
                peak = max(peak, u)
            T = total + (M - 1) * peak
            if best - 1e-12 > T:
                best = T
                best_plan = (stages, assign)
    if best_plan is None:
        return float("inf"), None
    stages, assign = best_plan
    used: dict[int, int] = {}
    out_stages = []
    for (a, b), g in zip(stages, assign):
        i = used.get(g, 0)
        used[g] = i + 1
        k, gi, grp = groups[g]
        out_stages.append(Stage(a, b, f"{inst.datacenters[k].name}/{grp.type}/{i}"))
    return best, Plan(tuple(out_stages))


def without_warnings(err: str) -> str:
    """stderr without the plausibility ``warning:`` lines (toy test instances draw them)."""
    return "".join(line for line in err.splitlines(keepends=True)
                   if not line.startswith("warning: "))


# --------------------------------------------------------------------------- version 2
def random_hybrid_instance(seed: int, *, max_layers: int = 4, max_dcs: int = 3) -> Instance:
    """A small random instance of contract version 2: nodes of 1, 2 or 4 devices, widths
    including non-powers of two (3), lists without 1, ZeRO on and off, both schedules,
    and about a third with tight memory."""
    from chainpipe import Parallelism

    rng = random.Random(10_000 + seed)
    L = rng.randint(1, max_layers)
    layers = []
    for i in range(L):
        out = float(rng.choice([0, 1, 5, 20]))
        layers.append(Layer(
            name=f"l{i}",
            fwd_flop=float(rng.choice([1, 2, 3, 5, 8]) * 10 + rng.randint(0, 9)),
            bwd_flop=float(rng.randint(0, 40)),
            params=rng.randint(0, 20),
            activation_bytes=float(rng.randint(0, 6)),
            output_bytes=out,
            tp_allreduce_bytes=float(rng.choice([0.0, 4 * out, rng.randint(0, 30)])),
        ))
    M = rng.choice([1, 2, 4, 8, 16])
    sched = rng.choice(["1f1b", "gpipe"])
    bpp = float(rng.choice([4, 16]))
    data = rng.choice([(1,), (1, 2), (1, 2, 3), (2,), (2, 4), (1, 3), (1, 2, 4)])
    tensor = rng.choice([(1,), (1, 2), (2,), (1, 2, 4), (1, 4)])
    par = Parallelism(data, tensor, rng.random() < 0.5)
    training = Training(M, sched, bpp, float(rng.choice([1, 2, 4])),
                        rng.choice([None, 0.0, bpp * 0.75]), par)
    tight = rng.random() < 0.35
    total_mem = sum(bpp * ly.params + M * ly.activation_bytes for ly in layers)
    K = rng.randint(1, max_dcs)
    dcs = []
    for k in range(K):
        groups = []
        for t in range(rng.randint(1, 2)):
            node = rng.choice([1, 2, 4])
            count = node * rng.randint(1, 2 if node == 4 else 3)
            mem = (max(1.0, round(total_mem * rng.uniform(0.1, 0.5))) if tight
                   else float(total_mem * 2 + 100))
            groups.append(DeviceGroup(f"t{t}", count, float(rng.choice([5, 10, 20, 40])), mem,
                                      node, float(rng.choice([5, 20, 100])) if node > 1 else None))
        dcs.append(Datacenter(f"dc{k}", tuple(groups),
                              Link(float(rng.choice([10, 50, 200])), rng.choice([0.0, 0.1, 0.5]))))
    links = tuple(Link(float(rng.choice([1, 5, 20])), rng.choice([0.0, 0.5, 1.0, 3.0]))
                  for _ in range(K - 1))
    return Instance(f"hyb{seed}", Model("m", tuple(layers)), training, tuple(dcs), links)


def hybrid_chain_as_period(seed: int) -> Instance:
    """:func:`random_hybrid_instance` (up to 4 DCs and 8 layers) made version 3: the
    ``period`` objective, one or two pipelines (two on odd seeds)."""
    import dataclasses

    base = random_hybrid_instance(seed, max_layers=8, max_dcs=4)
    tr = base.training
    return dataclasses.replace(base, training=dataclasses.replace(
        tr, objective="period", parallelism=dataclasses.replace(
            tr.parallelism, pipelines=(1, 2) if seed % 2 else (1,))))


def stage_figures(tables, stages) -> list[tuple[int, int, float]]:
    """Per stage ``(start, end, dc, group in dc, d, t)`` of a plan: its flattened group,
    width and compute time ``C`` (from ``tables``, a :class:`CostTables`)."""
    out = []
    for a, b, k, gi, d, t in stages:
        g = next(h for h, grp in enumerate(tables.groups) if grp.dc == k and grp.index == gi)
        opts = tables.options(g)
        c = next(c for c in range(len(opts.d)) if opts.d[c] == d and opts.t[c] == t)
        out.append((g, int(opts.width[c]), float(opts.compute_time[c, a, b])))
    return out


def brute_force_hybrid(inst: Instance) -> tuple[float, list | None]:
    """Optimum of a version-2 instance by enumeration, straight from the contract.

    Every cut of the layers into stages, every chain-ordered choice of a group and a
    pair ``(d, t)`` per stage with ``t`` within a node, ``d`` dividing ``microbatch_size``
    when it is stated, and the devices ``d * t`` of each group within its count. Returns ``(T, [(start, end, dc, group, d, t), ...])``
    or ``(inf, None)``.
    """
    tr = inst.training
    groups = [(k, g, grp) for k, dc in enumerate(inst.datacenters)
              for g, grp in enumerate(dc.devices)]
    widths = [d for d in tr.parallelism.data_parallel
              if tr.microbatch_size is None or tr.microbatch_size % d == 0]
    pairs = [(d, t) for d in widths for t in tr.parallelism.tensor_parallel]

    def path(k1, k2):
        return _path(inst, k1, k2)

    best = [float("inf"), None]
    for stages in _compositions(inst.num_layers):
        _hybrid_cut(inst, stages, groups, pairs, path, best)
    return best[0], best[1]


def _hybrid_cut(inst, stages, groups, pairs, path, best) -> None:
    """Every group and pair choice for one cut of the layers; ``best`` updated in place."""
    layers, tr = inst.layers, inst.training
    M, sched = inst.microbatches, tr.schedule
    beta, gamma = tr.bytes_per_param, tr.gradient_bytes_per_param
    zeta = tr.optimizer_bytes_per_param if tr.parallelism.zero else 0.0
    S = len(stages)
    F = [sum(ly.fwd_flop + ly.bwd_flop for ly in layers[a:b]) for a, b in stages]
    P = [sum(ly.params for ly in layers[a:b]) for a, b in stages]
    A = [sum(ly.activation_bytes for ly in layers[a:b]) for a, b in stages]
    TP = [sum(ly.tp_allreduce_bytes for ly in layers[a:b]) for a, b in stages]
    X = [layers[b - 1].output_bytes for a, b in stages]

    def place(s, used, last_dc, chosen):
        if s == S:
            C, R = [], []
            for q, (gi, d, t) in enumerate(chosen):
                k, _g, grp = groups[gi]
                c = F[q] / (d * t * grp.flop_per_s)
                if t > 1:
                    c += 2 * (t - 1) / t * (TP[q] / d) / grp.node_bandwidth_bytes_per_s
                C.append(c)
                lk = inst.datacenters[k].link
                R.append(0.0 if d == 1 else 2 * (d - 1) / d * gamma * P[q] / t
                         / lk.bandwidth_bytes_per_s + 2 * (d - 1) * lk.latency_s)
            total, peak = sum(C), max(C)
            for q in range(S - 1):
                bw, lat = path(groups[chosen[q][0]][0], groups[chosen[q + 1][0]][0])
                total += 2 * (lat + X[q] / bw)
                peak = max(peak, X[q] / bw)
            T = total + (M - 1) * peak + max(R)
            if best[0] - 1e-12 > T:
                best[0] = T
                best[1] = [(stages[q][0], stages[q][1], groups[gi][0], groups[gi][1], d, t)
                           for q, (gi, d, t) in enumerate(chosen)]
            return
        n = M if sched == "gpipe" else min(M, S - s)
        for gi, (k, _g, grp) in enumerate(groups):
            if k < last_dc:
                continue
            for d, t in pairs:
                if t > grp.devices_per_node or used.get(gi, 0) + d * t > grp.count:
                    continue
                need = ((beta - zeta) + zeta / d) * P[s] / t + n * A[s] / (d * t)
                if need > grp.memory_bytes * (1 + MEMORY_RTOL):
                    continue
                used[gi] = used.get(gi, 0) + d * t
                place(s + 1, used, k, chosen + [(gi, d, t)])
                used[gi] -= d * t

    place(0, {}, 0, [])


def private_strings(inst: Instance) -> list[str]:
    """Every private figure of every DC as text a message could carry: device type
    names, rates, memories, node bandwidths, internal link figures (several formats)."""
    out = []
    for dc in inst.datacenters:
        for g in dc.devices:
            out.append(g.type)
            values = [g.flop_per_s, g.memory_bytes]
            if g.node_bandwidth_bytes_per_s is not None:
                values.append(g.node_bandwidth_bytes_per_s)
            for v in values:
                out += [repr(v), repr(float(v)), f"{v:.6e}", f"{v:.5e}"]
        for v in (dc.link.bandwidth_bytes_per_s, dc.link.latency_s):
            out += [repr(v), f"{v:.5e}"]
    return out


def check_bracket(ref, r, where: str, rtol: float = 1e-6) -> None:
    """A time-limited run ``r`` against ``dp``'s result ``ref`` on the same instance: an
    infeasible instance is never given a plan, ``bound <= optimum <= T``, and an
    ``optimal`` status has the optimum (to ``rtol``)."""
    if ref.status == "infeasible":
        assert r.status in ("infeasible", "no_solution"), where
        return
    assert r.status in ("optimal", "feasible", "no_solution"), (where, r.status, r.message)
    if r.lower_bound is not None:
        assert r.lower_bound <= ref.iteration_time * (1 + 1e-9), where
    if r.plan is not None:
        assert ref.iteration_time <= r.iteration_time * (1 + 1e-9), where
    if r.status == "optimal":
        assert abs(r.iteration_time - ref.iteration_time) <= rtol * ref.iteration_time + 1e-12, where


def check_trace_private(inst: Instance, files, schema: dict) -> list[dict]:
    """Every message file of a CDynP trace follows the protocol's schema and carries no
    private figure of ``inst`` (:func:`private_strings`) nor any device name, and every
    summary's ``bw`` is a public chain-link bandwidth, and every prefix bound a power of
    the public grid. Returns the messages."""
    import json
    import math

    import jsonschema

    from chainpipe.solvers.cdynp.protocol import PREFIX_STEPS

    secrets = private_strings(inst)
    public_bw = {lk.bandwidth_bytes_per_s for lk in inst.links}
    messages = []
    for f in files:
        text = f.read_text()
        msg = json.loads(text)
        jsonschema.validate(msg, schema)
        for s in secrets:
            assert s not in text, (f.name, s)
        for dc in inst.datacenters:  # no device names either
            assert f"{dc.name}/" not in text
        if msg["kind"] == "summary":
            assert all(e["bw"] is None or e["bw"] in public_bw for e in msg["entries"])
        if msg["kind"] == "prefix" and msg["bound"] is not None:
            for v in msg["bound"].values():
                n = math.log2(v) * PREFIX_STEPS if v > 0 else 0.0
                assert abs(n - round(n)) < 1e-6, (f.name, v)
        messages.append(msg)
    return messages


# --------------------------------------------------------------------------- version 3
def random_v3_instance(seed: int) -> Instance:
    """A small random instance of contract version 3 (``/3`` semantics, built from Python).

    Chains of 1 to 3 DCs with MAN latencies from 0 to 5 s against stage times of about
    1 to 10 s (so 1F1B loops pace many plans), layers with few parameters and large
    activations over slow links (so several pipelines win on many), both objectives and
    schedules, pipeline lists with and without 1, ``H`` from 1 to 4, widths 1 and 2 with
    and without ``microbatch_size``, and some tight memory.
    """
    from chainpipe import Parallelism

    rng = random.Random(30_000 + seed)
    L = rng.choice([1, 2, 3, 3])
    layers = []
    for i in range(L):
        out = float(rng.choice([0, 5, 20, 50]))
        layers.append(Layer(f"l{i}", float(rng.randint(1, 8) * 10), float(rng.randint(1, 8) * 10),
                            rng.choice([0, 1, 5, 20]), float(rng.randint(0, 3)), out,
                            float(rng.choice([0.0, 4 * out, 10.0]))))
    M = rng.randint(3, 8)
    par = Parallelism(rng.choice([(1,), (1,), (1, 2), (1, 2), (2,)]), rng.choice([(1,), (1,), (1, 2)]),
                      rng.random() < 0.3, rng.choice([(1,), (1, 2), (1, 2), (1, 2, 3), (2,), (1, 3)]))
    bpp = float(rng.choice([1, 4]))
    training = Training(M, rng.choice(["1f1b", "1f1b", "gpipe"]), bpp, float(rng.choice([1, 2])),
                        None, par, rng.choice([None, None, 1, 2]),
                        "period" if rng.random() < 0.8 else "classic", rng.choice([1, 1, 2, 4]))
    tight = rng.random() < 0.2
    total_mem = sum(bpp * ly.params + M * ly.activation_bytes for ly in layers)
    K = rng.choice([1, 2, 2, 3, 3])
    dcs = []
    for k in range(K):
        groups = []
        for t in range(rng.choice([1, 1, 2])):
            node = rng.choice([1, 2])
            mem = (max(1.0, round(total_mem * rng.uniform(0.2, 0.7))) if tight
                   else float(total_mem * 2 + 100))
            groups.append(DeviceGroup(f"t{t}", node * rng.randint(1, 2),
                                      float(rng.choice([10, 20, 40])), mem, node,
                                      float(rng.choice([10, 100])) if node > 1 else None))
        dcs.append(Datacenter(f"dc{k}", tuple(groups),
                              Link(float(rng.choice([20, 100])), rng.choice([0.0, 0.5, 1.0]))))
    links = tuple(Link(float(rng.choice([2, 5, 20, 100])), rng.choice([0.0, 1.0, 2.0, 5.0]))
                  for _ in range(K - 1))
    return Instance(f"v3-{seed}", Model("m", tuple(layers)), training, tuple(dcs), links)


def random_period_chains(n: int, *, first_seed: int = 100, microbatches=(12, 20, 40),
                         pipelines: tuple | None = None):
    """``(seed, instance)`` of the first ``n`` :func:`random_instance` draws from
    ``first_seed`` on 2 or 3 DCs with 5 to 12 layers, under 1F1B with ``M`` one of
    ``microbatches`` (many: the steady part weighs and the prefix-curve floors matter), made
    ``period`` instances (and allowed ``pipelines``, if given)."""
    import dataclasses

    seed, got = first_seed, 0
    while got < n:
        rng = random.Random(seed)
        inst = random_instance(seed, max_layers=12, max_count=4, max_types=3, schedule="1f1b",
                               microbatches=rng.choice(microbatches))
        seed += 1
        if inst.num_datacenters < 2 or inst.num_layers < 5:
            continue
        training = dataclasses.replace(inst.training, objective="period")
        if pipelines is not None:
            training = dataclasses.replace(training, parallelism=dataclasses.replace(
                training.parallelism, pipelines=pipelines))
        yield seed - 1, dataclasses.replace(inst, training=training)
        got += 1


def random_v3_chains(least_m: int, *, objective: str | None = "period",
                     schedule: str | None = None, seeds=range(40)):
    """``(seed, instance)`` of the :func:`random_v3_instance` draws of ``seeds`` with two
    DCs or more and at least ``least_m`` microbatches, of that objective and schedule
    (``None``: any)."""
    for seed in seeds:
        inst = random_v3_instance(seed)
        if inst.num_datacenters < 2 or inst.microbatches < least_m:
            continue
        if objective is not None and inst.training.objective != objective:
            continue
        if schedule is not None and inst.training.schedule != schedule:
            continue
        yield seed, inst


@functools.cache
def v3_dp_reference(seed: int):
    """``(instance, dp's result)`` of :func:`random_v3_instance` ``seed``, computed once
    per process."""
    from chainpipe.solve import solve

    inst = random_v3_instance(seed)
    return inst, solve(inst, "dp")


def contract_pipeline(inst: Instance, M_p: int, stages) -> tuple[float, float] | None:
    """``(T_p, max_s R_s)`` of one pipeline straight from the contract (sections 4.1-4.3),
    or ``None`` when a stage breaks its memory limit. ``stages``: ``(start, end, dc, group,
    d, t)`` tuples in chain order."""
    tr = inst.training
    beta, gamma = tr.bytes_per_param, tr.gradient_bytes_per_param
    zeta = tr.optimizer_bytes_per_param if tr.parallelism.zero else 0.0
    S = len(stages)
    f, b, C, R, U, Q = [], [], [], [], [], []
    for q, (a, e, k, g, d, t) in enumerate(stages):
        grp, lk = inst.datacenters[k].devices[g], inst.datacenters[k].link
        part = inst.layers[a:e]
        Y, P = sum(ly.tp_allreduce_bytes for ly in part), sum(ly.params for ly in part)
        tp = (t - 1) / t * (Y / d) / grp.node_bandwidth_bytes_per_s if t > 1 else 0.0
        f.append(sum(ly.fwd_flop for ly in part) / (d * t * grp.flop_per_s) + tp)
        b.append(sum(ly.bwd_flop for ly in part) / (d * t * grp.flop_per_s) + tp)
        C.append(f[-1] + b[-1])
        n = M_p if tr.schedule == "gpipe" else min(M_p, S - q)
        need = ((beta - zeta) + zeta / d) * P / t + n * sum(ly.activation_bytes for ly in part) / (d * t)
        if need > grp.memory_bytes * (1 + MEMORY_RTOL):
            return None
        R.append(0.0 if d == 1 else 2 * (d - 1) / d * gamma * P / t / lk.bandwidth_bytes_per_s
                 + 2 * (d - 1) * lk.latency_s)
    for q in range(S - 1):
        bw, lat = _path(inst, stages[q][2], stages[q + 1][2])
        U.append(inst.layers[stages[q][1] - 1].output_bytes / bw)
        Q.append(2 * (lat + U[-1]))
    if tr.objective == "classic":
        lam = max(C + U)
    elif tr.schedule == "gpipe":
        mu = max(U) if U else 0.0
        lam = max(max(f), mu) + max(max(b), mu)
    else:
        lam = max(C + U)
        for s in range(S):
            if min(M_p, S - s) >= M_p:
                continue
            for t in range(s + 1, S):
                lam = max(lam, (sum(C[s:t + 1]) + sum(Q[s:t])) / (t - s + 1))
    return sum(C) + sum(Q) + (M_p - 1) * lam, max(R)


def contract_cross_sync(inst: Instance, first_dc: int, last_dc: int) -> float:
    """``R_X`` straight from the contract: every gradient over the chain links between the
    pipelines' outer DCs, along and back."""
    seg = inst.links[first_dc:last_dc]
    bw, lat = min(x.bandwidth_bytes_per_s for x in seg), sum(x.latency_s for x in seg)
    return inst.training.gradient_bytes_per_param * sum(ly.params for ly in inst.layers) / bw \
        + 2 * lat


def contract_time(inst: Instance, spec) -> float:
    """``T`` of a plan given as ``[(M_p, [(start, end, dc, group, d, t), ...]), ...]`` straight
    from the contract (``inf`` when a memory limit breaks); the rules of section 3 other
    than memory are the caller's to keep."""
    parts = [contract_pipeline(inst, m, stages) for m, stages in spec]
    if any(p is None for p in parts):
        return float("inf")
    r_x = contract_cross_sync(inst, spec[0][1][0][2], spec[-1][1][-1][2]) if len(spec) > 1 \
        else 0.0
    return max(p[0] for p in parts) + max(p[1] for p in parts) \
        + r_x / inst.training.pipeline_sync_period


def _v3_configurations(inst: Instance) -> list[list[tuple]]:
    """Every one-pipeline placement (any M_p): every cut, chain-ordered groups, allowed
    ``(d, t)`` (``d`` dividing ``microbatch_size``), device counts kept."""
    tr = inst.training
    groups = [(k, g, grp) for k, dc in enumerate(inst.datacenters) for g, grp in enumerate(dc.devices)]
    pairs = [(d, t) for d in tr.parallelism.data_parallel for t in tr.parallelism.tensor_parallel
             if tr.microbatch_size is None or tr.microbatch_size % d == 0]
    out: list[list[tuple]] = []

    def place(cut, s, used, last_dc, chosen):
        if s == len(cut):
            out.append(chosen)
            return
        for gi, (k, g, grp) in enumerate(groups):
            for d, t in pairs:
                if k < last_dc or t > grp.devices_per_node or used.get(gi, 0) + d * t > grp.count:
                    continue
                used[gi] = used.get(gi, 0) + d * t
                place(cut, s + 1, used, k, chosen + [(cut[s][0], cut[s][1], k, g, d, t)])
                used[gi] -= d * t

    for cut in _compositions(inst.num_layers):
        place(cut, 0, {}, 0, [])
    return out


def _splits(M: int, P: int):
    """Every way to write ``M`` as ``P`` ordered parts ``>= 1``."""
    for cuts in itertools.combinations(range(1, M), P - 1):
        bounds = (0, *cuts, M)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(P))


def v3_fronts(inst: Instance) -> dict[tuple[int, int, int], list]:
    """Per ``(first DC, last DC, M_p)``, the one-pipeline placements not dominated in
    ``(T_p, max_s R_s)``, each ``(T_p, max R, stages)`` by increasing ``T_p``, costed
    straight from the contract (:func:`contract_pipeline`)."""
    fronts: dict[tuple[int, int, int], list] = {}
    for stages in _v3_configurations(inst):
        key = (stages[0][2], stages[-1][2])
        for m in range(1, inst.microbatches + 1):
            part = contract_pipeline(inst, m, stages)
            if part is not None:
                fronts.setdefault((*key, m), []).append((part[0], part[1], stages))
    for key, items in fronts.items():
        items.sort(key=lambda x: (x[0], x[1]))
        kept, best_r = [], float("inf")
        for item in items:
            if item[1] < best_r:
                kept.append(item)
                best_r = item[1]
        fronts[key] = kept
    return fronts


def brute_force_v3(inst: Instance) -> dict[int, tuple[float, list | None]]:
    """The best ``T`` and plan for each allowed pipeline count, by enumeration.

    Every one-pipeline placement is costed straight from the contract for every
    ``M_p`` (:func:`contract_pipeline`); per DC range and ``M_p`` only the placements
    not dominated in ``(T_p, max R_s)`` are kept (``T`` grows with both, so this loses
    no optimum). Then every chain-ordered choice of disjoint ranges and every split of
    ``M`` into ``M_p >= 1``. Returns ``{P: (T, spec)}`` with ``spec`` as
    :func:`contract_time` takes it (``(inf, None)`` when no plan of ``P`` pipelines fits).
    """
    M, H = inst.microbatches, inst.training.pipeline_sync_period
    fronts = v3_fronts(inst)
    ranges = sorted({(a, b) for a, b, _m in fronts})
    out = {}
    for P in inst.parallelism.pipelines:
        best: tuple[float, list | None] = (float("inf"), None)
        for chosen in itertools.combinations(ranges, P) if P <= len(ranges) else ():
            if any(chosen[i][1] >= chosen[i + 1][0] for i in range(P - 1)):
                continue
            r_x = contract_cross_sync(inst, chosen[0][0], chosen[-1][1]) if P > 1 else 0.0
            for split in _splits(M, P):
                options = [fronts.get((*rng_, m), []) for rng_, m in zip(chosen, split)]
                for combo in itertools.product(*options):
                    T = max(c[0] for c in combo) + max(c[1] for c in combo) + r_x / H
                    if T < best[0] - 1e-12:
                        best = (T, [(m, c[2]) for m, c in zip(split, combo)])
        out[P] = best
    return out


def plan_of_spec(inst: Instance, spec) -> Plan:
    """The :class:`Plan` of a brute-force ``spec`` (the second form, devices packed)."""
    from chainpipe.plan import Pipeline

    return Plan(pipelines=[Pipeline(Plan.from_tuples(inst, stages).stages, m)
                           for m, stages in spec])


def assert_same_trace_files(local: Path, remote: Path) -> None:
    """The two runs wrote the same trace files, byte for byte (one run in process, one
    across hosts)."""
    files = sorted(p.relative_to(local) for p in local.rglob("*.json"))
    assert files and files == sorted(p.relative_to(remote) for p in remote.rglob("*.json"))
    for f in files:
        assert (remote / f).read_bytes() == (local / f).read_bytes(), f


def close(a: float, b: float, rtol: float = 1e-6) -> bool:
    """Whether ``a`` and ``b`` agree to ``rtol`` (relative, with an absolute hair)."""
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + 1e-12


def check_hybrid_optimum(inst: Instance, res) -> None:
    """``res`` (a solve of ``inst``) is the brute-force optimum, or ``infeasible`` when
    there is none; its plan is feasible."""
    from chainpipe import evaluate

    T, stages = brute_force_hybrid(inst)
    if stages is None:
        assert res.status == "infeasible"
        return
    assert res.status == "optimal", res.message
    assert math.isclose(res.iteration_time, T, rel_tol=1e-9, abs_tol=1e-12)
    assert evaluate(inst, res.plan).feasible


def check_cdynp_equals_dp(inst: Instance, rtol: float = 1e-9) -> None:
    """``cdynp`` in process reaches ``dp``'s status and time (relative ``rtol``)."""
    from chainpipe.solve import solve

    want, got = solve(inst, "dp"), solve(inst, "cdynp")
    assert got.status == want.status, (got.status, want.status)
    if want.iteration_time is not None:
        a, b = got.iteration_time, want.iteration_time
        assert abs(a - b) <= rtol * max(abs(a), abs(b), 1e-300), (a, b)


def sigint_at_default() -> None:
    """A ``preexec_fn`` for a child that must take Ctrl-C as a terminal sends it: SIGINT
    at its default, whatever this process's disposition. A child inherits an ignored
    SIGINT and Python then keeps it ignored (a test worker may run with it ignored: a
    full ``make test`` once saw the child sleep on through SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
