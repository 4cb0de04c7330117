"""A cluster described in a TOML file, in human units, and the instance it makes with a model.

    from chainpipe.instances.cluster_file import read_cluster, cluster_instance
    cluster = read_cluster("examples/metro-cluster.toml")
    inst = cluster_instance(cluster, read_model_config("tests/data/models/llama-3-8b"))

Every figure with a dimension is a string with its unit, read by ``pint``
(``"80 GiB"``, ``"400 Gbit/s"``, ``"5 us"``, ``"312 TFLOP/s"``, ``"40 km"``); a
bare number there is refused, so ``memory = 80`` cannot silently mean 80 bytes.
Counts are plain integers. The units are those of a registry of our own
(SI and binary prefixes, seconds, metres, bits and bytes as a dimension of
their own, FLOP): ``"80 GHz"`` is not a bandwidth, and ``"1 Gb"`` is a gigabit.
Every problem is one line naming its place in the file
(``cluster.toml: datacenters[1].devices[0].memory: expected a quantity of
bytes, got '80 GHz'``); all of them are reported at once.

The file's keys (``docs/launch.md`` has an example)::

    name = "str"                               # optional: the instance's name
    [training]                                 # optional, every key too
    microbatches = 32                          #   M (default 16)
    schedule = "1f1b"                          #   or "gpipe"
    data_parallel = [1, 2, 4, 8]               #   widths a stage may use (default 1, 2, 4, 8)
    tensor_parallel = [1, 2, 4, 8]             #   degrees (default 1, 2, 4, 8)
    zero = true                                #   ZeRO-1 (default true)
    [[datacenters]]                            # in chain order
    name = "north"
    link = {bandwidth = "400 Gbit/s", latency = "5 us"}   # per device, inside the DC
    [[datacenters.devices]]
    gpu = "H100-SXM"           # optional: a catalogue entry giving defaults for the rest
    type = "H100"              # default: gpu
    count = 16
    peak_flop_per_s = "989 TFLOP/s"   # with mfu (default 0.45); or flop_per_s (sustained)
    memory = "80 GiB"                 # on the card; memory_reserve (default 3 GiB) is kept
    devices_per_node = 8
    node_bandwidth = "450 GB/s"       # per device and direction (NVLink, PCIe)
    [[links]]                  # links[k] joins datacenters[k] and datacenters[k+1]
    bandwidth = "100 Gbit/s"
    distance = "40 km"         # or latency = "200 us"
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pint

from ..instance import (
    MAX_NAME,
    SCHEDULES,
    Datacenter,
    DeviceGroup,
    Instance,
    InstanceError,
    Link,
    Model,
    Parallelism,
    name_rule,
)
from ..names import did_you_mean
from ..strict_json import MAX_NESTING, quote, shorten
from .generator import PARALLELISM_ON, batch_sizes, model_training, resolve_parallelism
from .gpus import DEFAULT_MFU, DEFAULT_RESERVE_BYTES, GPUS
from .models import ModelShape, model_layers
from .network import FIBRE_S_PER_KM

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: microbatches of a cluster file without ``training.microbatches``
DEFAULT_MICROBATCHES = 16

_UNITS = """\
pico- = 1e-12 = p-
nano- = 1e-9 = n-
micro- = 1e-6 = µ- = μ- = u-
milli- = 1e-3 = m-
kilo- = 1e3 = k-
mega- = 1e6 = M-
giga- = 1e9 = G-
tera- = 1e12 = T-
peta- = 1e15 = P-
exa- = 1e18 = E-
kibi- = 2**10 = Ki-
mebi- = 2**20 = Mi-
gibi- = 2**30 = Gi-
tebi- = 2**40 = Ti-
pebi- = 2**50 = Pi-
second = [time] = s = sec
minute = 60 * second = min
meter = [length] = m = metre
bit = [information] = b
byte = 8 * bit = B
bps = bit / second
FLOP = [computation] = flop
FLOPS = FLOP / second = flops
"""


def _registry() -> pint.UnitRegistry:
    ureg = pint.UnitRegistry(None)
    for line in _UNITS.splitlines():
        ureg.define(line)
    return ureg


UREG = _registry()


@dataclass(frozen=True)
class Dimension:
    """What a figure measures: its name in errors, the unit it is converted to, an example."""

    what: str
    unit: str
    example: str


BYTES = Dimension("bytes", "byte", "80 GiB")
BANDWIDTH = Dimension("a bandwidth", "byte / second", "400 Gbit/s")
TIME = Dimension("a time", "second", "5 us")
RATE = Dimension("a compute rate", "FLOP / second", "312 TFLOP/s")
LENGTH = Dimension("a length", "meter", "40 km")


@dataclass(frozen=True)
class Cluster:
    """The datacenters, links and training settings a cluster file describes."""

    name: str
    datacenters: tuple[Datacenter, ...]
    links: tuple[Link, ...]
    microbatches: int
    schedule: str
    parallelism: Parallelism


#: a quantity as written: a decimal number (``80``, ``2.5``, ``.5``, ``1e3``; ``nan`` and
#: ``inf`` are read to be refused as not finite), then its unit
_QUANTITY = re.compile(r"\s*([+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
                       r"|(?i:nan|inf(?:inity)?)))\s*(.*?)\s*\Z", re.S)
#: a unit as written: names joined by ``/`` or ``*`` (``GiB``, ``Gbit/s``, ``TFLOP / s``);
#: no numbers and no powers, so that reading a unit never evaluates anything
_UNIT = re.compile(r"[A-Za-zµμ]+(?:\s*[/*]\s*[A-Za-zµμ]+)*\Z")
#: longest text of a quantity, in characters (``"312 TFLOP/s"`` has 11)
MAX_QUANTITY_CHARS = 64


def quantity(text: Any, dim: Dimension, *, positive: bool = True) -> float:
    """``text`` (``"80 GiB"``) in the SI unit of ``dim`` (bytes, bytes/s, s, FLOP/s, m).

    The text is a decimal number (optionally in scientific notation) and a unit
    made of names from the registry joined by ``/`` or ``*``. Nothing is
    evaluated: ``"2**30 B"`` or ``"10**10**10 B"`` is refused, not computed.

    Raises
    ------
    ValueError
        One line (without the place, which the caller adds): not a string, not a
        number and a unit, no such unit, another dimension, not finite (as written or
        once converted), not positive (``>= 0`` unless ``positive``).
    """
    expected = f"expected a quantity of {dim.what} such as {quote(dim.example)}"
    if not isinstance(text, str):
        raise ValueError(f"{expected} (a string with its unit), got {shorten(repr(text))}")
    m = _QUANTITY.match(text) if len(text) <= MAX_QUANTITY_CHARS else None
    if m is None or not _UNIT.match(m[2]):
        raise ValueError(f"{expected} (a decimal number, then a unit), got {quote(text)}")
    try:
        unit = UREG.parse_units(m[2])
        factor = float(UREG.Quantity(1.0, unit).to(dim.unit).magnitude)
    except Exception:  # pint's parser raises many kinds; every one means "not this"
        raise ValueError(f"{expected}, got {quote(text)}") from None
    value = float(m[1]) * factor  # 1e400 is inf: refused below
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"must be a finite quantity {'> 0' if positive else '>= 0'}, "
                         f"got {quote(text)}")
    return float(f"{value:.12g}")  # "5 us" is 5e-06, not 4.9999999999999996e-06


class _Reader:
    """Walks the parsed file, noting one problem per bad place, ``FILE: PATH: what``."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[str] = []

    def bad(self, path: str, msg: str) -> None:
        self.problems.append(f"{self.file}: {path}: {msg}")

    def table(self, data: Any, path: str, known: tuple[str, ...], required: tuple[str, ...] = ()
              ) -> dict | None:
        if not isinstance(data, dict):
            self.bad(path, f"must be a table, got {shorten(repr(data))}")
            return None
        for key in data:
            if key not in known:
                self.bad(f"{path}.{key}" if path else key,
                         f"unknown key{did_you_mean(key, known) or ';'} known: {', '.join(known)}")
        for key in required:
            if key not in data:
                self.bad(f"{path}.{key}" if path else key, "missing")
        return data

    def figure(self, data: dict, key: str, path: str, dim: Dimension, *, positive: bool = True
               ) -> float | None:
        try:
            return quantity(data[key], dim, positive=positive)
        except ValueError as exc:
            self.bad(f"{path}.{key}", str(exc))
            return None

    def count(self, data: dict, key: str, path: str, *, power_of_two: bool = False
              ) -> int | None:
        v = data[key]
        ok = isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 2**31
        if ok and power_of_two and v & (v - 1):
            self.bad(f"{path}.{key}", f"must be a power of two, got {v}")
            return None
        if not ok:
            self.bad(f"{path}.{key}", f"must be an integer between 1 and 2**31 - 1, "
                                      f"got {shorten(repr(v))}")
            return None
        return v

    def name(self, data: dict, key: str, path: str) -> str | None:
        if msg := name_rule(data[key]):
            self.bad(f"{path}.{key}", msg)
            return None
        return data[key]

    def record(self, path: str, renames: dict[str, str], build, **fields):
        """``build(**fields)``, its own rule breaks noted under ``path`` with the file's
        key names (``renames``: the instance's field name -> the file's)."""
        try:
            return build(**fields)
        except InstanceError as exc:
            for line in exc.problems:
                field, _, msg = line.partition(": ")
                self.bad(f"{path}.{renames.get(field, field)}", msg)
            return None


GROUP_KEYS = ("gpu", "type", "count", "flop_per_s", "peak_flop_per_s", "mfu", "memory",
              "memory_reserve", "devices_per_node", "node_bandwidth")
LINK_KEYS = ("bandwidth", "latency", "distance")
TRAINING_KEYS = ("microbatches", "schedule", "data_parallel", "tensor_parallel", "zero")


def _group(r: _Reader, data: Any, path: str) -> DeviceGroup | None:
    if r.table(data, path, GROUP_KEYS, ("count",)) is None:
        return None
    before = len(r.problems)
    spec = None
    if "gpu" in data:
        spec = GPUS.get(data["gpu"]) if isinstance(data["gpu"], str) else None
        if spec is None:
            r.bad(f"{path}.gpu", f"unknown GPU {shorten(repr(data['gpu']))}"
                                 f"{did_you_mean(str(data['gpu']), GPUS) or ';'} known: "
                                 f"{', '.join(GPUS)} (or give type, a rate and memory)")
    count = r.count(data, "count", path) if "count" in data else None
    kind = r.name(data, "type", path) if "type" in data else (spec.type if spec else None)
    if kind is None and "type" not in data and "gpu" not in data:
        r.bad(f"{path}.type", "missing (or give gpu, a catalogue entry)")
    rate = _rate(r, data, path, spec)
    memory = None
    if "memory" in data:
        memory = r.figure(data, "memory", path, BYTES)
    elif spec is not None:
        memory = float(spec.memory_bytes)
    elif "gpu" not in data:
        r.bad(f"{path}.memory", "missing (or give gpu, a catalogue entry)")
    reserve = (r.figure(data, "memory_reserve", path, BYTES, positive=False)
               if "memory_reserve" in data else DEFAULT_RESERVE_BYTES)
    if memory is not None and reserve is not None and memory - reserve <= 0:
        r.bad(f"{path}.memory", f"must exceed memory_reserve ({reserve / 2**30:g} GiB), "
                                f"got {memory / 2**30:g} GiB")
        memory = None
    per_node = 1
    if "devices_per_node" in data:
        per_node = r.count(data, "devices_per_node", path, power_of_two=True)
    elif spec is not None and count is not None:
        per_node = spec.node_size(count)
    node_bw = None
    if "node_bandwidth" in data:
        node_bw = r.figure(data, "node_bandwidth", path, BANDWIDTH)
    elif spec is not None and per_node and per_node > 1:
        node_bw = spec.link_bytes_per_s
    if len(r.problems) > before or None in (count, kind, rate, memory, per_node):
        return None
    return r.record(
        path, {"memory_bytes": "memory", "node_bandwidth_bytes_per_s": "node_bandwidth"},
        DeviceGroup, type=kind, count=count, flop_per_s=rate, memory_bytes=memory - reserve,
        devices_per_node=per_node, node_bandwidth_bytes_per_s=node_bw)


def _rate(r: _Reader, data: dict, path: str, spec) -> float | None:
    """The sustained rate: ``flop_per_s``, or ``peak x mfu`` (peak from the catalogue)."""
    if "flop_per_s" in data:
        for key in ("peak_flop_per_s", "mfu"):
            if key in data:
                r.bad(f"{path}.{key}", "give flop_per_s (sustained) or a peak with its mfu, "
                                       "not both")
        return r.figure(data, "flop_per_s", path, RATE)
    peak = None
    if "peak_flop_per_s" in data:
        peak = r.figure(data, "peak_flop_per_s", path, RATE)
    elif spec is not None:
        peak = spec.peak_flop_per_s
    elif "gpu" not in data:
        r.bad(f"{path}.flop_per_s", "missing: give flop_per_s (sustained), "
                                    "peak_flop_per_s (with mfu), or gpu")
    mfu = data.get("mfu", DEFAULT_MFU)
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        r.bad(f"{path}.mfu", f"must be a number in (0, 1], got {shorten(repr(mfu))}")
        return None
    return None if peak is None else peak * mfu


def _link(r: _Reader, data: Any, path: str, *, distance: bool) -> Link | None:
    keys = LINK_KEYS if distance else LINK_KEYS[:2]
    if r.table(data, path, keys, ("bandwidth",)) is None or "bandwidth" not in data:
        return None
    before = len(r.problems)
    bandwidth = r.figure(data, "bandwidth", path, BANDWIDTH)
    latency = None
    if "latency" in data and "distance" in data:
        r.bad(f"{path}.distance", "give latency or distance, not both")
    elif "latency" in data:
        latency = r.figure(data, "latency", path, TIME, positive=False)
    elif "distance" in data:
        metres = r.figure(data, "distance", path, LENGTH, positive=False)
        latency = None if metres is None else metres / 1000 * FIBRE_S_PER_KM
    else:
        r.bad(f"{path}.latency", "missing" + (" (or give distance)" if distance else ""))
    if len(r.problems) > before or bandwidth is None or latency is None:
        return None
    return r.record(path, {"bandwidth_bytes_per_s": "bandwidth", "latency_s": "latency"},
                    Link, bandwidth_bytes_per_s=bandwidth, latency_s=latency)


def _training(r: _Reader, data: Any) -> tuple[int, str, Parallelism] | None:
    if data is None:
        return DEFAULT_MICROBATCHES, "1f1b", PARALLELISM_ON
    if r.table(data, "training", TRAINING_KEYS) is None:
        return None
    before = len(r.problems)
    m = r.count(data, "microbatches", "training") if "microbatches" in data \
        else DEFAULT_MICROBATCHES
    schedule = data.get("schedule", "1f1b")
    if schedule not in SCHEDULES:
        r.bad("training.schedule", f"must be one of {', '.join(SCHEDULES)}, "
                                   f"got {shorten(repr(schedule))}")
    lists = {k: tuple(data[k]) if isinstance(data[k], list) else data[k]
             for k in ("data_parallel", "tensor_parallel", "zero") if k in data}
    par = r.record("training", {}, Parallelism, **{**dataclasses.asdict(PARALLELISM_ON), **lists})
    if len(r.problems) > before or m is None:
        return None
    return m, schedule, par


def parse_cluster(data: Any, file: str = "cluster") -> Cluster:
    """The cluster described by ``data`` (a parsed TOML document); ``file`` prefixes errors.

    Raises
    ------
    InstanceError
        One line per problem, ``FILE: PATH: what is wrong``.
    """
    r = _Reader(file)
    if r.table(data, "", ("name", "training", "datacenters", "links"), ("datacenters",)) is None:
        raise InstanceError(r.problems)
    name = data.get("name", Path(file).stem or "cluster")
    if msg := name_rule(name):
        r.bad("name", msg)
    training = _training(r, data.get("training"))
    dcs_data = data.get("datacenters", [])
    if not isinstance(dcs_data, list) or not dcs_data:
        r.bad("datacenters", "must be a non-empty array of tables ([[datacenters]])")
        dcs_data = []
    dcs = []
    for k, dc in enumerate(dcs_data):
        path = f"datacenters[{k}]"
        if r.table(dc, path, ("name", "link", "devices"), ("name", "link", "devices")) is None:
            continue
        before = len(r.problems)
        dc_name = r.name(dc, "name", path) if "name" in dc else None
        link = _link(r, dc["link"], f"{path}.link", distance=False) if "link" in dc else None
        groups_data = dc.get("devices", [])
        if not isinstance(groups_data, list) or not groups_data:
            r.bad(f"{path}.devices", "must be a non-empty array of tables "
                                     "([[datacenters.devices]])")
            groups_data = []
        groups = [_group(r, g, f"{path}.devices[{i}]") for i, g in enumerate(groups_data)]
        if len(r.problems) == before and None not in groups:
            dcs.append(r.record(path, {}, Datacenter, name=dc_name, devices=tuple(groups),
                                link=link))
    links_data = data.get("links", [])
    if not isinstance(links_data, list):
        r.bad("links", "must be an array of tables ([[links]])")
        links_data = []
    if dcs_data and len(links_data) != len(dcs_data) - 1:
        want = len(dcs_data) - 1
        r.bad("links", f"must hold {want} entr{'y' if want == 1 else 'ies'} (one between each "
                       f"two neighbouring datacenters), got {len(links_data)}")
    links = [_link(r, lk, f"links[{i}]", distance=True) for i, lk in enumerate(links_data)]
    if r.problems:
        raise InstanceError(r.problems)
    seen: dict[str, int] = {}
    for k, dc in enumerate(dcs):
        if dc.name in seen:
            r.bad(f"datacenters[{k}].name", f"repeats {quote(dc.name)} "
                                            f"(also datacenters[{seen[dc.name]}])")
        seen.setdefault(dc.name, k)
    if r.problems:
        raise InstanceError(r.problems)
    m, schedule, par = training
    return Cluster(name, tuple(dcs), tuple(links), m, schedule, par)


def read_cluster(path: str | os.PathLike) -> Cluster:
    """Read a cluster file (TOML).

    Raises
    ------
    InstanceError
        One line per problem: ``FILE: cannot read file: ...``,
        ``FILE:LINE:COLUMN: invalid TOML: ...`` (``FILE: invalid TOML: ...`` for
        tables and arrays nested deeper than
        :data:`~chainpipe.strict_json.MAX_NESTING` levels), or ``FILE: PATH: ...``.
    """
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InstanceError([f"{path}: cannot read file: {reason}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # "What is wrong (at line 2, column 14)" (or "(at end of document)")
        at = re.search(r" \(at line (\d+), column (\d+)\)\Z", str(exc))
        where = f"{path}:{at[1]}:{at[2]}" if at else f"{path}"
        msg = str(exc)[:at.start()] if at else str(exc)
        raise InstanceError([f"{where}: invalid TOML: {msg}"]) from None
    except RecursionError:  # tomllib recurses once per level of arrays and inline tables
        data = None
    if data is None or _deeper_than(data, MAX_NESTING):
        raise InstanceError([f"{path}: invalid TOML: tables and arrays nest deeper than "
                             f"{MAX_NESTING} levels (a cluster file needs 5)"])
    return parse_cluster(data, str(path))


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether tables and arrays in ``data`` nest deeper than ``limit`` (no recursion:
    dotted keys make any depth without tomllib recursing)."""
    level = [data]
    for _ in range(limit + 1):
        level = [v for x in level if isinstance(x, (dict, list))
                 for v in (x.values() if isinstance(x, dict) else x)]
        if not level:
            return False
    return True


def cluster_instance(cluster: Cluster, shape: ModelShape, *, microbatch_size: int | None = None,
                     microbatches: int | None = None, schedule: str | None = None,
                     parallelism: Parallelism | None = None, granularity: str = "block",
                     name: str | None = None, global_batch: int | None = None) -> Instance:
    """The instance of training ``shape`` on ``cluster``; keywords override the file.

    Parameters
    ----------
    cluster : Cluster
        From :func:`read_cluster`.
    shape : ModelShape
        A built-in shape or one read from a ``config.json``.
    microbatch_size : int, optional
        Sequences per microbatch (``training.microbatch_size``); default the least
        common multiple of the ``data_parallel`` widths
        (:func:`~chainpipe.instances.generator.batch_sizes`).
    microbatches, schedule, parallelism : optional
        Replace the cluster file's ``training`` settings.
    global_batch : int, optional
        Sequences per iteration: ``M = global_batch / microbatch_size``.
    granularity : {"block", "sublayer"}, default "block"
        One layer per transformer block, or two (attention, MLP).
    name : str, optional
        The instance's name; default ``<cluster>-<model>``.

    Returns
    -------
    Instance
    """
    par = cluster.parallelism if parallelism is None else parallelism
    microbatch_size, microbatches = batch_sizes(par, microbatch_size, global_batch, microbatches)
    layers = model_layers(shape, microbatch_size=microbatch_size, granularity=granularity,
                          tensor_parallel=par != Parallelism())
    return Instance(
        name=(name or f"{cluster.name}-{shape.name}")[:MAX_NAME],
        model=Model(shape.name, layers),
        training=model_training(shape, microbatches or cluster.microbatches,
                                schedule or cluster.schedule, par, microbatch_size),
        datacenters=cluster.datacenters,
        links=cluster.links,
    )


def generate_for_cluster(path: str | os.PathLike, shape: ModelShape, *,
                         microbatch_size: int | None = None, microbatches: int | None = None,
                         schedule: str | None = None, parallelism: str | None = None,
                         data_parallel=None, tensor_parallel=None, zero: bool | None = None,
                         global_batch: int | None = None) -> Instance:
    """Read the cluster file ``path`` and train ``shape`` on it; keywords override the file.

    ``parallelism`` (``"on"``/``"off"``), ``data_parallel``, ``tensor_parallel`` and
    ``zero`` act on the file's lists as ``chainpipe generate`` lets them act on a
    preset's (:func:`~chainpipe.instances.generator.resolve_parallelism`).

    Raises
    ------
    InstanceError
        The file's problems, one line each.
    ValueError
        An override out of range.
    """
    cluster = read_cluster(path)
    base = SimpleNamespace(parallelism=cluster.parallelism,
                           parallel_by_default=cluster.parallelism != Parallelism())
    par = resolve_parallelism(base, parallelism, data_parallel, tensor_parallel, zero)
    return cluster_instance(cluster, shape, microbatch_size=microbatch_size,
                            microbatches=microbatches, schedule=schedule, parallelism=par,
                            global_batch=global_batch)
