"""CP-SAT model size, time to proof and bound quality, per set and per strengthening.

For every instance of the chosen sets (default ``medium``, ``hybrid/small`` and
``hybrid/medium``) it runs the exact DP (the reference optimum, only to score the
answers) and ``cpsat`` with one worker and every strengthening on, and reports the model
size (stage and boundary arcs, constraints), the status, the exact plan time against the
optimum, the gap of the derived lower bound, CP-SAT's branches, the time of the first plan
within 1e-4 of the optimum (from the anytime trace), and the wall and CPU time of the
solve. Writes ``benchmarks/results/cpsat.md``. With ``--ablation`` it runs instead, on the
instances named there (found in the sets), each strengthening switched off alone and all
of them off, and writes ``benchmarks/results/cpsat_ablation.md``.

    python benchmarks/cpsat.py                                   # 60 s limit, 1 worker
    python benchmarks/cpsat.py --time-limit 10 --sets hybrid/small
    python benchmarks/cpsat.py --time-limit 30 --ablation medium-02-llama70b hybrid-medium-01
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cpsat.md"
ABLATION_OUT = ROOT / "benchmarks" / "results" / "cpsat_ablation.md"
HEADER = ("| instance | L | D | M | features | x | y | cons | status | T/T*-1 | gap | branches "
          "| opt (s) | wall (s) | cpu (s) |")


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def _first(trace, pred):
    for t, inc, _ in trace:
        if inc is not None and pred(inc):
            return t
    return None


def _row(cp, inst, opt, label, features, args) -> str:
    """One solve of ``inst`` with ``features`` (``None``: the defaults) as a table row."""
    options = {} if features is None else {"features": features}
    cpu, wall = time.process_time(), time.perf_counter()
    r = cp.solve(inst, "cpsat", time_limit=args.time_limit, threads=args.workers, seed=0,
                 **options)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    rounds = r.stats.get("rounds") or [{}]
    first = rounds[0]
    excess = None if (opt is None or r.iteration_time is None) else r.iteration_time / opt - 1
    t_opt = None if opt is None else _first(r.stats.get("trace", []),
                                            lambda x: x <= opt * (1 + 1e-4))
    branches = sum(rnd.get("branches", 0) or 0 for rnd in rounds)
    return (f"| {inst.name} | {inst.num_layers} | {inst.num_devices} | {inst.microbatches} | "
            f"{label} | {first.get('stage_arcs', '-')} | {first.get('boundary_arcs', '-')} | "
            f"{first.get('constraints', '-')} | {r.status} | {_fmt(excess, '.1e')} | "
            f"{_fmt(r.gap, '.1e')} | {branches} | {_fmt(t_opt, '.2f')} | {wall:.2f} | "
            f"{cpu:.2f} |")


def _reference(cp, path: Path):
    """The instance at ``path`` and its DP optimum (``None`` if the DP proves none)."""
    inst = cp.read(path)
    ref = cp.solve(inst, "dp", time_limit=600)
    return inst, (ref.iteration_time if ref.status == "optimal" else None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--sets", nargs="+", default=["medium", "hybrid/small", "hybrid/medium"])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--ablation", nargs="*", default=[],
                    help="instance names to run with each strengthening switched off")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"default {OUT.relative_to(ROOT)} ({ABLATION_OUT.name} with --ablation)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import chainpipe as cp
    from chainpipe.solvers.cpsat import ALL_FEATURES

    lines = [
        "## CP-SAT model (`cpsat`)", "",
        f"Machine: 2 cores ({platform.machine()}, {os.cpu_count()} logical CPUs, shared with "
        f"other jobs while measured: wall times are inflated, the CPU column is this "
        f"process's), Python {platform.python_version()}, OR-Tools "
        f"{__import__('ortools').__version__}, {args.workers} worker(s). Time limit "
        f"{args.time_limit:g} s per run. Produced by `python benchmarks/cpsat.py "
        + " ".join(argv if argv is not None else sys.argv[1:]) + "`.", "",
        "Columns: `features` the strengthenings on (`default`: the solver's defaults, "
        "`all`: every one, `-name`: all but one, `none`); "
        "`x`/`y` stage and boundary arcs, `cons` constraints (first round); `T/T*-1` the "
        "exact plan's excess over the DP optimum; `gap` = (T - bound)/T with the derived "
        "valid bound; `branches` CP-SAT's, over all rounds; `opt` the time of the first plan "
        "within 1e-4 of the optimum (from the anytime trace; includes model building).", "",
    ]
    files = {f.stem: f for name in args.sets for f in sorted((ROOT / "instances" / name).glob("*.json"))
             if f.name != "manifest.json"}
    if args.ablation:
        if unknown := [n for n in args.ablation if n not in files]:
            raise SystemExit(f"--ablation: {unknown[0]} is not in the sets {args.sets}")
        lines += ["### Each strengthening switched off", "", HEADER, "|---" * 15 + "|"]
        variants = [("all", list(ALL_FEATURES))] + [
            (f"-{f}", [g for g in ALL_FEATURES if g != f]) for f in ALL_FEATURES] + [("none", [])]
        for name in args.ablation:
            inst, opt = _reference(cp, files[name])
            for label, features in variants:
                row = _row(cp, inst, opt, label, features, args)
                print(row, flush=True)
                lines.append(row)
        lines.append("")
    else:
        for name in args.sets:
            lines += [f"### `instances/{name}/`", "", HEADER, "|---" * 15 + "|"]
            for f in sorted((ROOT / "instances" / name).glob("*.json")):
                if f.name == "manifest.json":
                    continue
                inst, opt = _reference(cp, f)
                row = _row(cp, inst, opt, "default", None, args)
                print(row, flush=True)
                lines.append(row)
            lines.append("")
    out = args.out or (ABLATION_OUT if args.ablation else OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
