"""Hostile instance files: whatever the bytes, reading either succeeds or raises
InstanceError whose every line is one short, printable line; never another exception,
never a RuntimeWarning.

The documents start from the committed instances (instances/small) and the valid test
files, then are mutated as a tree (hostile numbers written as the user would write them,
wrong types, deep nesting, long and odd names, deleted and repeated keys) and as bytes
(truncation, insertion, deletion, bad UTF-8, a byte order mark).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainpipe import strict_json
from chainpipe.instance import InstanceError
from chainpipe.io import instance_from_dict, instance_to_dict, read, read_plan
from chainpipe.plausibility import plausibility_warnings
from chainpipe.strict_json import JSONTextError

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "instances" / "small").glob("*.json")) + sorted(
    (ROOT / "tests" / "data" / "valid").glob("*.json"))
BASES = [json.loads(p.read_text(encoding="utf-8")) for p in FILES
         if p.name != "manifest.json" and p.name.count(".") == 1]
PLANS = [p.read_bytes() for p in FILES if p.name.endswith((".plan.json", ".result.json"))]
#: longest an error line may be beyond its "FILE: " prefix
MAX_LINE = 300
SETTINGS = settings(max_examples=1500, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Raw:
    """JSON text written as is: a number as the user typed it, a bare token, deep nesting."""

    def __init__(self, text: str):
        self.text = text


class Pairs(list):
    """An object as a list of (key, value) pairs, so a key can appear twice."""


def _tree(value):
    if isinstance(value, dict):
        return Pairs((k, _tree(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_tree(v) for v in value]
    return value


def _dump(node) -> str:
    if isinstance(node, Raw):
        return node.text
    if isinstance(node, Pairs):
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v)}" for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(v) for v in node) + "]"
    return json.dumps(node)


# --------------------------------------------------------------------------- hostile values
NUMBERS = ["1e400", "-1e400", "1E+309", "1" + "0" * 330, str(2**1100), "-" + "9" * 5000,
           "2147483647", "2147483648", "9007199254740991", "9007199254740993", "18446744073709551616",
           "0", "-0", "-0.0", "5e-324", "1e-400", "1.7976931348623157e308", "8.0", "1e9", "-1",
           "NaN", "Infinity", "-Infinity", "0x10", "01", "1.", ".5", "+1", "1e", "--1"]
NAMES = ["", " ", ".", "..", "...", "a/b", "a\\b", "x" * 64, "x" * 65, "y" * 300, "\x00",
         "a\nb", "\ud800", "a\udfffb", "\u202e", "\u2028", "\ufeff", "\U0001f600", "Zürich",
         "\t", "\x7f", "\x85", "\uf8ff", "\U000e0001", "\u0378", "con", "a" * 100_000]
numbers = st.sampled_from(NUMBERS).map(Raw) | st.floats().map(lambda f: Raw(repr(f))) \
    | st.integers().map(lambda i: Raw(str(i)))
names = st.sampled_from(NAMES) | st.text(max_size=80)
deep = st.sampled_from([2, 99, 100, 101, 150, 1000, 5000, 100_000]).flatmap(
    lambda n: st.sampled_from(["[" * n + "]" * n, '{"a": ' * n + "1" + "}" * n, "[" * n]).map(Raw))
scalars = st.one_of(numbers, names, st.none(), st.booleans(), deep)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.lists(st.tuples(names, inner), max_size=3).map(Pairs), max_leaves=6)


def _places(node, found=None):
    """Every (container, index) in the tree, in document order."""
    found = [] if found is None else found
    for i, item in enumerate(node):
        found.append((node, i))
        child = item[1] if isinstance(node, Pairs) else item
        if isinstance(child, list):  # an array or an object (Pairs)
            _places(child, found)
    return found


@st.composite
def tree_mutants(draw) -> bytes:
    doc = _tree(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        places = _places(doc)
        parent, i = draw(st.sampled_from(places))
        op = draw(st.sampled_from(["number", "name", "value", "delete", "repeat", "deep",
                                   "new_key"]))
        is_obj = isinstance(parent, Pairs)
        old = parent[i][1] if is_obj else parent[i]
        if op == "delete":
            del parent[i]
        elif op == "repeat":  # a key (or an array entry) a second time
            parent.insert(i, parent[i])
        elif op == "new_key" and is_obj:
            parent.append((draw(names), draw(values)))
        else:
            new = {"number": numbers, "name": names, "value": values, "deep": deep,
                   "new_key": values}[op]
            if op == "number" and not isinstance(old, (int, float)):
                new = names if isinstance(old, str) else values
            new_value = draw(new)
            if is_obj:
                parent[i] = (parent[i][0], new_value)
            else:
                parent[i] = new_value
    return _dump(doc).encode("utf-8", "surrogatepass")


@st.composite
def byte_mutants(draw, sources=None) -> bytes:
    data = bytearray(draw(st.sampled_from(sources)) if sources else
                     json.dumps(draw(st.sampled_from(BASES)), indent=1).encode())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "insert", "delete", "flip", "bom", "copy"]))
        if op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
                [b"NaN", b"1e400", b",", b"}", b"]", b"[", b'"', b"\\", b"\xff", b"\xed\xa0\x80",
                 b"\xef\xbb\xbf", b"\x00", b"garbage", b"\n"]))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 40))]
        elif op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "bom":
            data[0:0] = b"\xef\xbb\xbf"
        elif op == "copy":
            n = draw(st.integers(1, 60))
            data[at:at] = data[max(0, at - n):at]
    return bytes(data)


def _check_lines(lines: list[str], prefix: str = "") -> None:
    assert lines
    for line in lines:
        assert line.startswith(prefix), line[:200]
        assert line.isprintable(), repr(line[:200])  # one line: no control, separator, surrogate
        assert len(line) - len(prefix) <= MAX_LINE, line[:400]
        # JSON text holds no infinity: an overflowing number is quoted as written
        assert "got inf" not in line and "got -inf" not in line, line[:200]


def _read_checked(data: bytes):
    """What :func:`read` does once it holds the file's bytes; the instance or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            inst = instance_from_dict(strict_json.decode(data))
        except (JSONTextError, InstanceError) as exc:
            _check_lines(exc.problems)
            return None
        _check_lines(plausibility_warnings(inst) or ["(none)"])
    assert instance_from_dict(json.loads(json.dumps(instance_to_dict(inst)))) == inst
    for name in _names(inst):  # safe as a file name component
        assert 1 <= len(name) <= 64 and name not in (".", "..")
        assert not any(c in name for c in "/\\") and all(c >= " " and c != "\x7f" for c in name)
        name.encode("utf-8")  # no unpaired surrogate
    return inst


def _names(inst) -> list[str]:
    return [inst.name, inst.model.name] + [ly.name for ly in inst.layers] + [
        n for dc in inst.datacenters for n in [dc.name] + [g.type for g in dc.devices]]


@SETTINGS
@given(data=tree_mutants())
def test_tree_mutations_are_read_or_refused_in_short_lines(data):
    _read_checked(data)


@SETTINGS
@given(data=byte_mutants())
def test_byte_mutations_are_read_or_refused_in_short_lines(data):
    _read_checked(data)


@settings(SETTINGS, max_examples=300)
@given(data=byte_mutants(sources=PLANS) | tree_mutants())
def test_files_through_read_and_read_plan_raise_only_instance_error(tmp_path_factory, data):
    # the whole path, file included: the bytes as an instance file and as a plan file
    path = tmp_path_factory.getbasetemp() / "fuzz.json"
    path.write_bytes(data)
    for reader in (read, read_plan):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                reader(path)
            except InstanceError as exc:
                _check_lines(exc.problems, f"{path}: ")
