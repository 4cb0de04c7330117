"""``make demo``: compare every available solver on the committed small set.

Runs ``chainpipe compare instances/small --solvers all`` with a short time
limit into ``out/demo`` (every run in its own process), prints the summary
table, draws the Gantt chart of the best plan found for the instance with the
most datacenters, and says where everything is. ``python -m chainpipe.demo
--help`` for the options.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .instance import InstanceError
from .io import read
from .plan import Plan

ROOT = Path(__file__).resolve().parents[1]


def _gantt_of_best(records: list[dict], out: Path) -> Path | None:
    from .gantt import gantt

    with_plan = [r for r in records if r.get("plan") and r.get("iteration_time_s") is not None]
    if not with_plan:
        return None
    inst_rec = max(with_plan, key=lambda r: (r["num_datacenters"], r["num_devices"],
                                             r["num_layers"]))
    best = min((r for r in with_plan if r["instance_path"] == inst_rec["instance_path"]),
               key=lambda r: r["iteration_time_s"])
    inst = read(best["instance_path"])
    path = out / f"gantt_{inst.name}.png"
    gantt(inst, Plan.from_dict(best["plan"]), path=path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chainpipe.demo", description=__doc__.split("\n")[0])
    p.add_argument("--instances", default=str(ROOT / "instances" / "small"))
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    p.add_argument("--out", default="out/demo", metavar="DIR")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already in DIR/results.jsonl instead of starting afresh")
    args = p.parse_args(argv)

    from .compare import Interrupted, run_sweep
    from .compare.metrics import best_known
    from .compare.report import terminal_summary
    from .solve import available_solvers

    out = Path(args.out)
    solvers = [s.name for s in available_solvers()]
    if not args.resume and (out / "results.jsonl").exists():
        (out / "results.jsonl").unlink()
    print(f"chainpipe demo: {len(solvers)} solvers ({', '.join(solvers)}) on {args.instances}, "
          f"time limit {args.time_limit:g} s, {args.jobs} run(s) at a time, each in its own "
          f"process with 1 thread", flush=True)
    try:
        records = run_sweep([args.instances], solvers, args.time_limit, out, jobs=args.jobs)
    except InstanceError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(exc.line("rerun with --resume to go on from there"), file=sys.stderr)
        return exc.exit_status
    print()
    print(terminal_summary(records))
    conflicts = [c for b in best_known(records).values() for c in b["conflicts"]]
    if conflicts:
        print()
        print("CONTRADICTIONS between solvers:")
        for c in conflicts:
            print(f"  {c}")
    gantt_path = _gantt_of_best(records, out)
    print()
    print(f"results:  {out / 'results.csv'} (one row per run), {out / 'results.jsonl'} (with plans)")
    print(f"tables:   {out / 'summary.md'} (per solver and per instance, with definitions)")
    print("figures:  " + ", ".join(str(f) for f in sorted(out.glob("*.png"))))
    if gantt_path is not None:
        print(f"pipeline: {gantt_path} (Gantt of the best plan found for the instance with "
              f"the most datacenters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
