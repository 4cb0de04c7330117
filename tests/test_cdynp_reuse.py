"""CDynP across hosts with connections kept across runs (issue 32).

The owner keeps one TLS connection per agent for its whole solve
(:class:`chainpipe.solvers.cdynp.remote.Connections`) and each agent keeps its
connections to its neighbours (:class:`chainpipe.solvers.cdynp.net.Pool`). Here the
agents are :class:`~chainpipe.solvers.cdynp.serve.AgentServer` threads of this process
(each counts the connections it accepted, by party) and the owner is
:func:`~chainpipe.solvers.cdynp.remote.solve_remote`:

* a solve of dozens of range runs opens one connection to each agent, and each agent
  accepts at most one from each neighbour; the answer and the trace bytes are the
  in-process ones, and a second solve on the same agents gives the same bytes;
* on a kept connection every request is checked as the first: a message for a run the
  agent is not part of, or of a kind its party may not send, is refused and ends the
  connection; a second owner cannot take over or feed a run another owner started; an
  event that names another run ends the owner's run; a certificate another CA signed
  is still refused, and a kept connection is never used for another party;
* an agent closes a connection idle for its ``idle_timeout``; an owner whose kept
  connections an agent closed connects anew and gets the same answer.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from test_cdynp_hosts import THREE, _cli

import chainpipe as cp
from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import net, remote, tls, wire
from chainpipe.solvers.cdynp.serve import AgentServer, _Run
from chainpipe.solvers.cdynp.session import Decoded
from chainpipe.solvers.cdynp.watch import AgentFailure
from helpers import assert_same_trace_files

ROOT = Path(__file__).resolve().parents[1]
TWO = ROOT / "instances" / "v3" / "small" / "v3-small-02-two-pipelines.json"


class Agents:
    """A split instance with certificates and one in-process agent server per DC."""

    def __init__(self, instance: Path, d: Path, **server_options):
        assert _cli("split", instance, d, "--certs").returncode == 0
        self.dir, self.certs = d, d / "certs"
        self.public = json.loads((d / "public.json").read_text())
        self.names = list(self.public["datacenters"])
        self.servers, self.stops, self.threads, self.lines = {}, [], [], []
        try:
            for k, name in enumerate(self.names):
                ctx = [self.ctx(name, side) for side in ("server", "client")]
                private = json.loads((d / f"private-{k:02d}-{name}.json").read_text())
                server = AgentServer(self.public, private, *ctx, "127.0.0.1:0",
                                     self.lines.append, **server_options)
                stop = threading.Event()
                thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
                thread.start()
                self.servers[name] = server
                self.stops.append(stop)
                self.threads.append(thread)
        except BaseException:
            self.stop()
            raise
        self.address = {n: s.address for n, s in self.servers.items()}

    def ctx(self, party: str, side: str = "client", certs: Path | None = None):
        c = certs or self.certs
        return tls.context(side, c / "ca.pem", c / f"{party}.pem", c / f"{party}.key")

    def accepted(self) -> dict:
        """Per agent, the connections it accepted so far, by party."""
        return {n: dict(s.accepted) for n, s in self.servers.items()}

    def stop(self) -> None:
        for stop in self.stops:
            stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    agents = Agents(TWO, tmp_path_factory.mktemp("two"))
    yield agents
    agents.stop()


def _new(after: dict, before: dict) -> dict:
    return {n: {p: c - before[n].get(p, 0) for p, c in got.items() if c > before[n].get(p, 0)}
            for n, got in after.items()}


def test_a_solve_opens_one_connection_per_agent_and_gives_the_in_process_bytes(two, tmp_path):
    before = two.accepted()
    res, _ev = remote.solve_remote(two.public, two.address, two.ctx("owner"),
                                   trace_dir=tmp_path / "remote")
    new = _new(two.accepted(), before)
    runs = res.stats["range_runs"]
    assert res.status.value == "optimal" and runs >= 10, res.message
    # one connection to each agent for all the runs of the solve ...
    assert res.stats["connections"]["opened"] == 3
    assert res.stats["connections"]["reused"] >= runs
    assert all(new[n].get("owner") == 1 for n in two.names), new
    # ... and at most one from each neighbour (kept by the agents between messages)
    neighbours = {"dc1": {"dc2"}, "dc2": {"dc1", "dc3"}, "dc3": {"dc2"}}
    for n in two.names:
        assert set(new[n]) - {"owner"} <= neighbours[n] and all(
            new[n][p] == 1 for p in neighbours[n] & set(new[n])), new
    local = cp.solve(cp.read(TWO), "cdynp", trace_dir=tmp_path / "local")
    assert res.iteration_time == local.iteration_time
    assert res.plan.pipelines == local.plan.pipelines
    assert res.stats["range_runs"] == local.stats["range_runs"]
    assert_same_trace_files(tmp_path / "local", tmp_path / "remote")
    # a second solve on the same agents (their neighbour connections kept): the same bytes
    again, _ = remote.solve_remote(two.public, two.address, two.ctx("owner"),
                                   trace_dir=tmp_path / "again")
    assert again.iteration_time == res.iteration_time and again.plan == res.plan
    assert_same_trace_files(tmp_path / "local", tmp_path / "again")


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    d = tmp_path_factory.mktemp("three")
    agents = Agents(THREE, d / "split", idle_timeout=1.0)
    trace = d / "trace"
    assert cp.solve(cp.read(THREE), "cdynp", probe=False, trace_dir=trace).plan is not None
    agents.prefix = (trace / "000-prefix-dc1-to-dc2.json").read_bytes()
    yield agents
    agents.stop()


def _deliver(sock, kind: str, run: str, data: bytes):
    """Deliver a message (header and bytes in one write); the agent's answer."""
    net.send_message(sock, kind, run, data)
    return net.recv_json(sock)


def _taken(run: _Run, side: str, kind: str):
    """The message the agent put in ``run``'s inbox, as decoded on arrival."""
    got = run.inbox[side].get(timeout=5)
    assert isinstance(got, Decoded) and got.kind == kind, got
    return got


def _ended(sock, within: float = 0.6) -> float:
    """Seconds until the agent closes ``sock`` (fails if it sends anything or waits
    longer than ``within``: after a refusal it closes at once, well before its idle
    timeout of 1 s)."""
    sock.settimeout(within)
    t0 = time.monotonic()
    with pytest.raises(wire.Closed):
        net.recv_json(sock)
    return time.monotonic() - t0


def _registered(agents: Agents, name: str, run_id: str) -> _Run:
    run = _Run(run_id, {}, None)
    agents.servers[name].runs[run_id] = run
    return run


def test_a_message_for_another_run_on_a_kept_connection_is_refused(three):
    run = _registered(three, "dc2", "a1" * 16)
    sock = net.connect(three.address["dc2"], three.ctx("dc1"), "dc2")
    try:
        assert _deliver(sock, "prefix", run.id, three.prefix) == {"ok": True}
        assert _taken(run, "prev", "prefix").size == len(three.prefix)
        # the same connection, a run dc2 is not part of (an assemble: a prefix would be
        # kept a moment for a run not started yet)
        reply = _deliver(sock, "assemble", "b2" * 16, three.prefix)
        assert "not part of" in reply["refused"]
        _ended(sock)  # a refusal ends the connection
    finally:
        net.close(sock)
    assert any("not part of" in line for line in three.lines)


def test_every_request_on_a_kept_connection_is_authorised_by_its_party(three):
    """dc1, authenticated once, may send dc2 a prefix; on the same connection it may
    neither send a summary (downstream's) nor start a run (the owner's)."""
    for header, words in (({"kind": "summary"}, "only from the downstream neighbour"),
                          ({"kind": "run"}, "only the owner may start a run")):
        run = _registered(three, "dc2", ("c3" if header["kind"] == "run" else "d4") * 16)
        sock = net.connect(three.address["dc2"], three.ctx("dc1"), "dc2")
        try:
            assert _deliver(sock, "prefix", run.id, three.prefix) == {"ok": True}
            if header["kind"] == "run":
                net.send_json(sock, {"net": net.NET, "kind": "run", "run": "e5" * 16,
                                     "public_sha256": net.public_digest(three.public),
                                     "agents": three.address, "options": {},
                                     "time_limit_s": 5, "trace": False})
                reply = net.recv_json(sock)
            else:
                reply = _deliver(sock, "summary", run.id, three.prefix)
            assert words in reply["refused"], reply
            assert run.inbox["next"].empty()
            _ended(sock)
        finally:
            net.close(sock)


def test_a_second_owner_cannot_take_over_or_feed_a_run(three):
    """The owner starts a run at dc3 (which then waits for dc2's prefix); another owner
    connection can neither start a run of the same id nor deliver a message into it,
    and the first connection's events go on naming its run."""
    header = {"net": net.NET, "kind": "run", "run": "f6" * 16,
              "public_sha256": net.public_digest(three.public), "agents": three.address,
              "options": {}, "time_limit_s": 20, "trace": False}
    first = net.connect(three.address["dc3"], three.ctx("owner"), "dc3")
    try:
        net.send_json(first, header)
        first.settimeout(5)  # no answer to the header: its first event (a wait) says it took it
        assert net.recv_json(first) == {"event": "wait", "peer": "dc2", "run": header["run"]}
        for frames, words in (([header], "already under way"),
                              ([{"net": net.NET, "kind": "prefix", "run": header["run"]}],
                               "only from the upstream neighbour")):
            second = net.connect(three.address["dc3"], three.ctx("owner"), "dc3")
            try:
                for f in frames:
                    net.send_json(second, f)
                assert words in net.recv_json(second)["refused"]
            finally:
                net.close(second)
        events = [net.recv_json(first) for _ in range(2)]
        assert all(e["run"] == header["run"] and e["event"] == "beat" for e in events), events
    finally:
        net.close(first)


@contextlib.contextmanager
def fake_agents(agents: Agents, handle):
    """TLS servers on loopback, one per DC of ``agents``, each with its DC's certificate,
    calling ``handle(conn, name, stop)`` on every connection it accepts; yields their
    addresses by DC and stops them on the way out."""
    fakes, threads, stop = {}, [], threading.Event()

    def serve(listener, name):
        ctx = agents.ctx(name, "server")
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            with ctx.wrap_socket(raw, server_side=True) as conn:
                conn.settimeout(5)
                handle(conn, name, stop)

    try:
        for name in agents.names:
            listener = socket.create_server(("127.0.0.1", 0))
            fakes[name] = f"127.0.0.1:{listener.getsockname()[1]}"
            threads.append(threading.Thread(target=serve, args=(listener, name), daemon=True))
            threads[-1].start()
        yield fakes
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


def test_an_event_naming_another_run_ends_the_owners_run(three, tmp_path):
    """Fake agents (each with its DC's certificate) that take the run and answer with an
    event of another run: the owner ends the run naming the DC."""
    headers = []

    def handle(conn, name, stop):
        headers.append(net.recv_json(conn)["kind"])
        net.send_json(conn, {"event": "work", "run": "0" * 32})
        try:
            net.recv_json(conn)  # until the owner closes
        except (wire.Closed, OSError):
            pass

    with fake_agents(three, handle) as fakes:
        backend = remote.RemoteAgents(three.public, fakes, three.ctx("owner"))
        with pytest.raises(AgentFailure, match="does not name this run"):
            backend.one_run({}, None, Deadline(20))
    assert headers and set(headers) == {"run"}


def test_another_cas_certificate_is_refused_and_kept_connections_keep_their_party(
        three, tmp_path):
    other = tmp_path / "other"
    tls.make_certs(other, ["owner"])
    pool = net.Pool(three.ctx("owner", certs=other))
    with pytest.raises(OSError, match="TLS handshake failed"):
        pool.take(three.address["dc2"], "dc2")
    pool = net.Pool(three.ctx("owner"))
    try:
        sock, kept = pool.take(three.address["dc2"], "dc2")
        assert not kept
        pool.give(three.address["dc2"], "dc2", sock)
        # the connection kept for dc2 is not one to "dc3" at that address
        with pytest.raises(net.Refused, match="names 'dc2', not 'dc3'"):
            pool.take(three.address["dc2"], "dc3")
        again, kept = pool.take(three.address["dc2"], "dc2")
        assert kept and again is sock and pool.opened == 1
        pool.give(three.address["dc2"], "dc2", again)
    finally:
        pool.close()
    with pytest.raises(OSError):
        pool.take(three.address["dc2"], "dc2")


def test_an_idle_connection_is_closed_after_its_timeout(three):
    run = _registered(three, "dc2", "a7" * 16)
    sock = net.connect(three.address["dc2"], three.ctx("dc1"), "dc2")
    try:
        assert _deliver(sock, "prefix", run.id, three.prefix) == {"ok": True}
        waited = _ended(sock, within=5.0)
        assert 0.8 <= waited < 3.0, waited  # idle_timeout is 1 s
    finally:
        net.close(sock)
    assert any("idle for 1 s after 1 request(s)" in line for line in three.lines)


def test_an_owner_reconnects_when_an_agent_closed_its_kept_connection(three, monkeypatch):
    """Two runs on one Connections with a pause past the agents' idle timeout between
    them: the second finds its kept connections closed, connects anew and gets the same
    answer (also when the closed connection does not yet look closed: the request then
    fails on it and goes once more on a new one)."""
    monkeypatch.setattr(net, "_stale", lambda sock: False)
    conns = remote.Connections(three.address, three.ctx("owner"))
    backend = remote.RemoteAgents(three.public, three.address, three.ctx("owner"),
                                  connections=conns)
    try:
        first = backend.one_run({}, None, Deadline(60))
        assert conns.opened == 3
        time.sleep(1.5)  # past idle_timeout: every agent closed its connection
        second = backend.one_run({}, None, Deadline(60))
        assert conns.opened == 6 and conns.reused == 3
    finally:
        conns.close()
    assert first.stages == second.stages and first.messages == second.messages


def test_an_agent_tells_its_owner_of_waits_that_last_only():
    """A wait shorter than TELL_WAIT_S, and the work after it, are not told (a run of a
    few milliseconds costs its owner one event per agent); a wait that lasted is told,
    and then the work that ends it."""
    from chainpipe.solvers.cdynp.serve import _Told

    told: list = []
    t = _Told(told.append)
    t({"event": "wait", "peer": "dc2"})
    t({"event": "work"})
    t({"event": "work"})
    assert told == []
    t({"event": "wait", "peer": "dc3"})
    t.flush()  # the wait lasted
    t({"event": "work"})
    t({"event": "beat"})
    t({"event": "done"})
    assert [e["event"] for e in told] == ["wait", "work", "beat", "done"]
    assert told[0]["peer"] == "dc3"


def test_the_first_run_connects_to_every_agent_at_once(three):
    """A first run of DC 1 alone also connects to DCs 2 and 3 (their handshakes overlap
    its own instead of each delaying a later run); later runs take those connections."""
    conns = remote.Connections(three.address, three.ctx("owner"))
    try:
        socks, kept = conns.take(["dc1"], Deadline(20))
        assert len(socks) == 1 and kept == [False] and conns.opened == 3
        conns.give(["dc1"], socks)
        socks, kept = conns.take(["dc2", "dc3"], Deadline(20))
        assert kept == [True, True] and conns.opened == 3
        conns.give(["dc2", "dc3"], socks)
    finally:
        conns.close()


def test_a_header_sent_a_byte_at_a_time_does_not_keep_a_connection_open(three):
    """After a request, the next header must be whole within the idle timeout (1 s
    here): a peer dripping a byte every 0.3 s is closed all the same."""
    import select

    run = _registered(three, "dc2", "a8" * 16)
    sock = net.connect(three.address["dc2"], three.ctx("dc1"), "dc2")
    try:
        assert _deliver(sock, "prefix", run.id, three.prefix) == {"ok": True}
        sock.sendall((100).to_bytes(4, "big"))  # a header of 100 bytes, then a byte at a time
        t0 = time.monotonic()
        closed = None
        while time.monotonic() - t0 < 5.0 and closed is None:
            try:
                sock.sendall(b" ")
            except OSError:
                closed = time.monotonic() - t0
                break
            if select.select([sock], [], [], 0.3)[0]:
                sock.settimeout(1.0)
                try:
                    assert sock.recv(1) == b""
                except OSError:
                    pass
                closed = time.monotonic() - t0
        assert closed is not None and closed < 2.5, closed
    finally:
        net.close(sock)
