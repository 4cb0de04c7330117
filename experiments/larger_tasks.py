"""Experiment 2: model sizes from 1.3B to 175B parameters on one and the same cluster.

The cluster is the ``pool`` preset grown to 128 GPUs (4 DCs x 32, four GPU
types, 100 Gbit/s MAN links); only the model changes (the generator draws
each part of an instance from its own stream, so the GPUs and links stay the
same). M = 8 microbatches for every model, so that the largest models fit
with pipeline parallelism alone. Each method's iteration time is divided by
the exact optimum (``dp``) of the same instance.

    python experiments/larger_tasks.py [--quick]
"""

from __future__ import annotations

import time

from chainpipe.instances import generate
from chainpipe.instances.models import model_shape
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

NAME = "larger_tasks"
MODELS = ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama2-7b", "gpt3-13b", "llama2-13b",
          "llama2-70b", "gpt3-175b")


def billions(model: str, inst) -> float:
    return sum(ly.params for ly in inst.layers) / 1e9


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    models = ("gpt3-1.3b", "gpt3-13b", "llama2-70b") if args.quick else MODELS
    seeds = (0,) if args.quick else (0, 1)
    limit = args.time_limit or (20.0 if args.quick else 60.0)
    methods, missing = available(METHODS)
    start = time.perf_counter()

    T, status, size = {}, {}, {}
    for seed in seeds:
        for model in models:
            model_shape(model)
            inst = generate("pool", seed, model=model, datacenters=4, gpus_per_dc=32,
                            microbatches=8)
            size[model] = billions(model, inst)
            for m in methods:
                res = run(inst, m, limit)
                T[(seed, model, m)] = res.iteration_time
                status[(seed, model, m)] = res.status
            print(f"{inst.name}: " + ", ".join(f"{m} {fmt(T[(seed, model, m)])}" for m in methods),
                  flush=True)

    rows, curves = [], {}
    for m in methods:
        ratios = []
        for model in models:
            vals = [T[(s, model, m)] / T[(s, model, "dp")] for s in seeds
                    if T[(s, model, m)] is not None and T[(s, model, "dp")]]
            ratios.append(geomean(vals))
        curves[m] = ratios
        found = sum(T[(s, model, m)] is not None for s in seeds for model in models)
        rows.append([f"`{m}`"] + [fmt(r) for r in ratios] + [f"{found}/{len(seeds) * len(models)}"])
    summary = ("## Iteration time relative to the exact optimum\n\nGeometric mean over the "
               f"{len(seeds)} cluster draw(s) of T / T\\*(dp); '--' where the method found no "
               "plan.\n\n" + table(
                   ["method"] + [f"{m} ({size[m]:.1f}B)" for m in models] + ["plans found"], rows))

    detail = []
    for seed in seeds:
        for model in models:
            detail.append([seed, model] + [
                fmt(T[(seed, model, m)]) if T[(seed, model, m)] is not None
                else status[(seed, model, m)] for m in methods])
    detail_md = ("## Every instance: iteration time (s), or the status when there is no plan\n\n"
                 + table(["cluster seed", "model"] + [f"`{m}`" for m in methods], detail))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = list(range(len(models)))
    for m in methods:
        pts = [(x, y) for x, y in zip(xs, curves[m]) if y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=m, **STYLE.get(m, {}))
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{m}\n{size[m]:.1f}B" for m in models], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("T / T*(dp)  (log scale)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Larger models on one 128-GPU, 4-DC cluster (M = 8)")
    intro = (f"Instances: `generate('pool', seed, model=..., datacenters=4, gpus_per_dc=32, "
             f"microbatches=8)`, cluster seeds {', '.join(map(str, seeds))}; parameter counts "
             f"are the instance's own. Time limit {limit:g} s per solve. Figure: `{NAME}.png`. "
             "A model that needs more memory than pipeline parallelism over these GPUs offers is "
             "`infeasible` for the exact solver (a proof), `no_solution` for a baseline.")
    publish(NAME, "Larger tasks on the same cluster", fig, intro, [summary, detail_md], args.quick,
            time.perf_counter() - start, missing)


if __name__ == "__main__":
    main()
