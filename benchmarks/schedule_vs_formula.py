"""The cost model's T against the simulated schedule's makespan, over many instances.

For every committed instance (``instances/small``, ``medium``, ``large``) and a
few hundred generated ones (presets ``tiny``, ``metro`` and ``pool``, seeds
``0..N-1``, each with the 1F1B and the GPipe schedule), takes the optimal plan
of ``dp``, simulates its iteration (:func:`chainpipe.schedule.simulate_pipeline`)
and records ``T / makespan``. Also compares the schedules' own closed forms
(:func:`chainpipe.schedule.gpipe_makespan`, and for 1F1B the cycle of
:func:`chainpipe.schedule.one_f_one_b_cycle`) with the simulation. Writes
``benchmarks/results/schedule_vs_formula.md``.

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


def measure(instance) -> dict | None:
    """T, makespan and their ratio for the optimal plan of ``instance`` (None if infeasible)."""
    import chainpipe as cp
    from chainpipe.plan import evaluate
    from chainpipe.schedule import gpipe_makespan, one_f_one_b_cycle, simulate_pipeline

    res = cp.solve(instance, "dp")
    if res.plan is None:
        return None
    ev = evaluate(instance, res.plan)
    sim = simulate_pipeline(instance, res.plan, progress=False)
    S = res.plan.num_stages
    row = {"name": instance.name, "schedule": instance.training.schedule, "S": S,
           "M": instance.microbatches, "T": sim.iteration_time_s, "makespan": sim.makespan_s,
           "ratio": sim.ratio, "paced_by": "link" if ev.bottleneck.startswith("link") else
           ("last stage" if ev.bottleneck.startswith(f"stage {S - 1} ") else "an earlier stage")}
    if instance.training.schedule == "gpipe":
        row["estimate"] = gpipe_makespan(instance, res.plan, ev) / sim.makespan_s
    else:
        cycle = one_f_one_b_cycle(ev, instance.microbatches)
        row["estimate"] = (ev.fill_drain_s + (instance.microbatches - 1) * cycle
                           + ev.sync_s) / sim.makespan_s
    return row


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolation quantile of ``values`` (not empty)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def distribution_row(label: str, rows: list[dict], key: str = "ratio") -> str:
    r = [x[key] for x in rows]
    above = sum(1 for x in r if x > 1 + 1e-9)
    below = sum(1 for x in r if x < 1 - 1e-9)
    cells = [label, str(len(r))] + [f"{quantile(r, q):.4f}" for q in (0, 0.05, 0.5, 0.95, 1)]
    cells += [f"{100 * below / len(r):.0f}%", f"{100 * above / len(r):.0f}%"]
    return "| " + " | ".join(cells) + " |"


def header(what: str = "T") -> list[str]:
    return [f"| instances | n | min | p5 | median | p95 | max | {what} < makespan | "
            f"{what} > makespan |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]


def committed(sets: list[str]) -> list[dict]:
    from chainpipe.io import read
    from chainpipe.paths import instance_files

    rows = []
    for name in sets:
        for path in instance_files([ROOT / "instances" / name]):
            row = measure(read(path))
            if row is not None:
                row["group"] = name
                rows.append(row)
    return rows


def generated(seeds: int) -> list[dict]:
    from chainpipe.instances import generate

    rows = []
    for preset in PRESETS:
        for schedule in ("1f1b", "gpipe"):
            for seed in range(seeds):
                inst = generate(preset, seed=seed)
                inst = dataclasses.replace(
                    inst, training=dataclasses.replace(inst.training, schedule=schedule))
                row = measure(inst)
                if row is not None:
                    row["group"] = preset
                    rows.append(row)
    return rows


def report(rows: list[dict], seeds: int, elapsed: float) -> str:
    out = [
        "## The formula T against the simulated schedule",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}. Produced by "
        f"`python benchmarks/schedule_vs_formula.py --seeds {seeds}` in {elapsed:.0f} s.",
        "",
        "For the optimal plan (`dp`) of each instance: `T / makespan`, the cost model's "
        "iteration time over the makespan of the simulated schedule of the same plan "
        "(`docs/schedule.md`). Above 1 the formula is pessimistic, below 1 optimistic. "
        f"Generated: presets {', '.join(PRESETS)}, seeds 0-{seeds - 1}, each run once with "
        "the 1F1B and once with the GPipe schedule (instances without a feasible plan "
        "skipped).",
        "",
        "### By schedule", "",
    ] + header()
    for schedule in ("1f1b", "gpipe"):
        mine = [r for r in rows if r["schedule"] == schedule]
        if mine:
            out.append(distribution_row(f"all, {schedule}", mine))
    out += ["", "### By set and schedule", ""] + header()
    for group in dict.fromkeys(r["group"] for r in rows):
        for schedule in ("1f1b", "gpipe"):
            mine = [r for r in rows if r["group"] == group and r["schedule"] == schedule]
            if mine:
                out.append(distribution_row(f"{group}, {schedule}", mine))
    out += ["", "### 1F1B by what paces the steady state", ""] + header()
    for paced in ("last stage", "an earlier stage", "link"):
        mine = [r for r in rows if r["schedule"] == "1f1b" and r["paced_by"] == paced]
        if mine:
            who = paced if paced == "an earlier stage" else f"the {paced}"
            out.append(distribution_row(f"1f1b, paced by {who}", mine))
    out += ["", "### The schedules' own closed forms", "",
            "The same plans, `estimate / makespan` where the estimate is, for GPipe, its exact "
            "closed form `fill + (M-1) (max(F_max, U_max) + max(B_max, U_max))` and, for 1F1B, "
            "`fill + (M-1) cycle` with the cycle that counts the stash-limit loops "
            "(`chainpipe.schedule.one_f_one_b_cycle`).", ""] + header("estimate")
    for schedule in ("1f1b", "gpipe"):
        mine = [r for r in rows if r["schedule"] == schedule]
        if mine:
            out.append(distribution_row(f"all, {schedule}", mine, "estimate"))
    committed_rows = [r for r in rows if r["group"] in ("small", "medium", "large")]
    if committed_rows:
        out += ["", "### Committed instances", "",
                "| instance | schedule | S | M | paced by | T (s) | makespan (s) | T / makespan |",
                "|---|---|---:|---:|---|---:|---:|---:|"]
        for r in committed_rows:
            out.append(f"| {r['name']} | {r['schedule']} | {r['S']} | {r['M']} | {r['paced_by']} "
                       f"| {r['T']:.6g} | {r['makespan']:.6g} | {r['ratio']:.4f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50, help="seeds per preset and schedule")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = committed(["small", "medium", "large"]) + generated(args.seeds)
    text = report(rows, args.seeds, time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
