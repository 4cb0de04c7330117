"""One agent's part of one run, whatever connects it to its neighbours.

:func:`run_agent` drives a :class:`~.agent.DCAgent` through the protocol: take
the upstream neighbour's prefix bound and pass its own on, wait for the downstream
neighbour's summary, compute, send its own summary upstream,
wait for the upstream neighbour's ``assemble`` (or decide, at DC 1), pass the
request on, and return the report for the owner. A floor run (option
``floors_only``) ends with the prefix pass: its last DC's report is the run's answer.
It tells the owner what it is
doing through ``tell`` (``work``, ``wait``, ``beat``) and returns the final
``done`` or ``failed`` event. The neighbours are reached through a
:class:`Links` object: socket pairs to sibling processes (:mod:`.child`) or TLS
connections to agents on other hosts (:mod:`.serve`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Protocol

from ...deadline import Deadline, TimeUp
from ...gc_pace import fewer_collections
from . import protocol
from .agent import DCAgent
from .public import PublicInstance

#: seconds between two beats of a working agent
BEAT_S = 1.0

#: test hook, never an option: ``kill:<dc>``, ``hang:<dc>`` or ``forge:<dc>``, optionally
#: ``@forward`` (kill or hang in the forward pass instead of the backward one)
FAULT_ENV = "CHAINPIPE_CDYNP_FAULT"


class PeerGone(Exception):
    """A neighbour's connection closed, or it could not be reached."""

    def __init__(self, peer: str, why: str = "closed its connection"):
        super().__init__(f"{peer} {why}")
        self.peer = peer


class Cancelled(Exception):
    """The owner ended the run (its connection closed)."""


class Decoded:
    """A message a :class:`Links` delivers already decoded by :func:`.protocol.decode`
    with the expectations of this run's receiver (an agent server decodes each message
    as it arrives, to refuse a bad one at once): the run takes it as it is instead of
    decoding the same bytes again.

    Parameters
    ----------
    kind : str
        The message's kind (``prefix``, ``summary``, ``assemble``).
    message : dict
        What :func:`.protocol.decode` returned.
    size : int
        Its bytes on the wire.
    """

    __slots__ = ("kind", "message", "size")

    def __init__(self, kind: str, message: dict, size: int):
        self.kind, self.message, self.size = kind, message, size


class Links(Protocol):
    """The two chain neighbours of an agent; ``side`` is ``"prev"`` or ``"next"``."""

    def recv(self, side: str, peer: str, kind: str) -> bytes | Decoded:
        """The next message from that neighbour, its bytes or already decoded
        (:class:`PeerGone` if it is gone)."""

    def send(self, side: str, peer: str, kind: str, data: bytes) -> None:
        """Deliver a message to that neighbour (:class:`PeerGone` if it is gone)."""


def run_agent(public: PublicInstance, k: int, dc, setup: dict, links: Links, tell,
              cancel: threading.Event | None = None) -> dict:
    """Run DC ``k``'s part; returns the ``done`` or ``failed`` event for the owner.

    Parameters
    ----------
    public, k, dc
        What this DC holds (:func:`.public.read_view`).
    setup : dict
        ``options`` (the agent's), ``deadline_at`` (a ``time.monotonic()`` instant or
        ``None``), ``trace_dir`` (where to write sent messages, or ``None``) and
        ``trace_return`` (put each sent message's text in the report).
    links : Links
        The neighbours.
    tell : callable
        Sends an event to the owner.
    cancel : threading.Event, optional
        Set when the owner has gone: the run stops at its next check.

    Notes
    -----
    The run goes on under :func:`chainpipe.gc_pace.fewer_collections`, as a solve in one
    process does (:func:`chainpipe.solve.run_solver`): an agent's own process (across
    processes or hosts) allocates the same many small, long-lived objects.
    """
    try:
        with fewer_collections():
            report = _protocol(public, k, dc, setup, links, tell, cancel)
        return {"event": "done", "report": report}
    except PeerGone as exc:
        return {"event": "failed", "kind": "peer", "blame": exc.peer, "error": str(exc)}
    except protocol.ProtocolError as exc:
        return {"event": "failed", "kind": "protocol", "blame": exc.sender, "error": str(exc)}
    except TimeUp as exc:
        return {"event": "failed", "kind": "timeup", "error": str(exc)}
    except Cancelled:
        return {"event": "failed", "kind": "cancelled", "error": "the owner ended the run"}
    except Exception as exc:  # reported to the owner, which names this DC
        return {"event": "failed", "kind": "error", "blame": dc.name,
                "error": f"{type(exc).__name__}: {exc}"[:300]}


def _protocol(public, k: int, dc, setup: dict, links: Links, tell, cancel) -> dict:
    """Backward, then decide (DC 1) or forward; the report for the owner."""
    from .runner import send_record

    K, names, trace = public.num_datacenters, public.datacenter_names, setup.get("trace_dir")
    fault = _Fault(dc.name)
    agent = DCAgent(public, k, dc, deadline=_deadline(setup["deadline_at"], tell, cancel),
                    **setup["options"])
    sent = []

    def receive(side: str, j: int, kind: str) -> dict:
        tell({"event": "wait", "peer": names[j]})
        try:
            data = links.recv(side, names[j], kind)
        except protocol.ProtocolError as exc:
            raise protocol.ProtocolError(str(exc), names[j]) from None
        tell({"event": "work"})
        if isinstance(data, Decoded):  # decoded on arrival, with the same expectations
            if data.kind != kind:
                raise protocol.ProtocolError(f"a {data.kind} where a {kind} was due", names[j])
            return data.message
        return protocol.decode(data, kind, public.expect(j, k))

    def send(side: str, seq: int, msg: dict, j: int) -> None:
        data, meta = send_record(seq, msg, trace)
        links.send(side, names[j], msg["kind"], data)
        if setup.get("trace_return"):
            meta["text"] = data.decode("ascii")
        sent.append(meta)

    sent_prefix = agent.prefix(receive("prev", k - 1, "prefix") if k > 0 else None)
    if k < K - 1:  # messages are numbered as sent: K - 1 prefixes, summaries, assembles
        send("next", k, sent_prefix, k + 1)
    if agent.floors_only:  # a floor run ends with its prefix pass: the last DC reports
        if k == K - 1:
            agent.backward(None)
        return _report(agent, sent, None)
    incoming = receive("next", k + 1, "summary") if k < K - 1 else None
    tell({"event": "work"})
    fault.at("backward")
    out = agent.backward(incoming)
    estimate = None
    if k > 0:
        send("prev", 2 * (K - 1) - k, fault.forge(out), k - 1)
        request = agent.forward(receive("prev", k - 1, "assemble"))
        fault.at("forward")
    else:
        choice, estimate = agent.decide()
        request = agent.realise_origin(choice) if choice is not None else None
        fault.at("forward")
    if k < K - 1:
        send("next", 2 * (K - 1) + k, protocol.assemble(dc.name, names[k + 1], request),
             k + 1)
    return _report(agent, sent, estimate)


def _report(agent: DCAgent, sent: list, estimate: float | None) -> dict:
    """The agent's report for the owner, with the messages it sent and (DC 1) the
    estimate of the plan it chose (``None``: none)."""
    report = agent.report()
    report["sent"] = sent
    report["estimate"] = estimate if estimate is None or estimate < float("inf") else None
    return report


def _deadline(at: float | None, tell, cancel: threading.Event | None):
    """The run's deadline; each check also beats, at most once per :data:`BEAT_S`, and
    stops the run when ``cancel`` is set."""

    class Beating(Deadline):
        __slots__ = ("last",)

        def check(self) -> None:
            now = time.monotonic()
            if now - self.last >= BEAT_S:
                self.last = now
                if cancel is not None and cancel.is_set():
                    raise Cancelled
                tell({"event": "beat"})
            super().check()

    d = Beating(None if at is None else max(0.0, at - time.monotonic()))
    d.last = time.monotonic()
    return d


class _Fault:
    """The fault :data:`FAULT_ENV` asks of this DC, for tests of the owner's watch."""

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
