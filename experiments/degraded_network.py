"""Experiment 3: inter-DC bandwidth down to 10% and latency up to 10x; how each plan degrades.

Instances: the ``metro`` preset with 4 DCs (MAN links of 10-400 Gbit/s over
10-100 km). Every inter-DC link is degraded by a factor F in (1, 0.5, 0.25,
0.1) along three axes: bandwidth times F, latency divided by F, and both
(``generate(..., degrade=F)``). For each method two numbers are measured, both
relative to the exact optimum of the undegraded network:

- re-planned: the method run again on the degraded network;
- fixed plan: the method's plan for the undegraded network, kept and evaluated
  on the degraded one (what happens when the network degrades under a plan).

A last table asks, per degradation level, whether to keep ``dp``'s running plan or
move to the new optimum (:func:`chainpipe.replan.replan`, horizon
``DEFAULT_HORIZON`` iterations): the time re-planning saves per iteration, the
move's cost in seconds (the parameter state of every layer that changes devices)
and the iterations the move takes to pay back.

    python experiments/degraded_network.py [--quick]
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import chainpipe as cp
from chainpipe.instance import Link
from chainpipe.instances import generate
from chainpipe.replan import DEFAULT_HORIZON, replan
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
    # moves[(axis, F, model, seed)]: chainpipe.replan.replan of dp's undegraded plan
    moves = {}
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
                if F != 1.0 and original["dp"].plan is not None:
                    moves[(axis, F, model, seed)] = replan(
                        base, original["dp"].plan, inst, horizon=DEFAULT_HORIZON,
                        time_limit=limit)
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

    def move_row(axis, F):
        rs = [moves[(axis, F, mo, s)] for mo, s in cases if (axis, F, mo, s) in moves]
        gains = [r.old_on_new_s - r.new_time_s for r in rs
                 if r.new_time_s is not None and math.isfinite(r.old_on_new_s)]
        movers = [r for r in rs if r.move_bytes > 0 and math.isfinite(r.move_s)]
        paybacks = [r.move_s / (r.old_on_new_s - r.new_time_s) for r in movers
                    if r.new_time_s is not None and r.old_on_new_s - r.new_time_s > 1e-12]
        switch = sum(r.decision == "switch" for r in rs)
        return [f"{F:g}", f"{switch} / {len(rs)}", len(movers),
                fmt(statistics.mean(gains) if gains else None, 4),
                fmt(max(gains) if gains else None, 4),
                fmt(statistics.median([r.move_s for r in movers]) if movers else None, 1),
                fmt(statistics.median(paybacks) if paybacks else None, 0)]

    move_factors = [F for F in factors if F != 1.0]
    sections.append(
        "## Keep the running plan or move (`chainpipe.replan`)\n\n"
        f"`dp`'s plan for the undegraded network is running when the network degrades; "
        f"`replan` re-solves with `dp` and prices the move: every layer whose new stage "
        f"runs on other devices receives its parameter state (`bytes_per_param` per "
        f"parameter) over the degraded network, all transfers at once. It switches when "
        f"{DEFAULT_HORIZON} iterations of saving exceed the move. Per degradation level, "
        f"over {len(cases)} instances: how many switch, how many plans change at all "
        f"(move > 0 bytes), the time saved per iteration (T kept - T re-planned, mean and "
        f"max), the median move in seconds over the plans that change, and the median "
        f"iterations to pay it back (move / saving per iteration) over those that save.\n\n"
        + "\n\n".join(
            f"### Inter-DC {axis}\n\n" + table(
                ["F", f"switch at {DEFAULT_HORIZON} it.", "plans that change",
                 "saved s/iter (mean)", "saved s/iter (max)", "move s (median)",
                 "iterations to pay back (median)"],
                [move_row(axis, F) for F in move_factors])
            for axis in AXES))

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
