"""Versioned JSON messages between DC agents, their schema, and the one decoder.

Three kinds cross a chain link, always between neighbours:

* ``prefix`` (first, forward: DC k -> DC k+1): lower bounds on the cost of a
  partial plan that runs the whole model on DC 1..k alone, ``null`` when one of
  them keeps its own to itself: ``total_s``, the least sum of its stages'
  compute times, and ``bottleneck_s``, the least compute time of its slowest
  stage. Both are rounded *down* to the grid of :data:`PREFIX_STEPS` by the DC
  that sends them. A prefix of the model costs at least its share of FLOP of
  them; the receiver adds its own devices and bounds the cost of every plan's
  prefix with them (see :meth:`chainpipe.solvers.cdynp.agent.DCAgent.prefix`). In a
  run with the option ``curve_low`` it may carry ``curve`` too, the prefix-curve
  table (:mod:`.curve`): per public period cap, per prefix end ``a`` from
  :data:`WITHHELD` on (shorter prefixes are not sent: their rows are 0) and per
  excess bucket, the least fill of a prefix ``[0, a)`` on DC 1..k under that cap, an
  integer ``n`` for the value ``2^(n / CURVE_STEPS)`` rounded *down* (:data:`CURVE_ZERO`
  for 0) or ``null`` when no prefix meets the cap;
* ``summary`` (backward pass, DC k -> DC k-1): the state summary. Each entry
  is a layer boundary ``b`` (the suffix ``[b, L)`` is handled downstream), the
  bandwidth ``bw`` of the chain path from the receiver to the DC of the
  suffix's first stage (``null`` when ``b = 0``: no boundary), and the Pareto
  points ``[r, bottleneck_s, total_s, sync_s]`` of the suffix plans (``r``:
  stages in the suffix, capped; ``total_s`` already holds the chain latencies
  beyond the receiver; ``sync_s`` the largest gradient synchronisation of the
  suffix's stages, 0 without data parallelism). No device type, count, rate,
  memory, node, width, degree or internal link figure appears, and entries of
  different DCs are merged when their ``bw`` agrees.
* ``assemble`` (forward pass, DC k -> DC k+1): which point of the receiver's
  own summary to realise (entry and point index, and its boundary ``b``), or
  ``null`` when the sender's stages already end the model.

:func:`encode` produces the exact bytes that are sent (compact JSON, floats as
shortest round-trip reprs). :func:`decode` is the only way a received byte
string becomes a message: given what the connection expects (:class:`Expect`)
it returns a message that satisfies every rule below, or raises
:class:`ProtocolError`, whatever the bytes are. The rules beyond
:data:`SCHEMA`: at most :data:`MAX_MESSAGE_BYTES` bytes, UTF-8, no duplicate
keys, no ``NaN``/``Infinity`` and no number that overflows a float, ``from``
and ``to`` the connection's two parties, ``0 <= b < L``, ``bw`` ``null``
exactly when ``b = 0`` and otherwise the bandwidth of a chain path from the
receiver downstream, and ``min(1, R) <= r <= min(R, L - b)`` (``R``: the
position cap).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import partial
from itertools import chain
from operator import is_not, itemgetter

PROTOCOL = "chainpipe-cdynp/3"

#: the largest message, in bytes, that is sent or accepted (64 MiB; exact summaries of
#: the 122-layer, 8-DC ``large/`` instances stay below 100 KB)
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: the grid the bounds of a ``prefix`` message are rounded down to: ``2^(n / PREFIX_STEPS)``,
#: four steps per power of two (a step of 19%)
PREFIX_STEPS = 4

#: the prefix-curve table of a ``prefix`` message (:mod:`.curve`): fills as integers ``n``
#: for ``2^(n / CURVE_STEPS)``, rounded down (a step of about 1.1%); at most
#: ``CURVE_MOST`` caps, 1 or ``CURVE_BUCKETS`` excess buckets per row; ``CURVE_ZERO`` reads
#: as 0 and is the least integer allowed, ``CURVE_TOP`` the largest (a finite float)
CURVE_STEPS = 64
CURVE_MOST = 64
CURVE_BUCKETS = 16
CURVE_ZERO = -64 * 1100
CURVE_TOP = 64 * 1023
#: prefixes shorter than this many layers are never sent in a prefix-curve table (their
#: rows read as 0: weaker, still a floor), so no message holds the fill of a prefix of
#: one layer or few (at DC 2, a one-layer prefix's least fill is DC 1's fastest time for
#: layer 0)
WITHHELD = 4

#: the range of every run option an owner may give the agents: ``(integer, least, most,
#: least excluded)``. What the agents compute grows with none of them beyond an exact run
#: (``digits``: a double holds 15 decimal digits exactly; ``grid`` is at most the instance's
#: layer count too, checked where it is known). :func:`option_problem` is the one check,
#: of the owner (:func:`.drive.agent_options`) and of an agent reading a run's header.
RUN_OPTIONS = {
    "epsilon": (False, 0.0, 1e6, False),
    "quantum": (False, 0.0, 1e6, False),
    "digits": (True, 0, 15, False),
    "max_entries": (True, 0, 2**31 - 1, False),
    "upper_bound": (False, 0.0, math.inf, True),
    "beam": (True, 0, 2**31 - 1, False),
    "grid": (True, 0, 2**31 - 1, False),
    "sync_cap": (False, 0.0, math.inf, True),
    "lower_bound": (False, 0.0, math.inf, False),
    "frontier": (True, 0, 2**31 - 1, False),
    "frontier_bound": (False, 0.0, math.inf, True),
    "curve_low": (False, 0.0, math.inf, True),
    "curve_top": (False, 0.0, math.inf, True),
    "floors_only": (True, 0, 1, False),
    "curve_steps": (True, 0, 64, False),
    "sum_limit": (False, 0.0, math.inf, True),
}

_NUMBER = {"type": "number", "minimum": 0}
_POINT = {"oneOf": [
    {  # classic: [r, bottleneck_s, total_s, sync_s]
        "type": "array", "minItems": 4, "maxItems": 4,
        "prefixItems": [{"type": "integer", "minimum": 0}, _NUMBER, _NUMBER, _NUMBER],
    },
    {  # period: [r, period_s, phase2_s, total_s, sync_s, [window majorant, ...]]
        "type": "array", "minItems": 6, "maxItems": 6,
        "prefixItems": [{"type": "integer", "minimum": 0}, _NUMBER, _NUMBER, _NUMBER, _NUMBER,
                        {"type": "array", "items": _NUMBER}],
    },
]}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chainpipe-cdynp/3 message",
    "oneOf": [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["protocol", "kind", "from", "to", "bound"],
            "properties": {
                "protocol": {"const": PROTOCOL},
                "kind": {"const": "prefix"},
                "from": {"type": "string"},
                "to": {"type": "string"},
                "bound": {"oneOf": [
                    {"type": "null"},
                    {"type": "object", "additionalProperties": False,
                     "required": ["total_s", "bottleneck_s"],
                     "properties": {"total_s": {"type": "number", "minimum": 0},
                                    "bottleneck_s": {"type": "number", "minimum": 0}}},
                ]},
                "curve": {"oneOf": [
                    {"type": "null"},
                    {"type": "array", "maxItems": CURVE_MOST, "items": {
                        "type": "array", "items": {
                            "type": "array", "minItems": 1, "maxItems": CURVE_BUCKETS,
                            "items": {"oneOf": [
                                {"type": "null"},
                                {"type": "integer", "minimum": CURVE_ZERO,
                                 "maximum": CURVE_TOP}]}}}},
                ]},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["protocol", "kind", "from", "to", "entries"],
            "properties": {
                "protocol": {"const": PROTOCOL},
                "kind": {"const": "summary"},
                "from": {"type": "string"},
                "to": {"type": "string"},
                "entries": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["b", "bw", "points"],
                    "properties": {
                        "b": {"type": "integer", "minimum": 0},
                        "bw": {"type": ["number", "null"], "exclusiveMinimum": 0},
                        "points": {"type": "array", "minItems": 1, "items": _POINT},
                    },
                }},
            },
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["protocol", "kind", "from", "to", "realise"],
            "properties": {
                "protocol": {"const": PROTOCOL},
                "kind": {"const": "assemble"},
                "from": {"type": "string"},
                "to": {"type": "string"},
                "realise": {"oneOf": [
                    {"type": "null"},
                    {"type": "object", "additionalProperties": False,
                     "required": ["entry", "point", "b"],
                     "properties": {"entry": {"type": "integer", "minimum": 0},
                                    "point": {"type": "integer", "minimum": 0},
                                    "b": {"type": "integer", "minimum": 0}}},
                ]},
            },
        },
    ],
}


class ProtocolError(ValueError):
    """A message that does not follow ``chainpipe-cdynp/3``.

    ``sender`` names the DC that sent it (``None`` when not known), so the run can
    say which DC broke the protocol.
    """

    def __init__(self, message: str, sender: str | None = None):
        super().__init__(message)
        self.sender = sender


@dataclass(frozen=True)
class Expect:
    """What a connection accepts: its two parties and the instance's public sizes.

    Attributes
    ----------
    sender, receiver : str
        The DC names ``from`` and ``to`` must carry.
    num_layers : int
        ``L``; every boundary ``b`` is below it.
    position_cap : int
        ``R``; every stage count ``r`` is at most it.
    bandwidths : frozenset of float
        The bandwidths a summary entry with ``b > 0`` may carry: those of the chain
        paths from the receiver to each DC downstream of it.
    period : bool
        The run plans under the ``period`` objective (public: the instance's training):
        every point has the period shape ``[r, period_s, phase2_s, total_s, sync_s,
        hull]``, otherwise the classic ``[r, bottleneck_s, total_s, sync_s]``.
    """

    sender: str
    receiver: str
    num_layers: int
    position_cap: int
    bandwidths: frozenset = frozenset()
    period: bool = False


def prefix(sender: str, receiver: str, bound: dict | None, curve: list | None = None) -> dict:
    """A ``prefix`` message (``curve``: the prefix-curve table, sent only when given)."""
    msg = {"protocol": PROTOCOL, "kind": "prefix", "from": sender, "to": receiver,
           "bound": bound}
    if curve is not None:
        msg["curve"] = curve
    return msg


def summary(sender: str, receiver: str, entries: list[dict]) -> dict:
    return {"protocol": PROTOCOL, "kind": "summary", "from": sender, "to": receiver,
            "entries": entries}


def assemble(sender: str, receiver: str, realise: dict | None) -> dict:
    return {"protocol": PROTOCOL, "kind": "assemble", "from": sender, "to": receiver,
            "realise": realise}


def encode(message: dict) -> bytes:
    """The bytes sent for ``message``; a :class:`ProtocolError` above the size cap."""
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"its {message['kind']} would be {len(data)} bytes, above the cap of "
            f"{MAX_MESSAGE_BYTES} bytes; compress it (options max_entries, digits)",
            message["from"])
    return data


def decode(data: bytes, kind: str, expect: Expect) -> dict:
    """The message in ``data``, checked against every rule of the protocol.

    Parameters
    ----------
    data : bytes
        What arrived on the connection, any byte string.
    kind : {"prefix", "summary", "assemble"}
        The kind the receiver waits for.
    expect : Expect
        The connection's parties and the sizes the message must respect.

    Returns
    -------
    dict
        A message following the protocol.

    Raises
    ------
    ProtocolError
        For anything else (``sender`` is ``expect.sender``); never another exception.
    """
    try:
        msg = _parse(data)
        validate(msg)
        _check_context(msg, kind, expect)
    except ProtocolError as exc:
        raise ProtocolError(str(exc), expect.sender) from None
    return msg


def _parse(data) -> object:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes, above the cap of "
                            f"{MAX_MESSAGE_BYTES} bytes")
    try:
        return json.loads(bytes(data).decode("utf-8"), parse_constant=_reject_constant,
                          object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ProtocolError("not JSON: nested too deeply") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProtocolError(f"not JSON: {exc}"[:200]) from None


def _reject_constant(token: str):
    raise ValueError(f"{token} is not a number JSON allows")


def _unique_keys(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def validate(msg) -> None:
    """Structural check of a message (the rules of :data:`SCHEMA`, and finite numbers)."""
    if not isinstance(msg, dict) or msg.get("protocol") != PROTOCOL:
        raise ProtocolError(f"protocol: expected {PROTOCOL!r}")
    kind = msg.get("kind")
    keys = {"prefix": {"protocol", "kind", "from", "to", "bound"},
            "summary": {"protocol", "kind", "from", "to", "entries"},
            "assemble": {"protocol", "kind", "from", "to", "realise"}}.get(kind) \
        if isinstance(kind, str) else None
    if keys is None:
        raise ProtocolError("kind: must be 'prefix', 'summary' or 'assemble'")
    if set(msg) != keys and not (kind == "prefix" and set(msg) == keys | {"curve"}):
        raise ProtocolError(f"fields: expected {sorted(keys)}")
    if not isinstance(msg["from"], str) or not isinstance(msg["to"], str):
        raise ProtocolError("from/to: must be DC names")
    if kind == "prefix":
        bound = msg["bound"]
        if bound is not None and (not isinstance(bound, dict)
                                  or set(bound) != {"total_s", "bottleneck_s"}
                                  or not all(finite_number(v) and v >= 0
                                             for v in bound.values())):
            raise ProtocolError("bound: must be null or {total_s, bottleneck_s}, "
                                "finite numbers >= 0")
        _check_curve(msg.get("curve"))
    elif kind == "summary":
        if not isinstance(msg["entries"], list):
            raise ProtocolError("entries: must be a list")
        for i, e in enumerate(msg["entries"]):
            _check_entry(i, e)
    else:
        rz = msg["realise"]
        if rz is not None and (not isinstance(rz, dict) or set(rz) != {"entry", "point", "b"}
                               or not all(_int(v) and v >= 0 for v in rz.values())):
            raise ProtocolError("realise: must be null or {entry, point, b} integers >= 0")


def _check_curve(curve) -> None:
    """A prefix-curve table's structure: at most :data:`CURVE_MOST` caps, each a list of
    rows, every row as many integers in ``[CURVE_ZERO, CURVE_TOP]`` or nulls as every
    other (1 or :data:`CURVE_BUCKETS`)."""
    if curve is None:
        return
    if not isinstance(curve, list) or len(curve) > CURVE_MOST:
        raise ProtocolError(f"curve: must be null or a list of at most {CURVE_MOST} caps")
    width = None
    for i, cap in enumerate(curve):
        if not isinstance(cap, list):
            raise ProtocolError(f"curve[{i}]: must be a list of rows")
        widths = set(map(len, cap)) if set(map(type, cap)) <= {list} else None
        if widths is None or len(widths | ({width} if width else set())) > 1 \
                or not widths <= {1, CURVE_BUCKETS}:
            j = next(j for j, row in enumerate(cap) if type(row) is not list or len(row) not in
                     (1, CURVE_BUCKETS) or len(row) != (width or len(cap[0])))
            raise ProtocolError(f"curve[{i}][{j}]: must be a row of 1 or "
                                f"{CURVE_BUCKETS} buckets, as long as every other")
        width = width or next(iter(widths), None)
        if not _curve_entries_ok(cap):
            j = next(j for j, row in enumerate(cap) if not _curve_entries_ok([row]))
            raise ProtocolError(f"curve[{i}][{j}]: an entry must be null or an "
                                f"integer in [{CURVE_ZERO}, {CURVE_TOP}]")


def _curve_entries_ok(rows: list) -> bool:
    """Whether every entry of ``rows`` (lists) is ``None`` or an ``int`` (no bool, no float)
    in ``[CURVE_ZERO, CURVE_TOP]``: the types and the range of the whole block at once
    (``set``, ``min`` and ``max`` loop in C; a table of 64 caps of 80 rows of 16 buckets is
    checked per message)."""
    flat = list(chain.from_iterable(rows))
    kinds = set(map(type, flat))
    if not kinds <= {int, type(None)}:
        return False
    if type(None) in kinds:
        flat = list(filter(partial(is_not, None), flat))
    return not flat or (min(flat) >= CURVE_ZERO and max(flat) <= CURVE_TOP)


def _check_entry(i: int, e) -> None:
    if not isinstance(e, dict) or set(e) != {"b", "bw", "points"}:
        raise ProtocolError(f"entries[{i}]: must hold exactly b, bw, points")
    if not _int(e["b"]) or e["b"] < 0:
        raise ProtocolError(f"entries[{i}].b: must be an integer >= 0")
    if e["bw"] is not None and not (finite_number(e["bw"]) and e["bw"] > 0):
        raise ProtocolError(f"entries[{i}].bw: must be a finite number > 0 or null")
    pts = e["points"]
    if not isinstance(pts, list) or not pts:
        raise ProtocolError(f"entries[{i}].points: must be a non-empty list")
    if _points_ok(pts):
        return
    for j, p in enumerate(pts):
        if isinstance(p, list) and len(p) == 6 and isinstance(p[5], list):
            if _int(p[0]) and p[0] >= 0 and _finite_at_least_0(p[1:5] + p[5]):
                continue
            raise ProtocolError(f"entries[{i}].points[{j}]: must be [r, period, phase2, "
                                f"total, sync, hull], an integer, four finite numbers and a "
                                f"list of finite numbers, all >= 0")
        if not (isinstance(p, list) and len(p) == 4 and _int(p[0]) and p[0] >= 0
                and _finite_at_least_0(p[1:])):
            raise ProtocolError(f"entries[{i}].points[{j}]: must be [r, bottleneck, total, "
                                f"sync], an integer and three finite numbers, all >= 0")


def _points_ok(pts: list) -> bool:
    """Whether every point of ``pts`` (a non-empty list) passes :func:`_check_entry`'s test
    of its point, tested a field at a time over the whole entry (``set``, ``map`` and
    ``min`` loop in C; a summary holds thousands of points). ``False`` may also mean a
    shape this test leaves to the point-by-point one (which then names the point at
    fault): anything but exact lists of one length, 4 or 6, with ``int`` stage counts."""
    if set(map(type, pts)) != {list}:
        return False
    n = set(map(len, pts))
    if n == {6}:
        hulls = list(map(itemgetter(5), pts))
        if set(map(type, hulls)) != {list}:
            return False
        values = list(chain(chain.from_iterable(map(itemgetter(slice(1, 5)), pts)),
                            chain.from_iterable(hulls)))
    elif n == {4}:
        values = list(chain.from_iterable(map(itemgetter(slice(1, 4)), pts)))
    else:
        return False
    rs = list(map(itemgetter(0), pts))
    if set(map(type, rs)) != {int} or min(rs) < 0:
        return False
    if not set(map(type, values)) <= {int, float}:  # no bool, no string, no None
        return False
    try:  # finite, then >= 0 (an integer too large for a float overflows: not finite)
        return all(map(math.isfinite, values)) and (not values or min(values) >= 0)
    except OverflowError:
        return False


def _check_context(msg: dict, kind: str, expect: Expect) -> None:
    """The rules that need the connection: parties, kind, and the instance's sizes."""
    if msg["kind"] != kind:
        raise ProtocolError(f"expected a {kind!r} message, got {msg['kind']!r}")
    if msg["from"] != expect.sender or msg["to"] != expect.receiver:
        raise ProtocolError(f"from/to: expected {expect.sender!r} -> {expect.receiver!r}")
    L, R = expect.num_layers, expect.position_cap
    if kind == "prefix":
        rows = max(L + 1 - WITHHELD, 0)
        for i, cap in enumerate(msg.get("curve") or ()):
            if len(cap) != rows:
                raise ProtocolError(f"curve[{i}]: must hold the {rows} rows of prefix ends "
                                    f"{WITHHELD}..{L}")
        return
    if kind == "assemble":
        rz = msg["realise"]
        if rz is not None and rz["b"] >= L:
            raise ProtocolError(f"realise.b: must be below the layer count {L}")
        return
    for i, e in enumerate(msg["entries"]):
        b = e["b"]
        if b >= L:
            raise ProtocolError(f"entries[{i}].b: must be below the layer count {L}")
        if (e["bw"] is None) != (b == 0):
            raise ProtocolError(f"entries[{i}].bw: must be null exactly when b = 0")
        if b > 0 and e["bw"] not in expect.bandwidths:
            raise ProtocolError(f"entries[{i}].bw: not the bandwidth of a chain path "
                                f"from {expect.receiver!r} downstream")
        low, high = min(1, R), min(R, L - b)
        shape = 6 if expect.period else 4
        for j, p in enumerate(e["points"]):
            if len(p) != shape:
                raise ProtocolError(f"entries[{i}].points[{j}]: a {'period' if expect.period else 'classic'} "
                                    f"run's points have {shape} values")
            if shape == 6 and len(p[5]) > min(p[0], L - b):
                raise ProtocolError(f"entries[{i}].points[{j}]: the hull has more windows "
                                    f"than the suffix's {p[0]} stage(s)")
        rs = [p[0] for p in e["points"]]
        if min(rs) < low or max(rs) > high:
            j = next(j for j, r in enumerate(rs) if not low <= r <= high)
            raise ProtocolError(f"entries[{i}].points[{j}]: r must be in [{low}, {high}]")


def option_problem(name: str, value, num_layers: int | None = None) -> str | None:
    """Why ``value`` is not a valid run option ``name`` (:data:`RUN_OPTIONS`); ``None``
    when it is.

    Parameters
    ----------
    name : str
        One of :data:`RUN_OPTIONS`.
    value
        The option's value, any JSON value.
    num_layers : int, optional
        ``L``: ``grid`` is at most it (the grid's parts are runs of whole layers).
    """
    integer, least, most, strict = RUN_OPTIONS[name]
    if name == "grid" and num_layers is not None:
        most = min(most, num_layers)
    kind = "an integer" if integer else "a number"
    op = ">" if strict else ">="
    if not finite_number(value) or (integer and not float(value).is_integer()) \
            or value < least or (strict and value == least) or value > most:
        return f"must be {kind} {op} {least:g}" + (f" and <= {most:g}" if most < math.inf
                                                    else "")
    return None


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_MAX = 1.7976931348623157e308  # the largest finite float


def _finite_at_least_0(values: list) -> bool:
    """``all(finite_number(v) and v >= 0 for v in values)``, a float tested by one
    chained comparison (a NaN or an infinity fails it; a summary's points are thousands
    of floats: 0.15 s of a ``v3-medium-03`` solve went to the general test)."""
    for v in values:
        if type(v) is float:
            if not 0.0 <= v <= _MAX:
                return False
        elif not (finite_number(v) and v >= 0):
            return False
    return True


def finite_number(v) -> bool:
    """A JSON number (not a boolean) that is a finite float."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer too large for a float
        return False
