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

``--v3``: the contract-v3 instances (``v3/small`` and ``v3-medium-04-gpipe`` by default:
several pipelines, every range run on its range's agents) into
``benchmarks/results/cdynp_hosts_v3.md``, with the ratio of the owner's solve across
hosts to the in-process solve (the issue's target: within 1.5x). Both are timed warm,
``--repeat`` times each (alternating), and the table gives the fastest wall time of
each, the CPU seconds of a solve (the in-process one; across hosts the owner's and
all agents' together, their mean) and the TLS connections the owner opened and reused
in one solve.

    .venv/bin/python benchmarks/cdynp_hosts.py --v3

``--section TITLE`` appends the run, under ``## TITLE``, to the file instead of rewriting
it (the rows of other sets, measured at other times, stay):

    .venv/bin/python benchmarks/cdynp_hosts.py --v3 --repeat 5 --section "v3/medium" \
        --instances instances/v3/medium/*.json
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

import psutil

from chainpipe.io import read
from chainpipe.solve import solve

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
DEFAULT = [*(f"instances/large/large-0{i}.json" for i in (1, 2, 3)),
           "instances/hybrid/medium/hybrid-medium-01.json",
           *(f"instances/hybrid/large/{n}.json" for n in (
               "hybrid-large-01", "hybrid-large-02-nozero", "hybrid-large-03-degraded"))]


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "chainpipe", *map(str, args)]


def _loopback_bytes() -> int:
    return psutil.net_io_counters(pernic=True)["lo"].bytes_sent


def distributed(path: Path, work: Path, warm: bool = False,
                local=None) -> tuple[dict, float, int]:
    """The owner's result, its command's wall time and the bytes sent on the loopback
    interface meanwhile (TLS records, headers, events and reports included; anything
    else on the machine too), with one agent process per DC (``warm``: after a first,
    untimed solve, so that every agent has loaded its compiled kernels, as a long-lived
    agent server has; then ``local``, a :class:`_Local`, alternates the owner's warm
    solves in this process with in-process ones)."""
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
        command = _cli("solve", work / "public.json", "--solver", "cdynp", "--agents",
                       work / "agents.json", *tls("owner"), "--format", "json")
        if warm:
            subprocess.run(command, capture_output=True, text=True, check=True)
        t0, b0 = time.perf_counter(), _loopback_bytes()
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        got = json.loads(out.stdout), time.perf_counter() - t0, _loopback_bytes() - b0
        if warm:  # the owner's solve alone, in this (warm) process, the same agents
            got[0]["warm"] = _warm_owner(work, agents, procs, local)
        return got
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
            p.stdout.close()


class _Timing:
    """Repeated warm solves: the fastest wall time and the mean CPU seconds."""

    def __init__(self):
        self.wall, self.cpu = [], []

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    @property
    def best(self) -> float:
        return min(self.wall)

    @property
    def mean_cpu(self) -> float:
        return sum(self.cpu) / len(self.cpu)


def _cpu(procs) -> float:
    """CPU seconds (user and system) of this process and ``procs`` so far."""
    own = time.process_time()
    return own + sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs)


def _warm_owner(work: Path, agents: dict, procs, local) -> dict:
    """The owner's solve in this process (its modules loaded, as after an in-process
    solve) with the agents at ``agents``, ``local.repeat`` times, each followed by an
    in-process solve (``local.solve``): wall and CPU (this process's and the agents')
    per solve, the connections the owner opened and reused."""
    from chainpipe.solvers.cdynp import tls
    from chainpipe.solvers.cdynp.remote import solve_remote

    c = work / "certs"
    ctx = tls.context("client", c / "ca.pem", c / "owner.pem", c / "owner.key")
    public = json.loads((work / "public.json").read_text())
    remote, kept = _Timing(), _Timing()
    shared = _shared(agents, ctx)
    try:
        if shared is not None:  # its handshakes, untimed: a long-lived owner made them once
            solve_remote(public, agents, ctx, connections=shared)
        for _ in range(local.repeat):
            c0, t0 = _cpu(procs), time.perf_counter()
            res, _ev = solve_remote(public, agents, ctx)
            remote.add(time.perf_counter() - t0, _cpu(procs) - c0)
            assert res.status.value in ("optimal", "feasible"), res.message
            if shared is not None:
                c0, t0 = _cpu(procs), time.perf_counter()
                again, _ev = solve_remote(public, agents, ctx, connections=shared)
                kept.add(time.perf_counter() - t0, _cpu(procs) - c0)
                assert again.iteration_time == res.iteration_time, again.message
            local.once()
    finally:
        if shared is not None:
            shared.close()
    # (a solve before connections were kept reports none: each run made its own)
    return {"timing": remote, "kept": kept if kept.wall else None,
            "connections": res.stats.get("connections", {"opened": "-", "reused": "-"})}


def _shared(agents: dict, ctx):
    """Connections a long-lived owner keeps for its solves (``None`` before
    ``solve_remote(connections=...)`` existed)."""
    import inspect

    from chainpipe.solvers.cdynp import remote

    if "connections" not in inspect.signature(remote.solve_remote).parameters:
        return None
    return remote.Connections(agents, ctx)


class _Local(_Timing):
    """In-process solves of one instance, timed like the owner's."""

    def __init__(self, inst, repeat: int):
        super().__init__()
        self.inst, self.repeat = inst, repeat

    def once(self):
        c0, t0 = time.process_time(), time.perf_counter()
        res = solve(self.inst, "cdynp")
        self.add(time.perf_counter() - t0, time.process_time() - c0)
        return res


V3 = [*(f"instances/v3/small/{n}.json" for n in (
    "v3-small-01-period", "v3-small-02-two-pipelines", "v3-small-03-long-seq-slow",
    "v3-small-04-sync4", "v3-small-05-gpipe")), "instances/v3/medium/v3-medium-04-gpipe.json"]
#: the issue's target: the solve across hosts within this factor of the in-process one
TARGET = 1.5


def _measure(rel: str, args) -> tuple:
    """One row: the in-process solve and the one across hosts of the instance ``rel``."""
    path = ROOT / rel
    inst = read(path)
    timing = _Local(inst, args.repeat)
    if args.v3:  # warm, as the agents are (the compiled kernels loaded)
        solve(inst, "cdynp")
    local = timing.once()
    with tempfile.TemporaryDirectory(prefix="chainpipe-bench-") as tmp:
        remote, wall, wire_bytes = distributed(path, Path(tmp) / "split", warm=args.v3,
                                               local=timing)
    plan = {k: v for k, v in remote["plan"].items() if k != "instance"}
    same = (remote["iteration_time_s"] == local.iteration_time
            and plan == local.plan.to_dict())
    st = remote["stats"]
    row = (inst.name, inst.num_datacenters, len(st["messages"]), len(local.stats["messages"]),
           st["message_bytes_total"], local.stats["message_bytes_total"], wire_bytes)
    if not args.v3:
        return (*row, timing.best, remote["solve_time_s"], wall, "yes" if same else "NO")
    warm = remote["warm"]
    conns = warm["connections"]
    kept = warm["kept"]
    return (*row, timing.best, warm["timing"].best, wall, "yes" if same else "NO",
            timing.mean_cpu, warm["timing"].mean_cpu, conns["opened"], conns["reused"],
            None if kept is None else kept.best, None if kept is None else kept.mean_cpu)


def _table(rows: list, args) -> list[str]:
    head = ("| instance | DCs | messages (tls / in-process) | message bytes (tls / in-process) "
            "| bytes on loopback | in-process s | tls solve s | tls command s | tls solve / "
            "in-process |" + (" CPU s in-process / tls | connections opened / reused | "
                              "kept: tls solve s | kept / in-process | kept: CPU s |"
                              if args.v3 else "") + " same T and plan |")
    lines = [head, "|---|" + "---:|" * (8 + 5 * args.v3) + "---|"]
    for r in rows:
        extra = (f" {r[11]:.3f} / {r[12]:.3f} | {r[13]} / {r[14]} | {_kept(r)}"
                 if args.v3 else "")
        lines.append(f"| {r[0]} | {r[1]} | {r[2]} / {r[3]} | {r[4]:,} / {r[5]:,} | {r[6]:,} | "
                     f"{r[7]:.3f} | {r[8]:.3f} | {r[9]:.2f} | {r[8] / r[7]:.2f}x |{extra} "
                     f"{r[10]} |")
    ratios = [r[8] / r[7] for r in rows]
    lines += ["", f"The owner's solve across hosts over the in-process solve: {min(ratios):.2f}x "
                  f"to {max(ratios):.2f}x; within {TARGET:g}x on "
                  f"{sum(x <= TARGET for x in ratios)} of {len(rows)}."]
    if args.v3:
        cpu = [r[12] / r[11] for r in rows]
        lines += ["", f"CPU seconds across hosts (owner and agents) over in process: "
                      f"{min(cpu):.2f}x to {max(cpu):.2f}x."]
        kept = [(r[15] / r[7], r[16] / r[11]) for r in rows if r[15] is not None]
        if kept:
            lines += ["", f"With the connections kept across the owner's solves: wall "
                          f"{min(k[0] for k in kept):.2f}x to {max(k[0] for k in kept):.2f}x "
                          f"(within {TARGET:g}x on {sum(k[0] <= TARGET for k in kept)} of "
                          f"{len(kept)}), CPU {min(k[1] for k in kept):.2f}x to "
                          f"{max(k[1] for k in kept):.2f}x."]
        lines += ["", f"Load (1-minute average) {args.load[0]:.1f} before, "
                      f"{os.getloadavg()[0]:.1f} after."]
    return lines


def _kept(r) -> str:
    """The kept-connections columns of a v3 row (``-`` before they existed)."""
    if r[15] is None:
        return "- | - | - |"
    return f"{r[15]:.3f} | {r[15] / r[7]:.2f}x | {r[16]:.3f} |"


def _intro(args) -> list[str]:
    return [
        "# CDynP across hosts (loopback TLS) against in-process"
        + (" (contract v3)" if args.v3 else ""),
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work: "
        f"wall times vary by up to 50%), Python {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d')}. Rebuild: `python benchmarks/cdynp_hosts.py"
        f"{' --v3' if args.v3 else ''}`.",
        "",
        "Every agent is its own `chainpipe agent serve` process and the owner a `chainpipe "
        "solve PUBLIC --agents` command; all talk over TLS 1.3 with client certificates on "
        "127.0.0.1. The owner keeps one connection per agent for all the runs of its "
        "solve (probes, main run, range runs), and each agent one to each neighbour. "
        "*solve* is the owner's solve alone, *command* its whole command "
        "(interpreter start and imports included); the in-process column is "
        "`chainpipe.solve(inst, 'cdynp')` in this process. *Message bytes* are the protocol's "
        "messages (identical by construction); *bytes on loopback* all that the interface "
        "carried during the owner's command: TLS records and handshakes, headers, events, "
        "the agents' reports (with their stages' costs), and whatever else ran on the "
        "machine."
        + (" With `--v3` both solves are timed warm: the in-process one after a first, "
           "untimed solve in this process; across hosts, the agent servers after the "
           "owner's command has run once (a fresh agent process loads or compiles its "
           "kernels on its first run: up to several seconds on this loaded machine), and "
           "*tls solve* is then one owner's solve in this process (`remote.solve_remote`, "
           "its modules loaded), while *tls command* stays the owner's whole command. "
           f"Each is run {args.repeat} times, alternating, and the table gives the fastest "
           "wall time of each; *CPU s* is the mean CPU time of a solve, in process, and "
           "across hosts the owner's and every agent's together; *connections* those the "
           "owner opened (TLS handshakes) and reused in one solve. *kept*: the same solve "
           "by a long-lived owner that keeps its connections to the agents across its "
           "solves (`solve_remote(..., connections=...)`, made once, untimed): no TLS "
           "handshake in the solve."
           if args.v3 else ""),
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", nargs="+", default=None)
    ap.add_argument("--v3", action="store_true", help="the v3 instances, cdynp_hosts_v3.md")
    ap.add_argument("--repeat", type=int, default=5,
                    help="warm solves of each kind per instance (with --v3)")
    ap.add_argument("--section", default=None,
                    help="append the run under '## SECTION' instead of rewriting the file")
    args = ap.parse_args()
    if args.instances is None:
        args.instances = V3 if args.v3 else DEFAULT
    if not args.v3:
        args.repeat = 1
    rows = []
    args.load = os.getloadavg()
    for rel in args.instances:
        rows.append(_measure(rel, args))
        print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / ("cdynp_hosts_v3.md" if args.v3 else "cdynp_hosts.md")
    if args.section is None:
        path.write_text("\n".join(_intro(args) + _table(rows, args)) + "\n")
    else:
        head = [f"## {args.section}", "",
                f"Run: `benchmarks/cdynp_hosts.py{' --v3' if args.v3 else ''} --repeat "
                f"{args.repeat} --instances {' '.join(args.instances)}` on "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; columns as above.", ""]
        old = path.read_text() if path.exists() else "\n".join(_intro(args))
        path.write_text(old.rstrip("\n") + "\n\n" + "\n".join(head + _table(rows, args)) + "\n")
    print(path)


if __name__ == "__main__":
    main()
