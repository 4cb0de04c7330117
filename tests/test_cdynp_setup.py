"""What a CDynP range run repeats, made once: the summaries' number check
(``protocol._finite_at_least_0``) against the general rule it replaces."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from chainpipe.solvers.cdynp import protocol

ODD = [math.nan, math.inf, -math.inf, -0.0, 0.0, -1e-300, 1.7976931348623157e308, True,
       False, 10**400, -1, 2**60, np.float64(1.5), np.float64(math.nan), np.int64(3), "1",
       None, [1.0]]


@pytest.mark.parametrize("seed", range(30))
def test_the_fast_number_check_is_the_rule(seed):
    """On lists of floats with odd values mixed in, the check says what
    ``all(finite_number(v) and v >= 0 ...)`` says."""
    rng = random.Random(seed)
    for _ in range(200):
        values = [rng.uniform(0, 10) for _ in range(rng.randint(0, 6))]
        for _ in range(rng.randint(0, 2)):
            values.insert(rng.randint(0, len(values)), rng.choice(ODD))
        want = all(protocol.finite_number(v) and v >= 0 for v in values)
        assert protocol._finite_at_least_0(values) == want, values


def test_a_summary_with_a_nan_is_refused():
    """A period summary whose hull holds a NaN, or whose total is negative, is refused by
    the message check (the fast path is the one the check uses)."""
    good = {"b": 3, "bw": 1e9, "points": [[1, 0.5, 0.0, 2.0, 0.0, [0.25]]]}
    protocol._check_entry(0, good)
    for bad in ([1, 0.5, 0.0, 2.0, 0.0, [math.nan]], [1, 0.5, 0.0, -2.0, 0.0, [0.25]],
                [1, 0.5, math.inf, 2.0, 0.0, []]):
        with pytest.raises(protocol.ProtocolError):
            protocol._check_entry(0, {**good, "points": [bad]})
    with pytest.raises(protocol.ProtocolError):
        protocol._check_entry(0, {"b": 0, "bw": None, "points": [[1, 0.5, True, 0.0]]})
