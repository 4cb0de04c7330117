"""One DC's agent as an OS process (started by :func:`.runner.run_processes`).

``python -m chainpipe.solvers.cdynp.child PARENT_PID CONTROL_FD PREV_FD NEXT_FD``:
the control socket brings the setup (the public document, this DC's private
document, options, deadline) and carries this agent's events back: ``work``,
``wait`` (for a neighbour), ``beat`` (at most once a second while working),
then ``done`` with its report or ``failed``. ``PREV_FD`` and ``NEXT_FD`` are the
sockets to its chain neighbours (``-1``: none).

The agent ignores Ctrl-C (its coordinator ends it) and dies with its parent:
on Linux the kernel kills it when the parent dies (``PR_SET_PDEATHSIG``), and
everywhere it exits when its control socket closes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time

from . import wire

#: seconds between two beats of a working agent
BEAT_S = 1.0

#: test hook, never an option: ``kill:<dc>``, ``hang:<dc>`` or ``forge:<dc>``, optionally
#: ``@forward`` (kill or hang in the forward pass instead of the backward one)
FAULT_ENV = "CHAINPIPE_CDYNP_FAULT"


def main(argv: list[str]) -> int:
    parent, ctrl_fd, prev_fd, next_fd = (int(a) for a in argv[1:5])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)
    ctrl = socket.socket(fileno=ctrl_fd)
    setup = json.loads(wire.recv(ctrl))
    threading.Thread(target=_exit_when_closed, args=(ctrl,), daemon=True).start()
    lock = threading.Lock()

    def tell(event: dict) -> None:
        with lock:
            wire.send(ctrl, json.dumps(event, allow_nan=False).encode())

    peers = {"prev": socket.socket(fileno=prev_fd) if prev_fd >= 0 else None,
             "next": socket.socket(fileno=next_fd) if next_fd >= 0 else None}
    try:
        tell(_run(setup, peers, tell))
    except wire.Closed:
        pass  # the coordinator is gone: nobody to tell
    return 0


def _die_with(parent: int) -> None:
    """Be killed when the parent dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _exit_when_closed(ctrl: socket.socket) -> None:
    """The coordinator never writes after the setup: end of file means it is gone."""
    try:
        while ctrl.recv(4096):
            pass
    except OSError:
        pass
    os._exit(1)


def _run(setup: dict, peers: dict, tell) -> dict:
    """Run this DC's part; returns the ``done`` or ``failed`` event."""
    from ...deadline import TimeUp
    from . import protocol
    from .public import read_view

    name = None
    try:
        public, k, dc = read_view(setup["public"], setup["private"])
        name = dc.name
        return {"event": "done", "report": _protocol(public, k, dc, setup, peers, tell)}
    except _PeerGone as exc:
        return {"event": "failed", "kind": "peer", "blame": exc.peer, "error": str(exc)}
    except protocol.ProtocolError as exc:
        return {"event": "failed", "kind": "protocol", "blame": exc.sender, "error": str(exc)}
    except TimeUp as exc:
        return {"event": "failed", "kind": "timeup", "error": str(exc)}
    except Exception as exc:  # reported to the coordinator, which names this DC
        return {"event": "failed", "kind": "error", "blame": name,
                "error": f"{type(exc).__name__}: {exc}"[:300]}


class _PeerGone(Exception):
    def __init__(self, peer: str):
        super().__init__(f"{peer} closed its connection")
        self.peer = peer


def _protocol(public, k: int, dc, setup: dict, peers: dict, tell) -> dict:
    """Backward, then decide (DC 1) or forward; the report for the owner."""
    from . import protocol
    from .agent import DCAgent
    from .runner import send_record

    K, names, trace = public.num_datacenters, public.datacenter_names, setup["trace_dir"]
    fault = _Fault(dc.name)
    agent = DCAgent(public, k, dc, deadline=_deadline(setup["deadline_at"], tell),
                    **setup["options"])
    sent = []

    def receive(side: str, j: int, kind: str) -> dict:
        tell({"event": "wait", "peer": names[j]})
        try:
            data = wire.recv(peers[side])
        except wire.Closed:
            raise _PeerGone(names[j]) from None
        except protocol.ProtocolError as exc:
            raise protocol.ProtocolError(str(exc), names[j]) from None
        tell({"event": "work"})
        return protocol.decode(data, kind, public.expect(j, k))

    def send(side: str, seq: int, msg: dict, j: int) -> None:
        data, meta = send_record(seq, msg, trace)
        try:
            wire.send(peers[side], data)
        except wire.Closed:
            raise _PeerGone(names[j]) from None
        sent.append(meta)

    incoming = receive("next", k + 1, "summary") if k < K - 1 else None
    tell({"event": "work"})
    fault.at("backward")
    out = agent.backward(incoming)
    estimate = None
    if k > 0:
        send("prev", K - 1 - k, fault.forge(out), k - 1)
        request = agent.forward(receive("prev", k - 1, "assemble"))
        fault.at("forward")
    else:
        choice, estimate = agent.decide()
        request = agent.realise_origin(choice) if choice is not None else None
        fault.at("forward")
    if k < K - 1:
        send("next", K - 1 + k, protocol.assemble(dc.name, names[k + 1], request), k + 1)
    report = agent.report()
    report["sent"] = sent
    report["estimate"] = estimate if estimate is None or estimate < float("inf") else None
    return report


def _deadline(at: float | None, tell):
    """The run's deadline; each check also beats, at most once per :data:`BEAT_S`."""
    from ...deadline import Deadline

    class Beating(Deadline):
        __slots__ = ("last",)

        def check(self) -> None:
            now = time.monotonic()
            if now - self.last >= BEAT_S:
                self.last = now
                tell({"event": "beat"})
            super().check()

    d = Beating(None if at is None else max(0.0, at - time.monotonic()))
    d.last = time.monotonic()
    return d


class _Fault:
    """The fault :data:`FAULT_ENV` asks of this DC, for tests of the coordinator."""

    def __init__(self, name: str):
        spec = os.environ.get(FAULT_ENV, "")
        what, _, rest = spec.partition(":")
        dc, _, phase = rest.partition("@")
        self.what = what if dc == name else None
        self.phase = phase or "backward"

    def at(self, phase: str) -> None:
        if self.what == "kill" and phase == self.phase:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.what == "hang" and phase == self.phase:
            while True:
                time.sleep(3600)

    def forge(self, summary: dict) -> dict:
        """A summary whose every cost is halved: better than this DC can do."""
        if self.what == "forge":
            for e in summary["entries"]:
                e["points"] = [[r, bn / 2, sm / 2, sy / 2] for r, bn, sm, sy in e["points"]]
        return summary


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
