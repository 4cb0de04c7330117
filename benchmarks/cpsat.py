"""CP-SAT model size, time to optimality and bound quality, with 1 and 8 workers.

For every instance of ``instances/small`` and ``instances/medium`` it runs the exact DP
(the reference optimum) and ``cpsat`` with each worker count, and reports the model
size (stage arcs, boundary arcs, constraints), the status, the exact plan time against
the DP optimum, the derived lower bound and gap, the time of the first CP-SAT plan
and of the first plan within 1e-4 of the optimum (read from the anytime trace), and
the total solve time. Writes ``benchmarks/results/cpsat.md``.

    python benchmarks/cpsat.py                       # 60 s limit, 1 and 8 workers
    python benchmarks/cpsat.py --time-limit 10 --sets small --workers 1
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cpsat.md"


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def _first(trace, pred):
    for t, inc, _ in trace:
        if inc is not None and pred(inc):
            return t
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--sets", nargs="+", default=["small", "medium"])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import chainpipe as cp

    lines = [
        "## CP-SAT model (`cpsat`)", "",
        f"Machine: 2 cores ({platform.machine()}, {os.cpu_count()} logical CPUs, shared with "
        f"other jobs while measured), Python {platform.python_version()}, OR-Tools "
        f"{__import__('ortools').__version__}. Time limit {args.time_limit:g} s per run. "
        "Produced by `python benchmarks/cpsat.py "
        + " ".join(argv if argv is not None else sys.argv[1:]) + "`.", "",
        "Columns: `x`/`y` stage and boundary arcs, `cons` constraints; `T/T*-1` the exact "
        "plan's excess over the DP optimum; `gap` = (T - bound)/T with the derived valid "
        "bound; `first` the time of CP-SAT's first plan, `opt` of its first plan within "
        "1e-4 of the optimum (from the anytime trace; includes model building).", "",
    ]
    for name in args.sets:
        files = sorted((ROOT / "instances" / name).glob("*.json"))
        lines += [f"### `instances/{name}/`", "",
                  "| instance | L | D | M | workers | x | y | cons | status | T (s) | T/T*-1 "
                  "| gap | first (s) | opt (s) | total (s) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for f in files:
            if f.name == "manifest.json":
                continue
            inst = cp.read(f)
            ref = cp.solve(inst, "dp", time_limit=600)
            opt = ref.iteration_time if ref.status == "optimal" else None
            for w in args.workers:
                r = cp.solve(inst, "cpsat", time_limit=args.time_limit, threads=w, seed=0)
                rnd = (r.stats.get("rounds") or [{}])[0]
                trace = r.stats.get("trace", [])
                excess = None if (opt is None or r.iteration_time is None) else \
                    r.iteration_time / opt - 1
                t_first = _first(trace, lambda x: True)
                t_opt = None if opt is None else _first(trace, lambda x, opt=opt: x <= opt * (1 + 1e-4))
                row = (f"| {inst.name} | {inst.num_layers} | {inst.num_devices} | "
                       f"{inst.microbatches} | {w} | {rnd.get('stage_arcs', '-')} | "
                       f"{rnd.get('boundary_arcs', '-')} | {rnd.get('constraints', '-')} | "
                       f"{r.status} | {_fmt(r.iteration_time)} | {_fmt(excess, '.1e')} | "
                       f"{_fmt(r.gap, '.1e')} | {_fmt(t_first, '.2f')} | {_fmt(t_opt, '.2f')} | "
                       f"{r.solve_time:.2f} |")
                print(row, flush=True)
                lines.append(row)
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
