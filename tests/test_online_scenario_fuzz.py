"""Scenario files with any field replaced by any JSON value: refused with path-named lines
(``InstanceError``), never another exception."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from chainpipe.instance import InstanceError
from chainpipe.online.presets import preset_dict
from chainpipe.online.scenario import scenario_from_dict

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**12) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)


def paths(value, prefix=()):
    """Every path to a value inside ``value`` (dict keys and list indices)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


BASE = preset_dict("tiny")
BASE["jobs"]["trace"] = [{"arrival_s": 0, "model": "gpt3-1.3b", "microbatches": 4,
                          "iterations": 10, "gpus": 2}]
BASE["background"]["trace"] = [[{"between": ["a", "b"], "load": 0.5}], []]
PATHS = [p for p in paths(BASE) if p]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_any_field_replaced_or_removed_is_valid_or_refused_by_path(path, value, remove):
    data = copy.deepcopy(BASE)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        scenario_from_dict(data)
    except InstanceError as exc:
        assert exc.problems
        for line in exc.problems:
            assert "\n" not in line
            assert ": " in line
