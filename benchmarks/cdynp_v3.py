"""CDynP against dp on the contract-v3 sets, under a time limit per solve.

Each instance of ``instances/v3/<set>`` is solved once by ``dp`` and once by ``cdynp``
(in this process), each under ``--time-limit`` seconds; the table gives each one's
status, ``T``, CPU time (``time.process_time``; both run in one thread), their ratio
where both proved the optimum, the range runs CDynP's owner made (several pipelines),
its largest message and whether the optimum is paced by a loop. Writes
``benchmarks/results/cdynp_v3.md``.

    .venv/bin/python benchmarks/cdynp_v3.py --sets v3/small v3/medium --time-limit 240

With ``--options KEY=VALUE ...`` (compression: ``digits``, ``epsilon``, ``quantum``,
``max_entries``) the table is the compressed one instead: the realised gap of CDynP's
plan to dp's (dp's optimum, or its best plan when unproven, said so), the guarantee
factor, the largest message, how many messages exceed 16 KiB (the issue's target), and
it becomes (or replaces) the section of the results file named by the options and sets
(the rest of the file is kept).

    .venv/bin/python benchmarks/cdynp_v3.py --sets v3/medium --time-limit 150 \\
        --options digits=3 max_entries=8
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from chainpipe.io import read
from chainpipe.plan import evaluate
from chainpipe.solve import solve

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"


def timed(inst, solver: str, limit: float, **options):
    """``(result, CPU seconds)`` of one solve under ``limit`` seconds."""
    t0 = time.process_time()
    res = solve(inst, solver, time_limit=limit, **options)
    return res, time.process_time() - t0


def paced(inst, res) -> str:
    if res.plan is None:
        return "-"
    ev = evaluate(inst, res.plan)
    return ", ".join(pc.paced_by for pc in ev.pipelines) or ev.bottleneck


#: the issue's target for every message under compression
TARGET_BYTES = 16 * 1024


def exact_row(path, inst, ref, dp_s, res, cd_s) -> str:
    """One row of the exact table."""
    both = ref.status == "optimal" and res.status == "optimal"
    same = both and abs(res.iteration_time - ref.iteration_time) <= 1e-9 * ref.iteration_time
    stats = res.stats or {}
    return (f"| {path.stem} | {inst.num_datacenters} | {inst.num_layers} | "
            f"{inst.microbatches} | {inst.training.schedule} | "
            f"{list(inst.parallelism.pipelines)} | {ref.status} | "
            f"{ref.iteration_time if ref.iteration_time is not None else '-'} | "
            f"{dp_s:.1f} | {res.status} | "
            f"{res.iteration_time if res.iteration_time is not None else '-'} | "
            f"{cd_s:.1f} | {f'{cd_s / dp_s:.1f}x' if both and dp_s > 0 else '-'} | "
            f"{'yes' if same else ('-' if not both else 'NO')} | "
            f"{stats.get('range_runs', 0)} | {stats.get('message_bytes_max', '-')} | "
            f"{paced(inst, res)} |")


def compressed_row(path, inst, ref, dp_s, res, cd_s) -> str:
    """One row of the compressed table: the realised gap to dp's plan and the messages."""
    stats = res.stats or {}
    sizes = [m["bytes"] for m in stats.get("messages", [])]
    gap = "-"
    if res.iteration_time is not None and ref.iteration_time:
        gap = f"{100 * (res.iteration_time / ref.iteration_time - 1):.3f}%"
        if ref.status != "optimal":
            gap += " (vs dp's best, unproven)"
    factor = stats.get("guarantee_factor")
    return (f"| {path.stem} | {inst.num_datacenters} | {inst.num_layers} | "
            f"{inst.microbatches} | {list(inst.parallelism.pipelines)} | {ref.status} | "
            f"{ref.iteration_time if ref.iteration_time is not None else '-'} | {dp_s:.1f} | "
            f"{res.status} | {res.iteration_time if res.iteration_time is not None else '-'} "
            f"| {gap} | {f'{factor:.4g}' if factor else 'none'} | {cd_s:.1f} | "
            f"{stats.get('range_runs', 0)} | {len(sizes)} | {max(sizes, default=0)} | "
            f"{sum(b > TARGET_BYTES for b in sizes)} | {(res.message or '')[:60]} |")


def dp_table(path: Path) -> dict:
    """dp's ``(result, CPU seconds)`` per instance from the exact table of ``path`` (its
    status, ``T`` and CPU time, as that run measured them)."""
    from types import SimpleNamespace

    out = {}
    text = path.read_text() if path.exists() else ""
    for line in text.split("\n## ")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 17 and cells[0] != "instance" and not cells[0].startswith("-"):
            T = None if cells[7] == "-" else float(cells[7])
            out[cells[0]] = (SimpleNamespace(status=cells[6], iteration_time=T),
                             float(cells[8]))
    return out


def write_section(path: Path, heading: str, lines: list[str]) -> None:
    """Put ``lines`` under ``## heading`` in ``path``, replacing a section of that heading
    and keeping the rest of the file."""
    text = path.read_text() if path.exists() else ""
    parts = text.split("\n## ")
    body = "\n".join([heading, *lines]).rstrip("\n")
    kept = [p for p in parts[1:] if p.split("\n", 1)[0] != heading]
    path.write_text("\n## ".join([parts[0].rstrip("\n") + "\n", *kept, body]) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["v3/small", "v3/medium"])
    ap.add_argument("--time-limit", type=float, default=240.0)
    ap.add_argument("--dp-limit", type=float, default=None,
                    help="dp's time limit (default: --time-limit)")
    ap.add_argument("--dp-from-table", action="store_true",
                    help="take dp's status and T from the exact table of --out instead of "
                         "running dp (where it has the instance)")
    ap.add_argument("--options", nargs="*", default=[],
                    help="cdynp's compression options, KEY=VALUE")
    ap.add_argument("--out", default=str(OUT / "cdynp_v3.md"))
    args = ap.parse_args()
    options = {k: float(v) if "." in v else int(v)
               for k, v in (o.split("=", 1) for o in args.options)}
    rows, loads = [], [os.getloadavg()[0]]
    for name in args.sets:
        for path in sorted(p for p in (ROOT / "instances" / name).glob("*.json")
                           if p.name != "manifest.json"):
            inst = read(path)
            known = dp_table(Path(args.out)).get(path.stem) if args.dp_from_table else None
            ref, dp_s = known or timed(inst, "dp", args.dp_limit or args.time_limit)
            res, cd_s = timed(inst, "cdynp", args.time_limit, **options)
            row = (compressed_row if options else exact_row)(path, inst, ref, dp_s, res, cd_s)
            print(row, flush=True)
            rows.append(row)
            loads.append(os.getloadavg()[0])
    load = f"load (1-min average, sampled after each instance) {min(loads):.1f} to {max(loads):.1f}"
    if options:
        heading = (f"Compressed: {' '.join(args.options)} on {' '.join(args.sets)}")
        write_section(Path(args.out), heading, [
            "",
            f"`benchmarks/cdynp_v3.py --sets {' '.join(args.sets)} --time-limit "
            f"{args.time_limit:g} "
            + ("--dp-from-table" if args.dp_from_table else
               f"--dp-limit {args.dp_limit or args.time_limit:g}")
            + f" --options {' '.join(args.options)}`; {platform.machine()}, "
            f"{os.cpu_count()} cores shared "
            f"with other work, {load} (CPU seconds, one thread; with --dp-from-table dp's status, T "
            "and CPU seconds are those of the exact table above). `gap`: cdynp's T over "
            "dp's, minus 1; `factor`: the proven bound on T / optimum (`none` with max_entries); "
            "`msgs`: DC-to-DC messages of every run made (probes, classic and period runs, "
            "range runs); `> 16 KiB`: how many exceed the issue's target; a solve the time "
            "limit ended reports the messages of the runs it completed.",
            "",
            "| instance | K | L | M | pipelines | dp | dp T (s) | dp CPU (s) | cdynp | "
            "cdynp T (s) | gap | factor | cdynp CPU (s) | range runs | msgs | max msg (B) | "
            "> 16 KiB | note |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows])
        return
    head = [
        "# CDynP (exact) against dp on the contract-v3 sets",
        "",
        f"`benchmarks/cdynp_v3.py --sets {' '.join(args.sets)} --time-limit "
        f"{args.time_limit:g}`; {platform.machine()}, {os.cpu_count()} cores shared with "
        f"other work, {load} (CPU seconds of one thread, one solve each). `ratio`: cdynp over dp "
        "where both proved the optimum; `range runs`: CDynP runs over sub-chains that "
        "the owner's search of several pipelines made; `max msg`: the largest message in "
        "bytes (of the range runs when several pipelines are allowed and 1 is not, else "
        "of the one-pipeline solve's last run); `paced by`: per pipeline of cdynp's plan.",
        "",
        "| instance | K | L | M | schedule | pipelines | dp | dp T (s) | dp CPU (s) | cdynp "
        "| cdynp T (s) | cdynp CPU (s) | ratio | same T | range runs | max msg | paced by |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    out = Path(args.out)
    sections = out.read_text().split("\n## ")[1:] if out.exists() else []
    out.write_text("\n## ".join(["\n".join(head + rows) + "\n", *sections]).rstrip("\n")
                   + "\n")


if __name__ == "__main__":
    main()
