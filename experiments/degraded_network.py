"""Experiment 3: inter-DC bandwidth down to 10% and latency up to 10x; how each plan degrades.

Instances: the ``metro`` preset with 4 DCs (MAN links of 10-400 Gbit/s over
10-100 km). Every inter-DC link is degraded by a factor F in (1, 0.5, 0.25,
0.1) along three axes: bandwidth times F, latency divided by F, and both
(``generate(..., degrade=F)``). For each method two numbers are measured, both
relative to the exact optimum of the undegraded network:

- re-planned: the method run again on the degraded network;
- fixed plan: the method's plan for the undegraded network, kept and evaluated
  on the degraded one (what happens when the network degrades under a plan).

    python experiments/degraded_network.py [--quick]
"""

from __future__ import annotations

import dataclasses
import time

import chainpipe as cp
from chainpipe.instance import Link
from chainpipe.instances import generate
from common import (
    METHODS,
    STYLE,
    available,
    fmt,
    geomean,
    parse,
    publish,
    pyplot,
    run,
    table,
)

NAME = "degraded_network"
AXES = ("bandwidth x F", "latency / F", "both")


def degrade(inst, axis: str, factor: float, model: str, seed: int, gpus: int):
    if factor == 1.0:
        return inst
    if axis == "both":
        return generate("metro", seed, model=model, datacenters=4, gpus_per_dc=gpus, degrade=factor)
    links = tuple(
        Link(lk.bandwidth_bytes_per_s * (factor if axis.startswith("bandwidth") else 1.0),
             lk.latency_s / (factor if axis.startswith("latency") else 1.0))
        for lk in inst.links)
    return dataclasses.replace(inst, name=f"{inst.name}-{axis.split()[0]}{factor:g}", links=links)


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    models = ("llama2-7b",) if args.quick else ("gpt3-6.7b", "llama2-7b", "llama2-13b")
    seeds = (0,) if args.quick else (0, 1, 2)
    gpus = 8 if args.quick else 16
    factors = (1.0, 0.1) if args.quick else (1.0, 0.5, 0.25, 0.1)
    limit = args.time_limit or (20.0 if args.quick else 60.0)
    methods, missing = available(METHODS)
    start = time.perf_counter()

    cases = [(model, seed) for model in models for seed in seeds]
    # replanned[(axis, F, model, seed, m)], fixed[...] in seconds; None: no plan
    replanned, fixed, reference = {}, {}, {}
    for model, seed in cases:
        base = generate("metro", seed, model=model, datacenters=4, gpus_per_dc=gpus)
        original = {m: run(base, m, limit) for m in methods}
        reference[(model, seed)] = original["dp"].iteration_time
        print(f"{base.name}: links " + ", ".join(
            f"{lk.bandwidth_bytes_per_s * 8 / 1e9:g} Gbit/s {lk.latency_s * 1e3:.2f} ms"
            for lk in base.links), flush=True)
        for axis in AXES:
            for F in factors:
                inst = degrade(base, axis, F, model, seed, gpus)
                for m in methods:
                    res = original[m] if F == 1.0 else run(inst, m, limit)
                    replanned[(axis, F, model, seed, m)] = res.iteration_time
                    plan = original[m].plan
                    fixed[(axis, F, model, seed, m)] = (
                        None if plan is None else cp.evaluate(inst, plan).iteration_time_s)
                print(f"  {axis} F={F:g}: " + ", ".join(
                    f"{m} {fmt(replanned[(axis, F, model, seed, m)])}"
                    f"/{fmt(fixed[(axis, F, model, seed, m)])}" for m in methods), flush=True)

    def rel(table_, axis, F, m):
        vals = [table_[(axis, F, mo, s, m)] / reference[(mo, s)] for mo, s in cases
                if table_[(axis, F, mo, s, m)] is not None and reference[(mo, s)]]
        return geomean(vals)

    sections = []
    for axis in AXES:
        rows = []
        for m in methods:
            rows.append([f"`{m}`"] + [f"{fmt(rel(replanned, axis, F, m))} / {fmt(rel(fixed, axis, F, m))}"
                                      for F in factors])
        sections.append(
            f"## Inter-DC {axis}\n\nRe-planned / fixed original plan, geometric mean over "
            f"{len(cases)} instances of T / T\\*(undegraded network).\n\n"
            + table(["method"] + [f"F = {F:g}" for F in factors], rows))

    plt = pyplot()
    fig, axes = plt.subplots(1, len(AXES), figsize=(13, 4.3), sharey=True)
    for ax, axis in zip(axes, AXES):
        for m in methods:
            st = STYLE.get(m, {})
            for tab, ls, alpha, label in ((replanned, "-", 1.0, m), (fixed, ":", 0.6, None)):
                pts = [(F, rel(tab, axis, F, m)) for F in factors]
                pts = [p for p in pts if p[1] is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                            **{**st, "ls": ls, "alpha": alpha})
        ax.set_xscale("log")
        ax.invert_xaxis()
        ax.set_xticks(list(factors))
        ax.set_xticklabels([f"{F:g}" for F in factors])
        ax.set_xlabel(f"F ({axis})")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"inter-DC {axis}", fontsize=10)
    axes[0].set_ylabel("T / T*(undegraded)  (log)")
    axes[-1].legend(fontsize=7, ncol=2, title="solid: re-planned, dotted: fixed plan",
                    title_fontsize=7)
    intro = (f"Instances: `generate('metro', seed, model=..., datacenters=4, gpus_per_dc={gpus})` "
             f"for models {', '.join(models)} and seeds {', '.join(map(str, seeds))} (GPU types "
             f"and MAN links drawn per seed); the 'both' axis is `degrade=F`, the other two scale "
             f"one field of every inter-DC link. Time limit {limit:g} s per solve. "
             f"Figure: `{NAME}.png`.")
    publish(NAME, "Degraded networks", fig, intro, sections, args.quick,
            time.perf_counter() - start, missing)


if __name__ == "__main__":
    main()
