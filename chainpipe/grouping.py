"""Devices grouped by their measured profile: ``chainpipe group INVENTORY --max-groups K``.

A real inventory is not a handful of identical groups: devices of one type differ
in sustained speed, memory left, node size and network. An instance needs device
groups (every device of a group alike), and the DP's state grows with the groups
per datacenter, so grouping trades fidelity for search speed.

:func:`group_inventory` forms at most ``K`` groups per datacenter. A node's devices
stay together (tensor parallelism runs inside a node). Each group is priced by its
slowest member in every dimension (the least sustained FLOP/s, the least free memory,
the least node bandwidth, the smallest power-of-two node size dividing every node
size), so a plan made for the groups is feasible on every real device. The groups
are chosen to lose the least compute capacity: the capacity lost by a group is
``sum_i (r_i - min_j r_j)`` over its devices, and with the nodes sorted by their
slowest device's rate an optimal partition into ``K`` groups is made of contiguous
runs of the sorted order (exchange argument: moving a faster node into a slower
group never lowers that group's minimum), so an exact DP over split points finds it
in ``O(K n^2)`` for ``n`` nodes (:func:`best_split`). Memory and bandwidth follow the
rate's grouping and their loss is reported, not optimised: a second dimension makes
the groups non-contiguous in any one order (a fast small-memory node and a slow
large-memory one), and an exact grouping then needs a search over 2-D partitions.

The datacenter's own link is priced by its slowest NIC. The inventory carries no MAN
links: a JSON inventory may list them (``links``), else ``--link`` gives one for every
chain link. :func:`cluster_toml` writes the cluster file ``generate --cluster`` reads.

Inventory: a CSV file with a header row, or a JSON file (a list of device records,
or ``{"devices": [...], "links": [...]}``); each device has ``dc``, ``node``, ``type``,
``flop_per_s`` (sustained), ``memory_bytes`` (free), ``node_bandwidth_bytes_per_s``
(per device and direction inside its node) and ``nic_bandwidth_bytes_per_s``, numbers
in SI units. Datacenters keep the order of their first device (the chain order).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .instance import InstanceError

#: the columns of an inventory, in order
COLUMNS = ("dc", "node", "type", "flop_per_s", "memory_bytes", "node_bandwidth_bytes_per_s",
           "nic_bandwidth_bytes_per_s")
NUMBERS = COLUMNS[3:]
#: most devices an inventory may list (a DC of 100,000 nodes keeps the DP under a minute)
MAX_DEVICES = 1_000_000
#: latency of a datacenter's own link when the inventory does not measure it
DEFAULT_DC_LATENCY = "5 us"


@dataclass(frozen=True)
class Device:
    """One measured device of the inventory (SI units)."""

    dc: str
    node: str
    type: str
    flop_per_s: float
    memory_bytes: float
    node_bandwidth_bytes_per_s: float
    nic_bandwidth_bytes_per_s: float


@dataclass(frozen=True)
class Node:
    """A node's devices and its profile: each figure its slowest device's."""

    dc: str
    name: str
    devices: tuple[Device, ...]

    @property
    def rate(self) -> float:
        return min(d.flop_per_s for d in self.devices)


@dataclass(frozen=True)
class Group:
    """A group of whole nodes, priced by its slowest member.

    Attributes
    ----------
    type : str
        The group's name in the cluster file: its most common device type and its rank.
    count, devices_per_node : int
        Devices, and the power of two that divides every node size of the group.
    flop_per_s, memory_bytes, node_bandwidth_bytes_per_s : float
        The least of its devices'.
    nodes : tuple of str
        The nodes it holds.
    measured_flop_per_s, measured_memory_bytes : float
        The sums over its devices of what was measured.
    """

    type: str
    count: int
    devices_per_node: int
    flop_per_s: float
    memory_bytes: float
    node_bandwidth_bytes_per_s: float
    nodes: tuple[str, ...]
    measured_flop_per_s: float
    measured_memory_bytes: float


@dataclass(frozen=True)
class DatacenterGroups:
    """One datacenter's groups and what grouping lost."""

    name: str
    groups: tuple[Group, ...]
    nic_bandwidth_bytes_per_s: float
    devices: int
    nodes: int

    @property
    def measured_flop_per_s(self) -> float:
        return sum(g.measured_flop_per_s for g in self.groups)

    @property
    def grouped_flop_per_s(self) -> float:
        return sum(g.count * g.flop_per_s for g in self.groups)

    @property
    def flop_lost(self) -> float:
        """Share of the measured compute capacity the groups' pricing gives up."""
        m = self.measured_flop_per_s
        return 1.0 - self.grouped_flop_per_s / m if m > 0 else 0.0

    @property
    def memory_lost(self) -> float:
        """Share of the measured free memory the groups' pricing gives up."""
        m = sum(g.measured_memory_bytes for g in self.groups)
        return 1.0 - sum(g.count * g.memory_bytes for g in self.groups) / m if m > 0 else 0.0


# --------------------------------------------------------------------------- reading
def _number(value, where: str, problems: list[str]) -> float | None:
    try:
        x = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        problems.append(f"{where}: must be a finite number > 0, got {json.dumps(value)[:40]}")
        return None
    return x


def _device(record, where: str, problems: list[str]) -> Device | None:
    if not isinstance(record, dict):
        problems.append(f"{where}: must be an object with {', '.join(COLUMNS)}")
        return None
    before = len(problems)
    for key in COLUMNS:
        if key not in record or record[key] in (None, ""):
            problems.append(f"{where}.{key}: missing")
    for key in record:
        if key not in COLUMNS:
            problems.append(f"{where}.{key}: unknown field (the fields: {', '.join(COLUMNS)})")
    if len(problems) > before:
        return None
    values = {k: _number(record[k], f"{where}.{k}", problems) for k in NUMBERS}
    names = {k: str(record[k]).strip() for k in COLUMNS[:3]}
    for k, v in names.items():
        if not v or "/" in v or "\\" in v or len(v) > 48:
            problems.append(f"{where}.{k}: must be a name of 1-48 characters without / or \\, "
                            f"got {json.dumps(record[k])[:40]}")
    if len(problems) > before:
        return None
    return Device(**names, **values)


def read_inventory(path: str | os.PathLike) -> tuple[list[Device], list[dict] | None]:
    """The devices of an inventory file and its MAN links (``None`` if it gives none).

    Raises
    ------
    InstanceError
        One line per problem, naming the file and the record (``devices[3].flop_per_s``,
        or ``row 4.flop_per_s`` in a CSV file).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InstanceError([f"{path}: cannot read: {exc}"]) from None
    problems: list[str] = []
    links = None
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if rows and None in rows[0]:
            problems.append(f"{path}: row 2: more cells than the header has")
        records = [(f"row {i + 2}", r) for i, r in enumerate(rows)]
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InstanceError([f"{path}: invalid JSON: {exc}"]) from None
        if isinstance(data, dict):
            unknown = [k for k in data if k not in ("devices", "links")]
            problems += [f"{path}: {k}: unknown field (the fields: devices, links)"
                         for k in unknown]
            links = data.get("links")
            if links is not None and not (isinstance(links, list) and all(
                    isinstance(x, dict) for x in links)):
                problems.append(f"{path}: links: must be a list of tables such as "
                                f'{{"bandwidth": "100 Gbit/s", "distance": "40 km"}}')
            data = data.get("devices")
            prefix = "devices"
        else:
            prefix = "devices"
        if not isinstance(data, list):
            raise InstanceError(problems + [f"{path}: {prefix}: must be a list of devices"])
        records = [(f"{prefix}[{i}]", r) for i, r in enumerate(data)]
    if not records:
        problems.append(f"{path}: no device listed")
    if len(records) > MAX_DEVICES:
        raise InstanceError([f"{path}: {len(records):,} devices; at most {MAX_DEVICES:,}"])
    devices = []
    for where, record in records:
        dev = _device(record, where, problems)
        if dev is not None:
            devices.append(dev)
    if problems:
        raise InstanceError([p if p.startswith(str(path)) else f"{path}: {p}" for p in problems])
    return devices, links


# --------------------------------------------------------------------------- grouping
def best_split(rates: list[float], sizes: list[int], k: int) -> tuple[float, list[int]]:
    """The least capacity lost by cutting sorted nodes into at most ``k`` contiguous groups.

    Parameters
    ----------
    rates : list of float
        Each node's rate (its slowest device's), ascending.
    sizes : list of int
        Each node's devices.
    k : int
        At most this many groups (``>= 1``).

    Returns
    -------
    tuple of (float, list of int)
        The least loss ``sum over groups of (sum of the devices' rates - devices x the
        group's least rate)``, counted on node rates (the loss inside a node, which every
        grouping has, is added by the caller), and the start index of each group.
    """
    n = len(rates)
    k = max(1, min(k, n))
    prefix_work = [0.0]
    prefix_size = [0]
    for r, c in zip(rates, sizes):
        prefix_work.append(prefix_work[-1] + r * c)
        prefix_size.append(prefix_size[-1] + c)

    def loss(i: int, j: int) -> float:  # nodes i..j-1 priced at rates[i] (the least)
        return (prefix_work[j] - prefix_work[i]) - rates[i] * (prefix_size[j] - prefix_size[i])

    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0.0
    for g in range(1, k + 1):
        for j in range(1, n + 1):
            row_best, row_cut = inf, 0
            prev = best[g - 1]
            for i in range(g - 1, j):
                if prev[i] < inf:
                    v = prev[i] + loss(i, j)
                    if v < row_best:
                        row_best, row_cut = v, i
            best[g][j], cut[g][j] = row_best, row_cut
    used = min(range(1, k + 1), key=lambda x: (best[x][n], x))  # fewest groups on ties
    starts, j, g = [], n, used
    while g > 0:
        i = cut[g][j]
        starts.append(i)
        j, g = i, g - 1
    return best[used][n], sorted(starts)


def _power_of_two_dividing(sizes) -> int:
    g = 0
    for s in sizes:
        g = math.gcd(g, s)
    return g & -g if g else 1


def group_inventory(devices: list[Device], max_groups: int) -> list[DatacenterGroups]:
    """At most ``max_groups`` groups per datacenter, each priced by its slowest member,
    chosen to lose the least compute capacity (see the module doc).

    Parameters
    ----------
    devices : list of Device
        The inventory (:func:`read_inventory`).
    max_groups : int
        ``K >= 1``.

    Returns
    -------
    list of DatacenterGroups
        In chain order (each DC's first appearance in the inventory); groups fastest first.
    """
    if max_groups < 1:
        raise ValueError(f"max_groups must be >= 1, got {max_groups}")
    by_dc: dict[str, dict[str, list[Device]]] = {}
    for d in devices:
        by_dc.setdefault(d.dc, {}).setdefault(d.node, []).append(d)
    out = []
    for dc, nodes_of in by_dc.items():
        nodes = sorted((Node(dc, name, tuple(devs)) for name, devs in nodes_of.items()),
                       key=lambda nd: (nd.rate, nd.name))
        _loss, starts = best_split([nd.rate for nd in nodes], [len(nd.devices) for nd in nodes],
                                   max_groups)
        bounds = [*starts, len(nodes)]
        groups = []
        for a, b in zip(bounds, bounds[1:]):
            members = nodes[a:b]
            devs = [d for nd in members for d in nd.devices]
            types: dict[str, int] = {}
            for d in devs:
                types[d.type] = types.get(d.type, 0) + 1
            groups.append(Group(max(types, key=lambda t: (types[t], t)), len(devs),
                                _power_of_two_dividing(len(nd.devices) for nd in members),
                                min(d.flop_per_s for d in devs), min(d.memory_bytes for d in devs),
                                min(d.node_bandwidth_bytes_per_s for d in devs),
                                tuple(nd.name for nd in members),
                                sum(d.flop_per_s for d in devs),
                                sum(d.memory_bytes for d in devs)))
        groups.reverse()  # fastest first
        named = []
        seen: dict[str, int] = {}
        for g in groups:  # unique names inside the DC: H100, H100-2, ...
            seen[g.type] = seen.get(g.type, 0) + 1
            name = g.type if seen[g.type] == 1 else f"{g.type}-{seen[g.type]}"
            named.append(Group(name, *[getattr(g, f) for f in Group.__dataclass_fields__
                                       if f != "type"]))
        every = [d for nd in nodes for d in nd.devices]
        out.append(DatacenterGroups(dc, tuple(named),
                                    min(d.nic_bandwidth_bytes_per_s for d in every),
                                    len(every), len(nodes)))
    return out


# --------------------------------------------------------------------------- writing
def _toml_string(s: str) -> str:
    return json.dumps(s)  # a JSON string is a TOML basic string for these names


def _table_lines(link: dict) -> list[str]:
    parts = []
    for key, value in link.items():
        if isinstance(value, str):
            parts.append(f"{key} = {_toml_string(value)}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{key} = {value!r}")
        else:
            raise InstanceError([f"links: {key}: must be a string with its unit, got "
                                 f"{json.dumps(value)[:40]}"])
    return parts


def cluster_toml(dcs: list[DatacenterGroups], links: list[dict] | None, *,
                 name: str = "grouped", dc_latency: str = DEFAULT_DC_LATENCY,
                 source: str = "") -> str:
    """The cluster file of the groups, as ``generate --cluster`` reads it.

    Parameters
    ----------
    dcs : list of DatacenterGroups
        :func:`group_inventory`'s result.
    links : list of dict or None
        One table per chain link (``{"bandwidth": "100 Gbit/s", "distance": "40 km"}``);
        required when there are several datacenters.
    name : str
        The cluster's name.
    dc_latency : str
        Latency of each datacenter's own link.
    source : str
        Named in the header comment.

    Returns
    -------
    str
        TOML text; every figure with its unit (``B``, ``B/s``, ``FLOP/s``), memory as
        measured free memory with no reserve.
    """
    needed = len(dcs) - 1
    if needed and (links is None or len(links) != needed):
        got = "none" if links is None else str(len(links))
        raise InstanceError([f"links: the {len(dcs)} datacenters need {needed} chain link(s) "
                             f"(a JSON inventory's links, or --link), got {got}"])
    lines = [f"# {sum(len(d.groups) for d in dcs)} groups of {sum(d.devices for d in dcs)} "
             f"devices in {len(dcs)} datacenters, grouped by `chainpipe group`"
             + (f" from {source}" if source else "") + ".",
             "# Each group is priced by its slowest member; memory is the measured free memory.",
             f"name = {_toml_string(name)}", ""]
    for dc in dcs:
        lines += ["[[datacenters]]", f"name = {_toml_string(dc.name)}",
                  f'link = {{ bandwidth = "{dc.nic_bandwidth_bytes_per_s:.12g} B/s", '
                  f"latency = {_toml_string(dc_latency)} }}", ""]
        for g in dc.groups:
            lines += ["[[datacenters.devices]]", f"type = {_toml_string(g.type)}",
                      f"count = {g.count}", f'flop_per_s = "{g.flop_per_s:.12g} FLOP/s"',
                      f'memory = "{g.memory_bytes:.12g} B"', 'memory_reserve = "0 B"',
                      f"devices_per_node = {g.devices_per_node}"]
            if g.devices_per_node > 1:
                lines.append(f'node_bandwidth = "{g.node_bandwidth_bytes_per_s:.12g} B/s"')
            lines.append(f"# nodes: {', '.join(g.nodes)}"[:300])
            lines.append("")
    for link in links or []:
        lines += ["[[links]]", *_table_lines(link), ""]
    return "\n".join(lines)


def report_rows(dcs: list[DatacenterGroups]) -> list[dict]:
    """Per datacenter: devices, nodes, groups and the capacity lost (JSON-ready)."""
    return [{"datacenter": d.name, "devices": d.devices, "nodes": d.nodes,
             "groups": len(d.groups), "measured_flop_per_s": d.measured_flop_per_s,
             "grouped_flop_per_s": d.grouped_flop_per_s, "flop_lost": d.flop_lost,
             "memory_lost": d.memory_lost} for d in dcs]


__all__ = ["COLUMNS", "DEFAULT_DC_LATENCY", "DatacenterGroups", "Device", "Group", "best_split",
           "cluster_toml", "group_inventory", "read_inventory", "report_rows"]
