"""CDynP across hosts (loopback) against the in-process run: messages, bytes, wall time.

For each instance: the in-process ``cdynp`` (``chainpipe.solve``, one process), then
the same solve with every DC's agent a ``chainpipe agent serve`` process and the owner
``chainpipe solve PUBLIC --agents`` (all on this machine, over TLS 1.3 on 127.0.0.1).
The agents are started and listening before the owner starts; the owner's wall time
is its whole command (interpreter start included) and its ``solve_time_s`` the solve
alone (connections, handshakes and the two runs of a hybrid instance: probe and main).
Checks that T and the plan are equal. Writes ``benchmarks/results/cdynp_hosts.md``.

    .venv/bin/python benchmarks/cdynp_hosts.py
    .venv/bin/python benchmarks/cdynp_hosts.py --instances instances/large/large-01.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chainpipe.io import read
from chainpipe.solve import solve

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
DEFAULT = ["instances/large/large-01.json", "instances/hybrid/medium/hybrid-medium-01.json",
           "instances/hybrid/large/hybrid-large-01.json"]


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "chainpipe", *map(str, args)]


def distributed(path: Path, work: Path) -> tuple[dict, float]:
    """The owner's result and its command's wall time, with one agent process per DC."""
    subprocess.run(_cli("split", path, work, "--certs"), check=True, capture_output=True)
    names = json.loads((work / "public.json").read_text())["datacenters"]
    certs = work / "certs"

    def tls(party: str) -> list:
        return ["--tls-ca", certs / "ca.pem", "--tls-cert", certs / f"{party}.pem",
                "--tls-key", certs / f"{party}.key"]

    procs, agents = [], {}
    try:
        for k, name in enumerate(names):
            procs.append(subprocess.Popen(
                _cli("agent", "serve", work / f"private-{k:02d}-{name}.json", "--public",
                     work / "public.json", "--listen", "127.0.0.1:0", *tls(name)),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        for name, p in zip(names, procs):
            agents[name] = p.stdout.readline().split("listening on")[1].strip()
        (work / "agents.json").write_text(json.dumps(agents))
        t0 = time.perf_counter()
        out = subprocess.run(_cli("solve", work / "public.json", "--solver", "cdynp", "--agents",
                                  work / "agents.json", *tls("owner"), "--format", "json"),
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout), time.perf_counter() - t0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
            p.stdout.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", nargs="+", default=DEFAULT)
    args = ap.parse_args()
    rows = []
    for rel in args.instances:
        path = ROOT / rel
        inst = read(path)
        t0 = time.perf_counter()
        local = solve(inst, "cdynp")
        local_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="chainpipe-bench-") as tmp:
            remote, wall = distributed(path, Path(tmp) / "split")
        same = (remote["iteration_time_s"] == local.iteration_time
                and remote["plan"] == local.plan.to_dict())
        st = remote["stats"]
        rows.append((inst.name, inst.num_datacenters, len(st["messages"]),
                     len(local.stats["messages"]), st["message_bytes_total"],
                     local.stats["message_bytes_total"], local_s, remote["solve_time_s"], wall,
                     "yes" if same else "NO"))
        print(rows[-1], flush=True)
    lines = [
        "# CDynP across hosts (loopback TLS) against in-process",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work: "
        f"wall times vary by up to 50%), Python {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d')}. Rebuild: `python benchmarks/cdynp_hosts.py`.",
        "",
        "Every agent is its own `chainpipe agent serve` process and the owner a `chainpipe "
        "solve PUBLIC --agents` command; all talk over TLS 1.3 with client certificates on "
        "127.0.0.1. Hybrid instances run the probe and the main run, each with its own "
        "connections. *solve* is the owner's solve alone, *command* its whole command "
        "(interpreter start and imports included); the in-process column is "
        "`chainpipe.solve(inst, 'cdynp')` in this process.",
        "",
        "| instance | DCs | messages (tls / in-process) | bytes (tls / in-process) | "
        "in-process s | tls solve s | tls command s | same T and plan |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} / {r[3]} | {r[4]:,} / {r[5]:,} | "
                     f"{r[6]:.2f} | {r[7]:.2f} | {r[8]:.2f} | {r[9]} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cdynp_hosts.md").write_text("\n".join(lines) + "\n")
    print(OUT / "cdynp_hosts.md")


if __name__ == "__main__":
    main()
