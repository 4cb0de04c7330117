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

from . import wire


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
    from .public import read_view
    from .session import run_agent

    try:
        public, k, dc = read_view(setup["public"], setup["private"])
    except Exception as exc:  # reported to the coordinator, which names this DC
        return {"event": "failed", "kind": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
    return run_agent(public, k, dc, setup, _SocketLinks(peers), tell)


class _SocketLinks:
    """The neighbours as socket pairs from the coordinator."""

    def __init__(self, peers: dict):
        self.peers = peers

    def recv(self, side: str, peer: str, kind: str) -> bytes:
        from .session import PeerGone

        try:
            return wire.recv(self.peers[side])
        except wire.Closed:
            raise PeerGone(peer) from None

    def send(self, side: str, peer: str, kind: str, data: bytes) -> None:
        from .session import PeerGone

        try:
            wire.send(self.peers[side], data)
        except wire.Closed:
            raise PeerGone(peer) from None


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
