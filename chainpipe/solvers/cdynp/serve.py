"""One DC's agent as a TLS server (``chainpipe agent serve``).

The agent holds its private document and the public one, listens on one
address and serves run after run until SIGINT or SIGTERM; runs may overlap,
each isolated under its own run id. Every connection must present a
certificate the agreed CA signed, and what it may ask depends on the party it
names (:mod:`.tls`):

* a ``run`` only from the owner (:data:`.tls.OWNER`), for the same public
  instance (its digest must match) and a fresh run id;
* a ``summary`` only from the downstream neighbour, a ``prefix`` and an
  ``assemble`` only from the upstream one, each for a run this agent takes part
  in, once, and in the protocol's order (the ``prefix`` first, an
  ``assemble`` after this agent sent its summary).

Anything else is refused with a logged line and the agent goes on serving.
A message from the right neighbour that breaks the protocol is refused too and
ends that run, naming the neighbour to the owner. A run ends, and its state is
freed, when it is done, when the owner's connection closes, at the time limit
(plus :data:`.watch.GRACE_S`), or when a neighbour stays silent for
``peer_timeout`` seconds without one.
"""

from __future__ import annotations

import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

from ...deadline import Deadline
from . import net, protocol, wire
from .drive import agent_options
from .public import read_view
from .session import BEAT_S, Cancelled, PeerGone, run_agent
from .tls import OWNER, party_of
from .watch import GRACE_S

#: seconds a run waits for a neighbour's message when the run has no time limit
PEER_TIMEOUT_S = 600.0
#: connections served at once; more are closed at once (and logged)
MAX_CONNECTIONS = 64


@dataclass
class _Run:
    """One run this agent takes part in."""

    id: str
    agents: dict
    deadline_at: float | None
    inbox: dict = field(default_factory=lambda: {"next": queue.Queue(), "prev": queue.Queue()})
    received: set = field(default_factory=set)  # the kinds delivered so far
    summary_sent: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def deadline(self) -> Deadline:
        """The run's deadline (``deadline_at``, a ``time.monotonic()`` instant) from now."""
        return Deadline(None if self.deadline_at is None
                        else max(0.0, self.deadline_at - time.monotonic()))


class AgentServer:
    """The agent of one DC, serving runs over TLS.

    Parameters
    ----------
    public, private : dict
        The DC's documents (``chainpipe split``), as read from their files.
    server_ctx, client_ctx : ssl.SSLContext
        TLS contexts (:func:`.tls.context`) for the connections it accepts and makes.
    listen : str
        ``HOST:PORT`` to listen on (port 0: any free port; :attr:`address` says which).
    log : callable
        Called with one line per event worth logging (refusals, runs).
    peer_timeout : float
        Seconds a run without a time limit waits for a neighbour's message.
    allow_trace : bool
        Take runs whose owner traces (it then receives the text of this agent's
        messages); ``False`` refuses them.
    share_prefix : bool
        ``False``: this agent sends ``null`` in the prefix pass of every run, whatever
        the owner's option ``prefix_bound`` says (this DC's own choice).
    """

    def __init__(self, public: dict, private: dict, server_ctx: ssl.SSLContext,
                 client_ctx: ssl.SSLContext, listen: str, log,
                 peer_timeout: float = PEER_TIMEOUT_S, allow_trace: bool = True,
                 share_prefix: bool = True):
        self.public, self.k, self.dc = read_view(public, private)
        self.digest = net.public_digest(public)
        self.names = list(self.public.datacenter_names)
        self.server_ctx, self.client_ctx = server_ctx, client_ctx
        self.log = log
        self.peer_timeout = float(peer_timeout)
        self.allow_trace = bool(allow_trace)
        self.share_prefix = bool(share_prefix)
        self.runs: dict[str, _Run] = {}
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        host, port = net.parse_address(listen, any_port=True)
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.address = f"{host}:{self.sock.getsockname()[1]}"

    @property
    def name(self) -> str:
        return self.dc.name

    # ------------------------------------------------------------------ serving
    def serve(self, stop: threading.Event) -> None:
        """Accept connections until ``stop`` is set; each is served by its own thread."""
        self.sock.settimeout(0.2)
        try:
            while not stop.is_set():
                try:
                    raw, addr = self.sock.accept()
                except TimeoutError:
                    continue
                if not self.slots.acquire(blocking=False):
                    self.log(f"refused a connection from {_peer(addr)}: {MAX_CONNECTIONS} "
                             f"connections are being served")
                    raw.close()
                    continue
                threading.Thread(target=self._connection, args=(raw, addr), daemon=True).start()
        finally:
            self.sock.close()
            with self.lock:
                for run in self.runs.values():
                    run.cancel.set()

    def _connection(self, raw: socket.socket, addr) -> None:
        who = _peer(addr)
        try:
            raw.settimeout(net.HANDSHAKE_S)
            try:
                conn = self.server_ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                self.log(f"refused a connection from {who}: TLS handshake failed "
                         f"({getattr(exc, 'reason', None) or exc})")
                raw.close()
                return
            party = party_of(conn)
            who = f"{who} ({party!r})"
            try:
                self._dispatch(conn, party, who)
            except (wire.Closed, OSError) as exc:
                self.log(f"connection from {who} ended early ({type(exc).__name__}"
                         f"{': ' + str(exc)[:120] if str(exc) else ''})")
            finally:
                net.close(conn)
        finally:
            self.slots.release()

    def _refuse(self, conn, who: str, reason: str) -> None:
        self.log(f"refused {who}: {reason}")
        try:
            net.send_json(conn, {"refused": reason})
        except (wire.Closed, OSError):
            pass

    def _dispatch(self, conn, party: str | None, who: str) -> None:
        try:
            header = net.check_header(net.recv_json(conn))
        except protocol.ProtocolError as exc:
            return self._refuse(conn, who, f"a bad header: {exc}")
        except TimeoutError:
            return self._refuse(conn, who, f"no header within {net.HANDSHAKE_S:g} s")
        kind = header["kind"]
        if kind == "run":
            if party != OWNER:
                return self._refuse(conn, who, f"only the owner may start a run, not {party!r}")
            return self._serve_run(conn, header, who)
        side, j = ("next", self.k + 1) if kind == "summary" else ("prev", self.k - 1)
        allowed = self.names[j] if 0 <= j < len(self.names) else None
        if party != allowed:
            role = "downstream" if kind == "summary" else "upstream"
            return self._refuse(conn, who, f"a {kind} may come only from the {role} neighbour "
                                           f"of {self.name!r} ({allowed!r}), not {party!r}")
        with self.lock:
            run = self.runs.get(header["run"])
            problem = None
            if run is None:
                problem = f"a {kind} for run {header['run'][:8]}.. this agent is not part of"
            elif kind in run.received:
                problem = f"a second {kind} for run {run.id[:8]}.. (a replay)"
            elif kind == "assemble" and not run.summary_sent:
                problem = "an assemble before this agent sent its summary (out of order)"
            else:
                run.received.add(kind)
        if problem:
            return self._refuse(conn, who, problem)
        try:
            data = wire.recv(conn, protocol.MAX_MESSAGE_BYTES)
            protocol.decode(data, kind, self.public.expect(j, self.k))
        except (protocol.ProtocolError, TimeoutError) as exc:
            reason = str(exc) or "no message within the time allowed"
            run.inbox[side].put(protocol.ProtocolError(reason, allowed))
            return self._refuse(conn, who, f"its {kind}: {reason}")
        run.inbox[side].put(data)
        net.send_json(conn, {"ok": True})

    # ------------------------------------------------------------------ one run
    def _serve_run(self, conn, header: dict, who: str) -> None:
        if header["public_sha256"] != self.digest:
            return self._refuse(conn, who, "the run is for another public instance "
                                           "(its digest differs from this agent's public file)")
        if header["trace"] and not self.allow_trace:
            return self._refuse(conn, who, "this agent takes no traced runs (--no-trace)")
        if sorted(header["agents"]) != sorted(self.names):
            return self._refuse(conn, who, f"agents: must name exactly the DCs {self.names}")
        try:
            opts = header["options"]
            options = {**agent_options(**{k: opts.get(k) for k in
                                          ("epsilon", "quantum", "digits", "max_entries",
                                           "upper_bound", "prefix_bound")}),
                       **{k: int(opts[k]) for k in ("beam", "grid") if opts.get(k)}}
        except (ValueError, TypeError) as exc:
            return self._refuse(conn, who, f"options: {exc}")
        options["prefix_bound"] = options["prefix_bound"] and self.share_prefix
        t = header["time_limit_s"]
        run = _Run(header["run"], dict(header["agents"]),
                   None if t is None else time.monotonic() + float(t))
        with self.lock:
            if run.id in self.runs:
                return self._refuse(conn, who, f"run {run.id[:8]}.. is already under way")
            self.runs[run.id] = run
        self.log(f"run {run.id[:8]}.. for {who}")
        conn.settimeout(net.HANDSHAKE_S)
        lock = threading.Lock()

        def tell(event: dict) -> None:
            try:
                with lock:
                    net.send_json(conn, event)
            except (wire.Closed, OSError):
                run.cancel.set()
                raise Cancelled from None

        try:
            tell({"event": "accepted"})
            setup = {"options": options, "deadline_at": run.deadline_at, "trace_dir": None,
                     "trace_return": header["trace"]}
            event = run_agent(self.public, self.k, self.dc, setup, _TLSLinks(self, run, tell),
                              tell, run.cancel)
            tell(event)
            self.log(f"run {run.id[:8]}.. {event['event']}"
                     + (f": {event.get('error')}" if event["event"] == "failed" else ""))
        except Cancelled:
            self.log(f"run {run.id[:8]}.. ended: the owner's connection closed")
        finally:
            with self.lock:
                self.runs.pop(run.id, None)


class _TLSLinks:
    """A run's neighbours: messages arrive in its inbox (delivered by the connections the
    neighbours open) and leave on a connection this agent opens."""

    def __init__(self, server: AgentServer, run: _Run, tell):
        self.server, self.run, self.tell = server, run, tell

    def recv(self, side: str, peer: str, kind: str) -> bytes:
        run = self.run
        deadline = run.deadline
        give_up = (time.monotonic() + self.server.peer_timeout if deadline.unlimited
                   else deadline.at + GRACE_S)
        last_beat = time.monotonic()
        while True:
            try:
                item = run.inbox[side].get(timeout=0.2)
                break
            except queue.Empty:
                pass
            now = time.monotonic()
            if run.cancel.is_set():
                raise Cancelled
            if now > give_up:
                raise PeerGone(peer, f"sent no {kind} in time")
            if now - last_beat >= BEAT_S:  # also finds out when the owner has gone
                last_beat = now
                self.tell({"event": "beat"})
        if isinstance(item, Exception):
            raise item
        return item

    def send(self, side: str, peer: str, kind: str, data: bytes) -> None:
        run = self.run
        address = run.agents[peer]
        try:
            sock = net.connect(address, self.server.client_ctx, peer, deadline=run.deadline)
        except (OSError, net.Refused) as exc:
            raise PeerGone(peer, f"cannot be reached at {address}: {exc}") from None
        if kind == "summary":  # before it can arrive: the answer may come back at once
            run.summary_sent = True
        try:
            net.send_json(sock, {"net": net.NET, "kind": kind, "run": run.id})
            wire.send(sock, data)
            reply = net.recv_json(sock)
        except (wire.Closed, OSError, protocol.ProtocolError):
            raise PeerGone(peer, f"at {address} closed the connection before it answered") \
                from None
        finally:
            net.close(sock)
        if not (isinstance(reply, dict) and reply.get("ok") is True):
            reason = reply.get("refused") if isinstance(reply, dict) else None
            raise RuntimeError(f"{peer!r} refused its {kind}: {str(reason)[:200]}")


def _peer(addr) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
