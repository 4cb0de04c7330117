"""Devices grouped by profile: the optimum and the DP's time as the groups per DC grow.

A noisy inventory (per seed: 3 DCs of 6 nodes of 4 GPUs, each node H100, A100 or L40S,
every device's sustained rate its type's peak x 0.45 x U(0.7, 1.0), free memory its
card's less U(2, 10) GiB, NICs of 25-50 GB/s) is grouped by
:func:`chainpipe.grouping.group_inventory` into at most K groups per DC, each priced by
its slowest member; the cluster file is read back as ``generate --cluster`` reads it
and GPT-3 1.3B (16 microbatches, ``d`` in {1, 2}, ``t`` in {1, 2, 4}) is planned on it
by ``dp``. K = 6 is one group per node: the ungrouped optimum at node level (a node's
devices run one tensor-parallel group, so a node is never split).

    python experiments/grouping.py [--quick]
"""

from __future__ import annotations

import random
import statistics
import time

import chainpipe as cp
from chainpipe.grouping import Device, cluster_toml, group_inventory
from chainpipe.instance import Parallelism
from chainpipe.instances.cluster_file import cluster_instance, parse_cluster, tomllib
from chainpipe.instances.models import model_shape
from common import fmt, parse, publish, pyplot, table

NAME = "grouping"
#: type, peak FLOP/s, memory bytes, node bandwidth per device B/s
TYPES = (("H100", 989e12, 80 * 2**30, 450e9), ("A100", 312e12, 80 * 2**30, 300e9),
         ("L40S", 362e12, 48 * 2**30, 32e9))
NODES, PER_NODE, DCS = 6, 4, 3
LINK = {"bandwidth": "100 Gbit/s", "distance": "40 km"}


def inventory(seed: int) -> list[Device]:
    """The noisy inventory of ``seed`` (module doc)."""
    rng = random.Random(seed)
    out = []
    for k in range(DCS):
        for j in range(NODES):
            kind, peak, memory, node_bw = rng.choice(TYPES)
            nic = rng.uniform(25e9, 50e9)
            for _ in range(PER_NODE):
                out.append(Device(f"dc{k}", f"n{j}", kind, peak * 0.45 * rng.uniform(0.7, 1.0),
                                  memory - rng.uniform(2, 10) * 2**30, node_bw, nic))
    return out


def instance_for(devices, k: int, seed: int):
    dcs = group_inventory(devices, k)
    text = cluster_toml(dcs, [LINK] * (DCS - 1), name=f"noisy{seed}-K{k}")
    cluster = parse_cluster(tomllib.loads(text), f"noisy{seed}-K{k}")
    inst = cluster_instance(cluster, model_shape("gpt3-1.3b"), microbatches=16,
                            parallelism=Parallelism((1, 2), (1, 2, 4), True))
    lost = statistics.fmean(d.flop_lost for d in dcs)
    return inst, lost, sum(len(d.groups) for d in dcs)


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    seeds = (0,) if args.quick else (0, 1, 2)
    ks = (1, 2, 6) if args.quick else (1, 2, 3, 4, 6)
    limit = args.time_limit or 300.0
    start = time.perf_counter()
    rows = {}
    for seed in seeds:
        devices = inventory(seed)
        for k in ks:
            inst, lost, groups = instance_for(devices, k, seed)
            res = cp.solve(inst, "dp", time_limit=limit)
            rows[(seed, k)] = {"lost": lost, "groups": groups, "T": res.iteration_time,
                               "status": str(res.status), "time": res.solve_time}
            print(f"seed {seed} K={k}: {groups} groups, capacity lost {100 * lost:.1f}%, "
                  f"T {fmt(res.iteration_time, 4)} s ({res.status}), dp {res.solve_time:.1f} s",
                  flush=True)
    ref = max(ks)
    detail, summary = [], []
    for k in ks:
        ratios = [rows[(s, k)]["T"] / rows[(s, ref)]["T"] for s in seeds
                  if rows[(s, k)]["T"] and rows[(s, ref)]["T"]]
        summary.append([k, fmt(statistics.fmean(rows[(s, k)]["groups"] for s in seeds), 1),
                        fmt(100 * statistics.fmean(rows[(s, k)]["lost"] for s in seeds), 1) + "%",
                        fmt(statistics.fmean(ratios), 4) if ratios else "--",
                        fmt(max(ratios), 4) if ratios else "--",
                        fmt(statistics.fmean(rows[(s, k)]["time"] for s in seeds), 2),
                        fmt(max(rows[(s, k)]["time"] for s in seeds), 2)])
        for s in seeds:
            r = rows[(s, k)]
            detail.append([s, k, r["groups"], f"{100 * r['lost']:.1f}%", fmt(r["T"], 4),
                           r["status"], f"{r['time']:.2f}"])
    sections = [
        f"## Summary\n\nMeans over {len(seeds)} seeds; T relative to K = {ref} (one group per "
        f"node, the ungrouped optimum at node level).\n\n"
        + table(["K", "groups (all DCs)", "capacity lost", "T / T(ungrouped)", "max",
                 "dp time s", "max"], summary),
        "## Per seed\n\n" + table(["seed", "K", "groups", "capacity lost", "T s", "status",
                                   "dp time s"], detail)]
    plt = pyplot()
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for s in seeds:
        ax[0].plot(ks, [rows[(s, k)]["T"] / rows[(s, ref)]["T"] for k in ks], marker="o",
                   label=f"seed {s}")
        ax[1].plot(ks, [rows[(s, k)]["time"] for k in ks], marker="o", label=f"seed {s}")
    ax[0].set_xlabel("K (groups per DC, at most)")
    ax[0].set_ylabel(f"T / T(K = {ref})")
    ax[1].set_xlabel("K (groups per DC, at most)")
    ax[1].set_ylabel("dp time (s)")
    ax[1].set_yscale("log")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    intro = (f"Inventory: {DCS} DCs x {NODES} nodes x {PER_NODE} GPUs per seed (module doc); "
             f"MAN links of 100 Gbit/s over 40 km; GPT-3 1.3B, M = 16, d in {{1, 2}}, t in "
             f"{{1, 2, 4}}, ZeRO-1; `dp` with a {limit:g} s limit. Figure: `{NAME}.png`.")
    publish(NAME, "Grouping devices by profile", fig, intro, sections, args.quick,
            time.perf_counter() - start, {})


if __name__ == "__main__":
    main()
