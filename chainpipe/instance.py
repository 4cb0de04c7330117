"""The instance: frozen, validated dataclasses for ``chainpipe-instance/3`` (``/1``, ``/2`` read).

Every rule on a field is written once, in the ``RULES`` tables below. The
dataclasses check themselves with them (so a bad ``Instance`` cannot be built
from Python either) and :mod:`chainpipe.io` uses the same tables to report
every problem of a JSON file with its path.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .strict_json import OverflowNumber, quote, shorten

#: the format chainpipe writes
FORMAT = "chainpipe-instance/3"
#: the formats chainpipe reads: each version is the next without its optional fields (only
#: the default of ``training.objective`` depends on the version: :func:`default_objective`)
FORMATS = ("chainpipe-instance/1", "chainpipe-instance/2", "chainpipe-instance/3")
_CANONICAL_INDEX = re.compile(r"(0|[1-9][0-9]{0,9})\Z")  # counts are at most 2**31 - 1
SCHEDULES = ("1f1b", "gpipe")
#: what a plan's time optimises (contract v3): the schedule's own period, or the classic
#: ``sum + (M - 1) * max`` of versions 1 and 2
OBJECTIVES = ("period", "classic")


def default_objective(fmt: object) -> str:
    """The objective a file of format ``fmt`` has when it does not state one: ``"period"``
    for ``chainpipe-instance/3``, ``"classic"`` for ``/1`` and ``/2`` (their optima stay)."""
    return "period" if fmt == "chainpipe-instance/3" else "classic"


class InstanceError(ValueError):
    """An instance (or plan) that breaks the format; ``problems`` has one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# --------------------------------------------------------------------------- rules
Rule = Callable[[Any], "str | None"]


#: largest value of a count (``count``, ``microbatches``): 2**31 - 1, so that every solver
#: may hold counts in 32-bit integers and a count never sizes a structure by accident
MAX_COUNT = 2**31 - 1
#: largest parameter count of one layer: 2**53 - 1, exact as a double (a real layer can pass
#: 2**31: one block of a 405-billion-parameter model holds about 3.2e9 parameters)
MAX_PARAMS = 2**53 - 1
#: longest name (instance, model, layer, datacenter, device type), in characters
MAX_NAME = 64
#: Unicode categories a name may not use, and how an error line calls them
_NOT_PRINTABLE = {
    "Cc": "a control character",
    "Cf": "an invisible format character",
    "Cs": "an unpaired surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


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
    """A value as an error line shows it: JSON words, at most ~80 characters of any text."""
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, (dict, list, tuple)):
        return json_kind(v)
    if v is None or isinstance(v, bool):
        return "null" if v is None else ("true" if v else "false")
    try:
        return shorten(str(v))
    except ValueError:  # an int with more digits than Python will print
        return f"an integer of about {int(v.bit_length() * math.log10(2)) + 1} digits"


def _overflow(v: Any) -> str | None:
    """``"1e400 overflows a double"`` for a number outside the double range, else None."""
    if isinstance(v, OverflowNumber):
        return v.describe()
    if _is_number(v) and isinstance(v, int) and not _is_finite(v):
        return f"{_fmt(v)} overflows a double"
    return None


def name_rule(v: Any) -> str | None:
    """A name: 1-64 printable characters, no ``/`` or ``\\``, not ``.`` or ``..``."""
    if not isinstance(v, str) or not v.strip():
        return f"must be a non-empty string, got {_fmt(v)}"
    if len(v) > MAX_NAME:
        return f"must be at most {MAX_NAME} characters, got {_fmt(v)}"
    for i, ch in enumerate(v):
        kind = _NOT_PRINTABLE.get(unicodedata.category(ch))
        if kind:
            return (f"must be printable: character {i + 1} is U+{ord(ch):04X}, {kind}, "
                    f"got {_fmt(v)}")
    for ch in "/\\":
        if ch in v:
            return f"must not contain {ch!r}, got {_fmt(v)}"
    if v in (".", ".."):
        return f"must not be '.' or '..' (a name must be usable as a file name), got {_fmt(v)}"
    return None


def number_rule(minimum: float, strict: bool) -> Rule:
    op = ">" if strict else ">="

    def rule(v: Any) -> str | None:
        if msg := _overflow(v):
            return msg
        ok = _is_number(v) and _is_finite(v) and (v > minimum if strict else v >= minimum)
        return None if ok else f"must be a finite number {op} {minimum:g}, got {_fmt(v)}"

    return rule


def integer_rule(minimum: int, maximum: int, label: str) -> Rule:
    def rule(v: Any) -> str | None:
        if msg := _overflow(v):
            return msg
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= minimum):
            return f"must be an integer >= {minimum}, got {_fmt(v)}"
        if v > maximum:
            return f"must be an integer <= {maximum} ({label}), got {_fmt(v)}"
        return None

    return rule


def choice_rule(choices: tuple[str, ...]) -> Rule:
    def rule(v: Any) -> str | None:
        if isinstance(v, str) and v in choices:
            return None
        return f"must be one of {', '.join(choices)}, got {_fmt(v)}"

    return rule


def power_of_two_rule(label: str) -> Rule:
    count = integer_rule(1, MAX_COUNT, "2**31 - 1")

    def rule(v: Any) -> str | None:
        if msg := count(v):
            return msg
        return None if v & (v - 1) == 0 else f"must be a power of two ({label}), got {_fmt(v)}"

    return rule


def width_list_rule(item: Rule, what: str) -> Rule:
    """A non-empty list without duplicates whose entries follow ``item``.

    A problem with one entry is reported as ``"[i]: message"``, which
    :func:`field_problem` joins to the field's path (``data_parallel[1]: ...``).
    """

    def rule(v: Any) -> str | None:
        if not isinstance(v, (list, tuple)):
            return f"must be a non-empty array of {what}, got {_fmt(v)}"
        if not v:
            return f"must be a non-empty array of {what}, got []"
        for i, x in enumerate(v):
            if msg := item(x):
                return f"[{i}]: {msg}"
        first: dict[Any, int] = {}
        for i, x in enumerate(v):
            if x in first:
                return f"[{i}]: repeats {_fmt(x)} (also [{first[x]}]); values must be distinct"
            first[x] = i
        return None

    return rule


def field_problem(path: str, msg: str) -> str:
    """The problem line of a field: ``"path: msg"``, or ``"path[i]: ..."`` when the rule
    named an entry of the array (its message starts with ``[i]: ``)."""
    return f"{path}{msg}" if msg.startswith("[") else f"{path}: {msg}"


def bool_rule(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {_fmt(v)}"


NONNEG = number_rule(0.0, strict=False)
POSITIVE = number_rule(0.0, strict=True)


def share_rule(v: Any) -> str | None:
    """A share: a finite number from 0 to 1."""
    if msg := _overflow(v):
        return msg
    ok = _is_number(v) and _is_finite(v) and 0 <= v <= 1
    return None if ok else f"must be a finite number from 0 to 1, got {_fmt(v)}"


COUNT = integer_rule(1, MAX_COUNT, "2**31 - 1")

#: field name -> rule, per record of the format (nested records are handled by io.py)
RULES: dict[str, dict[str, Rule]] = {
    "layer": {
        "name": name_rule,
        "fwd_flop": NONNEG,
        "bwd_flop": NONNEG,
        "params": integer_rule(0, MAX_PARAMS, "2**53 - 1"),
        "activation_bytes": NONNEG,
        "output_bytes": NONNEG,
    },
    "training": {
        "microbatches": integer_rule(1, MAX_COUNT, "2**31 - 1"),
        "schedule": choice_rule(SCHEDULES),
        "bytes_per_param": POSITIVE,
    },
    "device_group": {
        "type": name_rule,
        "count": integer_rule(1, MAX_COUNT, "2**31 - 1"),
        "flop_per_s": POSITIVE,
        "memory_bytes": POSITIVE,
    },
    "link": {"bandwidth_bytes_per_s": POSITIVE, "latency_s": NONNEG},
    "parallelism": {
        "data_parallel": width_list_rule(COUNT, "integers >= 1"),
        "tensor_parallel": width_list_rule(power_of_two_rule("a tensor-parallel degree"),
                                           "powers of two"),
        "zero": bool_rule,
    },
}
#: the allowed pipeline counts of a plan (contract v3): like data-parallel widths
PIPELINES_RULE = width_list_rule(COUNT, "integers >= 1")

#: the fields of version 2 that a file may leave out, per record, with their rules; the
#: dataclasses give them their defaults (``docs/model.md``)
OPTIONAL: dict[str, dict[str, Rule]] = {
    "layer": {"tp_allreduce_bytes": NONNEG, "weight_grad_share": share_rule},
    "training": {"gradient_bytes_per_param": POSITIVE, "optimizer_bytes_per_param": NONNEG,
                 "microbatch_size": COUNT, "objective": choice_rule(OBJECTIVES),
                 "pipeline_sync_period": COUNT},
    "device_group": {
        "devices_per_node": power_of_two_rule("devices per node"),
        "node_bandwidth_bytes_per_s": POSITIVE,
    },
    "parallelism": {"pipelines": PIPELINES_RULE},
}
#: the parallelism a file without a ``parallelism`` block has: one device per stage, one
#: pipeline
PARALLELISM_DEFAULTS = {"data_parallel": (1,), "tensor_parallel": (1,), "zero": False,
                        "pipelines": (1,)}


def _problems(kind: str, obj: Any) -> list[str]:
    problems = []
    for name, rule in RULES[kind].items():
        msg = rule(getattr(obj, name))
        if msg:
            problems.append(field_problem(name, msg))
    for name, rule in OPTIONAL.get(kind, {}).items():
        value = getattr(obj, name)
        if value is not None and (msg := rule(value)):
            problems.append(field_problem(name, msg))
    return problems


def optimizer_problem(bytes_per_param: float, optimizer_bytes_per_param: float) -> str | None:
    """The rule between two training fields: the sharded part fits in the whole."""
    if optimizer_bytes_per_param <= bytes_per_param:
        return None
    return (f"optimizer_bytes_per_param: must be at most bytes_per_param "
            f"({_fmt(bytes_per_param)}), got {_fmt(optimizer_bytes_per_param)}")


def node_problems(count: int | None, devices_per_node: int | None,
                  has_node_bandwidth: bool) -> list[str]:
    """The rules between a device group's fields: whole nodes, and a node bandwidth when a
    node holds several devices.

    ``count`` or ``devices_per_node`` is ``None`` when it broke its own rule (nothing to
    relate it to); ``has_node_bandwidth`` says whether the field was given at all.
    """
    problems = []
    if count is not None and devices_per_node is not None and count % devices_per_node:
        problems.append(f"devices_per_node: must divide count ({count}) so that nodes are "
                        f"whole, got {devices_per_node}")
    if devices_per_node is not None and devices_per_node > 1 and not has_node_bandwidth:
        problems.append(f"node_bandwidth_bytes_per_s: missing field (required when "
                        f"devices_per_node > 1; it is {devices_per_node})")
    return problems


def _check(kind: str, obj: Any) -> None:
    if problems := _problems(kind, obj):
        raise InstanceError(problems)


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Layer:
    """One layer of the model, with its cost for one microbatch.

    Attributes
    ----------
    name : str
        A name (1-64 printable characters, no ``/`` or ``\\``, not ``.`` or ``..``).
    fwd_flop : float
        Forward FLOP for one microbatch, finite and >= 0.
    bwd_flop : float
        Backward FLOP for one microbatch, finite and >= 0.
    params : int
        Parameter count, 0 to 2**53 - 1.
    activation_bytes : float
        Bytes stashed per in-flight microbatch for the backward pass, finite and >= 0.
    output_bytes : float
        Bytes of the output tensor per microbatch (its gradient has the same size),
        finite and >= 0.
    tp_allreduce_bytes : float, optional
        Bytes all-reduced among a stage's ``t`` tensor-parallel devices per microbatch,
        forward and backward together, finite and >= 0. Default (``None``):
        ``4 * output_bytes`` (a Megatron block: two all-reduces of its hidden state
        forward, two backward).
    weight_grad_share : float, optional
        The share of ``bwd_flop`` that computes the weight gradient (the ``W`` of a
        zero-bubble schedule, :mod:`chainpipe.schedule`), 0 to 1. ``None`` (the default,
        and what a file without it reads as): the schedule's default, 0.5 (every matrix
        product's backward is one product for the input gradient and one of the same
        size for the weight gradient). Only the what-if schedules read it.

    Raises
    ------
    InstanceError
        If a field breaks its rule; one line per field.
    """

    name: str
    fwd_flop: float
    bwd_flop: float
    params: int
    activation_bytes: float
    output_bytes: float
    tp_allreduce_bytes: float = None
    weight_grad_share: float | None = None

    def __post_init__(self) -> None:
        _check("layer", self)
        if self.tp_allreduce_bytes is None:
            object.__setattr__(self, "tp_allreduce_bytes", 4 * self.output_bytes)

    @property
    def flop(self) -> float:
        """Forward plus backward FLOP of one microbatch."""
        return self.fwd_flop + self.bwd_flop


@dataclass(frozen=True)
class Model:
    """The model: named layers in execution order.

    Attributes
    ----------
    name : str
        A name, with the rules of :attr:`Layer.name`.
    layers : tuple of Layer
        At least one layer, in execution order.

    Raises
    ------
    InstanceError
        For a bad name or an empty layer list.
    """

    name: str
    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        problems = _named(self.name)
        if not self.layers:
            problems.append("layers: must hold at least one layer")
        if problems:
            raise InstanceError(problems)


@dataclass(frozen=True)
class Parallelism:
    """The widths and degrees a stage may use (contract version 2).

    Attributes
    ----------
    data_parallel : tuple of int
        Data-parallel widths ``d`` a stage may use: non-empty, no duplicates, each
        1 to 2**31 - 1 (not necessarily powers of two, not necessarily with 1).
    tensor_parallel : tuple of int
        Tensor-parallel degrees ``t``: non-empty, no duplicates, powers of two.
    zero : bool
        ZeRO-1: the optimizer state is sharded over a stage's ``d`` replicas.
    pipelines : tuple of int
        Contract v3: how many pipelines a plan may run (each on its own range of DCs):
        non-empty, no duplicates, each 1 to 2**31 - 1; default ``(1,)``.

    Raises
    ------
    InstanceError
        If a field breaks its rule; one line per field.
    """

    data_parallel: tuple[int, ...] = (1,)
    tensor_parallel: tuple[int, ...] = (1,)
    zero: bool = False
    pipelines: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        for name in ("data_parallel", "tensor_parallel", "pipelines"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        _check("parallelism", self)

    @property
    def single_device(self) -> bool:
        """Whether every stage runs on one device (``d = t = 1``: version 1)."""
        return self.data_parallel == (1,) and self.tensor_parallel == (1,)


@dataclass(frozen=True)
class Training:
    """How the model is trained: microbatches, schedule, memory per parameter, parallelism.

    Attributes
    ----------
    microbatches : int
        ``M``, the microbatches of one iteration, 1 to 2**31 - 1.
    schedule : str
        ``"1f1b"`` or ``"gpipe"``.
    bytes_per_param : float
        Bytes a device holds per parameter (weights, gradients, optimizer state), > 0.
    gradient_bytes_per_param : float, optional
        Bytes all-reduced per parameter by the gradient synchronisation, > 0;
        default 2 (16-bit gradients).
    optimizer_bytes_per_param : float, optional
        The part of ``bytes_per_param`` that ZeRO-1 shards, 0 to ``bytes_per_param``;
        default ``min(12, bytes_per_param)`` (fp32 master weights and two Adam moments).
    parallelism : Parallelism, optional
        Widths and degrees stages may use; default one device per stage.
    microbatch_size : int, optional
        Sequences per microbatch, the batch the layers' figures are for, 1 to 2**31 - 1;
        ``None`` (the default) when the file does not state it. When stated, every
        stage's data-parallel width must divide it (each replica takes
        ``microbatch_size / d`` whole sequences of every microbatch).
    objective : str, optional
        Contract v3: ``"period"`` (the schedule's own period) or ``"classic"`` (the
        ``sum + (M - 1) * max`` of versions 1 and 2). Built from Python the default is
        ``"classic"``, so every caller written before version 3 keeps its meaning; a
        file's default depends on its version (:func:`default_objective`: ``"period"``
        for ``/3``).
    pipeline_sync_period : int, optional
        Contract v3: ``H``, iterations between two gradient averagings across pipelines,
        1 to 2**31 - 1; default 1 (synchronous).

    Raises
    ------
    InstanceError
        If a field breaks its rule; one line per field.
    """

    microbatches: int
    schedule: str
    bytes_per_param: float
    gradient_bytes_per_param: float = None
    optimizer_bytes_per_param: float = None
    parallelism: Parallelism = None
    microbatch_size: int | None = None
    objective: str = "classic"
    pipeline_sync_period: int = 1

    def __post_init__(self) -> None:
        for name, default in (("objective", "classic"), ("pipeline_sync_period", 1)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        problems = _problems("training", self)
        if self.parallelism is not None and not isinstance(self.parallelism, Parallelism):
            problems.append(f"parallelism: must be a Parallelism, got {_fmt(self.parallelism)}")
        if problems:
            raise InstanceError(problems)
        if self.gradient_bytes_per_param is None:
            object.__setattr__(self, "gradient_bytes_per_param", 2.0)
        if self.optimizer_bytes_per_param is None:
            object.__setattr__(self, "optimizer_bytes_per_param",
                               min(12.0, self.bytes_per_param))
        elif msg := optimizer_problem(self.bytes_per_param, self.optimizer_bytes_per_param):
            raise InstanceError([msg])
        if self.parallelism is None:
            object.__setattr__(self, "parallelism", Parallelism())

    @property
    def data_parallel_widths(self) -> tuple[int, ...]:
        """The widths a stage may use: the allowed ``data_parallel`` widths that divide
        ``microbatch_size`` (all of them when it is not stated), in the file's order."""
        widths = self.parallelism.data_parallel
        if self.microbatch_size is None:
            return widths
        return tuple(d for d in widths if self.microbatch_size % d == 0)

    def width_problem(self, d: int) -> str | None:
        """Why a stage may not run ``d`` data-parallel replicas, or ``None`` if it may."""
        if d not in self.parallelism.data_parallel:
            return f"is not an allowed width {list(self.parallelism.data_parallel)}"
        if self.microbatch_size is not None and self.microbatch_size % d:
            return (f"does not divide training.microbatch_size ({self.microbatch_size}): each "
                    f"replica must take whole sequences of every microbatch")
        return None

    @property
    def classic(self) -> bool:
        """Whether the objective is the classic ``sum + (M - 1) * max`` (versions 1, 2)."""
        return self.objective == "classic"

    @property
    def sharded_bytes_per_param(self) -> float:
        """``zeta``: bytes per parameter ZeRO-1 shards over ``d`` replicas (0 without ZeRO)."""
        return self.optimizer_bytes_per_param if self.parallelism.zero else 0.0


@dataclass(frozen=True)
class DeviceGroup:
    """Identical devices of one type in one datacenter; a count, never a list of devices.

    Attributes
    ----------
    type : str
        The device type, a name unique within its datacenter.
    count : int
        How many devices, 1 to 2**31 - 1.
    flop_per_s : float
        Sustained (effective) rate of one device in FLOP per second, > 0.
    memory_bytes : float
        Memory of one device in bytes, > 0.
    devices_per_node : int, optional
        Devices per node, a power of two dividing ``count``; default 1. Device ``i``
        sits in node ``i // devices_per_node``.
    node_bandwidth_bytes_per_s : float or None, optional
        Bandwidth per device inside a node (NVLink, PCIe), > 0; required when
        ``devices_per_node > 1``.

    Raises
    ------
    InstanceError
        If a field breaks its rule; one line per field.
    """

    type: str
    count: int
    flop_per_s: float
    memory_bytes: float
    devices_per_node: int = 1
    node_bandwidth_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.devices_per_node is None:
            object.__setattr__(self, "devices_per_node", 1)
        problems = _problems("device_group", self)
        if not problems:
            problems = node_problems(self.count, self.devices_per_node,
                                     self.node_bandwidth_bytes_per_s is not None)
        if problems:
            raise InstanceError(problems)

    @property
    def node_bandwidth(self) -> float:
        """Bandwidth inside a node; ``inf`` for one device per node (no intra-node traffic)."""
        bw = self.node_bandwidth_bytes_per_s
        return math.inf if bw is None else bw


@dataclass(frozen=True)
class Link:
    """A network link: inside a datacenter, or between two neighbouring ones.

    Attributes
    ----------
    bandwidth_bytes_per_s : float
        Bandwidth in bytes per second, > 0.
    latency_s : float
        Latency in seconds, >= 0.

    Raises
    ------
    InstanceError
        If a field breaks its rule; one line per field.
    """

    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        _check("link", self)


@dataclass(frozen=True)
class Datacenter:
    """A datacenter of the chain: its device groups and its internal link.

    Attributes
    ----------
    name : str
        A name, unique in the instance, with the rules of :attr:`Layer.name`.
    devices : tuple of DeviceGroup
        At least one group; device types are unique within the datacenter.
    link : Link
        The network between two devices of this datacenter.

    Raises
    ------
    InstanceError
        For a bad name, no device group, or a device type given twice.
    """

    name: str
    devices: tuple[DeviceGroup, ...]
    link: Link

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        problems = _named(self.name)
        if not self.devices:
            problems.append("devices: must hold at least one device group")
        types = [g.type for g in self.devices]
        for t in sorted({t for t in types if types.count(t) > 1}):
            problems.append(f"devices: device type {_fmt(t)} appears more than once")
        if problems:
            raise InstanceError(problems)

    @property
    def device_count(self) -> int:
        """Devices in this datacenter, all groups together."""
        return sum(g.count for g in self.devices)


def _named(name: Any) -> list[str]:
    """``["name: ..."]`` if ``name`` breaks the name rule, else an empty list."""
    msg = name_rule(name)
    return [f"name: {msg}"] if msg else []


@dataclass(frozen=True)
class DeviceRef:
    """Where a named device sits: datacenter index, group index, index in its group."""

    dc: int
    group: int
    index: int


@dataclass(frozen=True)
class Instance:
    """A partition-and-mapping problem: the model, its training and the datacenter chain.

    Build one from JSON with :func:`chainpipe.io.read` or
    :func:`chainpipe.io.instance_from_dict`; built from Python, it checks the
    same rules.

    Attributes
    ----------
    name : str
        A name, with the rules of :attr:`Layer.name`.
    model : Model
        The layers in execution order.
    training : Training
        Microbatches, schedule and memory per parameter.
    datacenters : tuple of Datacenter
        The chain in order, at least one, names unique.
    links : tuple of Link
        ``links[k]`` joins ``datacenters[k]`` and ``datacenters[k + 1]``: exactly one
        fewer than the datacenters.

    Raises
    ------
    InstanceError
        For a bad name, no datacenter, a datacenter name given twice or a wrong
        number of links.
    """

    name: str
    model: Model
    training: Training
    datacenters: tuple[Datacenter, ...]
    links: tuple[Link, ...]
    _refs: dict = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "datacenters", tuple(self.datacenters))
        object.__setattr__(self, "links", tuple(self.links))
        problems = _named(self.name)
        if not self.datacenters:
            problems.append("datacenters: must hold at least one datacenter")
        names = [dc.name for dc in self.datacenters]
        for n in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"datacenters: name {_fmt(n)} appears more than once")
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

    @property
    def parallelism(self) -> Parallelism:
        return self.training.parallelism

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
        raise KeyError(f"no device named {_fmt(device)}")

    def group(self, ref: DeviceRef) -> DeviceGroup:
        return self.datacenters[ref.dc].devices[ref.group]

    @staticmethod
    def device_name(dc: Datacenter, group: DeviceGroup, index: int) -> str:
        return f"{dc.name}/{group.type}/{index}"
