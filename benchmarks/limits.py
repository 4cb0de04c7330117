"""Limit adherence: the time limit asked vs the wall time used and the peak memory,
seen from outside.

Each solver runs as ``python -m chainpipe solve INSTANCE --solver S --time-limit L
--format json`` in a subprocess on every ``instances/large`` and ``instances/hybrid/large``
instance and on two long chains of 1000 datacenters (one device group each; 6 and 300
layers, :func:`chain_instance`); the wall time is measured around the subprocess
(interpreter start and instance reading included), the peak resident memory is the
child's (and its own children's) from ``wait4``. The table goes to
``benchmarks/results/limits.md``. Usage::

    python benchmarks/limits.py [--limits 5 10] [--instances instances/large/*.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "limits.md"
#: (label, solver, options)
RUNS = [
    ("dp", "dp", []), ("cdynp", "cdynp", []),
    ("ilp-assign (highs)", "ilp-assign", []),
    ("ilp-assign (cbc)", "ilp-assign", ["-O", "backend=cbc"]), ("ilp-path (highs)", "ilp-path", []),
    ("ilp-path (cbc)", "ilp-path", ["-O", "backend=cbc"]), ("cpsat", "cpsat", []),
    ("uniform", "uniform", []), ("greedy-fill", "greedy-fill", []),
    ("proportional", "proportional", []), ("comm-unaware", "comm-unaware", []),
    ("uniform-chain", "uniform-chain", []), ("single-dc", "single-dc", []),
]
#: allowed overrun: 1 s + 5 % of the limit
GRACE_S, GRACE_SHARE = 1.0, 0.05
#: the stated memory ceiling of one solve (peak resident set, children included)
MEMORY_CEILING_GB = 4.0
#: the long chains: (datacenters, layers)
CHAINS = ((1000, 6), (1000, 300))
#: the solvers run on the long chains (the exact ones)
CHAIN_RUNS = ("dp", "cdynp", "ilp-assign (highs)", "ilp-assign (cbc)", "ilp-path (highs)",
              "ilp-path (cbc)", "cpsat")


def chain_instance(dcs: int, layers: int) -> dict:
    """A chain of ``dcs`` datacenters, one device group each, as an instance document:
    ``hybrid-small-01``'s model stretched to ``layers`` layers (its blocks repeated), its
    first datacenter's groups taken in turn, and chain links of varied bandwidth and
    latency (so no two paths look alike)."""
    doc = json.loads((ROOT / "instances" / "hybrid" / "small" / "hybrid-small-01.json")
                     .read_text())
    first, *blocks, last = doc["model"]["layers"]
    body = [dict(blocks[i % len(blocks)], name=f"block{i}") for i in range(max(layers - 2, 0))]
    doc["model"]["layers"] = [first, *body, last][:layers]
    dc0 = doc["datacenters"][0]
    doc["datacenters"] = [dict(dc0, name=f"dc{k}",
                               devices=[dict(dc0["devices"][k % len(dc0["devices"])])])
                          for k in range(dcs)]
    link = doc["links"][0]
    doc["links"] = [dict(link, latency_s=link["latency_s"] * (1 + k % 7),
                         bandwidth_bytes_per_s=link["bandwidth_bytes_per_s"] * (1 + k % 5))
                    for k in range(dcs - 1)]
    doc["name"] = f"chain-{dcs}dc-{layers}l"
    return doc


def _run_child(cmd: list[str], timeout: float):
    """Run ``cmd``; its stdout, stderr, exit status and peak memory in GB (``wait4``),
    or ``None`` for the output when it was killed at ``timeout``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    out: dict = {}
    readers = [threading.Thread(target=lambda n=n, f=f: out.__setitem__(n, f.read()))
               for n, f in (("stdout", proc.stdout), ("stderr", proc.stderr))]
    for r in readers:
        r.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    for r in readers:
        r.join()
    killed = proc.returncode < 0
    return (None if killed else out.get("stdout", "")), out.get("stderr", ""), \
        proc.returncode, usage.ru_maxrss / 1e6


def measure(instance: Path, solver: str, options: list[str], limit: float) -> dict:
    """Run one solve in a subprocess; its wall time, peak memory, status and T."""
    cmd = [sys.executable, "-m", "chainpipe", "solve", str(instance), "--solver", solver,
           *options, "--time-limit", str(limit), "--format", "json"]
    start = time.monotonic()
    stdout, stderr, code, peak = _run_child(cmd, limit * 10 + 60)
    row = {"wall": time.monotonic() - start, "peak_gb": peak, "T": None}
    if stdout is None:
        return {**row, "status": "killed (no answer)"}
    try:
        doc = json.loads(stdout)
        return {**row, "status": doc.get("status"),
                "T": doc.get("iteration_time_s", doc.get("iteration_time"))}
    except json.JSONDecodeError:
        last = (stderr.strip().splitlines() or ["?"])[-1][:60]
        return {**row, "status": f"exit {code}: {last}"}


def table(rows: list[dict]) -> str:
    lines = ["| instance | solver | limit (s) | wall (s) | over (s) | within 1 s + 5 % | "
             f"peak (GB) | under {MEMORY_CEILING_GB:g} GB | status | T (s) |",
             "|---|---|---:|---:|---:|:---:|---:|:---:|---|---:|"]
    for r in rows:
        over = r["wall"] - r["limit"]
        ok = "yes" if within(r) else "**no**"
        mem = "yes" if r["peak_gb"] <= MEMORY_CEILING_GB else "**no**"
        T = "-" if r["T"] is None else f"{r['T']:.4g}"
        lines.append(f"| {r['instance']} | {r['label']} | {r['limit']:g} | {r['wall']:.2f} | "
                     f"{over:+.2f} | {ok} | {r['peak_gb']:.2f} | {mem} | {r['status']} | {T} |")
    return "\n".join(lines)


def within(r: dict) -> bool:
    """Whether run ``r`` kept the limit plus :data:`GRACE_S` and :data:`GRACE_SHARE`."""
    return r["wall"] <= r["limit"] * (1 + GRACE_SHARE) + GRACE_S


def summary(rows: list[dict]) -> str:
    """How many runs kept the time rule and the memory ceiling, and each that did not."""
    late = [r for r in rows if not within(r)]
    heavy = [r for r in rows if r["peak_gb"] > MEMORY_CEILING_GB]
    text = (f"{len(rows) - len(late)} of {len(rows)} runs within the limit + "
            f"{GRACE_S:g} s + {GRACE_SHARE:.0%}; {len(rows) - len(heavy)} of {len(rows)} "
            f"under {MEMORY_CEILING_GB:g} GB.")
    for r in late:
        allowed = r["limit"] * (1 + GRACE_SHARE) + GRACE_S
        text += (f" Late: {r['instance']} {r['label']} at {r['limit']:g} s, "
                 f"{r['wall']:.2f} s ({r['wall'] - allowed:+.2f} s past {allowed:.2f} s).")
    for r in heavy:
        text += f" Over the ceiling: {r['instance']} {r['label']}, {r['peak_gb']:.2f} GB."
    return text


def chain_files(directory: Path) -> list[Path]:
    """The long chains of :data:`CHAINS` written to ``directory``."""
    paths = []
    for dcs, layers in CHAINS:
        path = directory / f"chain-{dcs}dc-{layers}l.json"
        path.write_text(json.dumps(chain_instance(dcs, layers)))
        paths.append(path)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[5.0, 10.0])
    ap.add_argument("--instances", nargs="+", type=Path,
                    default=sorted((ROOT / "instances" / "large").glob("large-*.json"))
                    + sorted((ROOT / "instances" / "hybrid" / "large").glob("hybrid-*.json")))
    ap.add_argument("--no-chains", action="store_true", help="leave out the long chains")
    ap.add_argument("--solvers", nargs="+", default=None, help="labels to run (default: all)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if args.solvers is None or r[0] in args.solvers]
    rows = []
    scratch = tempfile.TemporaryDirectory()
    chains = [] if args.no_chains else chain_files(Path(scratch.name))
    for instance in [*args.instances, *chains]:
        for limit in args.limits:
            for label, solver, options in runs:
                if instance in chains and label not in CHAIN_RUNS:
                    continue
                r = measure(instance, solver, options, limit)
                r.update(instance=instance.stem, label=label, limit=limit)
                rows.append(r)
                print(f"{instance.stem} {label} limit {limit:g}: {r['wall']:.2f} s "
                      f"{r['peak_gb']:.2f} GB {r['status']} {r['T']}", file=sys.stderr,
                      flush=True)
    text = ("# Time limits kept: limit asked vs wall time used, and peak memory\n\n"
            "Each row is one `python -m chainpipe solve INSTANCE --solver S --time-limit L "
            "--format json` run as a subprocess; the wall time is measured outside it, so "
            "interpreter start-up and reading the instance count. The target is the limit "
            f"plus {GRACE_S:g} s + {GRACE_SHARE:.0%}; the memory ceiling of one solve is "
            f"{MEMORY_CEILING_GB:g} GB (peak resident set, its own children included). "
            "The chains are `benchmarks/limits.py:chain_instance` (1000 datacenters, one group "
            "each). Produced by `benchmarks/limits.py` on a shared 2-core machine.\n\n"
            + summary(rows) + "\n\n" + table(rows) + "\n")
    scratch.cleanup()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
