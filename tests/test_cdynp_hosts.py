"""CDynP across hosts: each DC's agent a real OS process started through the CLI
(``chainpipe agent serve``), the owner ``chainpipe solve PUBLIC --agents``, all over
mutually authenticated TLS on the loopback interface.

Same answer as in-process (T, plan, byte-identical traces) on a 3-DC and a 5-DC
instance; refusals (a foreign CA, a party in a role it may not play, malformed and
oversized frames, a run of another public instance, a message for a run the agent is
not part of) leave the agents serving; a killed, hung or unreachable agent ends the
owner with one line naming the DC and its address, inside the deadline. Every process
started is stopped.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe.solvers.cdynp import net, tls
from chainpipe.solvers.cdynp.session import FAULT_ENV
from chainpipe.solvers.cdynp.watch import GRACE_S
from helpers import assert_same_trace_files, random_hybrid_instance

ROOT = Path(__file__).resolve().parents[1]
THREE = ROOT / "instances" / "hybrid" / "small" / "hybrid-small-04-three-dc.json"
#: what starting the interpreter and the agents may take on a loaded machine
STARTUP_S = 15.0


def _env(fault: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return env


def _cli(*args, timeout=60.0, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainpipe", *map(str, args)],
                          env=env or _env(), capture_output=True, text=True, timeout=timeout)


class Cluster:
    """A split instance with certificates and one agent process per DC."""

    def __init__(self, instance_path: Path, d: Path, faults: dict | None = None,
                 extra: dict | None = None):
        self.instance, self.dir = instance_path, d
        split = _cli("split", instance_path, d, "--certs")
        assert split.returncode == 0, split.stderr
        self.public = d / "public.json"
        self.names = json.loads(self.public.read_text())["datacenters"]
        self.procs, self.address, self.logs = {}, {}, {}
        try:
            for k, name in enumerate(self.names):
                self.start(k, name, (faults or {}).get(name), (extra or {}).get(name, []))
            for name in self.names:
                self.address[name] = self._listening(name)
        except BaseException:
            self.stop()
            raise
        self.agents = d / "agents.json"
        self.agents.write_text(json.dumps(self.address))

    def certs(self, party: str) -> list[str]:
        c = self.dir / "certs"
        return ["--tls-ca", str(c / "ca.pem"), "--tls-cert", str(c / f"{party}.pem"),
                "--tls-key", str(c / f"{party}.key")]

    def start(self, k: int, name: str, fault: str | None, extra: list) -> None:
        self.logs[name] = open(self.dir / f"agent-{name}.log", "w+")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "chainpipe", "agent", "serve",
             str(self.dir / f"private-{k:02d}-{name}.json"), "--public", str(self.public),
             "--listen", "127.0.0.1:0", *self.certs(name), *extra],
            env=_env(fault), stdout=subprocess.PIPE, stderr=self.logs[name], text=True)

    def _listening(self, name: str) -> str:
        line = self.procs[name].stdout.readline()  # 'agent NAME: listening on HOST:PORT'
        assert "listening on" in line, (line, self.log(name))
        return line.split("listening on")[1].strip()

    def log(self, name: str) -> str:
        self.logs[name].flush()
        return (self.dir / f"agent-{name}.log").read_text()

    def solve(self, *args, party="owner", agents=None, timeout=90.0):
        t0 = time.monotonic()
        proc = _cli("solve", self.public, "--solver", "cdynp", "--agents", agents or self.agents,
                    *self.certs(party), "--format", "json", *args, timeout=timeout)
        return proc, time.monotonic() - t0

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs.values())

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout:
                p.stdout.close()
        for f in self.logs.values():
            f.close()


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    c = Cluster(THREE, tmp_path_factory.mktemp("three"))
    yield c
    c.stop()
    assert all(p.returncode == 0 for p in c.procs.values()), "an agent did not stop cleanly"


def _same_as_in_process(cluster: Cluster, instance_path: Path, tmp: Path, *options):
    remote, _ = cluster.solve("--trace", tmp / "remote", *options)
    assert remote.returncode == 0, remote.stderr
    local = _cli("solve", instance_path, "--solver", "cdynp", "--format", "json",
                 "--trace", tmp / "local", *options)
    assert local.returncode == 0, local.stderr
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a["status"] == b["status"] and a["plan"]["stages"] == b["plan"]["stages"]
    # the owner names the instance without its digest: hashing the whole instance needs the
    # DCs' private data (and a digest of it would let a party test guesses of that data)
    assert a["plan"]["instance"] == {"name": b["plan"]["instance"]["name"]}
    assert a["devices_used"] == b["devices_used"] and a["devices_total"] is None
    assert a["iteration_time_s"] == b["iteration_time_s"]  # exactly: the same cost model
    assert a["lower_bound_s"] == b["lower_bound_s"]
    assert a["stats"]["mode"] == "tls"
    assert_same_trace_files(tmp / "local", tmp / "remote")
    return a


def test_three_dcs_give_the_in_process_answer(three, tmp_path):
    res = _same_as_in_process(three, THREE, tmp_path)
    assert res["status"] == "optimal"
    assert any(str(m["file"]).startswith("probe/") for m in res["stats"]["messages"])
    # compressed too, and a second run on the same agents
    _same_as_in_process(three, THREE, tmp_path / "again", "-O", "digits=3")
    assert three.alive()


def test_two_owners_at_once_get_isolated_runs(three):
    cmd = [sys.executable, "-m", "chainpipe", "solve", str(three.public), "--solver", "cdynp",
           "--agents", str(three.agents), *three.certs("owner"), "--format", "json"]
    procs = [subprocess.Popen(cmd + opts, env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for opts in ([], ["-O", "digits=2"])]
    outs = [p.communicate(timeout=90) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    exact, rounded = (json.loads(o[0]) for o in outs)
    assert exact["status"] == "optimal" and rounded["status"] == "feasible"
    assert rounded["iteration_time_s"] >= exact["iteration_time_s"]


def test_five_dcs_give_the_in_process_answer(tmp_path):
    seed = next(s for s in range(200) if random_hybrid_instance(s, max_layers=6, max_dcs=5)
                .num_datacenters == 5 and cp.solve(random_hybrid_instance(
                    s, max_layers=6, max_dcs=5), "dp").plan is not None)
    path = tmp_path / "five.json"
    cp.write(random_hybrid_instance(seed, max_layers=6, max_dcs=5), path)
    cluster = Cluster(path, tmp_path / "split")
    try:
        res = _same_as_in_process(cluster, path, tmp_path)
        assert res["status"] == "optimal"
    finally:
        cluster.stop()


def _eventually(check, within: float = 10.0) -> None:
    """``check()`` becomes true within that many seconds (an agent logs after it acts)."""
    until = time.monotonic() + within
    while not check():
        assert time.monotonic() < until
        time.sleep(0.1)


def _line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_certificate_of_another_ca_is_refused_and_the_agents_still_serve(three, tmp_path):
    other = tmp_path / "other"
    tls.make_certs(other, ["owner"])
    cmd = ["solve", three.public, "--solver", "cdynp", "--agents", three.agents,
           "--tls-ca", other / "ca.pem", "--tls-cert", other / "owner.pem",
           "--tls-key", other / "owner.key", "--format", "json"]
    t0 = time.monotonic()
    proc = _cli(*cmd)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1
    line = _line(proc)
    assert "cannot reach the agent of DC 'dc1' at " + three.address["dc1"] in line
    assert "TLS handshake failed" in line
    assert elapsed < STARTUP_S
    _eventually(lambda: "TLS handshake failed" in three.log("dc1"))
    ok, _ = three.solve()
    assert ok.returncode == 0, ok.stderr


def _client(three: Cluster, party: str) -> ssl.SSLContext:
    c = three.dir / "certs"
    return tls.context("client", c / "ca.pem", c / f"{party}.pem", c / f"{party}.key")


def _ask(three: Cluster, party: str, to: str, frames: list[bytes]) -> object:
    sock = net.connect(three.address[to], _client(three, party), to)
    try:
        for f in frames:
            sock.sendall(f)
        return net.recv_json(sock)
    finally:
        net.close(sock)


def _frame(obj) -> bytes:
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def test_a_party_in_a_role_it_may_not_play_is_refused(three):
    run = {"net": net.NET, "kind": "run", "run": "0" * 32,
           "public_sha256": net.public_digest(json.loads(three.public.read_text())),
           "agents": three.address, "options": {}, "time_limit_s": 5, "trace": False}
    # a DC may not start a run
    reply = _ask(three, "dc3", "dc2", [_frame(run)])
    assert "only the owner may start a run" in reply["refused"]
    # summaries come only from the downstream neighbour: dc3 -> dc2, never dc1 -> dc2
    summary = {"net": net.NET, "kind": "summary", "run": "1" * 32}
    reply = _ask(three, "dc1", "dc2", [_frame(summary)])
    assert "only from the downstream neighbour of 'dc2' ('dc3')" in reply["refused"]
    # assemble only from upstream: dc3 may not send dc2 one
    reply = _ask(three, "dc3", "dc2", [_frame({**summary, "kind": "assemble"})])
    assert "only from the upstream neighbour" in reply["refused"]
    # the right neighbour, but a run dc2 is not part of (a replay of a finished run)
    reply = _ask(three, "dc3", "dc2", [_frame(summary)])
    assert "not part of" in reply["refused"]
    # the owner, for another public instance
    reply = _ask(three, "owner", "dc2", [_frame({**run, "public_sha256": "0" * 64})])
    assert "another public instance" in reply["refused"]
    log = three.log("dc2")
    assert log.count("refused") >= 5
    ok, _ = three.solve()
    assert ok.returncode == 0 and three.alive()


def test_malformed_and_oversized_frames_are_refused(three):
    assert "bad header" in _ask(three, "dc3", "dc2", [_frame(b"\xff{not json")])["refused"]
    assert "bad header" in _ask(three, "dc3", "dc2", [_frame({"net": "x"})])["refused"]
    # announces 100 MB: refused before a byte of it is read
    big = struct.pack(">I", 100_000_000) + b"{"
    assert "above the cap" in _ask(three, "dc3", "dc2", [big])["refused"]
    # a client that does not speak TLS: dropped at the handshake, and logged
    with socket.create_connection(net.parse_address(three.address["dc2"])) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        try:
            while s.recv(100):  # an alert at most, then the end
                pass
        except ConnectionResetError:
            pass
    _eventually(lambda: "TLS handshake failed (HTTP_REQUEST)" in three.log("dc2"))
    ok, _ = three.solve()
    assert ok.returncode == 0 and three.alive()


@pytest.mark.parametrize("fault,dc", [("kill:dc2", "dc2"), ("hang:dc3", "dc3")])
def test_a_killed_or_hung_agent_ends_the_owner_in_time(tmp_path, fault, dc):
    cluster = Cluster(THREE, tmp_path, faults={dc: fault})
    try:
        limit = 4.0
        proc, elapsed = cluster.solve("--time-limit", limit, timeout=60)
        assert proc.returncode == 1, proc.stderr
        line = _line(proc)
        assert f"DC '{dc}' at {cluster.address[dc]}" in line, line
        assert ("died" in line) if fault.startswith("kill") else ("hung" in line)
        assert elapsed < limit + GRACE_S + STARTUP_S / 2
        # the others end their part of the run (its state freed) once the owner has gone
        for name in cluster.names:
            if name != dc:
                _eventually(lambda n=name: any(w in cluster.log(n)
                                               for w in (".. ended", ".. failed")))
    finally:
        cluster.stop()


def test_an_unreachable_agent_is_named(three, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps({**three.address, "dc3": f"127.0.0.1:{port}"}))
    proc, elapsed = three.solve(agents=agents)
    assert proc.returncode == 1
    assert _line(proc).startswith(f"chainpipe: cdynp: cannot reach the agent of DC 'dc3' at "
                                  f"127.0.0.1:{port}: cannot connect")
    assert elapsed < net.CONNECT_S + STARTUP_S / 2


def test_bad_agents_files_and_options_exit_2(three, tmp_path):
    agents = tmp_path / "agents.json"
    agents.write_text(json.dumps({"dc1": "127.0.0.1:1", "dc2": "nohost", "zz": "a:1"}))
    proc, _ = three.solve(agents=agents)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"{agents}: dc3: missing (the address of DC 'dc3''s agent)",
        f"{agents}: dc2: must be HOST:PORT with a port in 1..65535, got 'nohost'",
        f"{agents}: zz: not a DC of the chain ['dc1', 'dc2', 'dc3']"]
    proc = _cli("solve", three.public, "--solver", "dp", "--agents", three.agents,
                *three.certs("owner"))
    assert proc.returncode == 2 and "only the cdynp solver" in proc.stderr
    proc = _cli("solve", THREE, "--tls-ca", "x")
    assert proc.returncode == 2 and "--tls-ca: only with --agents" in proc.stderr
    proc = _cli("solve", three.public, "--solver", "cdynp", "--agents", three.agents,
                "--tls-ca", tmp_path / "missing.pem", "--tls-cert", "a", "--tls-key", "b")
    assert proc.returncode == 2 and "--tls-ca" in proc.stderr and "Traceback" not in proc.stderr


def test_an_agent_that_takes_no_traced_runs_refuses_them(tmp_path):
    cluster = Cluster(THREE, tmp_path, extra={"dc2": ["--no-trace"]})
    try:
        proc, _ = cluster.solve("--trace", tmp_path / "t")
        assert proc.returncode == 1
        assert "refused the run: this agent takes no traced runs" in _line(proc)
        assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
        ok, _ = cluster.solve()
        assert ok.returncode == 0, ok.stderr
    finally:
        cluster.stop()


def test_an_agent_that_keeps_its_prefix_bound_sends_null(tmp_path):
    """A DC started with --no-prefix-bound sends null whatever the owner asks, and so then
    does every DC after it: the run is the in-process one with prefix_bound=false."""
    cluster = Cluster(THREE, tmp_path, extra={"dc1": ["--no-prefix-bound"]})
    try:
        remote, _ = cluster.solve("--trace", tmp_path / "remote")
        assert remote.returncode == 0, remote.stderr
    finally:
        cluster.stop()
    local = _cli("solve", THREE, "--solver", "cdynp", "--format", "json", "--trace",
                 tmp_path / "local", "-O", "prefix_bound=false")
    assert local.returncode == 0, local.stderr
    assert json.loads(remote.stdout)["plan"]["stages"] == json.loads(local.stdout)["plan"]["stages"]
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.json"))
    prefixes = [f for f in files if "-prefix-" in f.name]
    assert len(prefixes) == 6  # two per run: the probes and the main run
    for f in files:
        assert (tmp_path / "remote" / f).read_bytes() == (tmp_path / "local" / f).read_bytes()
    for f in prefixes:
        assert json.loads((tmp_path / "remote" / f).read_text())["bound"] is None


def test_split_refuses_to_overwrite_certificates_and_an_owner_dc(tmp_path):
    assert _cli("split", THREE, tmp_path / "s", "--certs").returncode == 0
    key = (tmp_path / "s" / "certs" / "dc1.key")
    assert key.stat().st_mode & 0o077 == 0  # private keys readable by their owner only
    before = key.read_bytes()
    again = _cli("split", THREE, tmp_path / "s", "--certs")
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert key.read_bytes() == before


def test_a_public_file_solved_without_agents_says_how(three):
    proc = _cli("solve", three.public)
    assert proc.returncode == 2
    assert "a public.json of `chainpipe split`" in proc.stderr.splitlines()[0]


def test_a_replayed_or_out_of_order_message_is_refused_inside_a_run(tmp_path):
    """An agent in this process, a run registered by hand: the rightful neighbours'
    prefix and summary are taken once; a second copy of either, a prefix from the
    downstream side, and an assemble before this agent sent its own summary, are refused
    and logged."""
    import threading

    from chainpipe.solvers.cdynp.serve import AgentServer, _Run

    d = tmp_path / "split"
    assert _cli("split", THREE, d, "--certs").returncode == 0
    trace = tmp_path / "trace"
    assert _cli("solve", THREE, "--solver", "cdynp", "-O", "probe=false", "--trace",
                trace).returncode == 0
    prefix = (trace / "000-prefix-dc1-to-dc2.json").read_bytes()
    summary = (trace / "002-summary-dc3-to-dc2.json").read_bytes()
    c = d / "certs"
    ctx = [tls.context(side, c / "ca.pem", c / "dc2.pem", c / "dc2.key")
           for side in ("server", "client")]
    lines: list[str] = []
    server = AgentServer(json.loads((d / "public.json").read_text()),
                         json.loads((d / "private-01-dc2.json").read_text()), *ctx,
                         "127.0.0.1:0", lines.append)
    stop = threading.Event()
    t = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    t.start()
    try:
        run = _Run("ab" * 16, {}, None)
        server.runs[run.id] = run
        dc3 = tls.context("client", c / "ca.pem", c / "dc3.pem", c / "dc3.key")
        dc1 = tls.context("client", c / "ca.pem", c / "dc1.pem", c / "dc1.key")

        def deliver(ctx, kind: str, data: bytes = summary) -> object:
            sock = net.connect(server.address, ctx, "dc2")
            try:
                net.send_json(sock, {"net": net.NET, "kind": kind, "run": run.id})
                sock.sendall(_frame(data))
                return net.recv_json(sock)
            finally:
                net.close(sock)

        assert "upstream neighbour" in deliver(dc3, "prefix", prefix)["refused"]
        assert deliver(dc1, "prefix", prefix) == {"ok": True}
        got = run.inbox["prev"].get_nowait()  # decoded on arrival, once (session.Decoded)
        assert (got.kind, got.size, got.message["from"]) == ("prefix", len(prefix), "dc1")
        assert "(a replay)" in deliver(dc1, "prefix", prefix)["refused"]
        assert deliver(dc3, "summary") == {"ok": True}
        got = run.inbox["next"].get_nowait()
        assert (got.kind, got.size, got.message["from"]) == ("summary", len(summary), "dc3")
        assert "(a replay)" in deliver(dc3, "summary")["refused"]
        assert "out of order" in deliver(dc1, "assemble")["refused"]
        assert sum("refused" in line for line in lines) == 4
    finally:
        stop.set()
        t.join(timeout=5)
