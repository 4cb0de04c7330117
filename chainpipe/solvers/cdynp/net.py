"""The envelope of CDynP across hosts: TLS connections, frames and their headers.

Every connection is TLS 1.3 with certificates on both sides (:mod:`.tls`) and
carries frames of :mod:`.wire` (a 4-byte length, then the bytes). A connection
carries one request after another, each opened by a JSON header saying what it is
for and checked whole (:func:`check_header`) and against the party the connection's
certificate names, request by request:

* ``{"net": NET, "kind": "run", "run": ID, "public_sha256": H, "agents": {...},
  "options": {...}, "time_limit_s": S or null, "trace": bool, "chain": C}`` (``chain``
  may be left out, meaning ``null``): the owner
  asks an agent to take part in run ``ID`` of the public instance whose digest is ``H``
  (:func:`public_digest`), its neighbours at the addresses of ``agents``. ``C`` is
  ``null`` (the instance as it is) or ``{"first": i, "last": j, "microbatches": m,
  "objective": "classic" | "period"}``: a range run, the DCs ``i..j`` planning one
  pipeline of ``m`` microbatches (:meth:`.public.PublicInstance.chain`; the owner's
  public decisions of several pipelines, or the classic solve that bounds a period
  run), whose agents alone take part. The owner sends the header to every agent of
  the run at once. The agent answers ``{"refused": REASON}``, or takes the run and
  sends its events (``work``, ``wait``, ``beat``, then ``done`` or ``failed``), each
  naming the run (``"run": ID``), on the same connection: the first event says that it
  took the run. After ``done`` or ``failed`` the owner may send the next run's header
  on that connection;
* ``{"net": NET, "kind": "prefix" | "summary" | "assemble", "run": ID}``: a
  neighbour delivers a message of the CDynP protocol (:mod:`.protocol`), the exact
  bytes in the next frame (both frames in one write, :func:`send_message`). The
  receiver answers ``{"ok": true}`` or ``{"refused": REASON}`` (its own run then fails,
  naming the neighbour to its owner). The neighbour does not wait for that answer: it
  reads it when it next takes the connection (:class:`Pool`), and uses the
  connection again only after an ``ok``. A ``prefix`` may arrive before the owner's
  header of its run (the owner starts every agent at once, and DC 1 sends its prefix
  as soon as it has the run): the receiver keeps it, answered ``ok``, for at most
  :data:`EARLY_S` seconds, and checks and decodes it when the run starts.

Version 4 (``chainpipe-agents/4``) differs from version 3 in that: no ``accepted``
answer to a run's header (the owner sent DCs 2..K their headers, waited for their
answers, then sent DC 1 its own: two round trips between processes per run), no wait
for a message's ``ok`` before the sender goes on (one per message), and the early
``prefix``. Version 5 (``chainpipe-agents/5``) differs from version 4 in that a floor
run (option ``floors_only``) is the prefix pass alone: no summary or ``assemble`` follows
it (an agent of version 4 would wait for them). A party of another version is refused at
its first header, naming the version expected.

A refusal ends the connection. A header is at most :data:`HEADER_LIMIT` bytes; a
protocol message at most :data:`.protocol.MAX_MESSAGE_BYTES`. An agent closes a
connection that brings no header for :data:`IDLE_S` seconds between two requests;
the party that connects (:class:`Pool`) keeps a connection at most :data:`REUSE_S`
seconds idle, and closes every one it kept when it is done (the owner at the end of
its solve, whatever ended it).
"""

from __future__ import annotations

import hashlib
import json
import re
import select
import socket
import ssl
import threading
import time
import weakref

from . import protocol, wire
from .tls import party_of

NET = "chainpipe-agents/5"
#: the largest header or reply frame
HEADER_LIMIT = 64 * 1024
#: the largest event frame an agent sends its owner (its report may carry the text of
#: the two messages it sent, for the owner's trace)
EVENT_LIMIT = 2 * protocol.MAX_MESSAGE_BYTES + (1 << 20)
#: seconds an agent waits for the owner's header of a run whose ``prefix`` came first
EARLY_S = 10.0
#: seconds a party keeps trying to connect to an agent that is not listening yet
CONNECT_S = 5.0
#: seconds for the TLS handshake and the first frame of a connection, and for a reply
HANDSHAKE_S = 10.0
#: seconds an agent keeps an authenticated connection open, waiting for its next request
IDLE_S = 30.0
#: seconds a connecting party keeps a connection idle for its next request; an older one
#: is closed rather than reused (well below :data:`IDLE_S`: the agent must not be closing
#: it as the request leaves)
REUSE_S = 10.0

_RUN_ID = re.compile(r"[0-9a-f]{32}")

#: per client context, ``(address, party) ->`` the last TLS session that party's agent
#: gave it a ticket for (:func:`remember_session`): a new connection to that agent
#: resumes it (:func:`connect`)
_SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


class Refused(Exception):
    """The other party refused what we sent (its reason is the message)."""


def public_digest(public: dict) -> str:
    """SHA-256 of the public document's canonical JSON: every party must hold the same."""
    text = json.dumps(public, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_address(text: str, any_port: bool = False) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; ``ValueError`` says what is wrong.
    With ``any_port`` (an address to listen on) port 0 means any free port."""
    host, sep, port = str(text).rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    low = 0 if any_port else 1
    if not sep or not host or not port.isdigit() or not low <= int(port) < 65536:
        raise ValueError(f"must be HOST:PORT with a port in {low}..65535, got {str(text)[:60]!r}")
    return host, int(port)


def encode_json(obj) -> bytes:
    """``obj`` as the bytes of a JSON frame (:func:`send_json`)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("utf-8")


def send_json(sock, obj) -> None:
    wire.send(sock, encode_json(obj))


def send_message(sock, kind: str, run_id: str, data: bytes) -> None:
    """Deliver a protocol message to a neighbour: its header and its bytes, two frames
    in one write (one TLS record, one segment: nothing waits for an acknowledgement)."""
    wire.send(sock, encode_json({"net": NET, "kind": kind, "run": run_id}), data)


def recv_json(sock, limit: int = HEADER_LIMIT, within: float | None = None):
    """The next frame as JSON (:class:`.protocol.ProtocolError` if it is not); with
    ``within``, the whole frame must arrive within that many seconds (:func:`.wire.recv`)."""
    data = wire.recv(sock, limit, within)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise protocol.ProtocolError("a frame that is not JSON") from None


def check_header(h, num_layers: int | None = None) -> dict:
    """A connection's first frame, checked; :class:`.protocol.ProtocolError` says why not.

    Parameters
    ----------
    h
        The frame, any JSON value.
    num_layers : int, optional
        The instance's layer count, which bounds a run's option ``grid``.
    """
    if not isinstance(h, dict) or h.get("net") != NET:
        got = h.get("net") if isinstance(h, dict) else None
        other = (f" (this peer speaks {got[:40]!r}: another version of chainpipe)"
                 if isinstance(got, str) else "")
        raise protocol.ProtocolError(f"header: expected an object with net = {NET!r}"
                                     + other)
    kind = h.get("kind")
    keys = {"run": {"net", "kind", "run", "public_sha256", "agents", "options",
                    "time_limit_s", "trace", "chain"},
            "prefix": {"net", "kind", "run"},
            "summary": {"net", "kind", "run"},
            "assemble": {"net", "kind", "run"}}.get(kind if isinstance(kind, str) else "")
    if keys is None:
        raise protocol.ProtocolError(
            "header.kind: must be 'run', 'prefix', 'summary' or 'assemble'")
    if set(h) != keys and not (kind == "run" and set(h) == keys - {"chain"}):
        raise protocol.ProtocolError(f"header: expected exactly the fields {sorted(keys)}"
                                     + (" (chain may be left out)" if kind == "run" else ""))
    if not isinstance(h["run"], str) or not _RUN_ID.fullmatch(h["run"]):
        raise protocol.ProtocolError("header.run: must be 32 lowercase hex digits")
    if kind != "run":
        return h
    if not isinstance(h["public_sha256"], str):
        raise protocol.ProtocolError("header.public_sha256: must be a string")
    agents = h["agents"]
    if not isinstance(agents, dict) or not all(isinstance(v, str) for v in agents.values()):
        raise protocol.ProtocolError("header.agents: must map DC names to HOST:PORT")
    for name, addr in agents.items():
        try:
            parse_address(addr)
        except ValueError as exc:
            raise protocol.ProtocolError(f"header.agents.{name[:40]}: {exc}") from None
    _check_options(h["options"], num_layers)
    t = h["time_limit_s"]
    if t is not None and not (protocol.finite_number(t) and t >= 0):
        raise protocol.ProtocolError("header.time_limit_s: must be a number >= 0 or null")
    if not isinstance(h["trace"], bool):
        raise protocol.ProtocolError("header.trace: must be true or false")
    h.setdefault("chain", None)
    _check_chain(h["chain"])
    return h


def _check_chain(chain) -> None:
    """A run header's ``chain``: ``null`` or a range of DCs, a microbatch count and an
    objective (whether the agent's chain has that range is the agent's check)."""
    if chain is None:
        return
    keys = {"first", "last", "microbatches", "objective"}
    if not isinstance(chain, dict) or set(chain) != keys:
        raise protocol.ProtocolError(f"header.chain: must be null or exactly {sorted(keys)}")
    if not all(isinstance(chain[k], int) and not isinstance(chain[k], bool)
               for k in ("first", "last", "microbatches")):
        raise protocol.ProtocolError("header.chain: first, last, microbatches: integers")
    if not 0 <= chain["first"] <= chain["last"] or chain["microbatches"] < 1:
        raise protocol.ProtocolError("header.chain: must have 0 <= first <= last and "
                                     "microbatches >= 1")
    if chain["objective"] not in ("classic", "period"):
        raise protocol.ProtocolError("header.chain.objective: must be 'classic' or 'period'")


def _check_options(opts, num_layers: int | None) -> None:
    """A run's options: some of :data:`.protocol.RUN_OPTIONS`, each in its range (or
    ``null``), and ``prefix_bound`` true or false."""
    names = sorted(protocol.RUN_OPTIONS)
    if not isinstance(opts, dict) or not set(opts) <= {*names, "prefix_bound"}:
        raise protocol.ProtocolError(f"header.options: must map some of {names} and "
                                     f"'prefix_bound' to their values")
    if not isinstance(opts.get("prefix_bound", True), bool):
        raise protocol.ProtocolError("header.options.prefix_bound: must be true or false")
    for name, value in opts.items():
        problem = None if value is None or name == "prefix_bound" else \
            protocol.option_problem(name, value, num_layers)
        if problem:
            raise protocol.ProtocolError(f"header.options.{name}: {problem}")


def connect(address: str, ctx: ssl.SSLContext, party: str, *, within: float = CONNECT_S,
            deadline=None) -> ssl.SSLSocket:
    """A TLS connection to the agent at ``address``, which must be ``party``.

    Refused and reset connections are retried for ``within`` seconds (and not past
    ``deadline``): parties may start at the same moment, and a busy agent closes a
    connection it has no slot for, before or during the TLS handshake
    (:data:`.serve.MAX_HANDSHAKES`). A failed handshake otherwise (a certificate the CA
    did not sign, a timeout) is not retried.

    Raises
    ------
    OSError
        It could not be reached, or the TLS handshake failed (the message says why).
    Refused
        Its certificate names another party.
    """
    host, port = parse_address(address)
    give_up = time.monotonic() + within
    if deadline is not None and not deadline.unlimited:
        give_up = min(give_up, deadline.at + 1.0)
    pause = 0.1
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(ctx, {}).get((address, party))
    while True:
        try:
            sock = _handshake(host, port, ctx, session)
            break
        except _Again as exc:
            if time.monotonic() + pause >= give_up:
                raise OSError(str(exc)) from None
            time.sleep(pause)
            pause = min(2 * pause, 0.5)
    keep_alive(sock)
    peer = party_of(sock)
    if peer != party:
        sock.close()
        raise Refused(f"its certificate names {peer!r}, not {party!r}")
    return sock


def remember_session(ctx: ssl.SSLContext, address: str, party: str, sock) -> bool:
    """Keep ``sock``'s TLS session (once its agent sent a ticket for it) for the next
    connection of ``ctx`` to ``party`` at ``address``: a TLS 1.3 resumption (a key both
    sides derived from the first, fully authenticated handshake, which names both
    certificates again) instead of a full handshake, about 2 ms of CPU less on either
    side. The agent still checks the party of every request; a session it no longer
    takes means a full handshake. Whether it was kept (``False``: no ticket yet).

    Reading a connection's session costs about 0.3 ms of CPU (the ``ssl`` module
    copies it, certificates and all), so :class:`Pool` reads it once per connection,
    not at every request."""
    try:
        session = sock.session
    except (OSError, ValueError):
        return False
    if session is None or not session.has_ticket:
        return False
    with _SESSIONS_LOCK:
        _SESSIONS.setdefault(ctx, {})[(address, party)] = session
    return True


class _Again(OSError):
    """A failure worth another try: nobody listens yet, or a busy agent closed the
    connection before or during the TLS handshake."""


def _handshake(host: str, port: int, ctx: ssl.SSLContext, session=None) -> ssl.SSLSocket:
    """One try at a TLS connection, resuming ``session`` if given (:class:`_Again` if
    another may succeed; an :class:`OSError` saying why if not)."""
    try:
        raw = socket.create_connection((host, port), timeout=HANDSHAKE_S)
    except (TimeoutError, ConnectionRefusedError, ConnectionResetError) as exc:
        raise _Again(f"cannot connect ({_why(exc)})") from None
    try:
        return ctx.wrap_socket(raw, server_hostname=host, session=session)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as exc:
        raw.close()  # closed unread: the agent had no slot for it
        raise _Again(f"TLS handshake failed ({_why(exc)})") from None
    except (OSError, ssl.SSLError) as exc:
        raw.close()
        raise OSError(f"TLS handshake failed ({_why(exc)})") from None


def keep_alive(sock: socket.socket) -> None:
    """Find out within about half a minute that the host at the other end has gone
    silent (TCP keepalive probes, and a bound on unacknowledged data where the platform
    has one): a run must not wait for a vanished party for the system's 15 minutes. And
    no Nagle delay: every frame leaves in one write (:func:`.wire.send`), and a frame
    sent right after another (a header, then a message, then events) must not wait for
    the peer's delayed acknowledgement of the first."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
               (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3),
                        ("TCP_USER_TIMEOUT", 30_000)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, name, value in options:
        try:
            sock.setsockopt(level, name, value)
        except OSError:
            pass


def _why(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError):
        return str(getattr(exc, "reason", None) or exc.strerror or type(exc).__name__)
    return str(exc)


def close(sock) -> None:
    """Shut a connection down (a thread blocked reading it wakes up) and close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Pool:
    """TLS connections kept open between requests, per agent (its address and party).

    :meth:`take` gives a kept connection (idle less than ``reuse_s`` seconds, every
    answer due on it ``ok``, and not closed by the other end meanwhile) or a new one
    (:func:`connect`); :meth:`give` keeps a connection whose last request ended cleanly
    (an answer read whole, or due and read by the next :meth:`take`), for the next
    request to that agent; :meth:`close` closes every kept one. A connection
    whose request failed in any way is closed by its user, never given back.

    Parameters
    ----------
    ctx : ssl.SSLContext
        The TLS client context of the party that connects.
    reuse_s : float
        Seconds a connection may stay idle and still be reused.
    per_peer : int
        Idle connections kept per agent at most (more are closed).
    """

    def __init__(self, ctx: ssl.SSLContext, reuse_s: float = REUSE_S, per_peer: int = 4):
        self.ctx, self.reuse_s, self.per_peer = ctx, float(reuse_s), int(per_peer)
        self._idle: dict[tuple[str, str], list[tuple[ssl.SSLSocket, float, int]]] = {}
        self._lock = threading.Lock()
        self._closed = False
        #: the connections whose TLS session (with its ticket) is kept already
        #: (:func:`remember_session`)
        self._remembered: weakref.WeakSet = weakref.WeakSet()
        #: connections made (TLS handshakes, ``resumed`` of them resuming a session) and
        #: connections reused, since the start
        self.opened = self.reused = self.resumed = 0

    def take(self, address: str, party: str, deadline=None,
             fresh: bool = False) -> tuple[ssl.SSLSocket, bool]:
        """A connection to the agent ``party`` at ``address`` and whether it was kept
        from an earlier request (``fresh``: a new one in any case; :func:`connect`'s
        exceptions if a new one fails)."""
        while not fresh:
            now = time.monotonic()
            with self._lock:
                if self._closed:
                    raise OSError("the connections are closed")
                idle = self._idle.get((address, party), [])
                if not idle:
                    break
                sock, since, due = idle.pop()
            if now - since <= self.reuse_s and _answered(sock, due) and not _stale(sock):
                with self._lock:
                    self.reused += 1
                return sock, True
            close(sock)
        with self._lock:
            if self._closed:
                raise OSError("the connections are closed")
        sock = connect(address, self.ctx, party, deadline=deadline)
        with self._lock:
            self.opened += 1
            self.resumed += bool(sock.session_reused)
        return sock, False

    def has_idle(self, address: str, party: str) -> bool:
        """Whether a connection to that agent is kept (it may still turn out stale)."""
        with self._lock:
            return bool(self._idle.get((address, party)))

    def give(self, address: str, party: str, sock: ssl.SSLSocket, due: int = 0) -> None:
        """Keep ``sock`` (its last request sent whole, ``due`` answers to it not read yet:
        :meth:`take` reads them, and reuses the connection only if each is ``ok``) for
        the next request."""
        with self._lock:
            known = sock in self._remembered
        if not known and remember_session(self.ctx, address, party, sock):
            with self._lock:
                self._remembered.add(sock)
        with self._lock:
            idle = self._idle.setdefault((address, party), [])
            if not self._closed and len(idle) < self.per_peer:
                idle.append((sock, time.monotonic(), due))
                return
        close(sock)

    def close(self) -> None:
        """Close every kept connection; :meth:`take` refuses from now on."""
        with self._lock:
            self._closed = True
            socks = [s for idle in self._idle.values() for s, _, _ in idle]
            self._idle.clear()
        for sock in socks:
            close(sock)


def _answered(sock: ssl.SSLSocket, due: int) -> bool:
    """Whether the ``due`` answers to the requests sent last on ``sock`` are each
    ``{"ok": true}``, read whole within :data:`HANDSHAKE_S` seconds each (a refusal, an
    end or a silence: the connection is not reused)."""
    try:
        for _ in range(due):
            sock.settimeout(HANDSHAKE_S)
            if recv_json(sock, within=HANDSHAKE_S) != {"ok": True}:
                return False
    except (wire.Closed, OSError, protocol.ProtocolError):
        return False
    return True


def _stale(sock: ssl.SSLSocket) -> bool:
    """Whether an idle connection cannot carry another request: nothing is due on one,
    so anything but TLS's own records (session tickets) means that the other end closed
    it (or broke the protocol)."""
    try:
        if not sock.pending() and not select.select([sock], [], [], 0)[0]:
            return False
        timeout = sock.gettimeout()
        sock.setblocking(False)
        try:
            sock.recv(1)  # application data or the end: either way not reusable
        finally:
            sock.settimeout(timeout)
        return True
    except ssl.SSLWantReadError:  # only TLS records of its own (tickets), now read
        return False
    except (OSError, ValueError):
        return True


def closed_idle(exc: Exception) -> bool:
    """Whether a request's failure on a kept connection (:class:`Pool`) is the other end
    having closed it while it was idle, so that it read nothing of the request and a new
    connection may carry it; not a timeout or a frame that broke the protocol."""
    return isinstance(exc, (wire.Closed, ConnectionError, ssl.SSLError)) \
        and not isinstance(exc, TimeoutError)
