"""Orchestration of the DC agents: in one process, or one OS process per DC.

Both modes run the same protocol and pass every message through
:func:`protocol.encode` / :func:`protocol.decode`, so they see identical bytes:

1. prefix: DC 1, 2, ..., K-1 each send a ``prefix`` to their downstream
   neighbour (rounded-down bounds on the cost of the whole model on the DCs up to
   it, or ``null``);
2. backward: DC K, K-1, ..., 2 each send a ``summary`` to their upstream
   neighbour; DC 1 joins the last one with its own stages and picks the best
   complete plan;
3. forward: DC 1, 2, ..., K-1 each send an ``assemble`` message to their
   downstream neighbour naming the point of its summary to realise.

A floor run (agent option ``floors_only``, :meth:`.pipelines.RangeRuns.floors`) is the
prefix pass alone: the floors its last DC reports are its answer, and no summary or
``assemble`` follows.

Each agent then reports its own stages (device names of its own devices) to
the job's owner, who assembles the plan; that report is not a message between
DCs. With ``trace_dir`` every DC-to-DC message is written as sent, one file each,
``NNN-<kind>-<from>-to-<to>.json`` numbered in the order they are sent.

With processes (:func:`run_processes`) each agent is a child process
(:mod:`.child`) given only the public document and its own private document,
through its own socket; neighbours talk over socket pairs. The coordinator
watches every agent and ends the run, naming the DC, when one dies, hangs
(:data:`GRACE_S` past the deadline, or ``message_timeout`` seconds without a
word while it should be working) or breaks the protocol.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ...deadline import Deadline
from ...instance import Datacenter
from . import protocol, wire
from .agent import DCAgent
from .public import PublicInstance, read_split
from .watch import GRACE_S, MESSAGE_TIMEOUT_S, AgentFailure, Watch

__all__ = ["GRACE_S", "MESSAGE_TIMEOUT_S", "AgentFailure", "Run", "run_in_process",
           "run_processes", "run_split"]

@dataclass
class Run:
    """What the owner of the job collects from the agents."""

    stages: list[dict]  # the agents' stages in the plan's shape, in chain order
    estimate: float  # T of the chosen plan as the summaries computed it (inf: none)
    messages: list[dict] = field(default_factory=list)  # {"file", "kind", "from", "to", "bytes"}
    agents: list[dict] = field(default_factory=list)  # per-agent reports (DCAgent.report)


def message_name(seq: int, msg: dict) -> str:
    return f"{seq:03d}-{msg['kind']}-{msg['from']}-to-{msg['to']}.json"


def send_record(seq: int, msg: dict, trace_dir) -> tuple[bytes, dict]:
    """The bytes of ``msg`` and its log entry; written to ``trace_dir`` if given."""
    data = protocol.encode(msg)
    name = message_name(seq, msg)
    if trace_dir is not None:
        Path(trace_dir, name).write_bytes(data)
    return data, {"file": name, "kind": msg["kind"], "from": msg["from"], "to": msg["to"],
                  "bytes": len(data)}


# ---------------------------------------------------------------------- one process
def run_in_process(public: PublicInstance, datacenters: list[Datacenter], *,
                   trace_dir=None, deadline: Deadline | None = None, **options) -> Run:
    """All agents in this process, the messages still encoded and decoded.

    Raises
    ------
    TimeUp
        The deadline passed (the message names the DC).
    AgentFailure
        A message broke the protocol.
    """
    K = public.num_datacenters
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
    agents = [DCAgent(public, k, dc, deadline=deadline, **options)
              for k, dc in enumerate(datacenters)]
    log = []
    try:
        received = None
        for k in range(K):  # the prefix pass, forward
            sent = agents[k].prefix(received)
            if k < K - 1:
                data, meta = send_record(len(log), sent, trace_dir)
                log.append(meta)
                received = protocol.decode(data, "prefix", public.expect(k, k + 1))
        if agents[0].floors_only:  # a floor run ends with its prefix pass (as in session)
            agents[-1].backward(None)
            return Run([], math.inf, log, [a.report() for a in agents])
        incoming = None
        for k in range(K - 1, 0, -1):
            data, meta = send_record(len(log), agents[k].backward(incoming), trace_dir)
            log.append(meta)
            incoming = protocol.decode(data, "summary", public.expect(k, k - 1))
        agents[0].backward(incoming)
        choice, estimate = agents[0].decide()
        request = agents[0].realise_origin(choice)
        # with no plan too: every agent then hears that it realises nothing (an agent in
        # its own process or on its own host waits for that word), as in those modes
        for k in range(1, K):
            msg = protocol.assemble(agents[k - 1].name, agents[k].name, request)
            data, meta = send_record(len(log), msg, trace_dir)
            log.append(meta)
            request = agents[k].forward(protocol.decode(data, "assemble",
                                                        public.expect(k - 1, k)))
    except protocol.ProtocolError as exc:
        raise _broke_protocol(exc) from None
    stages = [s for a in agents for s in a.stages] if choice is not None else []
    return Run(stages, estimate, log, [a.report() for a in agents])


def _broke_protocol(exc: protocol.ProtocolError) -> AgentFailure:
    return AgentFailure(f"DC {exc.sender!r} broke the protocol: {exc}", exc.sender)


# ---------------------------------------------------------------------- processes
def run_split(outdir, **options) -> Run:
    """:func:`run_processes` on the documents of a split directory (``chainpipe split``)."""
    public, private = read_split(outdir)
    return run_processes(public, private, **options)


def run_processes(public: dict, private: list[dict], *, trace_dir=None,
                  deadline: Deadline | None = None,
                  message_timeout: float = MESSAGE_TIMEOUT_S, **options) -> Run:
    """Every DC's agent as a child process, given only the public document and its own.

    Parameters
    ----------
    public : dict
        The ``chainpipe-public/1`` document.
    private : list of dict
        Each DC's ``chainpipe-private/1`` document, in chain order.
    trace_dir : path, optional
        Where the agents write every message they send.
    deadline : Deadline, optional
        The run's deadline; each agent checks it.
    message_timeout : float
        Seconds an agent may stay silent while it works (see :data:`MESSAGE_TIMEOUT_S`).
    **options
        The agents' options (:class:`DCAgent`).

    Raises
    ------
    TimeUp
        The deadline passed while the agents were healthy.
    AgentFailure
        An agent died, hung, broke the protocol or failed; the message names its DC.
    """
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
    deadline = Deadline.of(deadline)
    names = list(public["datacenters"])
    setup = {"public": public, "options": options,
             "deadline_at": None if deadline.unlimited else deadline.at,
             "trace_dir": None if trace_dir is None else str(trace_dir)}
    coord = _Coordinator(names, deadline, float(message_timeout))
    try:
        coord.start([{**setup, "private": doc} for doc in private])
        reports = coord.watch()
    finally:
        coord.close()
    return collect(reports)


def collect(reports: list[dict]) -> Run:
    """The owner's :class:`Run` from the agents' final reports."""
    est = reports[0].pop("estimate", None)
    estimate = math.inf if est is None else float(est)
    log = sorted((m for r in reports for m in r.pop("sent")), key=lambda m: m["file"])
    for r in reports[1:]:
        r.pop("estimate", None)
    stages = [s for r in reports for s in r["stages"]]
    return Run(stages if math.isfinite(estimate) else [], estimate, log, reports)


def _child_env() -> dict:
    """The environment of an agent: this one, with this chainpipe first on the path."""
    root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in
                                                  env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class _Coordinator:
    """Starts the agents as child processes and watches them (:class:`.watch.Watch`)."""

    def __init__(self, names: list[str], deadline: Deadline, message_timeout: float):
        self.names = names
        self.progress = Watch(names, deadline, message_timeout)
        self.procs: list[subprocess.Popen] = []
        self.ctrl: list[socket.socket] = []
        # each agent's stderr: an unnamed file (nothing to clean up, and unlike a pipe it
        # never fills up and blocks an agent that writes a lot)
        self.errs: list = []

    # ------------------------------------------------------------------ start and stop
    def start(self, setups: list[dict]) -> None:
        K = len(self.names)
        links = [socket.socketpair() for _ in range(K - 1)]  # links[k]: DC k <-> DC k+1
        child_ends = []
        env = _child_env()
        try:
            for k in range(K):
                mine, theirs = socket.socketpair()
                self.ctrl.append(mine)
                self.errs.append(tempfile.TemporaryFile())
                fds = [theirs.fileno(),
                       links[k - 1][1].fileno() if k > 0 else -1,
                       links[k][0].fileno() if k < K - 1 else -1]
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "chainpipe.solvers.cdynp.child", str(os.getpid()),
                     *map(str, fds)],
                    pass_fds=[fd for fd in fds if fd >= 0], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=self.errs[-1]))
                child_ends.append(theirs)
        finally:
            # only the children hold these now: a child's death closes its ends
            for s in child_ends + [s for pair in links for s in pair]:
                s.close()
        self.progress.started()
        for sock, setup in zip(self.ctrl, setups):
            try:
                wire.send(sock, json.dumps(setup, allow_nan=False).encode())
            except wire.Closed:
                pass  # the child already ended; watch() finds out why

    def close(self) -> None:
        """End every agent still running (they are ours) and reap them."""
        done = self.progress.all_done()
        for p in self.procs:
            if done:  # each exits once its report is sent
                try:
                    p.wait(timeout=2.0)
                except subprocess.TimeoutExpired:
                    pass
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in self.errs:
            f.close()
        for s in self.ctrl:
            s.close()

    # ------------------------------------------------------------------ watching
    def watch(self) -> list[dict]:
        """The agents' final reports in chain order, once all are done.

        Raises
        ------
        TimeUp, AgentFailure
            See :func:`run_processes`.
        """
        sel = selectors.DefaultSelector()
        for k, s in enumerate(self.ctrl):
            sel.register(s, selectors.EVENT_READ, k)

        def next_events(timeout: float) -> list:
            out = []
            for key, _ in sel.select(timeout):
                k = key.data
                try:
                    out.append((k, json.loads(wire.recv(self.ctrl[k]))))
                except (wire.Closed, protocol.ProtocolError, ValueError):
                    sel.unregister(self.ctrl[k])
                    out.append((k, None))
            return out

        return self.progress.run(next_events, self._exit_reason)

    def _exit_reason(self, k: int) -> str:
        p = self.procs[k]
        try:
            code = p.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            return "it closed its connection"
        if code < 0:
            import signal

            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        self.errs[k].seek(0)
        err = self.errs[k].read().decode("utf-8", "replace").strip().splitlines()
        return f"exit status {code}" + (f": {err[-1][:200]}" if err else "")
