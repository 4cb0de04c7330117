"""The instance: frozen, validated dataclasses for ``chainpipe-instance/1``.

Every rule on a field is written once, in the ``RULES`` tables below. The
dataclasses check themselves with them (so a bad ``Instance`` cannot be built
from Python either) and :mod:`chainpipe.io` uses the same tables to report
every problem of a JSON file with its path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FORMAT = "chainpipe-instance/1"
_CANONICAL_INDEX = re.compile(r"(0|[1-9][0-9]*)\Z")
SCHEDULES = ("1f1b", "gpipe")


class InstanceError(ValueError):
    """An instance (or plan) that breaks the format; ``problems`` has one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# --------------------------------------------------------------------------- rules
Rule = Callable[[Any], "str | None"]


#: largest integer a field may hold: 2**53 - 1, exact in every JSON tool (I-JSON, RFC 7493)
#: and as a float, so sums and products of counts stay exact
MAX_INTEGER = 2**53 - 1


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v: Any) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def json_kind(v: Any) -> str:
    """The JSON name of a value's type: object, array, string, number, boolean, null."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, (list, tuple)):
        return "array"
    return type(v).__name__


def _fmt(v: Any) -> str:
    """A value as an error message shows it: JSON words for null, booleans and containers."""
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (dict, list, tuple)):
        return json_kind(v)
    if v is None or isinstance(v, bool):
        return "null" if v is None else ("true" if v else "false")
    try:
        return str(v)
    except ValueError:  # an int with more digits than Python will print
        return f"an integer of {v.bit_length()} bits"


def name_rule(v: Any) -> str | None:
    if not isinstance(v, str) or not v.strip():
        return f"must be a non-empty string, got {_fmt(v)}"
    if "/" in v:
        return f"must not contain '/', got {_fmt(v)}"
    return None


def text_rule(v: Any) -> str | None:
    return None if isinstance(v, str) else f"must be a string, got {_fmt(v)}"


def number_rule(minimum: float, strict: bool) -> Rule:
    op = ">" if strict else ">="

    def rule(v: Any) -> str | None:
        ok = _is_number(v) and _is_finite(v) and (v > minimum if strict else v >= minimum)
        return None if ok else f"must be a finite number {op} {minimum:g}, got {_fmt(v)}"

    return rule


def integer_rule(minimum: int) -> Rule:
    def rule(v: Any) -> str | None:
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= minimum):
            return f"must be an integer >= {minimum}, got {_fmt(v)}"
        if v > MAX_INTEGER:
            return f"must be an integer <= {MAX_INTEGER} (2**53 - 1), got {_fmt(v)}"
        return None

    return rule


def choice_rule(choices: tuple[str, ...]) -> Rule:
    def rule(v: Any) -> str | None:
        if isinstance(v, str) and v in choices:
            return None
        return f"must be one of {', '.join(choices)}, got {_fmt(v)}"

    return rule


NONNEG = number_rule(0.0, strict=False)
POSITIVE = number_rule(0.0, strict=True)

#: field name -> rule, per record of the format (nested records are handled by io.py)
RULES: dict[str, dict[str, Rule]] = {
    "layer": {
        "name": text_rule,
        "fwd_flop": NONNEG,
        "bwd_flop": NONNEG,
        "params": integer_rule(0),
        "activation_bytes": NONNEG,
        "output_bytes": NONNEG,
    },
    "training": {
        "microbatches": integer_rule(1),
        "schedule": choice_rule(SCHEDULES),
        "bytes_per_param": POSITIVE,
    },
    "device_group": {
        "type": name_rule,
        "count": integer_rule(1),
        "flop_per_s": POSITIVE,
        "memory_bytes": POSITIVE,
    },
    "link": {"bandwidth_bytes_per_s": POSITIVE, "latency_s": NONNEG},
}


def _check(kind: str, obj: Any) -> None:
    problems = []
    for name, rule in RULES[kind].items():
        msg = rule(getattr(obj, name))
        if msg:
            problems.append(f"{name}: {msg}")
    if problems:
        raise InstanceError(problems)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Layer:
    name: str
    fwd_flop: float
    bwd_flop: float
    params: int
    activation_bytes: float
    output_bytes: float

    def __post_init__(self) -> None:
        _check("layer", self)

    @property
    def flop(self) -> float:
        """Forward plus backward FLOP of one microbatch."""
        return self.fwd_flop + self.bwd_flop


@dataclass(frozen=True)
class Model:
    name: str
    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise InstanceError(["layers: must hold at least one layer"])


@dataclass(frozen=True)
class Training:
    microbatches: int
    schedule: str
    bytes_per_param: float

    def __post_init__(self) -> None:
        _check("training", self)


@dataclass(frozen=True)
class DeviceGroup:
    type: str
    count: int
    flop_per_s: float
    memory_bytes: float

    def __post_init__(self) -> None:
        _check("device_group", self)


@dataclass(frozen=True)
class Link:
    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        _check("link", self)


@dataclass(frozen=True)
class Datacenter:
    name: str
    devices: tuple[DeviceGroup, ...]
    link: Link

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        problems = []
        if msg := name_rule(self.name):
            problems.append(f"name: {msg}")
        if not self.devices:
            problems.append("devices: must hold at least one device group")
        types = [g.type for g in self.devices]
        for t in sorted({t for t in types if types.count(t) > 1}):
            problems.append(f"devices: device type {t!r} appears more than once")
        if problems:
            raise InstanceError(problems)

    @property
    def device_count(self) -> int:
        return sum(g.count for g in self.devices)


@dataclass(frozen=True)
class DeviceRef:
    """Where a named device sits: datacenter index, group index, index in its group."""

    dc: int
    group: int
    index: int


@dataclass(frozen=True)
class Instance:
    name: str
    model: Model
    training: Training
    datacenters: tuple[Datacenter, ...]
    links: tuple[Link, ...]
    _refs: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "datacenters", tuple(self.datacenters))
        object.__setattr__(self, "links", tuple(self.links))
        problems = []
        if not self.datacenters:
            problems.append("datacenters: must hold at least one datacenter")
        names = [dc.name for dc in self.datacenters]
        for n in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"datacenters: name {n!r} appears more than once")
        want = max(len(self.datacenters) - 1, 0)
        if len(self.links) != want:
            problems.append(
                f"links: must have exactly {want} entries (one per pair of neighbouring "
                f"datacenters), got {len(self.links)}"
            )
        if problems:
            raise InstanceError(problems)
        # (dc name, device type) -> (dc index, group index); devices are never enumerated,
        # so a group of any count costs nothing
        refs = {(dc.name, group.type): (k, g)
                for k, dc in enumerate(self.datacenters) for g, group in enumerate(dc.devices)}
        object.__setattr__(self, "_refs", refs)

    # -- convenient views
    @property
    def layers(self) -> tuple[Layer, ...]:
        return self.model.layers

    @property
    def num_layers(self) -> int:
        return len(self.model.layers)

    @property
    def num_datacenters(self) -> int:
        return len(self.datacenters)

    @property
    def num_devices(self) -> int:
        return sum(dc.device_count for dc in self.datacenters)

    @property
    def microbatches(self) -> int:
        return self.training.microbatches

    def device_names(self) -> list[str]:
        return [self.device_name(dc, g, i)
                for dc in self.datacenters for g in dc.devices for i in range(g.count)]

    def locate(self, device: str) -> DeviceRef:
        """The datacenter, group and index of a device named ``dc/type/i``.

        ``i`` is written in canonical decimal (``0``, ``1``, ..., no sign, no leading zero).
        """
        parts = device.split("/") if isinstance(device, str) else ()
        if len(parts) == 3 and (parts[0], parts[1]) in self._refs \
                and _CANONICAL_INDEX.match(parts[2]):
            k, g = self._refs[(parts[0], parts[1])]
            i = int(parts[2])
            if i < self.datacenters[k].devices[g].count:
                return DeviceRef(k, g, i)
        raise KeyError(f"no device named {device!r}")

    def group(self, ref: DeviceRef) -> DeviceGroup:
        return self.datacenters[ref.dc].devices[ref.group]

    @staticmethod
    def device_name(dc: Datacenter, group: DeviceGroup, index: int) -> str:
        return f"{dc.name}/{group.type}/{index}"
