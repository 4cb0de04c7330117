"""Benchmark: a 1,000-job online simulation on the 9-DC meshed preset, every policy.

What ``chainpipe simulate --preset metro-mesh --jobs 1000 --out DIR`` does, in
this process: every policy in turn on the same jobs and background traffic,
one planner (and its solve cache) shared by all, then the files written.
Measured with ``time.process_time()`` (the machine is shared): the whole
command, each policy, the part spent in solver calls, and the CPU time after
every 250 jobs resolved (how it scales with the stream's length). Target
(issue 18): under 5 minutes.

    python benchmarks/online.py [--jobs N]

Writes ``benchmarks/results/online.md``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chainpipe.online.jobs import job_stream  # noqa: E402
from chainpipe.online.network import Network  # noqa: E402
from chainpipe.online.offers import Planner  # noqa: E402
from chainpipe.online.policies import POLICIES  # noqa: E402
from chainpipe.online.presets import preset  # noqa: E402
from chainpipe.online.report import metrics, write_outputs  # noqa: E402
from chainpipe.online.simulator import make_policy, simulate  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "online.md"
TARGET_S = 300.0
STEP = 250


def measure(jobs: int, rate: float | None) -> tuple[list[str], float]:
    """Every policy on ``jobs`` requests of ``metro-mesh`` (at ``rate`` per hour, or the
    preset's), then the files written; the result's lines and the whole command's CPU."""
    scenario = preset("metro-mesh").with_jobs(jobs)
    if rate is not None:
        scenario = scenario.with_rate(rate)
    seed = scenario.seed
    start_all, wall = time.process_time(), time.perf_counter()
    network = Network(scenario)
    planner = Planner(network, scenario.planning)
    stream = job_stream(scenario, seed)
    rows, runs = [], []
    for name in POLICIES:
        marks, count = [], [0]
        t0 = time.process_time()

        def tick(t0=t0, marks=marks, count=count):
            count[0] += 1
            if count[0] % STEP == 0:
                marks.append(time.process_time() - t0)

        run = simulate(scenario, make_policy(name, planner), seed, network=network, jobs=stream,
                       on_resolved=tick)
        cpu = time.process_time() - t0
        runs.append(run)
        rows.append((name, cpu, run.solver_calls, run.solve_cpu_s, marks, metrics(run)))
        print(f"{scenario.jobs.arrivals_per_hour:g}/h {name}: {cpu:.1f} s CPU, "
              f"{run.solver_calls} solver calls", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.process_time()
        write_outputs(runs, scenario, seed, Path(tmp))
        write_cpu = time.process_time() - t0
    total = time.process_time() - start_all
    elapsed = time.perf_counter() - wall
    option = "" if rate is None else f" with `jobs.arrivals_per_hour` = {rate:g}"
    lines = [
        f"### {scenario.jobs.arrivals_per_hour:g} arrivals per hour", "",
        f"The work of `chainpipe simulate --preset metro-mesh --jobs {jobs} --out DIR`{option} "
        f"(seed {seed}, every policy). **Whole command: {total:.0f} s of CPU ({elapsed:.0f} s "
        f"wall-clock); target under {TARGET_S:.0f} s: "
        f"{'met' if total < TARGET_S else 'NOT met'}.** Writing the files took "
        f"{write_cpu:.1f} s; {planner.solves} distinct offers were solved.", "",
        "| " + " | ".join(["policy", "CPU (s)", "solver calls", "in solvers (s)", "share"]
                          + [f"CPU after {k * STEP} jobs" for k in range(1, jobs // STEP + 1)]
                          + ["blocked", "mean T (s)"]) + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * (jobs // STEP) + "---:|---:|",
    ]
    for name, cpu, calls, solve_s, marks, m in rows:
        mean_t = f"{m.mean_T:.4f}" if m.mean_T is not None else "-"
        lines.append(
            f"| {name} | {cpu:.1f} | {calls} | {solve_s:.1f} | "
            f"{solve_s / cpu if cpu else 0:.0%} | " + "".join(f"{x:.1f} | " for x in marks)
            + f"{m.blocked} | {mean_t} |")
    forecast = next((r.extra["forecast"] for r in runs if "forecast" in r.extra), None)
    if forecast:
        lines += ["", "Forecasts of `gmc-mdp` in this run (one step ahead, every span and DC, "
                  "loads as fractions of capacity):", "",
                  "| method | forecasts | MAE | RMSE |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {e['n']} | {e['mae']:.4f} | {e['rmse']:.4f} |"
                  for k, e in forecast.items()]
    return lines + [""], total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rates", default="preset,24",
                    help="arrival rates per hour, 'preset' for the preset's (default: %(default)s)")
    args = ap.parse_args()
    lines = [
        f"## Online simulation: {args.jobs:,} jobs on the 9-DC meshed metro network", "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, shared by other "
        "work: times are CPU (`time.process_time()`) of this one process. Produced by "
        "`python benchmarks/online.py`. Each policy runs in turn on the same jobs and "
        "background traffic, one planner and its solve cache shared by all, as the command "
        "does; `CPU after N jobs` is the policy's CPU once N requests were resolved.", "",
    ]
    for text in args.rates.split(","):
        part, _ = measure(args.jobs, None if text == "preset" else float(text))
        lines += part
    lines += ["Solver calls are cache misses: a policy reuses the plans of every offer an "
              "earlier policy (or itself) already solved, so a policy run alone costs more than "
              "its row (the first, `first-fit`, pays for its own cache only)."]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
