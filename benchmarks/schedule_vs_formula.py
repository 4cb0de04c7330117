"""The cost model's T, under both objectives, against the simulated schedule's makespan.

For every committed instance (``instances/*``, ``instances/hybrid/*``) and a few
hundred generated ones (presets ``tiny``, ``metro`` and ``pool``, seeds
``0..N-1``, each with the 1F1B and the GPipe schedule; presets ``hybrid-small``
and ``hybrid``, a fifth as many seeds), takes the plan ``dp`` proves optimal
under the ``classic`` objective (``dp`` solves contract versions 1 and 2: a
copy of the instance with objective ``classic`` and one pipeline), simulates
its iteration (:func:`chainpipe.schedule.simulate_pipeline`) and records, for
that one plan, ``classic / makespan`` and ``period / makespan``: the ``T`` that
:func:`chainpipe.plan.evaluate` gives under each objective, over the length of
the concrete schedule. On the smaller sets (:data:`PERIOD_GROUPS`) it also takes
the plan ``dp`` finds under ``period`` itself (one pipeline, within
:data:`PERIOD_LIMIT_S` seconds) and records its ``period / makespan``: a search for
the smallest period is where a period below the makespan would be picked. The
target of contract version 3 (issue 30) is a ``period`` never below the
makespan. Writes ``benchmarks/results/schedule_vs_formula.md``.

    python benchmarks/schedule_vs_formula.py             # 50 seeds per preset and schedule
    python benchmarks/schedule_vs_formula.py --seeds 5   # a quick run
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "schedule_vs_formula.md"
PRESETS = ("tiny", "metro", "pool")
#: presets of hybrid parallelism, run with a fifth of the seeds (each solve is slower)
HYBRID_PRESETS = ("hybrid-small", "hybrid")
COMMITTED = ("small", "medium", "large", "hybrid/small", "hybrid/medium", "hybrid/large")
#: the two ratios reported, by column
RATIOS = ("classic", "period")
#: the sets and presets whose plans under ``period`` are searched too (dp's version-3
#: search is fast there; on the hybrid and large sets it takes minutes to hours yet)
PERIOD_GROUPS = ("small", "hybrid/small", "tiny", "hybrid-small")
#: seconds each search under ``period`` may take
PERIOD_LIMIT_S = 10.0


def with_objective(instance, objective: str):
    """A copy of ``instance`` under ``objective`` with one pipeline (``H`` unchanged)."""
    training = instance.training
    parallelism = dataclasses.replace(training.parallelism, pipelines=(1,))
    return dataclasses.replace(instance, training=dataclasses.replace(
        training, objective=objective, parallelism=parallelism))


def measure(instance, period_optimum: bool = False) -> dict | None:
    """For ``dp``'s classic optimum of ``instance``: its ``T`` under each objective and its
    simulated makespan (``None`` when no plan fits); with ``period_optimum``, also the
    plan ``dp`` finds under ``period`` (:func:`measure_period_optimum`)."""
    import chainpipe as cp
    from chainpipe.plan import evaluate
    from chainpipe.schedule import simulate_pipeline

    classic = with_objective(instance, "classic")
    res = cp.solve(classic, "dp")
    if res.plan is None:
        return None
    period = with_objective(instance, "period")
    ev = evaluate(period, res.plan)
    sim = simulate_pipeline(period, res.plan, progress=False)
    T = {"classic": evaluate(classic, res.plan).iteration_time_s,
         "period": sim.iteration_time_s}
    assert T["classic"] == res.iteration_time  # every T recomputed by evaluate
    row = {"name": instance.name, "schedule": instance.training.schedule,
           "S": res.plan.num_stages, "M": instance.microbatches, "T": T,
           "makespan": sim.makespan_s, "paced_by": ev.pipelines[0].paced_by,
           **{r: T[r] / sim.makespan_s for r in RATIOS}}
    if period_optimum:
        row["period_optimum"] = measure_period_optimum(period)
    return row


def measure_period_optimum(period) -> dict | None:
    """``dp`` under ``period`` (one pipeline, :data:`PERIOD_LIMIT_S`): its status, and its
    plan's ``period / makespan`` (``None`` without a plan)."""
    import chainpipe as cp
    from chainpipe.schedule import simulate_pipeline

    res = cp.solve(period, "dp", time_limit=PERIOD_LIMIT_S)
    if res.plan is None:
        return None
    sim = simulate_pipeline(period, res.plan, progress=False)
    assert sim.iteration_time_s == res.iteration_time  # every T recomputed by evaluate
    return {"status": res.status.value, "ratio": sim.ratio}


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile of ``values`` (not empty)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def distribution_row(label: str, rows: list[dict], key: str) -> str:
    """One table row: ``key / makespan``'s quantiles and how often it is below or above 1."""
    r = [x[key] for x in rows]
    above = sum(1 for x in r if x > 1 + 1e-9)
    below = sum(1 for x in r if x < 1 - 1e-9)
    cells = [label, key, str(len(r))] + [f"{quantile(r, q):.4f}" for q in (0, 0.05, 0.5, 0.95, 1)]
    cells += [f"{100 * below / len(r):.0f}%", f"{100 * above / len(r):.0f}%"]
    return "| " + " | ".join(cells) + " |"


def header() -> list[str]:
    return ["| instances | T under | n | min | p5 | median | p95 | max | T < makespan | "
            "T > makespan |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def committed() -> list[dict]:
    from chainpipe.io import read
    from chainpipe.paths import instance_files

    rows = []
    for name in COMMITTED:
        for path in instance_files([ROOT / "instances" / name]):
            row = measure(read(path), name in PERIOD_GROUPS)
            if row is not None:
                row["group"] = name
                rows.append(row)
    return rows


def generated(seeds: int) -> list[dict]:
    from chainpipe.instances import generate

    rows = []
    runs = [(p, seeds) for p in PRESETS] + [(p, max(seeds // 5, 1)) for p in HYBRID_PRESETS]
    for preset, n in runs:
        for schedule in ("1f1b", "gpipe"):
            for seed in range(n):
                row = measure(generate(preset, seed=seed, schedule=schedule),
                              preset in PERIOD_GROUPS)
                if row is not None:
                    row["group"] = preset
                    rows.append(row)
    return rows


def tables(rows: list[dict]) -> list[str]:
    """The distribution tables: by schedule, by set and schedule, by what paces 1F1B."""
    out = ["### By schedule", ""] + header()
    for schedule in ("1f1b", "gpipe"):
        mine = [r for r in rows if r["schedule"] == schedule]
        out += [distribution_row(f"all, {schedule}", mine, k) for k in RATIOS if mine]
    out += ["", "### By set and schedule", ""] + header()
    for group in dict.fromkeys(r["group"] for r in rows):
        for schedule in ("1f1b", "gpipe"):
            mine = [r for r in rows if r["group"] == group and r["schedule"] == schedule]
            out += [distribution_row(f"{group}, {schedule}", mine, k) for k in RATIOS if mine]
    out += ["", "### 1F1B by what paces the plan under `period`", ""] + header()
    for paced in ("device", "link", "loop"):
        mine = [r for r in rows if r["schedule"] == "1f1b" and r["paced_by"] == paced]
        out += [distribution_row(f"1f1b, paced by a {paced}", mine, k) for k in RATIOS if mine]
    return out


def verdict(rows: list[dict]) -> list[str]:
    """The target, in words: is ``period`` ever below the makespan, and by how much above."""
    p = [r["period"] for r in rows]
    below = [r for r in rows if r["period"] < 1 - 1e-9]
    c_below = sum(1 for r in rows if r["classic"] < 1 - 1e-9)
    words = (f"**Target: `period` never below the makespan.** Over the {len(rows)} plans, "
             f"`period / makespan` is {min(p):.4f} at least, {quantile(p, 0.5):.4f} at the "
             f"median and {max(p):.4f} at most (p95 {quantile(p, 0.95):.4f}): ")
    if below:
        worst = min(below, key=lambda r: r["period"])
        words += (f"below 1 on {len(below)} plan(s), the worst {worst['name']} "
                  f"({worst['schedule']}, {worst['period']:.4f}). ")
    else:
        words += "never below 1. "
    words += (f"`classic / makespan` is below 1 on {c_below} of them (down to "
              f"{min(r['classic'] for r in rows):.4f}).")
    opt = [r["period_optimum"]["ratio"] for r in rows if r.get("period_optimum")]
    if opt:
        low = sum(1 for x in opt if x < 1 - 1e-9)
        words += (f" On the {len(opt)} plans `dp` finds under `period` itself "
                  f"({', '.join(PERIOD_GROUPS)}), `period / makespan` runs from "
                  f"{min(opt):.4f} to {max(opt):.4f}, below 1 on {low}.")
    return [words]


def period_optima(rows: list[dict]) -> list[str]:
    """The table of the plans ``dp`` finds under ``period`` (:data:`PERIOD_GROUPS`)."""
    found = [r for r in rows if r.get("period_optimum")]
    if not found:
        return []
    out = ["### The plans `dp` finds under `period`", "",
           f"On {', '.join(PERIOD_GROUPS)}: the plan `dp` returns under `period` (one pipeline, "
           f"{PERIOD_LIMIT_S:g} s at most; `optimal` on "
           f"{sum(r['period_optimum']['status'] == 'optimal' for r in found)} of {len(found)}), "
           "its `period / makespan`.", ""] + header()
    for schedule in ("1f1b", "gpipe"):
        mine = [{"period": r["period_optimum"]["ratio"]} for r in found
                if r["schedule"] == schedule]
        if mine:
            out.append(distribution_row(f"{', '.join(PERIOD_GROUPS)}; {schedule}", mine,
                                        "period"))
    return out


def committed_table(rows: list[dict]) -> list[str]:
    mine = [r for r in rows if r["group"] in COMMITTED]
    out = ["### Committed instances", "",
           "| instance | schedule | S | M | paced by (period) | classic T (s) | period T (s) | "
           "makespan (s) | classic / makespan | period / makespan |",
           "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in mine:
        out.append(f"| {r['name']} | {r['schedule']} | {r['S']} | {r['M']} | {r['paced_by']} "
                   f"| {r['T']['classic']:.6g} | {r['T']['period']:.6g} | {r['makespan']:.6g} "
                   f"| {r['classic']:.4f} | {r['period']:.4f} |")
    return out


def report(rows: list[dict], seeds: int, elapsed: float) -> str:
    out = [
        "## The formula T against the simulated schedule",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}. Produced by "
        f"`python benchmarks/schedule_vs_formula.py --seeds {seeds}` in {elapsed:.0f} s.",
        "",
        "For the plan `dp` proves optimal under the `classic` objective (one pipeline) of each "
        "instance: `T / makespan`, the cost model's iteration time of that plan under "
        "`classic` and under `period` (contract version 3) over the makespan of its simulated "
        "schedule (`docs/schedule.md`). Above 1 the formula is pessimistic, below 1 "
        "optimistic. Committed: every set under `instances/`. Generated: presets "
        f"{', '.join(PRESETS)}, seeds 0-{seeds - 1}, and {', '.join(HYBRID_PRESETS)}, seeds "
        f"0-{max(seeds // 5, 1) - 1}, each run once with the 1F1B and once with the GPipe "
        "schedule (instances without a feasible plan skipped).",
        "",
    ] + verdict(rows) + [""] + tables(rows) + [""] + period_optima(rows) + [""] \
        + committed_table(rows)
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50, help="seeds per preset and schedule")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = committed() + generated(args.seeds)
    text = report(rows, args.seeds, time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
