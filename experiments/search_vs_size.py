"""Experiment 4: search time and quality against instance size, for every exact solver and CDynP.

Instances grow along the two axes that drive the search: layers (the first
``blocks`` transformer blocks of Llama-2 7B, plus embedding and head) and
devices (2 DCs x 8 GPUs, then 4 DCs x 16 GPUs, ``metro`` preset). Every run
goes through the comparison harness (``chainpipe.compare.run_sweep``): one
process per run, killed past its limit, its plan re-evaluated by the cost
model. Quality is T over the best T any solver found on the instance; a run
that proves optimality has gap 0.

    python experiments/search_vs_size.py [--quick]
"""

from __future__ import annotations

import tempfile
import time

from chainpipe.compare import run_sweep
from chainpipe.instances import generate
from common import (
    EXACT_SOLVERS,
    STYLE,
    available,
    fmt,
    geomean,
    parse,
    publish,
    pyplot,
    table,
)

NAME = "search_vs_size"


def instances(quick: bool):
    if quick:
        grid = [(2, 2, 4), (6, 2, 4)]
    else:
        grid = [(b, 2, 8) for b in (4, 8, 16, 32)] + [(b, 4, 16) for b in (4, 8, 16, 32)]
    return [generate("metro", 0, model="llama2-7b", blocks=b, datacenters=k, gpus_per_dc=g)
            for b, k, g in grid]


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    limit = args.time_limit or (5.0 if args.quick else 30.0)
    solvers, missing = available(EXACT_SOLVERS)
    insts = instances(args.quick)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chainpipe-search-vs-size-") as out:
        records = run_sweep(insts, solvers, limit, out, jobs=1 if args.quick else 2,
                            progress=False, figures=False)
    by = {(r["instance"], r["solver"]): r for r in records}
    best = {}
    for inst in insts:
        ts = [by[(inst.name, s)]["iteration_time_s"] for s in solvers
              if by.get((inst.name, s), {}).get("iteration_time_s") is not None]
        best[inst.name] = min(ts) if ts else None

    rows = []
    for inst in insts:
        for s in solvers:
            r = by.get((inst.name, s))
            if r is None:
                continue
            T = r["iteration_time_s"]
            rows.append([inst.num_layers, inst.num_devices, inst.num_datacenters, f"`{s}`",
                         r["status"], fmt(r["solve_time_s"], 2),
                         fmt(T), fmt(None if T is None or not best[inst.name] else T / best[inst.name], 4),
                         fmt(r.get("gap"), 4)])
    detail = ("## Every run\n\n" + table(
        ["layers", "devices", "DCs", "solver", "status", "time (s)", "T (s)", "T / best", "gap"],
        rows))

    summary_rows = []
    for s in solvers:
        recs = [by[(i.name, s)] for i in insts if (i.name, s) in by]
        proven = sum(r["status"] in ("optimal", "infeasible") for r in recs)
        ratios = [r["iteration_time_s"] / best[r["instance"]] for r in recs
                  if r["iteration_time_s"] is not None and best[r["instance"]]]
        summary_rows.append([f"`{s}`", f"{proven}/{len(recs)}",
                             fmt(geomean([max(r["solve_time_s"], 1e-3) for r in recs]), 2),
                             fmt(max((r["solve_time_s"] for r in recs), default=None), 2),
                             fmt(geomean(ratios), 4), f"{len(ratios)}/{len(recs)}"])
    summary = ("## Per solver\n\n" + table(
        ["solver", "proven (optimal or infeasible)", "geo-mean time (s)", "max time (s)",
         "geo-mean T / best", "plans found"], summary_rows))

    # an "optimal" claim with a plan worse than another solver's is a solver bug: say so
    wrong = [f"- `{r['solver']}` on {r['instance']}: status optimal with T = {r['iteration_time_s']:.6g} s, "
             f"but another solver found {best[r['instance']]:.6g} s"
             for r in records if r["status"] == "optimal" and r["iteration_time_s"] is not None
             and best[r["instance"]] and r["iteration_time_s"] > best[r["instance"]] * (1 + 1e-6)]
    check = ("## Consistency of optimality claims\n\n"
             + ("\n".join(wrong) if wrong else
                "Every run that claims `optimal` matches the best plan any solver found."))

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.3))
    for s in solvers:
        pts = sorted((i.num_layers * i.num_devices, by[(i.name, s)]) for i in insts
                     if (i.name, s) in by)
        st = STYLE.get(s, {})
        ax1.plot([p[0] for p in pts], [max(p[1]["solve_time_s"], 1e-3) for p in pts], label=s,
                 **st)
        q = [(x, r["iteration_time_s"] / best[r["instance"]]) for x, r in pts
             if r["iteration_time_s"] is not None and best[r["instance"]]]
        if q:
            ax2.plot([p[0] for p in q], [p[1] for p in q], label=s, **st)
    ax1.axhline(limit, color="gray", lw=0.8, ls=":")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("layers x devices")
        ax.grid(alpha=0.3, which="both")
    ax1.set_yscale("log")
    ax1.set_ylabel("solve time (s), dotted: time limit")
    ax2.set_ylabel("T / best T found")
    ax1.legend(fontsize=8)
    fig.suptitle("Search time and plan quality against size (llama2-7b slices, metro clusters)")
    intro = (f"Instances: `generate('metro', 0, model='llama2-7b', blocks=b, datacenters=k, "
             f"gpus_per_dc=g)` for (b, k, g) in "
             f"{', '.join(f'({i.num_layers - 2}, {i.num_datacenters}, {i.num_devices // i.num_datacenters})' for i in insts)}. "
             f"Solvers: {', '.join(solvers)}, one thread each, time limit {limit:g} s, through "
             f"`chainpipe.compare.run_sweep` ({'1 run' if args.quick else '2 runs'} at a time). "
             f"Figure: `{NAME}.png`.")
    publish(NAME, "Search time and quality against size", fig, intro, [summary, check, detail], args.quick,
            time.perf_counter() - start, missing)


if __name__ == "__main__":
    main()
