"""Test helpers: random small instances and a brute-force enumerator.

The enumerator is written independently of chainpipe's solvers and tables: it
walks every partition of the layers into contiguous stages and every chain-ordered
assignment of device groups, and computes T straight from the contract
(``docs/model.md``). Its best plan is checked with ``chainpipe.evaluate``.
"""

from __future__ import annotations

import itertools
import random

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
        if k1 == k2:
            lk = inst.datacenters[k1].link
            return lk.bandwidth_bytes_per_s, lk.latency_s
        seg = inst.links[k1:k2]
        return min(x.bandwidth_bytes_per_s for x in seg), sum(x.latency_s for x in seg)

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
