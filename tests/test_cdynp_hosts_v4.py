"""CDynP across hosts, protocol version 4 (issue 32): fewer round trips per run.

* the owner sends a run's header to every agent at once and waits for no answer (an
  agent's first event says that it took the run);
* a ``prefix`` that reaches an agent before the owner's header of its run is kept for
  that run (answered ``ok``), at most :data:`~chainpipe.solvers.cdynp.serve.MAX_EARLY`
  of them and each at most :data:`~chainpipe.solvers.cdynp.net.EARLY_S` seconds; a
  replay of one, one too many, and one whose run never starts are refused or dropped;
* a neighbour does not wait for a message's ``ok``: the pool reads it when the
  connection is next taken, and reuses the connection only after an ``ok``;
* a party of another protocol version is refused, naming both versions.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from test_cdynp_hosts import THREE
from test_cdynp_reuse import Agents, fake_agents

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import net, remote, serve
from chainpipe.solvers.cdynp.serve import _Run
from chainpipe.solvers.cdynp.watch import AgentFailure


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    d = tmp_path_factory.mktemp("three4")
    agents = Agents(THREE, d / "split")
    import chainpipe as cp

    trace = d / "trace"
    assert cp.solve(cp.read(THREE), "cdynp", probe=False, trace_dir=trace).plan is not None
    agents.prefix = (trace / "000-prefix-dc1-to-dc2.json").read_bytes()
    yield agents
    agents.stop()


@pytest.fixture
def clean(three):
    """Every test leaves no parked prefix behind."""
    yield three
    for server in three.servers.values():
        with server.lock:
            server._early.clear()


def _header(agents: Agents, run: str) -> dict:
    return {"net": net.NET, "kind": "run", "run": run,
            "public_sha256": net.public_digest(agents.public), "agents": agents.address,
            "options": {}, "time_limit_s": 20, "trace": False}


def _first_event(agents: Agents, to: str, run: str) -> dict:
    """Start ``run`` at agent ``to`` alone; its first event (then the owner leaves)."""
    sock = net.connect(agents.address[to], agents.ctx("owner"), to)
    try:
        net.send_json(sock, _header(agents, run))
        sock.settimeout(5)
        return net.recv_json(sock)
    finally:
        net.close(sock)


def test_the_owner_starts_every_agent_at_once(clean):
    """Fake agents that read the header and never answer: each of the three gets it
    (protocol version 3 sent DC 1 its header only after DCs 2 and 3 had answered)."""
    got: dict = {}

    def handle(conn, name, stop):
        got[name] = net.recv_json(conn)["kind"]
        while not stop.is_set():
            time.sleep(0.05)

    with fake_agents(clean, handle) as fakes:
        backend = remote.RemoteAgents(clean.public, fakes, clean.ctx("owner"))
        with pytest.raises(AgentFailure, match="hung"):
            backend.one_run({}, None, Deadline(0.5))
    assert got == {"dc1": "run", "dc2": "run", "dc3": "run"}


def _send_early_prefix(agents: Agents, run: str) -> None:
    """dc1's prefix of ``run`` to dc2 before any header of that run: answered ok."""
    sock = net.connect(agents.address["dc2"], agents.ctx("dc1"), "dc2")
    try:
        net.send_message(sock, "prefix", run, agents.prefix)
        assert net.recv_json(sock) == {"ok": True}
    finally:
        net.close(sock)


def test_an_early_prefix_is_kept_for_its_run(clean):
    """dc1's prefix reaches dc2 before the owner's header: answered ok, and the run takes
    it when it starts (dc2 then waits for dc3's summary, not for dc1's prefix)."""
    run = "e1" * 16
    _send_early_prefix(clean, run)
    assert _first_event(clean, "dc2", run) == {"event": "wait", "peer": "dc3", "run": run}
    # without it, the run waits for dc1
    other = "e2" * 16
    assert _first_event(clean, "dc2", other) == {"event": "wait", "peer": "dc1", "run": other}


def test_an_early_prefix_is_dropped_when_its_run_does_not_start_in_time(clean, monkeypatch):
    monkeypatch.setattr(net, "EARLY_S", 0.3)
    run = "e3" * 16
    _send_early_prefix(clean, run)
    time.sleep(0.6)
    assert _first_event(clean, "dc2", run) == {"event": "wait", "peer": "dc1", "run": run}
    assert any(f"dropped a prefix for run {run[:8]}.." in line for line in clean.lines)


def test_too_many_or_replayed_early_prefixes_are_refused(clean):
    sock = net.connect(clean.address["dc2"], clean.ctx("dc1"), "dc2")
    try:
        for i in range(serve.MAX_EARLY):
            net.send_message(sock, "prefix", f"{i:02x}" * 16, clean.prefix)
            assert net.recv_json(sock) == {"ok": True}
        net.send_message(sock, "prefix", "00" * 16, clean.prefix)
        assert "(a replay)" in net.recv_json(sock)["refused"]
    finally:
        net.close(sock)
    sock = net.connect(clean.address["dc2"], clean.ctx("dc1"), "dc2")
    try:
        net.send_message(sock, "prefix", "ff" * 16, clean.prefix)
        reply = net.recv_json(sock)
        assert f"{serve.MAX_EARLY} early prefixes wait already" in reply["refused"], reply
    finally:
        net.close(sock)
    assert len(clean.servers["dc2"]._early) == serve.MAX_EARLY


def test_a_kept_connection_is_reused_only_after_an_ok(clean):
    """A neighbour's pool takes a connection again only once the answer due on it is
    ``ok``; after a refusal it makes a new one."""
    with _prefix_sent(clean, "a5" * 16) as (pool, address, sock):
        again, kept = pool.take(address, "dc2")
        assert kept and again is sock and pool.opened == 1
        # an assemble for a run dc2 is not part of: refused, and the connection not reused
        net.send_message(again, "assemble", "a6" * 16, clean.prefix)
        pool.give(address, "dc2", again, due=1)
        third, kept = pool.take(address, "dc2")
        assert not kept and third is not again and pool.opened == 2
        pool.give(address, "dc2", third)


@contextlib.contextmanager
def _prefix_sent(clean, run_id: str):
    """``(pool, address, sock)``: dc1's pool with one connection to dc2, on which a prefix
    of the run ``run_id`` (registered at dc2) went and whose answer is due; the pool
    closed and the run dropped at the end."""
    run = _Run(run_id, {}, None)
    clean.servers["dc2"].runs[run.id] = run
    pool = net.Pool(clean.ctx("dc1"))
    address = clean.address["dc2"]
    try:
        sock, _kept = pool.take(address, "dc2")
        net.send_message(sock, "prefix", run.id, clean.prefix)
        pool.give(address, "dc2", sock, due=1)
        yield pool, address, sock
    finally:
        pool.close()
        clean.servers["dc2"].runs.pop(run.id, None)


def test_a_peer_of_another_version_is_refused_naming_both(clean):
    old = {**_header(clean, "e4" * 16), "net": "chainpipe-agents/4"}
    sock = net.connect(clean.address["dc1"], clean.ctx("owner"), "dc1")
    try:
        net.send_json(sock, old)
        reply = net.recv_json(sock)["refused"]
    finally:
        net.close(sock)
    assert "'chainpipe-agents/5'" in reply and "'chainpipe-agents/4'" in reply, reply


def test_a_long_lived_owner_shares_its_connections_across_solves(clean, tmp_path):
    """solve_remote(connections=...): the second solve makes no TLS handshake and gives
    the same answer and trace bytes; the connections stay open for the owner to close."""
    ctx = clean.ctx("owner")
    conns = remote.Connections(clean.address, ctx)
    try:
        first, _ = remote.solve_remote(clean.public, clean.address, ctx, connections=conns,
                                       trace_dir=tmp_path / "a")
        assert first.stats["connections"]["opened"] == 3
        second, _ = remote.solve_remote(clean.public, clean.address, ctx, connections=conns,
                                        trace_dir=tmp_path / "b")
        # every run of the second solve reuses one connection per agent of its range,
        # its first run those the first solve's runs left too
        assert second.stats["connections"] == {
            "opened": 0, "reused": first.stats["connections"]["reused"] + 3, "resumed": 0}
        assert (second.iteration_time, second.plan) == (first.iteration_time, first.plan)
        assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
            p.name for p in (tmp_path / "a").iterdir())
        assert all(conns.pool.has_idle(clean.address[n], n) for n in clean.names)
        with pytest.raises(ValueError, match="same agents"):
            remote.solve_remote(clean.public, clean.address, clean.ctx("owner"),
                                connections=conns)
    finally:
        conns.close()
    alone, _ = remote.solve_remote(clean.public, clean.address, ctx)
    assert alone.stats["connections"]["opened"] == 3 and alone.plan == first.plan


def test_a_new_connection_resumes_the_tls_session_of_an_earlier_one(clean):
    """An owner's second solve (its own connections, closed after the first) resumes
    the TLS sessions of the first: same answer, every agent still sees the owner's
    party (it starts the runs), and a context without those sessions does not resume."""
    ctx = clean.ctx("owner")
    first, _ = remote.solve_remote(clean.public, clean.address, ctx)
    second, _ = remote.solve_remote(clean.public, clean.address, ctx)
    assert second.stats["connections"]["opened"] == 3
    assert second.stats["connections"]["resumed"] == 3
    assert (second.iteration_time, second.plan) == (first.iteration_time, first.plan)
    other, _ = remote.solve_remote(clean.public, clean.address, clean.ctx("owner"))
    assert other.stats["connections"]["resumed"] == 0 and other.plan == first.plan
    # a resumed session is the party of its first handshake: dc1's is not the owner's
    run = _Run("a9" * 16, {}, None)
    clean.servers["dc2"].runs[run.id] = run
    pool = net.Pool(clean.ctx("dc1"))
    try:
        sock, _ = pool.take(clean.address["dc2"], "dc2")
        net.send_message(sock, "prefix", run.id, clean.prefix)
        pool.give(clean.address["dc2"], "dc2", sock, due=1)
        sock, _ = pool.take(clean.address["dc2"], "dc2")  # its answer read: and the ticket
        pool.give(clean.address["dc2"], "dc2", sock)
        pool.close()
        pool = net.Pool(pool.ctx)
        again, _ = pool.take(clean.address["dc2"], "dc2")
        assert again.session_reused and pool.resumed == 1
        net.send_json(again, _header(clean, "e9" * 16))
        assert "only the owner may start a run, not 'dc1'" in net.recv_json(again)["refused"]
    finally:
        pool.close()
        clean.servers["dc2"].runs.pop(run.id, None)


def test_a_pool_reads_a_connections_tls_session_once(clean, monkeypatch):
    """A connection's TLS session is kept once it has its ticket, and not read again at
    each later request on that connection (reading it copies the session, certificates
    and all); a new connection's is read again."""
    calls = []
    real = net.remember_session

    def counted(ctx, address, party, sock):
        calls.append(sock)
        return real(ctx, address, party, sock)

    monkeypatch.setattr(net, "remember_session", counted)
    with _prefix_sent(clean, "b7" * 16) as (pool, address, first):
        for _ in range(4):  # its answers read (and the ticket with them), then idle gives
            sock, kept = pool.take(address, "dc2")
            assert kept and sock is first
            pool.give(address, "dc2", sock)
        assert 1 <= len(calls) <= 2 and set(calls) == {first}
        assert real(pool.ctx, address, "dc2", first)  # it has its ticket by now
        other, kept = pool.take(address, "dc2", fresh=True)
        assert not kept
        pool.give(address, "dc2", other)
        assert calls[-1] is other
