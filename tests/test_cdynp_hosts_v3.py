"""CDynP across hosts under contract version 3: several pipelines and the period objective.

Each DC's agent is a real OS process (``chainpipe agent serve``), the owner ``chainpipe
solve PUBLIC --agents``, over mutually authenticated TLS on the loopback interface
(:class:`test_cdynp_hosts.Cluster`). The owner's search over pipeline counts, DC ranges
and splits of ``M`` runs every range run on that range's agents (each run's header names
its chain): the same optimum, plan, lower bound and byte-identical traces as in process,
on ``v3-small-02-two-pipelines`` (two pipelines win; objective ``period``), exact and
compressed, and on ``v3-small-03`` (range runs whose period runs search below the classic
plan). A range run is refused when its chain does not hold the agent, is not of
the instance, or is a range of an instance that allows one pipeline only; a message from
a DC outside a run's chain is refused; refusals leave the agents serving; a forged
summary is named by the owner's audit.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from test_cdynp_hosts import Cluster, _ask, _cli, _frame

from chainpipe.solvers.cdynp import net, tls
from helpers import assert_same_trace_files

ROOT = Path(__file__).resolve().parents[1]
TWO = ROOT / "instances" / "v3" / "small" / "v3-small-02-two-pipelines.json"
SLOW = ROOT / "instances" / "v3" / "small" / "v3-small-03-long-seq-slow.json"
THREE = ROOT / "instances" / "hybrid" / "small" / "hybrid-small-04-three-dc.json"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    c = Cluster(TWO, tmp_path_factory.mktemp("two"))
    yield c
    c.stop()
    assert all(p.returncode == 0 for p in c.procs.values()), "an agent did not stop cleanly"


def _same_as_in_process(cluster: Cluster, instance_path: Path, tmp: Path, *options) -> dict:
    remote, _ = cluster.solve("--trace", tmp / "remote", *options, timeout=180)
    assert remote.returncode == 0, remote.stderr
    local = _cli("solve", instance_path, "--solver", "cdynp", "--format", "json",
                 "--trace", tmp / "local", *options, timeout=180)
    assert local.returncode == 0, local.stderr
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a["status"] == b["status"]
    assert a["plan"]["pipelines"] == b["plan"]["pipelines"]
    assert a["iteration_time_s"] == b["iteration_time_s"]  # exactly: the same cost model
    assert a["lower_bound_s"] == b["lower_bound_s"]
    assert a["stats"]["mode"] == "tls" and b["stats"]["mode"] == "in-process"
    assert a["stats"]["range_runs"] == b["stats"]["range_runs"] > 0
    assert_same_trace_files(tmp / "local", tmp / "remote")
    return a


def test_several_pipelines_across_hosts_give_the_in_process_optimum(two, tmp_path):
    res = _same_as_in_process(two, TWO, tmp_path)
    assert res["status"] == "optimal" and len(res["plan"]["pipelines"]) == 2
    # under period every run starts with its classic solve (a run of objective classic)
    assert any(p.name == "classic" for p in (tmp_path / "remote").rglob("*"))
    # the ranges' floor runs went over TLS too (their traces byte-identical, above)
    assert res["stats"]["floor_runs"] > 0
    assert any(p.name.startswith("floors-") for p in (tmp_path / "remote").iterdir())
    assert two.alive()


def test_floor_curves_made_ahead_across_hosts_give_the_in_process_optimum(two):
    """Untraced, the owner across hosts makes the ranges' floor curves ahead, in a thread
    beside its own runs (``pipelines.FLOORS_AHEAD``, a second connection to each agent):
    the same status, plan and ``T`` as in process, every curve it took made over TLS, and
    the agents still serving."""
    remote, _ = two.solve(timeout=180)
    assert remote.returncode == 0, remote.stderr
    local = _cli("solve", TWO, "--solver", "cdynp", "--format", "json", timeout=180)
    assert local.returncode == 0, local.stderr
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a["status"] == b["status"] == "optimal"
    assert a["plan"]["pipelines"] == b["plan"]["pipelines"]
    assert a["iteration_time_s"] == b["iteration_time_s"]
    st = a["stats"]
    assert st["floor_runs"] >= b["stats"]["floor_runs"] > 0
    # (a curve made ahead and never taken is one to three floor runs more)
    assert st["floor_runs"] >= b["stats"]["floor_runs"] + st["floor_curves_unused"]
    assert st["range_runs"] - st["floor_runs"] == b["stats"]["range_runs"] - \
        b["stats"]["floor_runs"]
    assert two.alive()


def test_period_runs_across_hosts_give_the_in_process_optimum(tmp_path):
    """v3-small-03: range runs whose classic plan is not optimal under period, so their
    period runs search below it on the agents too (the owner's T from the phase and loop
    costs the agents report, not the classic ``T``)."""
    cluster = Cluster(SLOW, tmp_path / "split")
    try:
        res = _same_as_in_process(cluster, SLOW, tmp_path)
        assert res["status"] == "optimal"
        assert any(p.name == "period" for p in (tmp_path / "remote").rglob("*"))
        # the one-pipeline period run is the owner's ladder, each run with the prefix-curve
        # pass: its tables crossed the hosts too (the traces above are byte-identical)
        assert any(p.name == "ladder-01" for p in (tmp_path / "remote").rglob("*"))
        assert any('"curve":' in p.read_text()
                   for p in (tmp_path / "remote").rglob("*-prefix-*.json"))
    finally:
        cluster.stop()


def test_several_pipelines_across_hosts_compressed(two, tmp_path):
    res = _same_as_in_process(two, TWO, tmp_path, "-O", "digits=3")
    assert res["status"] == "feasible" and res["lower_bound_s"] <= res["iteration_time_s"]
    assert two.alive()


def _run_header(cluster: Cluster, chain, agents=None) -> dict:
    return {"net": net.NET, "kind": "run", "run": "c" * 32,
            "public_sha256": net.public_digest(json.loads(cluster.public.read_text())),
            "agents": agents or cluster.address, "options": {}, "time_limit_s": 5,
            "trace": False, "chain": chain}


def test_range_runs_the_agent_may_not_take_are_refused(two):
    chain = {"first": 0, "last": 1, "microbatches": 4, "objective": "period"}
    # the range does not hold dc3
    reply = _ask(two, "owner", "dc3", [_frame(_run_header(two, chain))])
    assert "do not hold this DC" in reply["refused"]
    # more microbatches than the instance has, an objective it does not have
    for bad, words in (({"microbatches": 9}, "9 microbatches, the instance has 8"),
                       ({"last": 3}, "of a chain of 3")):
        reply = _ask(two, "owner", "dc1", [_frame(_run_header(two, {**chain, **bad}))])
        assert words in reply["refused"], reply
    # agents must be exactly the range's
    reply = _ask(two, "owner", "dc1", [_frame(_run_header(two, chain))])
    assert "must name exactly the DCs ['dc1', 'dc2']" in reply["refused"]
    # a malformed chain is a bad header
    reply = _ask(two, "owner", "dc1", [_frame(_run_header(two, {**chain, "first": -1}))])
    assert "bad header" in reply["refused"] and "first <= last" in reply["refused"]
    reply = _ask(two, "owner", "dc1", [_frame(_run_header(two, {**chain, "objective": "x"}))])
    assert "bad header" in reply["refused"]
    # only the owner starts a range run too
    reply = _ask(two, "dc2", "dc1", [_frame(_run_header(two, chain))])
    assert "only the owner may start a run" in reply["refused"]
    ok, _ = two.solve("-O", "digits=2", timeout=180)
    assert ok.returncode == 0, ok.stderr
    assert two.alive()


def _server(d: Path, index: int, name: str, lines: list):
    """An agent server of the split in ``d`` in this process (its thread, its stop)."""
    from chainpipe.solvers.cdynp.serve import AgentServer

    c = d / "certs"
    ctx = [tls.context(side, c / "ca.pem", c / f"{name}.pem", c / f"{name}.key")
           for side in ("server", "client")]
    server = AgentServer(json.loads((d / "public.json").read_text()),
                         json.loads((d / f"private-{index:02d}-{name}.json").read_text()),
                         *ctx, "127.0.0.1:0", lines.append)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve, args=(stop,), daemon=True)
    thread.start()
    return server, stop, thread


def test_a_message_from_outside_the_runs_chain_is_refused(two, tmp_path):
    """dc2 takes part in a range run of dc2..dc3: dc1, its upstream neighbour in the
    whole chain, is not in that run, so its prefix is refused (and logged)."""
    from chainpipe.solvers.cdynp.serve import _Run

    lines: list[str] = []
    server, stop, thread = _server(two.dir, 1, "dc2", lines)
    try:
        view = server.public.chain(1, 2, 3)
        run = _Run("cd" * 16, {}, None, view, 1)
        server.runs[run.id] = run
        c = two.dir / "certs"
        dc1 = tls.context("client", c / "ca.pem", c / "dc1.pem", c / "dc1.key")
        sock = net.connect(server.address, dc1, "dc2")
        try:
            net.send_json(sock, {"net": net.NET, "kind": "prefix", "run": run.id})
            reply = net.recv_json(sock)
        finally:
            net.close(sock)
        assert "which is not in that run's chain" in reply["refused"]
        assert run.inbox["prev"].empty()
        assert any("not in that run's chain" in line for line in lines)
    finally:
        stop.set()
        thread.join(timeout=5)


def test_a_one_pipeline_instance_takes_no_range_run(tmp_path):
    """The chain field exists for the owner's public decisions of several pipelines: an
    instance that allows one pipeline takes the whole chain only (its classic solve)."""
    d = tmp_path / "split"
    assert _cli("split", THREE, d, "--certs").returncode == 0
    lines: list[str] = []
    server, stop, thread = _server(d, 0, "dc1", lines)
    try:
        names = server.names
        c = d / "certs"
        owner = tls.context("client", c / "ca.pem", c / "owner.pem", c / "owner.key")
        M = server.public.microbatches

        def ask(chain, agents) -> dict:
            header = {"net": net.NET, "kind": "run", "run": "e" * 32,
                      "public_sha256": net.public_digest(json.loads(
                          (d / "public.json").read_text())),
                      "agents": {n: "127.0.0.1:9" for n in agents}, "options": {},
                      "time_limit_s": 5, "trace": False, "chain": chain}
            sock = net.connect(server.address, owner, "dc1")
            try:
                net.send_json(sock, header)
                return net.recv_json(sock)
            finally:
                net.close(sock)

        reply = ask({"first": 0, "last": 1, "microbatches": M, "objective": "classic"},
                    names[:2])
        assert "allows one pipeline only" in reply["refused"]
        reply = ask({"first": 0, "last": len(names) - 1, "microbatches": max(M - 1, 1),
                     "objective": "classic"}, names)
        assert "allows one pipeline only" in reply["refused"] or M == 1
        reply = ask({"first": 0, "last": len(names) - 1, "microbatches": M,
                     "objective": "period"}, names)
        assert "objective 'period'" in reply["refused"]
    finally:
        stop.set()
        thread.join(timeout=5)


def test_a_forged_summary_in_a_range_run_is_named(tmp_path):
    """dc3 halves every cost of the summaries it sends (the classic runs' points): the
    owner's audit of the first range run whose plan relies on one names dc3, in one
    line, and the solve ends with status error."""
    cluster = Cluster(TWO, tmp_path / "split", faults={"dc3": "forge:dc3"})
    try:
        proc, _ = cluster.solve(timeout=180)
        assert proc.returncode == 1, proc.stderr
        line = proc.stderr.strip().splitlines()
        assert len(line) == 1 and "DC 'dc3' sent a forged summary" in line[0], proc.stderr
        assert cluster.alive()
    finally:
        cluster.stop()


def test_the_search_beside_the_period_run_across_hosts(tmp_path):
    """A random chain of 3 DCs allowing 1, 2 and 3 pipelines whose span of one pipeline per
    DC beats the classic plan: across hosts, untraced, the owner searches 2 pipelines in a
    thread beside the one-pipeline solve's period run (``pipelines.BESIDE``, each agent
    serving runs of both at once), with the in-process status, plan and ``T``."""
    import dataclasses

    from chainpipe.io import instance_to_dict
    from helpers import random_period_chains

    inst = next(inst for seed, inst in random_period_chains(30, pipelines=(1, 2, 3))
                if seed == 129)
    path = tmp_path / "beside.json"
    path.write_text(json.dumps(instance_to_dict(dataclasses.replace(inst, name="beside"))))
    cluster = Cluster(path, tmp_path / "split")
    try:
        remote, _ = cluster.solve(timeout=180)
        assert remote.returncode == 0, remote.stderr
        local = _cli("solve", path, "--solver", "cdynp", "--format", "json", timeout=180)
        assert local.returncode == 0, local.stderr
        a, b = json.loads(remote.stdout), json.loads(local.stdout)
        assert a["stats"]["several_beside"] is True and b["stats"]["several_beside"] is False
        assert a["status"] == b["status"] == "optimal"
        # (the owner across hosts holds the public part only: no instance digest)
        assert {k: v for k, v in a["plan"].items() if k != "instance"} == \
            {k: v for k, v in b["plan"].items() if k != "instance"}
        assert a["plan"].get("stages") or a["plan"].get("pipelines")
        assert a["iteration_time_s"] == b["iteration_time_s"]
        assert cluster.alive()
    finally:
        cluster.stop()
