"""The CDynP decoder: any byte string gives a message that follows the protocol or a
``ProtocolError``, nothing else. Mutations start from the messages of a real run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import protocol
from chainpipe.solvers.cdynp.protocol import MAX_MESSAGE_BYTES, ProtocolError, decode
from chainpipe.solvers.cdynp.public import PublicInstance

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = read(ROOT / "instances" / "small" / "small-08-three-dc.json")
PUBLIC = PublicInstance.of(INSTANCE)
NAMES = list(PUBLIC.datacenter_names)


def _trace() -> list[tuple[bytes, str, protocol.Expect]]:
    """The messages of a real run, each with its kind and what its connection expects."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        res = solve(INSTANCE, "cdynp", trace_dir=tmp)
        out = []
        for m in res.stats["messages"]:
            expect = PUBLIC.expect(NAMES.index(m["from"]), NAMES.index(m["to"]))
            out.append((Path(tmp, m["file"]).read_bytes(), m["kind"], expect))
    assert {k for _, k, _ in out} == {"prefix", "summary", "assemble"}
    return out


TRACE = _trace()


def _follows_protocol(msg: dict, kind: str, expect: protocol.Expect) -> None:
    """An oracle apart from the decoder: the schema, finite JSON, the parties, the sizes."""
    jsonschema.validate(msg, protocol.SCHEMA)
    protocol.encode(msg)  # allow_nan=False: every number finite
    assert msg["kind"] == kind
    assert (msg["from"], msg["to"]) == (expect.sender, expect.receiver)
    if kind == "summary":
        for e in msg["entries"]:
            assert 0 <= e["b"] < expect.num_layers
            assert (e["bw"] is None) == (e["b"] == 0)
            assert e["b"] == 0 or e["bw"] in expect.bandwidths
            assert all(p[0] <= expect.position_cap and math.isfinite(p[1] + p[2] + p[3])
                       for p in e["points"])
    elif kind == "prefix":
        bound = msg["bound"]
        assert bound is None or all(math.isfinite(v) and v >= 0 for v in bound.values())
    elif msg["realise"] is not None:
        assert msg["realise"]["b"] < expect.num_layers


def _decode_or_error(data: bytes, kind: str, expect) -> None:
    try:
        msg = decode(data, kind, expect)
    except ProtocolError as exc:
        assert exc.sender == expect.sender
        return
    _follows_protocol(msg, kind, expect)


def test_the_real_messages_decode():
    for data, kind, expect in TRACE:
        _follows_protocol(decode(data, kind, expect), kind, expect)


# ------------------------------------------------------------------ byte mutations
_edit = st.tuples(st.sampled_from(["flip", "insert", "delete", "replace", "cut"]),
                  st.floats(0, 1, exclude_max=True), st.integers(0, 255))


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(TRACE) - 1), st.lists(_edit, min_size=1, max_size=4))
def test_mutated_bytes_decode_or_raise_the_protocol_error(which, edits):
    data, kind, expect = TRACE[which]
    buf = bytearray(data)
    for op, where, byte in edits:
        i = int(where * len(buf)) if buf else 0
        if op == "flip" and buf:
            buf[i] ^= 1 << (byte % 8)
        elif op == "insert":
            buf.insert(i, byte)
        elif op == "delete" and buf:
            del buf[i]
        elif op == "replace" and buf:
            buf[i] = byte
        elif op == "cut":
            del buf[i:]
    _decode_or_error(bytes(buf), kind, expect)


# ------------------------------------------------------------------ value mutations
#: texts spliced in for a value: overflows, non-finite tokens, huge and negative numbers,
#: wrong types, nested junk
_TOKENS = ["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "-1", "-0.0", "1e-400",
           str(10**300), str(2**64), "true", "null", '"x"', "[]", "{}", "[[[[[]]]]]",
           "0", "1", "0.5", str(len(INSTANCE.layers)), str(len(INSTANCE.layers) + 1),
           "4.0", '"dc1"', '"dc2"', '"dc3"', json.dumps(NAMES[0] + "x")]
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                     | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3),
                                                                         c, max_size=3),
                     max_leaves=6)


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, path + (i,))


_MARK = "\u0000MARK\u0000"


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(TRACE) - 1), st.data())
def test_mutated_values_decode_or_raise_the_protocol_error(which, data):
    raw, kind, expect = TRACE[which]
    msg = json.loads(raw)
    paths = list(_paths(msg))
    path = data.draw(st.sampled_from(paths))
    how = data.draw(st.sampled_from(["token", "json", "duplicate", "drop"]))
    if not path:
        target, key = None, None
    else:
        target = msg
        for p in path[:-1]:
            target = target[p]
        key = path[-1]
    if how == "drop" and target is not None:
        del target[key]
        text = json.dumps(msg)
    elif how == "json" or target is None:
        value = data.draw(_json)
        if target is None:
            msg = value
        else:
            target[key] = value
        text = json.dumps(msg)
    else:
        if how == "duplicate" and isinstance(target, dict):
            # the same key twice in one object: the second copy spliced in as text
            target[key] = _MARK
            text = json.dumps(msg).replace(json.dumps(_MARK),
                                           f"{json.dumps(target.get(key) and 0)}, "
                                           f"{json.dumps(key)}: 0", 1)
        else:
            target[key] = _MARK
            text = json.dumps(msg).replace(json.dumps(_MARK),
                                           data.draw(st.sampled_from(_TOKENS)), 1)
    _decode_or_error(text.encode(), kind, expect)


# ------------------------------------------------------------------ each rule
def _summary() -> tuple[dict, protocol.Expect]:
    raw, kind, expect = next(t for t in TRACE if t[1] == "summary")
    return json.loads(raw), expect


def _refused(msg_text: str, expect, kind="summary", match=None):
    with pytest.raises(ProtocolError, match=match) as info:
        decode(msg_text.encode() if isinstance(msg_text, str) else msg_text, kind, expect)
    assert info.value.sender == expect.sender


def test_each_rule_is_enforced():
    msg, expect = _summary()
    L = expect.num_layers
    inner = next(e for e in msg["entries"] if e["b"] > 0)

    def with_entry(**change):
        m = json.loads(json.dumps(msg))
        e = next(x for x in m["entries"] if x["b"] == inner["b"] and x["bw"] == inner["bw"])
        e.update(change)
        return json.dumps(m)

    _refused(with_entry(b=L), expect, match="below the layer count")
    _refused(with_entry(b=L + 7), expect, match="below the layer count")
    _refused(with_entry(bw=None), expect, match="null exactly when b = 0")
    _refused(with_entry(bw=inner["bw"] * 3), expect, match="chain path")
    _refused(with_entry(points=[[expect.position_cap + 1, 1.0, 2.0, 0.0]]), expect, match="r must")
    _refused(with_entry(points=[[1, 1.0, 2.0]]), expect, match="sync")
    _refused(with_entry(points=[[1, 1.0, 2.0, -1.0]]), expect, match="sync")
    text = with_entry(points=[[1, 1.0, 2.0, 3.0]])
    for token in ("Infinity", "NaN", "-Infinity", "1e400"):
        _refused(text.replace("2.0,", f"{token},", 1), expect)
        _refused(text.replace("3.0]", f"{token}]", 1), expect)
    _refused(text.replace('"b":', '"b": 1, "b":', 1), expect, match="twice")
    forged = dict(msg, **{"from": expect.receiver, "to": expect.sender})
    _refused(json.dumps(forged), expect, match="from/to")
    _refused(json.dumps(msg), expect, kind="assemble", match="expected a 'assemble'")
    _refused(b"[" * 100_000, expect, match="not JSON")
    _refused(b" " * (MAX_MESSAGE_BYTES + 1), expect, match="above the cap")
    _refused(b"\xff\xfe", expect, match="not JSON")
    with pytest.raises(ProtocolError):
        decode("a str, not bytes", "summary", expect)


def test_an_assemble_naming_a_point_never_sent_names_its_sender():
    from chainpipe.solvers.cdynp.agent import DCAgent

    last = len(NAMES) - 1
    agent = DCAgent(PUBLIC, last, INSTANCE.datacenters[last])
    sent = agent.backward(None)
    entry = len(sent["entries"]) - 1
    good_b = sent["entries"][entry]["b"]
    for realise in ({"entry": entry + 1, "point": 0, "b": good_b},
                    {"entry": entry, "point": len(sent["entries"][entry]["points"]), "b": good_b},
                    {"entry": entry, "point": 0, "b": good_b + 1}):
        with pytest.raises(ProtocolError, match="never sent") as info:
            agent.forward(protocol.assemble(NAMES[last - 1], NAMES[last], realise))
        assert info.value.sender == NAMES[last - 1]


def test_an_oversized_summary_is_not_sent(monkeypatch):
    monkeypatch.setattr(protocol, "MAX_MESSAGE_BYTES", 1000)
    big = protocol.summary("dc2", "dc1", [{"b": 1, "bw": 1.0, "points": [[1, 1.0, 1.0, 0.0]] * 100}])
    with pytest.raises(ProtocolError, match="above the cap") as info:
        protocol.encode(big)
    assert info.value.sender == "dc2"
