"""Where an exact CDynP solve of several pipelines spends its range runs, and which of them
a floor could have answered without a run.

One exact ``cdynp`` solve (in process, cold), with every range run the owner's search makes
(:meth:`chainpipe.solvers.cdynp.pipelines.RangeRuns._run`) recorded: its range, ``M_p``,
``theta``, the owner's bound, the answer, its CPU seconds split into the classic run and
the period run(s) (:func:`chainpipe.solvers.cdynp.drive`), how the classic run ended and
the floor under the range's period its last DC reported. Then, per run of several DCs,
two floors it could have been answered by:

- *reported*: ``(M_p - 1) lambda``, ``lambda`` the largest period floor an **earlier** run
  on the range or on a range holding it reported at a ``theta`` no smaller (what the
  owner already holds; 1F1B only, where that floor reads no ``M_p``);
- *dp's static floor* (an **oracle**, never a route: it reads every device of the range):
  ``CostTables.pipeline_bound`` with ``dp``'s own period floor, which ``dp``'s
  :class:`~chainpipe.solvers.dp_ranges.RangeTimes` asks before any search.

A run either floor puts above its bound would have been answered "none" without a run;
the report sums their CPU seconds. ``dp``'s own range searches of the same instance
(:meth:`chainpipe.solvers.dp_ranges.RangeTimes._search`) are listed beside, for the count
and the labels.

Run: ``python benchmarks/cdynp_range_runs.py --instance
instances/v3/large/v3-large-03-slow-sync8.json``; appends a section to
``benchmarks/results/cdynp_range_runs.md``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cdynp_range_runs.md"


def record_cdynp(instance, limit: float) -> tuple[list[dict], float, object]:
    """The range runs of one cold exact cdynp solve (module docstring), its CPU seconds
    and its result."""
    from cdynp_speed_v3 import _cold

    import chainpipe.solvers.cdynp as C
    from chainpipe.solve import solve
    from chainpipe.solvers.cdynp import pipelines as P

    runs, cur = [], {}
    drive, run = C.drive, P.RangeRuns._run

    def timed_drive(backend, options, **kw):
        t0 = time.process_time()
        out = drive(backend, options, **kw)
        if cur:
            kind = "period" if backend.public.period else "classic"
            cur[kind] = cur.get(kind, 0.0) + time.process_time() - t0
            if kind == "classic":
                cur["classic_end"] = out.status
        return out

    def timed_run(self, i, j, m, theta, bound, proven=0.0):
        cur.clear()
        cur.update(i=i, j=j, m=m, theta=theta, bound=bound, proven=proven)
        t0 = time.process_time()
        got, lam = run(self, i, j, m, theta, bound, proven)
        cur.update(cpu=time.process_time() - t0, lam=lam,
                   got=None if got is None else got.time)
        runs.append(dict(cur))
        cur.clear()
        return got, lam

    C.drive, P.RangeRuns._run = timed_drive, timed_run
    try:
        _cold()
        t0 = time.process_time()
        res = solve(instance, "cdynp", time_limit=limit)
        return runs, time.process_time() - t0, res
    finally:
        C.drive, P.RangeRuns._run = drive, run


def record_dp(instance, limit: float) -> tuple[list[dict], float]:
    """``dp``'s range searches of the same instance: range, ``M_p``, target, answer, CPU
    seconds and labels; and the solve's CPU seconds."""
    from chainpipe.solve import solve
    from chainpipe.solvers import dp_ranges

    searches, search = [], dp_ranges.RangeTimes._search

    def timed(self, i, j, m, tau, theta):
        t0 = time.process_time()
        got = search(self, i, j, m, tau, theta)
        searches.append(dict(i=i, j=j, m=m, tau=tau, theta=theta,
                             got=None if got is None else got[0],
                             cpu=time.process_time() - t0, labels=self.last_labels))
        return got

    dp_ranges.RangeTimes._search = timed
    try:
        t0 = time.process_time()
        solve(instance, "dp", time_limit=limit)
        return searches, time.process_time() - t0
    finally:
        dp_ranges.RangeTimes._search = search


def mark_floors(instance, runs: list[dict]) -> None:
    """Per run of several DCs, ``reported`` and ``static`` (module docstring): whether that
    floor lies above the run's bound."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers.dp_pipelines import shared_holds
    from chainpipe.solvers.dp_ranges import RangeTimes
    from chainpipe.tables import CostTables

    tables = CostTables(instance)
    ranges = RangeTimes(tables, Deadline(600), max(r["bound"] for r in runs),
                        shared_holds(tables, Deadline(600)))
    one_f_one_b = instance.training.schedule == "1f1b"
    lams: dict = {}
    for r in runs:
        i, j, m, theta, bound = r["i"], r["j"], r["m"], r["theta"], r["bound"]
        lam = max([v for (a, b, th), v in lams.items() if a <= i and b >= j and th >= theta],
                  default=0.0)
        r["reported"] = one_f_one_b and (m - 1) * lam > bound * (1 + 1e-9)
        r["static"] = float(tables.pipeline_bound(i, j, m, ranges._period_floor(i, j, m))) > (
            bound * (1 + 1e-9))
        if r["lam"] > 0:
            key = (i, j, theta)
            lams[key] = max(lams.get(key, 0.0), r["lam"])


def _classes(runs: list[dict]) -> list[str]:
    """Table rows: runs and CPU seconds by range size, answer and how the classic run
    ended."""
    rows = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for r in runs:
        key = ("one DC" if r["i"] == r["j"] else "several DCs",
               "plan" if r["got"] is not None else "none",
               r.get("classic_end", "-") if r["i"] != r["j"] else "-")
        row = rows[key]
        row[0] += 1
        row[1] += r["cpu"]
        row[2] += r.get("classic", 0.0)
        row[3] += r.get("period", 0.0)
    out = ["| range | answer | classic run ended | runs | CPU s | classic s | period s |",
           "|---|---|---|---:|---:|---:|---:|"]
    for key, (n, cpu, cl, pe) in sorted(rows.items()):
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {cpu:.2f} | {cl:.2f} | {pe:.2f} |")
    return out


def _floors(runs: list[dict]) -> list[str]:
    """Table rows: the runs of several DCs each floor would have answered."""
    multi = [r for r in runs if r["i"] != r["j"]]
    out = ["| floor | runs answered (of several DCs) | their CPU s | runs left | their CPU s |",
           "|---|---:|---:|---:|---:|"]
    for name, key in (("reported (M_p - 1) lambda", "reported"),
                      ("dp's static floor (oracle)", "static")):
        hit = [r for r in multi if r[key]]
        left = [r for r in multi if not r[key]]
        out.append(f"| {name} | {len(hit)} of {len(multi)} | {sum(r['cpu'] for r in hit):.2f}"
                   f" | {len(left)} | {sum(r['cpu'] for r in left):.2f} |")
    return out


def _dearest(runs: list[dict], n: int = 12) -> list[str]:
    """Table rows: the ``n`` dearest runs."""
    out = ["| range | M_p | theta | bound | answer | CPU s | classic s | period s | "
           "dp's static floor above the bound |", "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in sorted(runs, key=lambda r: -r["cpu"])[:n]:
        got = "none" if r["got"] is None else f"{r['got']:.4g}"
        out.append(f"| {r['i']}..{r['j']} | {r['m']} | {r['theta']:.3g} | {r['bound']:.4g} | "
                   f"{got} | {r['cpu']:.2f} | {r.get('classic', 0.0):.2f} | "
                   f"{r.get('period', 0.0):.2f} | {'yes' if r.get('static') else 'no'} |")
    return out


def main() -> None:
    """Run the measurement and append its section to :data:`OUT`."""
    from chainpipe.io import read

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--instance", required=True)
    ap.add_argument("--time-limit", type=float, default=600.0)
    args = ap.parse_args()
    inst = read(args.instance)
    load0 = os.getloadavg()[0]
    runs, cpu, res = record_cdynp(inst, args.time_limit)
    searches, dp_cpu = record_dp(inst, args.time_limit)
    mark_floors(inst, [r for r in runs if r["i"] != r["j"]])
    name = Path(args.instance).stem
    lines = [f"## {name}: run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             f"`benchmarks/cdynp_range_runs.py --instance {args.instance}`; load (1-min "
             f"average) {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. "
             f"cdynp {res.status} in {cpu:.1f} CPU s with {len(runs)} range runs "
             f"({sum(r['cpu'] for r in runs):.1f} s); dp {dp_cpu:.1f} CPU s with "
             f"{len(searches)} range searches ({sum(s['cpu'] for s in searches):.1f} s, "
             f"{sum(s['i'] != s['j'] for s in searches)} of several DCs, at most "
             f"{max([s['labels'] for s in searches], default=0)} labels).", "",
             *_classes(runs), "", *_floors(runs), "", "The dearest range runs:", "",
             *_dearest(runs), ""]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    head = [] if OUT.exists() else [
        "# CDynP's range runs: where an exact solve of several pipelines spends them", "",
        "Written by `benchmarks/cdynp_range_runs.py` (its docstring says what each column "
        "is). CPU seconds of one thread; 2 cores shared with other work.", ""]
    with OUT.open("a") as f:
        f.write("\n".join(head + lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
