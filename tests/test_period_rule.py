"""The version-3 dominance rule (``period_kernel._sweep``, as ``pareto`` runs it within a
state) against every completion.

For random suffixes ``A`` and ``B`` of a 1F1B pipeline (every loop counting: ``M_p`` above
the stages) and a floor under ``B``'s completed period, whenever the rule says ``A``
dominates ``B``, no completion (a prefix of stages and its joining boundary) whose
period with ``B`` reaches the floor may make ``A``'s plan slower than ``B``'s. The
periods are computed here from their definition (the slowest stage and every window
``W(s, t) / (t - s + 1)``), not by the package's recursions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from chainpipe.solvers import dp_period, period_kernel

M = 40  # microbatches: more than any plan here has stages, so every loop counts
STEADY = M - 1


def _period(C: list, Q: list) -> float:
    """The 1F1B period of stages ``C`` with boundaries ``Q`` (every loop counting)."""
    best = max(C)
    for s in range(len(C)):
        w = 0.0
        for t in range(s, len(C)):
            w += C[t] + (Q[t - 1] if t > s else 0.0)
            best = max(best, w / (t - s + 1))
    return best


def _label(C: list, Q: list, R: float) -> tuple:
    """``(row [x1, 0, fill, R, p], majorant)`` of a suffix, built as the search builds it:
    stages prepended from the last (the majorant by the package's ``hull_prepend``)."""
    hull: tuple = ()
    for k in range(len(C) - 1, -1, -1):
        hull = dp_period.hull_prepend(hull, C[k], Q[k] if k < len(C) - 1 else 0.0)
    row = [_period(C, Q), 0.0, sum(C) + sum(Q), R, float(len(C))]
    return row, hull


def _suffix(rng: random.Random, n: int) -> tuple:
    C = [rng.uniform(0.5, 2.0) for _ in range(n)]
    Q = [rng.choice([0.0, rng.uniform(0.0, 3.0)]) for _ in range(n - 1)]
    return C, Q, rng.choice([0.0, rng.uniform(0.0, 1.0)])


def _time(C: list, Q: list, R: float) -> float:
    return sum(C) + sum(Q) + STEADY * _period(C, Q) + R


@pytest.mark.parametrize("seed", range(40))
def test_a_dominated_suffix_never_completes_faster(seed):
    rng = random.Random(seed)
    checked = 0
    for _ in range(60):
        n = rng.randint(1, 4)  # the same count of stages placed: p plays no part
        (CA, QA, RA), (CB, QB, RB) = _suffix(rng, n), _suffix(rng, n)
        (ra, ha), (rb, hb) = _label(CA, QA, RA), _label(CB, QB, RB)
        width = max(len(ha), len(hb), 1)
        S = np.array([ra, rb])
        H = np.full((2, width), -np.inf)
        H[0, :len(ha)], H[1, :len(hb)] = ha, hb
        HL = np.array([len(ha), len(hb)], dtype=np.int64)
        floor = rng.uniform(0.5, 3.0)
        # A first in one state's labels: pareto keeps it and drops B if A dominates it
        alive = period_kernel.pareto(S, H, HL, np.array([0, 2], dtype=np.int64),
                                     np.array([floor]), np.inf, STEADY, np.inf, np.inf, True)
        assert alive[0]
        if alive[1]:
            continue
        for _ in range(30):  # completions whose period with B reaches the floor
            k = rng.randint(0, 3)
            CP = [rng.uniform(0.3, 3.0) for _ in range(k)]
            QP = [rng.choice([0.0, rng.uniform(0.0, 3.0)]) for _ in range(max(k - 1, 0))]
            join = [rng.uniform(0.0, 3.0)] if k else []
            RP = rng.uniform(0.0, 1.0) if k else 0.0
            full_b = (CP + CB, QP + join + QB)
            if _period(*full_b) < floor:
                continue
            TB = _time(*full_b, max(RB, RP))
            TA = _time(CP + CA, QP + join + QA, max(RA, RP))
            assert TA <= TB * (1 + 1e-9), (seed, CA, QA, RA, CB, QB, RB, floor, CP, QP, join)
            checked += 1
    assert checked > 0
