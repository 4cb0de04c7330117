"""Agents that cannot be pinned, starved or started as another party (issue 28, 11-14).

* a run's options are checked against their ranges before the run starts (``grid``
  1e10 used to pin a core for hours), and a run whose owner leaves is cancelled and
  freed;
* idle or slow connections that never finish their TLS handshake take slots of their
  own pool, a few per peer address, and are dropped after a few seconds: an owner's
  solve succeeds through a flood of them (it used to fail in 0.3 s);
* ``agent serve`` refuses a certificate of another party and an address without a port
  (exit 2, one line);
* any finite time limit works as "no practical limit" (1e9 with processes, 1e10 across
  hosts used to overflow a timeout).

Traffic goes to 127.0.0.1 only (floods come from 127.0.0.2, another loopback source
address, where the platform allows binding it); every wait is bounded.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from test_cdynp_hosts import STARTUP_S, THREE, Cluster, _cli, _env, _eventually

import chainpipe as cp
from chainpipe.deadline import Deadline
from chainpipe.result import OptionError
from chainpipe.solvers.cdynp import net, protocol, serve, tls
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.cdynp.watch import WAKE_MAX_S, Watch

#: connections a flood opens to each agent (the old cap was 64)
FLOOD = 66


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    c = Cluster(THREE, tmp_path_factory.mktemp("three"))
    yield c
    c.stop()
    assert all(p.returncode == 0 for p in c.procs.values()), "an agent did not stop cleanly"


def _run_header(cluster: Cluster, run: str, **options) -> dict:
    return {"net": net.NET, "kind": "run", "run": run,
            "public_sha256": net.public_digest(json.loads(cluster.public.read_text())),
            "agents": cluster.address, "options": options, "time_limit_s": None,
            "trace": False}


def _owner(cluster: Cluster, to: str):
    c = cluster.dir / "certs"
    ctx = tls.context("client", c / "ca.pem", c / "owner.pem", c / "owner.key")
    return net.connect(cluster.address[to], ctx, to)


def _ask(cluster: Cluster, to: str, header: dict) -> object:
    sock = _owner(cluster, to)
    try:
        net.send_json(sock, header)
        return net.recv_json(sock)
    finally:
        net.close(sock)


# ---------------------------------------------------------------- 11: run options, runs freed
@pytest.mark.parametrize("name, value", [
    ("grid", 1e10), ("grid", 10**10), ("grid", 1000), ("grid", 2.5), ("beam", 1e10),
    ("digits", 400), ("epsilon", 1e300), ("quantum", 1e300), ("upper_bound", 0),
    ("max_entries", 0.5), ("max_entries", -1), ("sum_limit", 0), ("sum_limit", -2.0),
    ("sum_limit", float("inf"))])
def test_a_run_option_out_of_its_range_is_refused_in_the_header(name, value):
    with pytest.raises(protocol.ProtocolError, match=f"header.options.{name}: must be"):
        net.check_header({"net": net.NET, "kind": "run", "run": "0" * 32,
                          "public_sha256": "0" * 64, "agents": {}, "options": {name: value},
                          "time_limit_s": None, "trace": False}, num_layers=12)


def test_the_owner_and_the_agent_keep_to_the_same_ranges():
    with pytest.raises(OptionError, match="'digits' of cdynp: must be an integer >= 0 and <= 15"):
        agent_options(digits=400)
    with pytest.raises(OptionError, match="'epsilon' of cdynp: must be a number >= 0"):
        agent_options(epsilon=1e300)
    inst = cp.read(THREE)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="grid: must be an integer"):
        DCAgent(PublicInstance.of(inst), 0, inst.datacenters[0], grid=10**10)
    assert time.monotonic() - t0 < 5.0  # refused, not spun


def test_an_agent_refuses_a_grid_that_would_pin_its_core_and_goes_on_serving(three):
    for value in (1e10, 10**6):
        reply = _ask(three, "dc2", _run_header(three, "a" * 32, grid=value))
        assert "header.options.grid: must be an integer" in reply["refused"], reply
    _eventually(lambda: "header.options.grid" in three.log("dc2"))
    ok, _ = three.solve()
    assert ok.returncode == 0, ok.stderr


def test_a_run_whose_owner_leaves_is_cancelled_and_freed(three):
    header = _run_header(three, "b" * 32)
    sock = _owner(three, "dc3")  # dc3 then waits for dc2's prefix, which never comes
    net.send_json(sock, header)
    # no answer to a header (protocol version 4): the first event, a wait, says it took it
    assert net.recv_json(sock) == {"event": "wait", "peer": "dc2", "run": header["run"]}
    net.close(sock)
    t0 = time.monotonic()
    _eventually(lambda: "run bbbbbbbb.. ended" in three.log("dc3")
                or "the owner ended the run" in three.log("dc3"), within=5.0)
    assert time.monotonic() - t0 < 5.0
    # freed: the same run id is a new run again (it would be "already under way")
    sock = _owner(three, "dc3")
    try:
        net.send_json(sock, header)
        assert net.recv_json(sock) == {"event": "wait", "peer": "dc2", "run": header["run"]}
    finally:
        net.close(sock)


# ---------------------------------------------------------------- 12: floods of handshakes
def _flood(cluster: Cluster, source: str, count: int = FLOOD) -> list[socket.socket]:
    """``count`` idle TCP connections to each agent from ``source``, never a TLS byte."""
    socks = []
    try:
        for address in cluster.address.values():
            host, port = net.parse_address(address)
            for _ in range(count):
                s = socket.socket()
                s.settimeout(5.0)
                s.bind((source, 0))
                try:
                    s.connect((host, port))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
    except BaseException:
        _close(socks)
        raise
    return socks


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def _other_source() -> str:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("this platform cannot send from 127.0.0.2")
    return "127.0.0.2"


def test_an_owner_solves_through_a_flood_of_idle_connections(three):
    socks = _flood(three, _other_source())
    try:
        ok, elapsed = three.solve(timeout=60.0)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["status"] == "optimal"
    finally:
        _close(socks)
    assert three.alive()


def test_a_flood_from_the_owners_own_address_only_delays_it(three):
    socks = _flood(three, "127.0.0.1")
    try:  # the owner retries until the flood's handshakes time out
        ok, elapsed = three.solve(timeout=60.0)
        assert ok.returncode == 0, ok.stderr
    finally:
        _close(socks)
    assert elapsed < net.CONNECT_S + STARTUP_S


def test_idle_and_slow_handshakes_are_dropped_fast(three):
    host, port = net.parse_address(three.address["dc1"])
    idle = socket.create_connection((host, port), timeout=serve.HANDSHAKE_S + 5.0)
    slow = socket.create_connection((host, port), timeout=serve.HANDSHAKE_S + 5.0)
    t0 = time.monotonic()
    try:
        slow.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then a byte a second
        closed = False
        for _ in range(int(serve.HANDSHAKE_S) + 5):
            try:
                slow.sendall(b"\x02")
            except OSError:
                closed = True
                break
            time.sleep(1.0)
        assert closed or _ended(slow)
        assert _ended(idle)
        assert time.monotonic() - t0 < serve.HANDSHAKE_S + 4.0
    finally:
        idle.close()
        slow.close()


def _ended(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# ---------------------------------------------------------------- 13, 14: agent serve's input
def _serve(cluster: Cluster, private: str, cert: str, listen: str = "127.0.0.1:0"):
    c = cluster.dir / "certs"
    try:
        return _cli("agent", "serve", cluster.dir / private, "--public", cluster.public,
                    "--listen", listen, "--tls-ca", c / "ca.pem", "--tls-cert",
                    c / f"{cert}.pem", "--tls-key", c / f"{cert}.key", timeout=STARTUP_S)
    except subprocess.TimeoutExpired:
        pytest.fail("agent serve started serving instead of refusing")


@pytest.mark.parametrize("cert", ["dc2", "owner"])
def test_an_agent_will_not_serve_with_another_partys_certificate(three, cert):
    proc = _serve(three, "private-00-dc1.json", cert)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("--tls-cert: "), proc.stderr
    assert f"names the party {cert!r}, not 'dc1'" in lines[0]


@pytest.mark.parametrize("listen", ["localhost", "127.0.0.1:99999", ":7000"])
def test_an_address_without_a_usable_port_exits_2_naming_listen(three, listen):
    proc = _serve(three, "private-00-dc1.json", "dc1", listen=listen)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("--listen: "), proc.stderr


def test_any_finite_time_limit_is_no_practical_limit(three):
    res = cp.solve(cp.read(THREE), "cdynp", time_limit=1e9, processes=True)
    assert res.status == "optimal", res.message
    ok, _ = three.solve("--time-limit", "1e10")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "optimal"
    watch = Watch(["a"], Deadline(1e300), 1e300)
    assert 0 < watch.next_wake(time.monotonic(), None) <= WAKE_MAX_S


def test_the_cli_takes_a_huge_time_limit_with_processes(tmp_path):
    proc = _cli("solve", THREE, "--solver", "cdynp", "-O", "processes=true",
                "--time-limit", "1e9", "--format", "json", env=_env(), timeout=60.0)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "optimal"


# ---------------------------------------------------------------- agent serve --idle-timeout
def _serve_args(cluster: Cluster, *extra: str) -> list[str]:
    c = cluster.dir / "certs"
    return ["agent", "serve", str(cluster.dir / "private-00-dc1.json"), "--public",
            str(cluster.public), "--listen", "127.0.0.1:0", "--tls-ca", str(c / "ca.pem"),
            "--tls-cert", str(c / "dc1.pem"), "--tls-key", str(c / "dc1.key"), *extra]


def _refuse_to_listen(*_args, **_kwargs):
    raise OSError("not listening in this test")


def _server_kwargs(cluster: Cluster, monkeypatch, *extra: str) -> dict:
    """The keyword arguments ``agent serve`` builds its server with (the server itself is
    not started: the stand-in refuses to listen, and the command exits 1)."""
    from chainpipe import cli

    seen = {}

    def stand_in(*args, **kwargs):
        seen.update(kwargs)
        _refuse_to_listen()

    monkeypatch.setattr(serve, "AgentServer", stand_in)
    assert cli.main(_serve_args(cluster, *extra)) == 1
    return seen


def test_idle_timeout_reaches_the_agents_server(three, monkeypatch, capsys):
    from chainpipe import cli

    assert _server_kwargs(three, monkeypatch, "--idle-timeout", "2.5")["idle_timeout"] == 2.5
    # without the option the server keeps its own default, the one the help names
    assert "idle_timeout" not in _server_kwargs(three, monkeypatch)
    capsys.readouterr()
    assert cli.main(["agent", "serve", "--help"]) == 0
    assert f"(default {net.IDLE_S:g})" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_an_idle_timeout_that_leaves_no_time_exits_2_naming_it(three, value, capsys,
                                                                 monkeypatch):
    from chainpipe import cli

    monkeypatch.setattr(serve, "AgentServer", _refuse_to_listen)  # never serves if taken
    assert cli.main(_serve_args(three, "--idle-timeout", value)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--idle-timeout" in err[-1] and "seconds > 0" in err[-1], err
