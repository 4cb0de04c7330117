"""``chainpipe group``: devices grouped by measured profile, priced by the slowest member,
the least compute capacity lost (exact against a brute force), a cluster file that
``generate --cluster`` reads."""

from __future__ import annotations

import csv
import json
import random

import pytest

from chainpipe.cli import main
from chainpipe.grouping import COLUMNS, Device, best_split, group_inventory, read_inventory
from chainpipe.instances.cluster_file import read_cluster

LINK = "bandwidth=100 Gbit/s,distance=40 km"


def partitions(items):
    """Every partition of ``items`` into non-empty blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first] + part[i]] + part[i + 1:]
        yield [[first]] + part


def test_best_split_is_the_least_loss_over_every_partition():
    """The DP over contiguous runs of the sorted nodes equals the brute force over all
    partitions (not only contiguous ones) into at most ``k`` groups."""
    rng = random.Random(0)
    for _ in range(120):
        n = rng.randint(1, 6)
        rates = sorted(rng.choice([1.0, 2.0, 3.0, 3.5, 5.0, 8.0]) for _ in range(n))
        sizes = [rng.choice([1, 2, 4, 8]) for _ in range(n)]
        k = rng.randint(1, 4)
        brute = min(sum(sum(rates[i] * sizes[i] for i in block)
                        - min(rates[i] for i in block) * sum(sizes[i] for i in block)
                        for block in part)
                    for part in partitions(list(range(n))) if len(part) <= k)
        loss, starts = best_split(rates, sizes, k)
        assert loss == pytest.approx(brute, abs=1e-9)
        assert starts[0] == 0 and len(starts) <= k and starts == sorted(set(starts))


def _inventory(seed: int, dcs: int = 2, nodes: int = 6) -> list[Device]:
    rng = random.Random(seed)
    out = []
    for k in range(dcs):
        for j in range(nodes):
            kind, base = rng.choice([("H100", 400e12), ("A100", 150e12), ("L40S", 180e12)])
            size = rng.choice([2, 4, 8])
            for _ in range(size):
                out.append(Device(f"dc{k}", f"n{j}", kind, base * rng.uniform(0.7, 1.0),
                                  rng.uniform(40e9, 80e9), rng.uniform(100e9, 450e9),
                                  rng.uniform(10e9, 50e9)))
    return out


def test_groups_are_priced_by_their_slowest_member_and_lose_the_least():
    devices = _inventory(1)
    previous = None
    for k in (1, 2, 3, 6):
        dcs = group_inventory(devices, k)
        assert [d.name for d in dcs] == ["dc0", "dc1"]
        lost = 0.0
        for dc in dcs:
            assert 1 <= len(dc.groups) <= k
            mine = [d for d in devices if d.dc == dc.name]
            assert sum(g.count for g in dc.groups) == len(mine) == dc.devices
            for g in dc.groups:
                members = [d for d in mine if d.node in g.nodes]
                assert g.flop_per_s == min(d.flop_per_s for d in members)
                assert g.memory_bytes == min(d.memory_bytes for d in members)
                assert g.count % g.devices_per_node == 0
            assert dc.nic_bandwidth_bytes_per_s == min(d.nic_bandwidth_bytes_per_s for d in mine)
            assert dc.flop_lost == pytest.approx(
                1 - sum(g.count * g.flop_per_s for g in dc.groups)
                / sum(d.flop_per_s for d in mine))
            lost += dc.measured_flop_per_s - dc.grouped_flop_per_s
        if previous is not None:
            assert lost <= previous + 1e-6  # more groups never lose more
        previous = lost
    # one group per node: only the spread inside each node is lost
    dc = group_inventory(devices, 100)[0]
    assert len(dc.groups) == dc.nodes


def _write_csv(path, devices):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for d in devices:
            w.writerow([getattr(d, c) for c in COLUMNS])


def test_group_command_writes_a_cluster_file_generate_reads(tmp_path, capsys):
    inv = tmp_path / "inv.csv"
    devices = _inventory(2, dcs=3)
    _write_csv(inv, devices)
    out = tmp_path / "cluster.toml"
    assert main(["group", str(inv), "--max-groups", "2", "--link", LINK, "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "compute lost" in report and "dc2" in report and "wrote" in report
    cluster = read_cluster(out)
    assert [dc.name for dc in cluster.datacenters] == ["dc0", "dc1", "dc2"]
    assert all(len(dc.devices) <= 2 for dc in cluster.datacenters)
    assert sum(g.count for dc in cluster.datacenters for g in dc.devices) == len(devices)
    grouped = group_inventory(devices, 2)
    assert [g.flop_per_s for dc in cluster.datacenters for g in dc.devices] == pytest.approx(
        [g.flop_per_s for dc in grouped for g in dc.groups], rel=1e-11)
    inst_file = tmp_path / "i.json"
    assert main(["generate", "--cluster", str(out), "--model", "gpt3-125m",
                 "-o", str(inst_file)]) == 0
    assert json.loads(inst_file.read_text())["datacenters"][0]["name"] == "dc0"


def test_group_json_inventory_with_links_and_json_report(tmp_path, capsys):
    devices = _inventory(3)
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"devices": [{c: getattr(d, c) for c in COLUMNS}
                                           for d in devices],
                               "links": [{"bandwidth": "10 Gbit/s", "latency": "1 ms"}]}))
    assert main(["group", str(inv), "--max-groups", "1", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert '[[links]]\nbandwidth = "10 Gbit/s"\nlatency = "1 ms"' in captured.out
    report = json.loads(captured.err)
    assert [r["groups"] for r in report["datacenters"]] == [1, 1]
    assert all(0 < r["flop_lost"] < 1 for r in report["datacenters"])


def test_group_bad_inputs_exit_2_naming_the_place(tmp_path, capsys):
    inv = tmp_path / "inv.csv"
    inv.write_text(",".join(COLUMNS) + "\na,n0,H100,fast,1e10,1e11,1e10\n"
                   "a,n0,H100,1e14,-3,1e11,1e10\n")
    assert main(["group", str(inv), "--max-groups", "2"]) == 2
    err = capsys.readouterr().err
    assert "row 2.flop_per_s: must be a finite number > 0" in err
    assert "row 3.memory_bytes" in err and "Traceback" not in err
    _write_csv(inv, _inventory(4))
    assert main(["group", str(inv), "--max-groups", "2"]) == 2  # 2 DCs, no links
    assert "need 1 chain link" in capsys.readouterr().err
    assert main(["group", str(inv), "--max-groups", "2", "--link", LINK, "-o", str(inv)]) == 2
    assert inv.read_text().startswith("dc,node")  # the input is never overwritten
    assert main(["group", str(inv), "--max-groups", "0"]) == 2


def test_read_inventory_keeps_chain_order(tmp_path):
    devices = _inventory(5, dcs=3)
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps([{c: getattr(d, c) for c in COLUMNS} for d in devices]))
    got, links = read_inventory(inv)
    assert links is None and got == devices
