"""Orchestration of the DC agents: in one process, or one OS process per DC.

Both modes run the same protocol and pass every message through
:func:`protocol.encode` / :func:`protocol.decode`, so they see identical bytes:

1. backward: DC K, K-1, ..., 2 each send a ``summary`` to their upstream
   neighbour; DC 1 joins the last one with its own stages and picks the best
   complete plan;
2. forward: DC 1, 2, ..., K-1 each send an ``assemble`` message to their
   downstream neighbour naming the point of its summary to realise.

Each agent then reports its own stages (device names of its own devices) to
the job's owner, who assembles the plan; that report is not a message between
DCs. With ``trace_dir`` every DC-to-DC message is written as sent, one file each,
``NNN-<kind>-<from>-to-<to>.json`` numbered in the order they are sent.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...instance import Datacenter, DeviceGroup, Link
from . import protocol
from .agent import DCAgent, Deadline
from .public import PRIVATE_FORMAT, PublicInstance


@dataclass
class Run:
    """What the owner of the job collects from the agents."""

    stages: list[tuple[int, int, str]]  # (start, end, device) in chain order
    estimate: float  # T of the chosen plan as the summaries computed it (inf: none)
    messages: list[dict] = field(default_factory=list)  # {"file", "kind", "from", "to", "bytes"}
    agents: list[dict] = field(default_factory=list)  # per-agent stats and what it learned


def message_name(seq: int, msg: dict) -> str:
    return f"{seq:03d}-{msg['kind']}-{msg['from']}-to-{msg['to']}.json"


def _send(seq: int, msg: dict, trace_dir) -> tuple[bytes, dict]:
    data = protocol.encode(msg)
    name = message_name(seq, msg)
    if trace_dir is not None:
        Path(trace_dir, name).write_bytes(data)
    return data, {"file": name, "kind": msg["kind"], "from": msg["from"], "to": msg["to"],
                  "bytes": len(data)}


def _agent_report(agent: DCAgent) -> dict:
    return {"datacenter": agent.name, "stages": [list(s) for s in agent.stages],
            "learned_boundaries": agent.boundaries, **agent.stats}


def run_in_process(public: PublicInstance, datacenters: list[Datacenter], *,
                   trace_dir=None, deadline=None, **options) -> Run:
    K = public.num_datacenters
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
    agents = [DCAgent(public, k, dc, deadline=deadline, **options)
              for k, dc in enumerate(datacenters)]
    log = []
    seq = 0
    incoming = None
    for k in range(K - 1, 0, -1):
        out = agents[k].backward(incoming)
        data, meta = _send(seq, out, trace_dir)
        seq += 1
        log.append(meta)
        incoming = protocol.decode(data, "summary")
    agents[0].backward(incoming)
    choice, estimate = agents[0].decide()
    request = agents[0].realise_origin(choice)
    if choice is not None:
        for k in range(1, K):
            msg = protocol.assemble(agents[k - 1].name, agents[k].name, request)
            data, meta = _send(seq, msg, trace_dir)
            seq += 1
            log.append(meta)
            request = agents[k].forward(protocol.decode(data, "assemble"))
    stages = [s for a in agents for s in a.stages] if choice is not None else []
    return Run(stages, estimate, log, [_agent_report(a) for a in agents])


# ---------------------------------------------------------------------- split files
def private_to_dict(index: int, dc: Datacenter) -> dict:
    return {
        "format": PRIVATE_FORMAT,
        "index": index,
        "datacenter": {
            "name": dc.name,
            "devices": [{"type": g.type, "count": g.count, "flop_per_s": g.flop_per_s,
                         "memory_bytes": g.memory_bytes} for g in dc.devices],
            "link": {"bandwidth_bytes_per_s": dc.link.bandwidth_bytes_per_s,
                     "latency_s": dc.link.latency_s},
        },
    }


def private_from_dict(d: dict) -> tuple[int, Datacenter]:
    if d.get("format") != PRIVATE_FORMAT:
        raise ValueError(f"format: expected {PRIVATE_FORMAT!r}, got {d.get('format')!r}")
    dc = d["datacenter"]
    return d["index"], Datacenter(dc["name"], tuple(DeviceGroup(**g) for g in dc["devices"]),
                                  Link(**dc["link"]))


def load_split(outdir) -> tuple[PublicInstance, list[Path]]:
    """The public part and the private files (in chain order) of a split instance."""
    outdir = Path(outdir)
    public = PublicInstance.from_dict(json.loads((outdir / "public.json").read_text()))
    files = {}
    for p in sorted(outdir.glob("private-*.json")):
        k, _ = private_from_dict(json.loads(p.read_text()))
        files[k] = p
    missing = [public.datacenter_names[k] for k in range(public.num_datacenters) if k not in files]
    if missing:
        raise ValueError(f"{outdir}: no private file for {', '.join(missing)}")
    return public, [files[k] for k in range(public.num_datacenters)]


# ---------------------------------------------------------------------- processes
def _worker(public_path: str, private_path: str, options: dict, prev_conn, next_conn,
            report_conn, trace_dir, deadline) -> None:
    """One DC as an OS process: it reads its own two files and talks only through pipes."""
    try:
        public = PublicInstance.from_dict(json.loads(Path(public_path).read_text()))
        k, dc = private_from_dict(json.loads(Path(private_path).read_text()))
        K = public.num_datacenters
        agent = DCAgent(public, k, dc, deadline=deadline, **options)
        sent = []
        incoming = None
        if k < K - 1:
            incoming = protocol.decode(next_conn.recv_bytes(), "summary")
        out = agent.backward(incoming)
        if k > 0:
            data, meta = _send(K - 1 - k, out, trace_dir)
            prev_conn.send_bytes(data)
            sent.append(meta)
            request = agent.forward(protocol.decode(prev_conn.recv_bytes(), "assemble"))
            estimate = None
        else:
            choice, estimate = agent.decide()
            request = agent.realise_origin(choice)
            if choice is None:
                # nothing to assemble: tell everyone downstream to stop
                request = None
        if k < K - 1:
            msg = protocol.assemble(agent.name, public.datacenter_names[k + 1], request)
            data, meta = _send(K - 1 + k, msg, trace_dir)
            next_conn.send_bytes(data)
            sent.append(meta)
        report = _agent_report(agent)
        report["sent"] = sent
        report["estimate"] = estimate if estimate is None or math.isfinite(estimate) else "inf"
        report_conn.send_bytes(json.dumps({"ok": True, "index": k, "report": report}).encode())
    except Deadline as exc:
        report_conn.send_bytes(json.dumps({"ok": False, "deadline": True,
                                           "error": str(exc)}).encode())
    except Exception as exc:
        report_conn.send_bytes(json.dumps({"ok": False, "deadline": False,
                                           "error": f"{type(exc).__name__}: {exc}"}).encode())


def run_processes(outdir, *, trace_dir=None, deadline=None, **options) -> Run:
    """Run every DC agent as a separate (spawned) OS process from split files alone."""
    import multiprocessing as mp

    public, files = load_split(outdir)
    K = public.num_datacenters
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    links = [ctx.Pipe(duplex=True) for _ in range(K - 1)]  # links[k]: DC k <-> DC k+1
    reports = [ctx.Pipe(duplex=False) for _ in range(K)]
    procs = []
    for k in range(K):
        prev_conn = links[k - 1][1] if k > 0 else None
        next_conn = links[k][0] if k < K - 1 else None
        p = ctx.Process(target=_worker, name=f"cdynp-{public.datacenter_names[k]}",
                        args=(str(Path(outdir) / "public.json"),
                              str(files[k]), options, prev_conn, next_conn, reports[k][1],
                              None if trace_dir is None else str(trace_dir), deadline),
                        daemon=True)
        procs.append(p)
    for p in procs:
        p.start()
    results: dict[int, dict] = {}
    error = None
    try:
        for k in range(K):
            if deadline is not None:
                wait = max(1.0, deadline - time.monotonic() + 5.0)
            else:
                wait = None
            if not reports[k][0].poll(wait):
                error = ("deadline", f"{public.datacenter_names[k]} did not report in time")
                break
            msg = json.loads(reports[k][0].recv_bytes())
            if not msg["ok"]:
                error = ("deadline" if msg["deadline"] else "error", msg["error"])
                break
            results[k] = msg["report"]
    finally:
        for p in procs:
            if error is not None and p.is_alive():
                p.terminate()
            p.join(timeout=10)
    if error is not None:
        if error[0] == "deadline":
            raise Deadline(error[1])
        raise RuntimeError(error[1])
    est = results[0].get("estimate")
    estimate = math.inf if est in (None, "inf") else float(est)
    log = sorted((m for r in results.values() for m in r.pop("sent")), key=lambda m: m["file"])
    stages = [tuple(s) for k in range(K) for s in results[k]["stages"]]
    agents = []
    for k in range(K):
        r = results[k]
        r.pop("estimate", None)
        agents.append(r)
    return Run(stages if math.isfinite(estimate) else [], estimate, log, agents)


def write_split(public: PublicInstance, datacenters: list[Datacenter], outdir) -> list[Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / "public.json"]
    _write(paths[0], public.to_dict())
    for k, dc in enumerate(datacenters):
        p = outdir / f"private-{k:02d}-{dc.name}.json"
        _write(p, private_to_dict(k, dc))
        paths.append(p)
    return paths


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
