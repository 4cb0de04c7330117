"""Experiment 1: one fixed pool of GPUs split over 1, 2, 3, 4 datacenters of a MAN chain.

The ``pool`` preset keeps the same 32 GPUs (four types) and only splits them
differently; each method's iteration time is divided by the exact optimum of
the one-DC split (same model, same GPUs). The CDynP paper reports its
increase from one to four DCs held to 8.3%, substantially less than the
baselines'; this script measures ours and the baselines' on the same instances,
on the preset's 100 Gbit/s links and on links degraded to 10 Gbit/s with ten
times the latency.

The same instances are then solved again under contract version 3 (objective
``period``, the schedule's own period, and up to one pipeline per DC,
``pipelines = 1..k``): ``dp`` exactly (within the time limit, its status kept),
the classic optimum costed under ``period`` (``classic-optimum``) and one
pipeline per DC (``replicate-per-dc``). The classic tables are unchanged.

    python experiments/one_to_four_dcs.py [--quick]
"""

from __future__ import annotations

import dataclasses
import time

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

NAME = "one_to_four_dcs"
NETWORKS = (("100 Gbit/s MAN links", None), ("links degraded to 10 Gbit/s, 10x latency", 0.1))
#: the methods rerun under contract version 3 (objective ``period``, pipelines 1..k)
PERIOD_METHODS = ("dp", "classic-optimum", "replicate-per-dc")


def period_copy(instance):
    """``instance`` under objective ``period`` with 1 to ``k`` pipelines (``k`` its DCs)."""
    tr = instance.training
    par = dataclasses.replace(tr.parallelism,
                              pipelines=tuple(range(1, len(instance.datacenters) + 1)))
    return dataclasses.replace(instance, name=f"{instance.name}-period", training=dataclasses.replace(
        tr, objective="period", parallelism=par))


def period_runs(cases, pool: int, limit: float) -> dict:
    """``{(net, model, seed, k, method): (T, status, pipelines)}`` under ``period``."""
    out = {}
    for model, seed in cases:
        for net, factor in NETWORKS:
            for k in (1, 2, 3, 4):
                if k == 1 and net != NETWORKS[0][0]:
                    for m in PERIOD_METHODS:
                        out[(net, model, seed, k, m)] = out[(NETWORKS[0][0], model, seed, 1, m)]
                    continue
                inst = period_copy(generate("pool", seed, model=model, datacenters=k,
                                            degrade=factor,
                                            gpus_per_dc=None if pool == 32 else pool // k))
                for m in PERIOD_METHODS:
                    res = run(inst, m, limit)
                    P = None if res.plan is None else res.plan.num_pipelines
                    out[(net, model, seed, k, m)] = (res.iteration_time, str(res.status), P)
                print(f"{inst.name}: " + ", ".join(
                    f"{m} {fmt(out[(net, model, seed, k, m)][0])} "
                    f"({out[(net, model, seed, k, m)][1]}, P={out[(net, model, seed, k, m)][2]})"
                    for m in PERIOD_METHODS), flush=True)
    return out


def period_sections(R: dict, cases) -> tuple[list[str], dict]:
    """The summary per network under ``period`` and the detail table; the dp curves."""
    sections, curves = [], {}
    for net, _ in NETWORKS:
        rows = []
        for m in PERIOD_METHODS:
            ratios = []
            for k in (1, 2, 3, 4):
                ratios.append(geomean(R[(net, mo, s, k, m)][0] / R[(net, mo, s, 1, "dp")][0]
                                      for mo, s in cases if R[(net, mo, s, k, m)][0]
                                      and R[(net, mo, s, 1, "dp")][0]))
            own = geomean(R[(net, mo, s, 4, m)][0] / R[(net, mo, s, 1, m)][0] for mo, s in cases
                          if R[(net, mo, s, 4, m)][0] and R[(net, mo, s, 1, m)][0])
            proven = sum(R[(net, mo, s, k, m)][1] == "optimal" for mo, s in cases
                         for k in (1, 2, 3, 4))
            several = sum((R[(net, mo, s, k, m)][2] or 1) > 1 for mo, s in cases
                          for k in (1, 2, 3, 4))
            curves[(net, m)] = ratios
            rows.append([f"`{m}`"] + [fmt(r) for r in ratios] + [
                fmt(None if ratios[3] is None else ratios[3] - 1, pct=True),
                fmt(None if own is None else own - 1, pct=True),
                f"{proven}/{4 * len(cases)}" if m == "dp" else "--",
                f"{several}/{4 * len(cases)}"])
        sections.append(
            f"## Under `period`, pipelines 1..k: {net}\n\nGeometric mean over {len(cases)} "
            f"cases of T / T\\*(1 DC), T\\*(1 DC) the `dp` result under `period` on the same "
            f"GPUs in one DC (where it is not proven optimal, the ratios are against the best "
            f"plan found). 'several pipelines' counts the plans that run more than one.\n\n"
            + table(["method", "1 DC", "2 DCs", "3 DCs", "4 DCs", "4 DCs vs 1-DC optimum",
                     "own 1 -> 4 DC increase", "dp proven optimal", "several pipelines"], rows))
    return sections, curves


def period_detail(R: dict, cases) -> str:
    detail = []
    for net, _ in NETWORKS:
        for model, seed in cases:
            for k in (1, 2, 3, 4):
                cells = []
                for m in PERIOD_METHODS:
                    T, status, P = R[(net, model, seed, k, m)]
                    proven = status == "optimal" or (m != "dp" and status == "feasible")
                    cells.append(status if T is None else fmt(T) + (
                        "" if proven else f" ({status})") + (f", P={P}" if P and P > 1 else ""))
                detail.append([net.split(" MAN")[0].split(" to ")[-1], model, seed, k] + cells)
    return ("## Under `period`: every instance, iteration time (s)\n\n`dp` is marked when the "
            "time limit stopped it before a proof; P = number of pipelines when above 1.\n\n"
            + table(["network", "model", "pool seed", "DCs"] + [f"`{m}`" for m in PERIOD_METHODS],
                    detail))


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    models = ("gpt3-1.3b",) if args.quick else ("gpt3-6.7b", "gpt3-13b", "llama2-7b", "llama2-13b")
    pool = 12 if args.quick else 32  # 12 splits evenly over 1..4 DCs; 32 is the preset's pool
    seeds = (0,) if args.quick else (0, 1, 2)
    limit = args.time_limit or (20.0 if args.quick else 60.0)
    methods, missing = available(METHODS)
    start = time.perf_counter()

    # T[(net, model, seed, k, method)] in seconds (None: no plan)
    T, status = {}, {}
    for model in models:
        for seed in seeds:
            for net, factor in NETWORKS:
                for k in (1, 2, 3, 4):
                    inst = generate("pool", seed, model=model, datacenters=k, degrade=factor,
                                    gpus_per_dc=None if pool == 32 else pool // k)
                    for m in methods:
                        if k == 1 and net != NETWORKS[0][0]:
                            # one DC has no inter-DC link to degrade: the same instance, reused
                            first = (NETWORKS[0][0], model, seed, 1, m)
                            T[(net, model, seed, k, m)] = T[first]
                            status[(net, model, seed, k, m)] = status[first]
                            continue
                        res = run(inst, m, limit)
                        T[(net, model, seed, k, m)] = res.iteration_time
                        status[(net, model, seed, k, m)] = res.status
                    print(f"{inst.name}: " + ", ".join(
                        f"{m} {fmt(T[(net, model, seed, k, m)])}" for m in methods), flush=True)

    cases = [(model, seed) for model in models for seed in seeds]
    sections, curves = [], {}
    for net, _ in NETWORKS:
        rows = []
        for m in methods:
            ratios, own, found = [], [], 0
            for k in (1, 2, 3, 4):
                vals = []
                for model, seed in cases:
                    ref = T[(net, model, seed, 1, "dp")]
                    t = T[(net, model, seed, k, m)]
                    if t is not None and ref:
                        vals.append(t / ref)
                        found += 1
                ratios.append(geomean(vals))
            for model, seed in cases:
                t1, t4 = T[(net, model, seed, 1, m)], T[(net, model, seed, 4, m)]
                if t1 and t4:
                    own.append(t4 / t1)
            curves[(net, m)] = ratios
            inc = None if ratios[0] is None or ratios[3] is None else ratios[3] - 1.0
            rows.append([f"`{m}`"] + [fmt(r) for r in ratios] + [
                fmt(inc, pct=True), fmt(None if geomean(own) is None else geomean(own) - 1, pct=True),
                f"{found}/{4 * len(cases)}"])
        sections.append(
            f"## {net}\n\nGeometric mean over {len(cases)} (model, pool draw) cases of "
            f"T / T\\*(1 DC), the exact optimum of the same GPUs in one DC.\n\n" + table(
                ["method", "1 DC", "2 DCs", "3 DCs", "4 DCs", "4 DCs vs 1-DC optimum",
                 "own 1 -> 4 DC increase", "plans found"], rows))

    detail = []
    for net, _ in NETWORKS:
        for model, seed in cases:
            for k in (1, 2, 3, 4):
                detail.append([net.split(" MAN")[0].split(" to ")[-1], model, seed, k] + [
                    fmt(T[(net, model, seed, k, m)]) if T[(net, model, seed, k, m)] is not None
                    else status[(net, model, seed, k, m)] for m in methods])
    sections.append("## Every instance: iteration time (s)\n\n"
                    + table(["network", "model", "pool seed", "DCs"] + [f"`{m}`" for m in methods],
                            detail))

    R = period_runs(cases, pool, limit)
    psections, pcurves = period_sections(R, cases)
    sections += psections + [period_detail(R, cases)]

    plt = pyplot()
    fig, axes = plt.subplots(1, len(NETWORKS), figsize=(11, 4.2), sharey=False)
    for ax, (net, _) in zip(axes, NETWORKS):
        for m in methods:
            ys = curves[(net, m)]
            xs = [k for k, y in zip((1, 2, 3, 4), ys) if y is not None]
            ax.plot(xs, [y for y in ys if y is not None], label=m, **STYLE.get(m, {}))
        ys = pcurves[(net, "dp")]
        ax.plot([k for k, y in zip((1, 2, 3, 4), ys) if y is not None],
                [y for y in ys if y is not None], label="dp under period (vs its 1 DC)",
                color="black", ls=":", marker="o", mfc="white")
        ax.set_title(net, fontsize=10)
        ax.set_xlabel(f"datacenters the {pool}-GPU pool is split over")
        ax.set_xticks([1, 2, 3, 4])
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("T / T*(1 DC)  (geometric mean, log)")
    axes[-1].legend(fontsize=8)
    fig.suptitle("One pool of GPUs over 1-4 DCs: iteration time relative to the 1-DC optimum")
    intro = (f"Instances: a pool of {pool} GPUs, `generate('pool', seed, model=..., datacenters=k, "
             f"degrade=F{', gpus_per_dc=12 // k' if pool != 32 else ''})` for models "
             f"{', '.join(models)}, pool seeds {', '.join(map(str, seeds))} (each seed draws the "
             f"pool's four GPU types), k = 1..4, M = 32, 1F1B. Time limit {limit:g} s per solve. "
             f"Figure: `{NAME}.png`. 'own 1 -> 4 DC increase' is the method's T at 4 DCs over its "
             f"own T at 1 DC (the quantity the CDynP paper reports as 8.3%), geometric mean. "
             f"The `period` sections rerun the same instances under contract version 3 "
             f"(objective `period`, `pipelines = 1..k`), with the same time limit; the figure's "
             f"dotted curve is `dp` under `period` against its own 1-DC result.")
    publish(NAME, "One to four datacenters", fig, intro, sections, args.quick,
            time.perf_counter() - start, missing)


if __name__ == "__main__":
    main()
