"""What the classic formula costs: the classic optimum's simulated makespan against the period optimum's.

For every committed instance (``instances/*``, ``instances/hybrid/*``,
``instances/v3/*``) and for generated ones whose MAN latency is set from 0.1 to
5 ms, two plans of one pipeline are found by the exact DP: the optimum under
the ``classic`` objective (``sum + (M - 1) max``, versions 1 and 2) and the
optimum under ``period`` (contract version 3: the schedule's own period, 1F1B's
round-trip loops and GPipe's two phases). Both are then run by the block
simulator (:func:`chainpipe.schedule.simulate_pipeline`) and their makespans
compared: ``makespan(classic optimum) / makespan(period optimum)`` is what
planning with the classic formula costs once the schedule runs. One pipeline on
both sides, so only the objective differs. A ``period`` search stopped by the
time limit keeps its best plan (at worst the classic optimum) and is marked.

    python experiments/classic_cost.py [--quick] [--time-limit S]
"""

from __future__ import annotations

import time
from pathlib import Path

from what_runs import makespan, solve, status_mark, v3_copy, with_man

import chainpipe as cp
from chainpipe.instances import generate
from chainpipe.paths import instance_files
from chainpipe.plan import evaluate
from common import fmt, geomean, parse, publish, pyplot, table

NAME = "classic_cost"
ROOT = Path(__file__).resolve().parents[1]
SETS = ("small", "medium", "large", "hybrid/small", "hybrid/medium", "hybrid/large",
        "v3/small", "v3/medium")
LATENCIES_MS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def measure(instance, limit: float) -> dict | None:
    """Both optima of ``instance`` (one pipeline) and their simulated makespans."""
    classic = v3_copy(instance, "classic")
    period = v3_copy(instance, "period")
    c = solve(classic, limit)
    if c.plan is None:
        return None
    p = solve(period, limit)
    mc = makespan(period, c.plan)
    under_period = evaluate(period, c.plan).pipelines[0]
    mp = makespan(period, p.plan) if p.plan is not None else None
    return {"name": instance.name, "schedule": instance.training.schedule,
            "M": instance.microbatches, "S_c": c.plan.num_stages,
            "S_p": None if p.plan is None else p.plan.num_stages,
            "T_classic": c.T, "status_c": c.status, "mk_c": mc,
            "T_period": p.T, "status_p": p.status, "mk_p": mp,
            "ratio": None if mp is None else mc / mp,
            "under": c.T / mc, "seconds": c.seconds + p.seconds,
            "paced": under_period.paced_by}


def committed(limit: float, sets) -> list[dict]:
    rows = []
    for name in sets:
        for path in instance_files([ROOT / "instances" / name]):
            row = measure(cp.read(path), limit)
            if row is None:
                print(f"{path.name}: no plan (infeasible)", flush=True)
                continue
            row["group"] = name
            rows.append(row)
            print(f"{row['name']}: ratio {fmt(row['ratio'], 4)} ({row['status_p']}, "
                  f"{row['seconds']:.1f} s)", flush=True)
    return rows


def generated(limit: float, models, seeds, schedules) -> list[dict]:
    rows = []
    for model in models:
        for seed in seeds:
            for sched in schedules:
                base = generate("hybrid", seed, model=model, datacenters=4, gpus_per_dc=8,
                                microbatches=32, schedule=sched)
                for lat in LATENCIES_MS:
                    row = measure(with_man(base, latency_s=lat * 1e-3), limit)
                    if row is None:
                        continue
                    row.update(group=f"{model} {sched}", latency_ms=lat, model=model, seed=seed)
                    rows.append(row)
                    print(f"{base.name} lat {lat} ms: ratio {fmt(row['ratio'], 4)} "
                          f"({row['status_p']}, {row['seconds']:.1f} s)", flush=True)
    return rows


def _cost(r) -> str:
    """The ratio as a signed percentage (the classic optimum's extra time)."""
    return fmt(None if r is None else r - 1.0, pct=True)


def _names(rows) -> str:
    """The instances' names, in backticks, or ``none``."""
    return ", ".join(f"`{r['name']}`" for r in rows) or "none"


def committed_section(rows) -> str:
    body = [[r["group"], r["name"], r["schedule"], r["M"], f"{r['S_c']} / {r['S_p']}",
             fmt(r["T_classic"], 4), fmt(r["mk_c"], 4), fmt(r["under"], 3),
             fmt(r["T_period"], 4) + status_mark(r["status_p"]), fmt(r["mk_p"], 4),
             _cost(r["ratio"]), r["paced"], f"{r['seconds']:.1f}"] for r in rows]
    worse = [r for r in rows if r["ratio"] is not None and r["ratio"] > 1 + 1e-6]
    better = [r for r in rows if r["ratio"] is not None and r["ratio"] < 1 - 1e-6]
    open_ = [r for r in rows if r["status_p"] != "optimal"]
    top = max(rows, key=lambda r: r["ratio"] or 0.0)
    text = (f"On {len(rows)} committed instances with a plan, the classic optimum's schedule "
            f"is slower than the period optimum's on {len(worse)} and faster on {len(better)} "
            f"(the period is an upper bound on the makespan, not the makespan itself: "
            f"{_names(better)}); "
            f"the largest cost is "
            f"{_cost(top['ratio'])} (`{top['name']}`), the geometric mean "
            f"{_cost(geomean(r['ratio'] for r in rows))}. 'classic T / its makespan' is how "
            f"far the classic formula promises below what its own plan's schedule takes. "
            f"{len(open_)} period searches were stopped by the time limit (status shown after "
            f"T): their plan is the best found, so the cost shown is a lower bound on what "
            f"the classic formula costs there.")
    return "## Committed instances\n\n" + text + "\n\n" + table(
        ["set", "instance", "schedule", "M", "stages (classic / period opt.)",
         "classic T (s)", "its makespan (s)", "classic T / makespan", "period T* (s)",
         "its makespan (s)", "classic optimum's cost", "classic opt. under period paced by",
         "dp s"], body)


def generated_section(rows, limit: float) -> tuple[str, dict]:
    groups = sorted({r["group"] for r in rows})
    curves, body = {}, []
    for g in groups:
        mine = [r for r in rows if r["group"] == g]
        curve = []
        for lat in LATENCIES_MS:
            at = [r for r in mine if r["latency_ms"] == lat]
            rs = [r["ratio"] for r in at if r["ratio"] is not None]
            curve.append((geomean(rs), max(rs, default=None)))
            body.append([g, lat, len(at), _cost(geomean(rs)), _cost(max(rs, default=None)),
                         fmt(sum(r["S_c"] for r in at) / max(len(at), 1), 1),
                         fmt(sum(r["S_p"] or 0 for r in at) / max(len(at), 1), 1),
                         sum(r["paced"] == "loop" for r in at),
                         sum(r["status_p"] == "optimal" for r in at)])
        curves[g] = curve
    low = [r["ratio"] for r in rows if r["latency_ms"] == LATENCIES_MS[0]
           and r["schedule"] == "1f1b" and r["ratio"] is not None]
    high = [r["ratio"] for r in rows if r["latency_ms"] == LATENCIES_MS[-1]
            and r["schedule"] == "1f1b" and r["ratio"] is not None]
    gp = [r["ratio"] for r in rows if r["schedule"] == "gpipe" and r["ratio"] is not None]
    text = (f"`generate('hybrid', seed, model, datacenters=4, gpus_per_dc=8, microbatches=32, "
            f"schedule)` (32 GPUs, d and t in {{1,2,4,8}}, ZeRO-1), every MAN link's one-way "
            f"latency set to the value shown; {limit:g} s per search. Under 1F1B the classic "
            f"optimum already costs {_cost(geomean(low))} (geometric mean) at "
            f"{LATENCIES_MS[0]:g} ms and {_cost(geomean(high))} at {LATENCIES_MS[-1]:g} ms: "
            f"the loops that pace it carry each boundary's round trip `Q = 2 (latency + U)`, "
            f"and the activation transfer `U` weighs as much as the latency; larger models have "
            f"longer stages, so the loop matters less. Under GPipe (the period is the two "
            f"phases' sum) the cost is at most {_cost(max(gp, default=None))}.")
    return "## Generated instances, MAN latency 0.1 to 5 ms\n\n" + text + "\n\n" + table(
        ["model, schedule", "MAN latency (ms)", "instances", "cost (geo. mean)",
         "cost (max)", "mean stages, classic opt.", "mean stages, period opt.",
         "classic opt. paced by a 1F1B loop", "period proven optimal"], body), curves


def figure(curves):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for g, curve in curves.items():
        ys = [c[0] for c in curve]
        ax.plot(LATENCIES_MS, [100 * (y - 1) if y else float("nan") for y in ys], marker="o",
                label=f"{g} (geo. mean)")
        ax.plot(LATENCIES_MS, [100 * (c[1] - 1) if c[1] else float("nan") for c in curve],
                ls=":", color=ax.lines[-1].get_color(), label=f"{g} (max)")
    ax.set_xscale("log")
    ax.set_xlabel("one-way MAN latency per link (ms)")
    ax.set_ylabel("makespan(classic opt.) / makespan(period opt.) - 1 (%)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("What the classic formula costs, by MAN latency")
    return fig


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    limit = args.time_limit or (10.0 if args.quick else 30.0)
    start = time.perf_counter()
    sets = ("small", "hybrid/small", "v3/small") if args.quick else SETS
    rows_c = committed(limit, sets)
    models = ("gpt3-1.3b",) if args.quick else ("gpt3-1.3b", "llama2-7b")
    seeds = (0,) if args.quick else (0, 1, 2)
    rows_g = generated(limit, models, seeds, ("1f1b", "gpipe"))
    sec_g, curves = generated_section(rows_g, limit)
    intro = (f"Sets: {', '.join(sets)}. Each instance is planned twice with one pipeline by "
             f"`dp` (its `classic` copy and its `period` copy, "
             f"`experiments/what_runs.py: v3_copy`); both plans are simulated on the period "
             f"copy. 'cost' = makespan(classic optimum) / makespan(period optimum) - 1: what "
             f"an iteration loses when the plan comes from the classic formula. Time limit "
             f"{limit:g} s per search. Figure: `{NAME}.png`.")
    publish(NAME, "What the classic formula costs", figure(curves), intro,
            [committed_section(rows_c), sec_g], args.quick, time.perf_counter() - start, {})


if __name__ == "__main__":
    main()
