"""Random mutations of valid instance dicts: each is either accepted (and then round-trips
through JSON and can be evaluated) or rejected with an InstanceError whose every line names
a JSON path of the mutated document; never any other exception."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chainpipe.instance import MAX_COUNT, MAX_PARAMS, InstanceError
from chainpipe.io import instance_from_dict, instance_to_dict
from chainpipe.plan import Plan, Stage, evaluate
from helpers import random_instance

VALID = Path(__file__).resolve().parent / "data" / "valid"
BASES = [json.loads(p.read_text(encoding="utf-8"))
         for p in sorted(VALID.glob("*.json")) if p.name.count(".") == 1]
BASES += [instance_to_dict(random_instance(seed, max_dcs=3, max_types=2)) for seed in range(4)]

FIELD_NAMES = ["format", "name", "model", "layers", "fwd_flop", "bwd_flop", "params",
               "activation_bytes", "output_bytes", "training", "microbatches", "schedule",
               "bytes_per_param", "datacenters", "devices", "type", "count", "flop_per_s",
               "memory_bytes", "link", "bandwidth_bytes_per_s", "latency_s", "links",
               # version 2
               "tp_allreduce_bytes", "gradient_bytes_per_param", "optimizer_bytes_per_param",
               "parallelism", "data_parallel", "tensor_parallel", "zero", "devices_per_node",
               "node_bandwidth_bytes_per_s"]
keys = st.sampled_from(FIELD_NAMES) | st.from_regex(r"[a-z_][a-z0-9_]{0,7}", fullmatch=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, -1, MAX_COUNT, MAX_COUNT + 1, MAX_PARAMS, MAX_PARAMS + 1, 10**400, 0.0, -0.0,
                     5e-324, 1e308, -1e308, 1.5, 8.0]),
    st.just(5000).map(lambda digits: 10**digits),  # more digits than Python prints
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["", " ", "a/b", "1f1b", "gpipe", "chainpipe-instance/1", "a/g/0"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)

same_kind = {
    bool: st.booleans(),
    int: st.integers(min_value=0, max_value=10**6) | st.integers(),
    float: st.floats(min_value=0.0, max_value=1e18) | st.floats(),
    str: st.text(max_size=6) | st.sampled_from(["1f1b", "gpipe", "dc", "gpu"]),
}


def _locations(node, path=()):
    """Every (path, container-kind) in a JSON tree, the root included."""
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _locations(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _locations(v, path + (i,))


def _get(node, path):
    for step in path:
        node = node[step]
    return node


@st.composite
def mutated(draw):
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        locs = list(_locations(doc))
        path = draw(st.sampled_from(locs))
        op = draw(st.sampled_from(["delete", "replace", "replace", "negate", "add_key",
                                   "append", "duplicate"] + ["same_kind"] * 5))
        if not path:  # the root itself
            if op in ("replace", "delete"):
                doc = draw(json_values)
            continue
        parent, last = _get(doc, path[:-1]), path[-1]
        value = parent[last]
        if op == "delete":
            del parent[last]
        elif op == "replace":
            parent[last] = draw(json_values)
        elif op == "negate" and isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[last] = -value if value else -1
        elif op == "add_key" and isinstance(value, dict):
            value[draw(keys)] = draw(json_values)
        elif op == "append" and isinstance(value, list):
            value.append(draw(json_values))
        elif op == "same_kind" and isinstance(value, (int, float, str)):
            # a plausible edit: another number or another string, often still valid
            parent[last] = draw(same_kind[type(value)])
        elif op == "duplicate" and isinstance(value, list) and value:
            value.append(copy.deepcopy(value[draw(st.integers(0, len(value) - 1))]))
        else:
            parent[last] = draw(json_values)
    return doc


_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


def _resolves(doc, path: str, missing_ok: bool) -> bool:
    """Whether a problem's path names a place in ``doc`` (its last step may be missing)."""
    if path == "(instance)":
        return True
    steps: list = []
    for part in path.split("."):
        m = _SEGMENT.fullmatch(part)
        if not m:
            return False
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    node = doc
    for n, step in enumerate(steps):
        ok = (isinstance(node, dict) and isinstance(step, str) and step in node) or (
            isinstance(node, list) and isinstance(step, int) and step < len(node))
        if not ok:
            return missing_ok and n == len(steps) - 1 and isinstance(node, dict)
        node = node[step]
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutation_is_accepted_and_round_trips_or_rejected_with_paths(doc):
    try:
        inst = instance_from_dict(doc)
    except InstanceError as exc:
        event("rejected")
        assert exc.problems
        for line in exc.problems:
            path, sep, message = line.partition(": ")
            assert sep and message, line
            # "missing field" may say why ("... (required when devices_per_node > 1; ...)")
            assert _resolves(doc, path, missing_ok=message.startswith("missing field")), line
        return
    event("accepted")
    again = instance_from_dict(json.loads(json.dumps(instance_to_dict(inst), allow_nan=False)))
    assert again == inst
    # the cost model takes any valid instance: a one-stage plan on the first device
    first = inst.datacenters[0]
    ev = evaluate(inst, Plan((Stage(0, inst.num_layers,
                                    f"{first.name}/{first.devices[0].type}/0"),)))
    assert ev.stages and not math.isnan(ev.iteration_time_s)
