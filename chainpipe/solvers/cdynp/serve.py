"""One DC's agent as a TLS server (``chainpipe agent serve``).

The agent holds its private document and the public one, listens on one
address and serves run after run until SIGINT or SIGTERM; runs may overlap,
each isolated under its own run id. Every connection must present a
certificate the agreed CA signed, and what it may ask depends on the party it
names (:mod:`.tls`):

* a ``run`` only from the owner (:data:`.tls.OWNER`), for the same public
  instance (its digest must match) and a fresh run id; a range run's ``chain``
  (several pipelines, or the classic solve that bounds a period run) must hold
  this DC and be one the instance allows (:meth:`AgentServer._chain_problem`), and
  the run then plans that chain (:meth:`.public.PublicInstance.chain`);
* a ``summary`` only from the downstream neighbour, a ``prefix`` and an
  ``assemble`` only from the upstream one, each for a run this agent takes part
  in and from a DC of that run's chain, once, and in the protocol's order (the
  ``prefix`` first, an ``assemble`` after this agent sent its summary). A ``prefix``
  may come before the owner's header of its run (the owner starts every agent at
  once): it is kept for that run (at most :data:`MAX_EARLY` of them, each at most
  :data:`.net.EARLY_S` seconds) and checked and decoded when the run starts.

Anything else is refused with a logged line, the connection closed, and the agent
goes on serving; a run's header is checked whole first, every option against its
range (:data:`.protocol.RUN_OPTIONS`). A connection carries one request after another
(:mod:`.net`): the owner's, run after run of its solve; a neighbour's, message after
message. Every request is checked as the first one is, against the party the
connection's certificate names; a connection that brings no request for
``idle_timeout`` seconds (:data:`.net.IDLE_S`) is closed. The agent's own messages to
its neighbours leave on connections it keeps the same way (:class:`.net.Pool`). A message from the right neighbour that breaks
the protocol is refused too and ends that run, naming the neighbour to the
owner. A run ends, and its state is freed, when it is done, when the owner's
connection closes (the run looks at it whenever it checks its deadline or waits for a
neighbour, :class:`_OwnerGone`), at the time
limit (plus :data:`.watch.GRACE_S`), or when a neighbour stays silent for
``peer_timeout`` seconds without one.

Connections still in their TLS handshake take slots of their own pool
(:data:`MAX_HANDSHAKES` in all, :data:`MAX_HANDSHAKES_PER_ADDRESS` from one peer
address, :data:`HANDSHAKE_S` seconds each), apart from the authenticated ones
(:data:`MAX_CONNECTIONS`): a flood of idle connections cannot take the owner's.
"""

from __future__ import annotations

import math
import queue
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

from ...deadline import Deadline
from . import net, protocol, wire
from .drive import agent_options
from .public import PublicInstance, read_view
from .session import BEAT_S, Cancelled, Decoded, PeerGone, run_agent
from .tls import OWNER, party_of
from .watch import GRACE_S

#: seconds a run waits for a neighbour's message when the run has no time limit
PEER_TIMEOUT_S = 600.0
#: authenticated connections served at once; more are refused (and logged)
MAX_CONNECTIONS = 64
#: connections in their TLS handshake at once (nobody authenticated yet), in all and from
#: one peer address; more are closed at once. A pool of their own: a flood of them never
#: takes a slot of :data:`MAX_CONNECTIONS`
MAX_HANDSHAKES = 32
MAX_HANDSHAKES_PER_ADDRESS = 8
#: seconds a connection has to complete its TLS handshake (a handshake between hosts
#: takes a few round trips)
HANDSHAKE_S = 3.0
#: seconds between two log lines about connections closed for want of a slot
_LOG_EVERY_S = 5.0
#: prefixes kept at once for runs whose owner's header has not come yet (:data:`.net.EARLY_S`)
MAX_EARLY = 4
#: seconds a run waits for a neighbour's message before it tells its owner that it waits
#: (a shorter wait is not worth an event, nor is the ``work`` that ends it: :class:`_Told`)
TELL_WAIT_S = 0.05


@dataclass
class _Run:
    """One run this agent takes part in."""

    id: str
    agents: dict
    deadline_at: float | None
    view: PublicInstance | None = None  # the run's chain (None: the whole, as in the file)
    first: int = 0  # the index of the run's first DC in the whole chain
    inbox: dict = field(default_factory=lambda: {"next": queue.Queue(), "prev": queue.Queue()})
    received: set = field(default_factory=set)  # the kinds delivered so far
    summary_sent: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)  # _OwnerGone when served

    @property
    def deadline(self) -> Deadline:
        """The run's deadline (``deadline_at``, a ``time.monotonic()`` instant) from now."""
        return Deadline(None if self.deadline_at is None
                        else max(0.0, self.deadline_at - time.monotonic()))


class _Admission:
    """Who may be served: connections in their TLS handshake (at most
    :data:`MAX_HANDSHAKES`, :data:`MAX_HANDSHAKES_PER_ADDRESS` from one address) and,
    apart from them, authenticated ones (at most :data:`MAX_CONNECTIONS`)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.handshakes: dict[str, int] = {}  # peer address -> connections in a handshake
        self.sessions = 0

    def start_handshake(self, host: str) -> str | None:
        """Take a handshake slot for a connection from ``host``; why not, if none is free."""
        with self.lock:
            if sum(self.handshakes.values()) >= MAX_HANDSHAKES:
                return f"{MAX_HANDSHAKES} connections are in their TLS handshake"
            if self.handshakes.get(host, 0) >= MAX_HANDSHAKES_PER_ADDRESS:
                return (f"{MAX_HANDSHAKES_PER_ADDRESS} connections from {host} are in their "
                        f"TLS handshake")
            self.handshakes[host] = self.handshakes.get(host, 0) + 1
            return None

    def end_handshake(self, host: str) -> None:
        with self.lock:
            self.handshakes[host] -= 1
            if not self.handshakes[host]:
                del self.handshakes[host]

    def start_session(self) -> bool:
        """Take a slot for an authenticated connection (``False``: none is free)."""
        with self.lock:
            if self.sessions >= MAX_CONNECTIONS:
                return False
            self.sessions += 1
            return True

    def end_session(self) -> None:
        with self.lock:
            self.sessions -= 1


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
    idle_timeout : float
        Seconds an authenticated connection may wait for its next request.

    Attributes
    ----------
    accepted : dict
        Party -> authenticated connections this agent has served (for tests and logs).
    peers : net.Pool
        The connections this agent keeps to its neighbours.
    """

    def __init__(self, public: dict, private: dict, server_ctx: ssl.SSLContext,
                 client_ctx: ssl.SSLContext, listen: str, log,
                 peer_timeout: float = PEER_TIMEOUT_S, allow_trace: bool = True,
                 share_prefix: bool = True, idle_timeout: float = net.IDLE_S):
        self.public, self.k, self.dc = read_view(public, private)
        self.digest = net.public_digest(public)
        self.names = list(self.public.datacenter_names)
        self.server_ctx, self.client_ctx = server_ctx, client_ctx
        self.log = log
        self.peer_timeout = float(peer_timeout)
        self.allow_trace = bool(allow_trace)
        self.share_prefix = bool(share_prefix)
        self.idle_timeout = float(idle_timeout)
        self.peers = net.Pool(client_ctx, reuse_s=min(net.REUSE_S, self.idle_timeout / 2))
        self.accepted: dict[str | None, int] = {}
        self._live: set = set()  # the authenticated connections being served
        self.runs: dict[str, _Run] = {}
        self.lock = threading.Lock()
        self._early: dict[str, tuple[int, bytes, float]] = {}  # run -> (j, prefix, when)
        self.admission = _Admission()
        self._dropped = 0  # connections closed for want of a slot, not yet logged
        self._logged_at = -math.inf
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
                why = self.admission.start_handshake(addr[0])
                if why is not None:
                    raw.close()
                    self._log_dropped(_peer(addr), why)
                    continue
                threading.Thread(target=self._connection, args=(raw, addr), daemon=True).start()
        finally:
            self.sock.close()
            self.peers.close()
            with self.lock:
                for run in self.runs.values():
                    run.cancel.set()
                live = list(self._live)
            for conn in live:  # wakes the threads waiting for a next request
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _log_dropped(self, who: str, why: str) -> None:
        """Log a connection closed for want of a slot, at most once per
        :data:`_LOG_EVERY_S` seconds (a flood must not flood the log too)."""
        self._dropped += 1
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            more = f" (and {self._dropped - 1} more since)" if self._dropped > 1 else ""
            self.log(f"refused a connection from {who}: {why}{more}")
            self._dropped, self._logged_at = 0, now

    def _connection(self, raw: socket.socket, addr) -> None:
        who = _peer(addr)
        try:
            conn = self._handshake(raw, who)
        finally:
            self.admission.end_handshake(addr[0])
        if conn is None:
            return
        party = party_of(conn)
        who = f"{who} ({party!r})"
        try:
            if not self.admission.start_session():
                return self._refuse(conn, who, f"busy: {MAX_CONNECTIONS} connections are "
                                               f"being served")
            with self.lock:
                self.accepted[party] = self.accepted.get(party, 0) + 1
                self._live.add(conn)
            try:
                self._requests(conn, party, who)
            except (wire.Closed, OSError) as exc:
                self.log(f"connection from {who} ended early ({type(exc).__name__}"
                         f"{': ' + str(exc)[:120] if str(exc) else ''})")
            except Exception as exc:  # a bug must not end the agent's thread unlogged
                self.log(f"connection from {who} failed: {type(exc).__name__}: "
                         f"{str(exc)[:200]}")
            finally:
                with self.lock:
                    self._live.discard(conn)
                self.admission.end_session()
        finally:
            net.close(conn)

    def _handshake(self, raw: socket.socket, who: str) -> ssl.SSLSocket | None:
        """The TLS connection, once the peer has authenticated within :data:`HANDSHAKE_S`
        seconds in all (``None``, logged, if not)."""
        raw.settimeout(HANDSHAKE_S)  # the ssl module bounds the whole handshake by it
        try:
            conn = self.server_ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.log(f"refused a connection from {who}: TLS handshake failed "
                     f"({getattr(exc, 'reason', None) or exc})")
            raw.close()
            return None
        conn.settimeout(net.HANDSHAKE_S)
        net.keep_alive(conn)
        return conn

    def _refuse(self, conn, who: str, reason: str) -> bool:
        """Say why, log it; ``False``: the connection ends with a refusal."""
        self.log(f"refused {who}: {reason}")
        try:
            net.send_json(conn, {"refused": reason})
        except (wire.Closed, OSError):
            pass
        return False

    def _requests(self, conn, party: str | None, who: str) -> None:
        """Serve the connection's requests one after another, until one is refused or
        fails, the other end closes it, or it stays idle for :attr:`idle_timeout` s."""
        served = 0
        while True:
            try:  # the whole header in time: a byte now and then does not keep it open
                frame = net.recv_json(conn, within=net.HANDSHAKE_S if not served
                                      else self.idle_timeout)
            except protocol.ProtocolError as exc:
                return self._refuse(conn, who, f"a bad header: {exc}")
            except TimeoutError:
                if not served:
                    return self._refuse(conn, who, f"no header within {net.HANDSHAKE_S:g} s")
                return self.log(f"closed the connection from {who}: idle for "
                                f"{self.idle_timeout:g} s after {served} request(s)")
            except (wire.Closed, OSError):
                if not served:
                    raise
                return  # the other end is done with it
            conn.settimeout(net.HANDSHAKE_S)
            if not self._dispatch(conn, party, who, frame):
                return
            served += 1

    def _dispatch(self, conn, party: str | None, who: str, frame) -> bool:
        """Serve one request (its header ``frame``); whether the connection may carry
        another (``False`` after a refusal or a run that did not end cleanly)."""
        try:
            header = net.check_header(frame, self.public.num_layers)
        except protocol.ProtocolError as exc:
            return self._refuse(conn, who, f"a bad header: {exc}")
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
            problem = self._message_problem(run, header["run"], kind, j, party)
        if problem:
            return self._refuse(conn, who, problem)
        try:
            data = wire.recv(conn, protocol.MAX_MESSAGE_BYTES)
        except (protocol.ProtocolError, TimeoutError) as exc:
            reason = str(exc) or "no message within the time allowed"
            if run is not None:
                run.inbox[side].put(protocol.ProtocolError(reason, allowed))
            return self._refuse(conn, who, f"its {kind}: {reason}")
        if run is None:  # a prefix before the owner's header of its run
            run, problem = self._park(header["run"], j, data, party)
            if problem:
                return self._refuse(conn, who, problem)
            if run is None:
                net.send_json(conn, {"ok": True})
                return True
        problem = self._take(run, kind, j, data)
        if problem:
            return self._refuse(conn, who, f"its {kind}: {problem}")
        net.send_json(conn, {"ok": True})
        return True

    def _message_problem(self, run: _Run | None, run_id: str, kind: str, j: int,
                         party: str | None) -> str | None:
        """Why a neighbour's message for ``run`` (registered, or ``None``) is refused, or
        ``None`` (then noted as received); under :attr:`lock`. A ``prefix`` for a run not
        registered yet is parked (:meth:`_park`)."""
        if run is None:
            if kind == "prefix":
                return None
            return f"a {kind} for run {run_id[:8]}.. this agent is not part of"
        if kind in run.received:
            return f"a second {kind} for run {run.id[:8]}.. (a replay)"
        if kind == "assemble" and not run.summary_sent:
            return "an assemble before this agent sent its summary (out of order)"
        if not 0 <= j - run.first < (run.view or self.public).num_datacenters:
            return (f"a {kind} for run {run.id[:8]}.. from {party!r}, which is not in "
                    f"that run's chain")
        run.received.add(kind)
        return None

    def _take(self, run: _Run, kind: str, j: int, data: bytes) -> str | None:
        """Decode a message of ``run`` from DC ``j`` (checked by
        :meth:`_message_problem`) and put it in the run's inbox, decoded (the run does not
        decode it again); why not, when it breaks the protocol (the run then fails,
        naming the neighbour)."""
        side = "next" if kind == "summary" else "prev"
        view = run.view or self.public
        try:
            message = protocol.decode(data, kind, view.expect(j - run.first,
                                                              self.k - run.first))
        except protocol.ProtocolError as exc:
            run.inbox[side].put(protocol.ProtocolError(str(exc), self.names[j]))
            return str(exc)
        run.inbox[side].put(Decoded(kind, message, len(data)))
        return None

    def _park(self, run_id: str, j: int, data: bytes,
              party: str | None) -> tuple[_Run | None, str | None]:
        """Keep a prefix whose run the owner has not started here yet (its header may come
        a moment later: the owner starts every agent at once) for :data:`.net.EARLY_S`
        seconds at most, :data:`MAX_EARLY` prefixes and :data:`.protocol.MAX_MESSAGE_BYTES`
        in all; the run takes it when it starts (:meth:`_unpark`). ``(run, None)`` if the
        run started meanwhile (checked as any message), ``(None, why)`` if it is refused."""
        with self.lock:
            self._expire()
            run = self.runs.get(run_id)
            if run is not None:
                return run, self._message_problem(run, run_id, "prefix", j, party)
            if run_id in self._early:
                return None, f"a second prefix for run {run_id[:8]}.. (a replay)"
            if len(self._early) >= MAX_EARLY or len(data) + sum(
                    len(e[1]) for e in self._early.values()) > protocol.MAX_MESSAGE_BYTES:
                return None, (f"a prefix for run {run_id[:8]}.. this agent is not part of "
                              f"(and {len(self._early)} early prefixes wait already)")
            self._early[run_id] = (j, data, time.monotonic())
            return None, None

    def _expire(self) -> None:
        """Drop the parked prefixes older than :data:`.net.EARLY_S` (under :attr:`lock`)."""
        now = time.monotonic()
        for run_id in [r for r, e in self._early.items() if now - e[2] > net.EARLY_S]:
            del self._early[run_id]
            self.log(f"dropped a prefix for run {run_id[:8]}.. this agent is not part of "
                     f"(no run of that id started within {net.EARLY_S:g} s)")

    def _unpark(self, run: _Run) -> None:
        """A newly registered run takes the prefix parked for it, if any."""
        with self.lock:
            self._expire()
            early = self._early.pop(run.id, None)
            problem = early and self._message_problem(run, run.id, "prefix", early[0],
                                                      self.names[early[0]])
        if early is None:
            return
        problem = problem or self._take(run, "prefix", early[0], early[1])
        if problem:  # a bad one fails the run (_take); one from outside its chain does not
            self.log(f"refused the early prefix of {self.names[early[0]]!r} for run "
                     f"{run.id[:8]}..: {problem}")

    # ------------------------------------------------------------------ one run
    def _serve_run(self, conn, header: dict, who: str) -> bool:
        if header["public_sha256"] != self.digest:
            return self._refuse(conn, who, "the run is for another public instance "
                                           "(its digest differs from this agent's public file)")
        if header["trace"] and not self.allow_trace:
            return self._refuse(conn, who, "this agent takes no traced runs (--no-trace)")
        view, first = self.public, 0
        if header["chain"] is not None:
            problem = self._chain_problem(header["chain"])
            if problem:
                return self._refuse(conn, who, f"chain: {problem}")
            c = header["chain"]
            view, first = self.public.chain(c["first"], c["last"], c["microbatches"],
                                            c["objective"]), c["first"]
        if sorted(header["agents"]) != sorted(view.datacenter_names):
            return self._refuse(conn, who, f"agents: must name exactly the DCs "
                                           f"{list(view.datacenter_names)}")
        try:
            opts = header["options"]
            options = {**agent_options(**{k: opts.get(k) for k in
                                          ("epsilon", "quantum", "digits", "max_entries",
                                           "upper_bound", "prefix_bound")}),
                       **{k: int(opts[k]) for k in ("beam", "grid", "frontier", "floors_only",
                                                      "curve_steps")
                          if opts.get(k)},
                       **{k: float(opts[k]) for k in ("sync_cap", "lower_bound",
                                                      "frontier_bound", "curve_low",
                                                      "curve_top", "sum_limit")
                          if opts.get(k) is not None}}
        except (ValueError, TypeError) as exc:
            return self._refuse(conn, who, f"options: {exc}")
        options["prefix_bound"] = options["prefix_bound"] and self.share_prefix
        t = header["time_limit_s"]
        run = _Run(header["run"], dict(header["agents"]),
                   None if t is None else time.monotonic() + float(t), view, first,
                   cancel=_OwnerGone(conn))
        with self.lock:
            if run.id in self.runs:
                return self._refuse(conn, who, f"run {run.id[:8]}.. is already under way")
            self.runs[run.id] = run
        self._unpark(run)
        self.log(f"run {run.id[:8]}.. for {who}")
        return self._execute(conn, run, options, header["trace"])

    def _execute(self, conn, run: _Run, options: dict, trace: bool) -> bool:
        """Run this DC's part of ``run`` (registered) for the owner at the other end of
        ``conn``; whether the connection may carry the owner's next run (the run ended
        and its last event went out, the owner still there). Its first event tells the
        owner that it took the run (there is no answer to the header)."""
        view, first = run.view or self.public, run.first
        conn.settimeout(net.HANDSHAKE_S)

        def tell(event: dict) -> None:
            """Send the owner an event naming the run (only this thread sends on ``conn``
            while the run lasts)."""
            try:
                net.send_json(conn, {**event, "run": run.id})
            except (wire.Closed, OSError):
                run.cancel.set()
                raise Cancelled from None

        clean = False
        try:
            setup = {"options": options, "deadline_at": run.deadline_at, "trace_dir": None,
                     "trace_return": trace}
            told = _Told(tell)
            event = run_agent(view, self.k - first, self.dc, setup,
                              _TLSLinks(self, run, told), told, run.cancel)
            # its part is over: from now on the owner's connection turning readable is the
            # owner's next request, not its end
            run.cancel.disarm()
            tell(event)
            clean = True
            self.log(f"run {run.id[:8]}.. {event['event']}"
                     + (f": {event.get('error')}" if event["event"] == "failed" else ""))
        except Cancelled:
            self.log(f"run {run.id[:8]}.. ended: the owner's connection closed")
        finally:
            run.cancel.disarm()
            with self.lock:
                self.runs.pop(run.id, None)
        # the owner may send its next run on this connection, unless it has gone
        return clean and not run.cancel.is_set()

    def _chain_problem(self, chain: dict) -> str | None:
        """Why this agent takes no range run of ``chain`` (a header's, checked by
        :func:`.net.check_header`), or ``None``: the range must be of this chain and hold
        this DC, its microbatches at most the instance's, its objective the instance's or
        ``classic`` (the bound of a period run); a range other than the whole chain with
        all its microbatches only where the instance allows several pipelines."""
        K, M = len(self.names), self.public.microbatches
        tr = self.public.training
        if chain["last"] >= K or not chain["first"] <= self.k <= chain["last"]:
            return (f"DCs {chain['first']}..{chain['last']} of a chain of {K} do not hold "
                    f"this DC ({self.k})")
        if chain["microbatches"] > M:
            return f"{chain['microbatches']} microbatches, the instance has {M}"
        if chain["objective"] not in (tr.objective, "classic"):
            return f"objective {chain['objective']!r}: the instance's is {tr.objective!r}"
        whole = (chain["first"], chain["last"], chain["microbatches"]) == (0, K - 1, M)
        if not whole and max(tr.parallelism.pipelines) < 2:
            return "a range run, but the instance allows one pipeline only"
        return None


class _Told:
    """A run's events as its owner's watch needs them (:class:`.watch.Watch`): a change
    of state, a beat, the last event. A ``wait`` goes out only once the wait has lasted
    :data:`TELL_WAIT_S` (:meth:`flush`, called by :meth:`_TLSLinks.recv`), and a ``work``
    only after a ``wait`` that went out (the owner counts a starting agent as working,
    and beats, at most :data:`.session.BEAT_S` apart, keep a working one alive): a run of
    a few milliseconds then costs its owner one event per agent, not eight."""

    def __init__(self, tell):
        self.tell = tell
        self.pending: dict | None = None  # a wait not told yet
        self.working = True  # what the owner believes

    def __call__(self, event: dict) -> None:
        kind = event.get("event")
        if kind == "wait":
            self.pending = event
            return
        if kind == "work":
            self.pending = None
            if self.working:
                return
        self.flush()
        self.working = self.working or kind == "work"
        self.tell(event)

    def flush(self) -> None:
        """Tell the owner of the wait under way, if it has not been told."""
        if self.pending is not None:
            event, self.pending = self.pending, None
            self.working = False
            self.tell(event)


class _TLSLinks:
    """A run's neighbours: messages arrive in its inbox (delivered by the connections the
    neighbours open) and leave on a connection this agent keeps to the neighbour
    (:attr:`AgentServer.peers`), opened by the first message to it."""

    def __init__(self, server: AgentServer, run: _Run, tell: _Told):
        self.server, self.run, self.tell = server, run, tell

    def recv(self, side: str, peer: str, kind: str) -> bytes | Decoded:
        run = self.run
        deadline = run.deadline
        give_up = (time.monotonic() + self.server.peer_timeout if deadline.unlimited
                   else deadline.at + GRACE_S)
        last_beat = time.monotonic()
        wait_s = TELL_WAIT_S
        while True:
            try:
                item = run.inbox[side].get(timeout=wait_s)
                break
            except queue.Empty:
                self.tell.flush()  # a wait worth telling
                wait_s = 0.2
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
        """Deliver a message on the connection kept to ``peer`` (a new one if none is).
        Its answer is not awaited (a neighbour that refuses a message fails its own run and
        names this DC to its owner): it is read when the connection is next taken
        (:meth:`.net.Pool.take`), and a connection whose answer is not ``ok`` is not
        used again."""
        run = self.run
        address = run.agents[peer]
        if kind == "summary":  # before it can arrive: the answer may come back at once
            run.summary_sent = True
        for attempt in (1, 2):
            try:
                sock, kept = self.server.peers.take(address, peer, deadline=run.deadline,
                                                    fresh=attempt > 1)
            except (OSError, net.Refused) as exc:
                raise PeerGone(peer, f"cannot be reached at {address}: {exc}") from None
            try:
                sock.settimeout(net.HANDSHAKE_S)
                net.send_message(sock, kind, run.id, data)
                break
            except (wire.Closed, OSError) as exc:
                net.close(sock)
                # a kept connection the neighbour closed while it was idle: once more on a
                # new one
                if not (kept and attempt == 1 and net.closed_idle(exc)):
                    raise PeerGone(peer, f"at {address} closed the connection") from None
        self.server.peers.give(address, peer, sock, due=1)  # its answer read at next use


class _OwnerGone(threading.Event):
    """A run's ``cancel``: set when the agent stops (:meth:`AgentServer.serve`) or when the
    owner's connection turns readable while the run lasts (its end, a reset, an alert:
    the owner sends nothing between a run's header and its last event, so that means
    that it has gone). The connection is looked at whenever the run asks (at most
    :data:`.session.BEAT_S` apart while it computes, every 0.2 s while it waits for a
    neighbour), so that no thread per run watches it; :meth:`disarm` stops looking once
    the run's part is over (the owner's next request then makes it readable)."""

    def __init__(self, conn):
        super().__init__()
        self._poller: select.poll | None = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN | getattr(select, "POLLRDHUP", 0))

    def is_set(self) -> bool:
        if super().is_set():
            return True
        poller = self._poller
        if poller is not None and poller.poll(0):
            self.set()
            return True
        return False

    def disarm(self) -> None:
        """Stop looking at the owner's connection (the run's part is over)."""
        self._poller = None


def _peer(addr) -> str:
    host, port = addr[0], addr[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
