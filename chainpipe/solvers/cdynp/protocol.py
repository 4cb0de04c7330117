"""Versioned JSON messages between DC agents, and their schema.

Two kinds cross a chain link, always between neighbours:

* ``summary`` (backward pass, DC k -> DC k-1): the state summary. Each entry
  is a layer boundary ``b`` (the suffix ``[b, L)`` is handled downstream), the
  bandwidth ``bw`` of the chain path from the receiver to the DC of the
  suffix's first stage (``null`` when ``b = 0``: no boundary), and the Pareto
  points ``[r, bottleneck_s, total_s]`` of the suffix plans (``r``: stages in
  the suffix, capped; ``total_s`` already holds the chain latencies beyond the
  receiver). No device type, count, rate, memory or internal link figure
  appears, and entries of different DCs are merged when their ``bw`` agrees.
* ``assemble`` (forward pass, DC k -> DC k+1): which point of the receiver's
  own summary to realise (entry and point index, and its boundary ``b``), or
  ``null`` when the sender's stages already end the model.

``encode`` produces the exact bytes that are sent (compact JSON, floats as
shortest round-trip reprs), ``decode`` checks them against the schema.
"""

from __future__ import annotations

import json

PROTOCOL = "chainpipe-cdynp/1"

_POINT = {
    "type": "array", "minItems": 3, "maxItems": 3,
    "prefixItems": [
        {"type": "integer", "minimum": 0},
        {"type": "number", "minimum": 0},
        {"type": "number", "minimum": 0},
    ],
}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chainpipe-cdynp/1 message",
    "oneOf": [
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
    """A message that does not follow ``chainpipe-cdynp/1``."""


def summary(sender: str, receiver: str, entries: list[dict]) -> dict:
    return {"protocol": PROTOCOL, "kind": "summary", "from": sender, "to": receiver,
            "entries": entries}


def assemble(sender: str, receiver: str, realise: dict | None) -> dict:
    return {"protocol": PROTOCOL, "kind": "assemble", "from": sender, "to": receiver,
            "realise": realise}


def encode(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")


def decode(data: bytes, kind: str | None = None) -> dict:
    try:
        msg = json.loads(data.decode("utf-8"))
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    validate(msg)
    if kind is not None and msg["kind"] != kind:
        raise ProtocolError(f"expected a {kind!r} message, got {msg['kind']!r}")
    return msg


def validate(msg: dict) -> None:
    """Structural check of a message (the rules of :data:`SCHEMA`, without jsonschema)."""
    if not isinstance(msg, dict) or msg.get("protocol") != PROTOCOL:
        raise ProtocolError(f"protocol: expected {PROTOCOL!r}")
    kind = msg.get("kind")
    keys = {"summary": {"protocol", "kind", "from", "to", "entries"},
            "assemble": {"protocol", "kind", "from", "to", "realise"}}.get(kind)
    if keys is None:
        raise ProtocolError(f"kind: unknown message kind {kind!r}")
    if set(msg) != keys:
        raise ProtocolError(f"fields: expected {sorted(keys)}, got {sorted(msg)}")
    if not isinstance(msg["from"], str) or not isinstance(msg["to"], str):
        raise ProtocolError("from/to: must be DC names")
    if kind == "summary":
        if not isinstance(msg["entries"], list):
            raise ProtocolError("entries: must be a list")
        for i, e in enumerate(msg["entries"]):
            if not isinstance(e, dict) or set(e) != {"b", "bw", "points"}:
                raise ProtocolError(f"entries[{i}]: must hold exactly b, bw, points")
            if not _int(e["b"]) or e["b"] < 0:
                raise ProtocolError(f"entries[{i}].b: must be an integer >= 0")
            if e["bw"] is not None and not (_num(e["bw"]) and e["bw"] > 0):
                raise ProtocolError(f"entries[{i}].bw: must be a number > 0 or null")
            pts = e["points"]
            if not isinstance(pts, list) or not pts:
                raise ProtocolError(f"entries[{i}].points: must be a non-empty list")
            for j, p in enumerate(pts):
                if not (isinstance(p, list) and len(p) == 3 and _int(p[0]) and p[0] >= 0
                        and _num(p[1]) and p[1] >= 0 and _num(p[2]) and p[2] >= 0):
                    raise ProtocolError(f"entries[{i}].points[{j}]: must be [r, bottleneck, total]")
    else:
        rz = msg["realise"]
        if rz is not None and (not isinstance(rz, dict) or set(rz) != {"entry", "point", "b"}
                               or not all(_int(rz[k]) and rz[k] >= 0 for k in rz)):
            raise ProtocolError("realise: must be null or {entry, point, b} integers >= 0")


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
