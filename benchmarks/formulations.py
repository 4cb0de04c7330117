"""Formulation study: the assignment ILP against the path ILP, HiGHS against CBC.

    python benchmarks/formulations.py [--time-limit 60] [--sets small medium]
                                      [--backends highs cbc] [--limit N]

For every instance of the committed sets: the exact DP optimum (the reference),
then for each formulation and backend the LP-relaxation bound (and its ratio to
the optimum), the model size (variables, constraints, non-zeros), the MIP run's
status, iteration time, proven bound and gap, build and solve time. Writes
``benchmarks/results/formulations.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "formulations.md"
FORMULATIONS = ("ilp-assign", "ilp-path")


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def measure(inst, time_limit: float, backends) -> tuple[dict, list[dict]]:
    from chainpipe.solve import solve

    ref = solve(inst, "dp", time_limit=max(time_limit, 60.0))
    rows = []
    for name in FORMULATIONS:
        for backend in backends:
            lp = solve(inst, name, backend=backend, relax=True)
            t0 = time.perf_counter()
            r = solve(inst, name, backend=backend, time_limit=time_limit)
            wall = time.perf_counter() - t0
            st = r.stats
            opt = ref.iteration_time
            rows.append({
                "formulation": name, "backend": backend, "status": r.status,
                "T": r.iteration_time, "bound": r.lower_bound, "gap": r.gap,
                "lp": lp.lower_bound,
                "lp_ratio": (lp.lower_bound / opt) if (lp.lower_bound is not None and opt) else None,
                "vars": st.get("variables"), "cons": st.get("constraints"),
                "nnz": st.get("nonzeros"), "build": st.get("build_time_s"),
                "solve": st.get("solve_time_s"), "wall": wall,
                "arcs": (f"{st['stage_arcs']}/{st['stage_arcs_total']}"
                         if "stage_arcs" in st else "-"),
                "agrees": (r.status != "optimal" or opt is None
                           or abs(r.iteration_time - opt) <= 1e-6 * opt),
            })
    return {"status": ref.status, "T": ref.iteration_time, "time": ref.solve_time}, rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per MIP run")
    ap.add_argument("--sets", nargs="+", default=["small", "medium"])
    ap.add_argument("--backends", nargs="+", default=["highs", "cbc"])
    ap.add_argument("--limit", type=int, default=None, help="first N instances of each set")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)

    from chainpipe.io import read

    lines = [
        "## ILP formulations: assignment vs path, HiGHS vs CBC",
        "",
        f"Machine: 2 cores ({platform.machine()}), Python {platform.python_version()}; "
        f"one thread per solver, MIP time limit {args.time_limit:g} s per run. Produced by "
        f"`python benchmarks/formulations.py --time-limit {args.time_limit:g} --sets "
        f"{' '.join(args.sets)} --backends {' '.join(args.backends)}"
        + (f" --limit {args.limit}" if args.limit else "") + "`.",
        "",
        "*LP* is the LP-relaxation bound, *LP/opt* its ratio to the DP optimum; "
        "*bound* and *gap* are the MIP solver's proven bound and `(T - bound) / T`; "
        "*arcs* (path ILP) are stage arcs kept after pre-filtering / all candidates. "
        "Times in seconds; *build* is model construction in Python, *solve* the solver call. "
        "*ok* says whether an `optimal` claim matches the DP optimum to 1e-6.",
        "",
    ]
    for set_name in args.sets:
        files = sorted(p for p in (ROOT / "instances" / set_name).glob("*.json")
                       if p.name != "manifest.json")
        if args.limit:
            files = files[: args.limit]
        lines += [f"### Committed set `instances/{set_name}/`", "",
                  "| instance | DP T (s) | formulation | backend | status | T (s) | bound (s) | gap "
                  "| LP (s) | LP/opt | vars | cons | nnz | arcs | build | solve | ok |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for f in files:
            inst = read(f)
            ref, rows = measure(inst, args.time_limit, args.backends)
            for r in rows:
                lines.append(
                    f"| {inst.name} | {_fmt(ref['T'])} | {r['formulation']} | {r['backend']} | "
                    f"{r['status']} | {_fmt(r['T'])} | {_fmt(r['bound'])} | {_fmt(r['gap'], '.2%')} | "
                    f"{_fmt(r['lp'])} | {_fmt(r['lp_ratio'], '.3f')} | {r['vars'] or '-'} | "
                    f"{r['cons'] or '-'} | {r['nnz'] or '-'} | {r['arcs']} | "
                    f"{_fmt(r['build'], '.2f')} | {_fmt(r['solve'], '.2f')} | "
                    f"{'yes' if r['agrees'] else 'NO'} |")
                print(lines[-1], flush=True)
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
