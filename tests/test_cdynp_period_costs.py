"""The period DP's cheaper steps against the rules they stand for: the curve's paired
floor tested on a layer's images as they are filed (``PeriodDP._curve_keeps``) keeps
exactly the rows :func:`.curve.paired` keeps (a weaker test would only cost time, the
layer's own test dropping the rest, so nothing else shows it), and the summary's
dominance filter (:func:`.period.pareto`) keeps what the rule keeps, pair by pair."""

from __future__ import annotations

import itertools
import types

import numpy as np

from chainpipe.solvers.cdynp import curve, period


def _dp_with_curve(rng, count: list, L: int, n: int):
    """A period DP of ``len(count)`` groups with a made-up curve pass: ``CF[a, room,
    cap]`` (a view with the caps last, as :class:`.curve.CurvePass` keeps it) over an
    ascending grid of ``n`` caps, rooms numbered in another order than the usage codes."""
    radix = np.array(count) + 1
    stride = np.cumprod(np.concatenate(([1], radix[::-1][:-1])))[::-1]  # last group fastest
    joined = rng.uniform(0.0, 4.0, size=(n, L + 1, int(np.prod(radix))))
    joined[rng.random(joined.shape) < 0.2] = np.inf  # caps no prefix meets
    grid = np.sort(rng.uniform(0.1, 1.0, size=n))
    c = types.SimpleNamespace(CF=joined.transpose(1, 2, 0), grid=grid, M=7,
                              below=np.concatenate(([0.0], grid[:-1])), radix=radix,
                              stride=stride)
    dp = period.PeriodDP.__new__(period.PeriodDP)
    dp.t, dp.curve, dp.bound_cut = types.SimpleNamespace(G=len(count)), c, False
    dp._count = list(count)
    dp._stride = np.cumprod([1] + [k + 1 for k in count[:-1]]).astype(np.int64)
    return dp, c


def test_curve_keeps_the_rows_paired_keeps():
    rng = np.random.default_rng(5)
    count, L, n, ub = [2, 3], 6, 5, 6.0
    dp, c = _dp_with_curve(rng, count, L, n)
    usages = [u for u in itertools.product(*(range(k + 1) for k in count)) if any(u)]
    kept_any = dropped_any = False
    for _ in range(30):
        states = sorted({(int(rng.integers(0, L + 1)), usages[int(rng.integers(len(usages)))])
                         for _ in range(6)})
        sizes = rng.integers(1, 40, size=len(states))
        S = np.column_stack([rng.uniform(0.0, 1.2, size=(sizes.sum(), 2)),
                             rng.uniform(0.0, 3.0, size=(sizes.sum(), 2)),
                             np.zeros(sizes.sum())])
        S[::7, 1] = S[::7, 0] = c.grid[1] / 2  # periods on a cap
        lo = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        at = np.array([a for a, _u in states])
        codes = np.array([int(np.dot(u, dp._stride)) for _a, u in states])
        dp.bound_cut = False
        got = dp._curve_keeps(S, lo, at, codes, ub * (1 + 1e-9))
        want = []
        for (a, u), i, k in zip(states, lo, sizes):
            room = sum((int(r) - 1 - g) * int(s) for g, r, s in zip(u, c.radix, c.stride))
            rows = S[i:i + k]
            want.append(np.ones(k, dtype=bool) if a == 0 else
                        curve.paired(rows, c.CF[a, room], c.grid, c.below, c.M, ub))
        want = np.concatenate(want)
        if want.all():
            assert got is None and not dp.bound_cut
        else:
            assert np.array_equal(got, want) and dp.bound_cut
        kept_any |= bool(want[at.repeat(sizes) > 0].any())
        dropped_any |= not want.all()
    assert kept_any and dropped_any


def _pareto_by_definition(labels: list, same_p: bool, prior: list) -> list:
    """:func:`.period.pareto` pair by pair: in ``total`` order, a label is kept when no
    prior point and no label kept before it dominates it (:func:`.period.dominates`)."""
    kept, out = list(prior), []
    for lab in sorted(labels, key=lambda lab: (lab[2], lab[0], lab[1], lab[3])):
        if not any(period.dominates(k, lab, same_p) for k in kept):
            kept.append(lab)
            out.append(lab)
    return out


def test_summary_pareto_is_the_definition():
    """The summary's dominance filter (compiled ``keep_points``, taken ``p`` by ``p`` under
    1F1B) keeps exactly the labels the rule keeps, prior points included; on few values
    per term, so that ties and dominance are common, with majorants of two lengths."""
    rng = np.random.default_rng(5)
    checked = dropped = 0
    for _ in range(150):
        n, same_p = int(rng.integers(1, 60)), bool(rng.integers(2))

        def label(i):
            hl = int(rng.integers(0, 3))
            return (*map(float, rng.integers(0, 4, 4)), int(rng.integers(0, 4)),
                    tuple(sorted(map(float, rng.integers(0, 5, hl)), reverse=True)), i)

        labels = [label(i) for i in range(n)]
        prior = [label(-1) for _ in range(int(rng.integers(0, 6)))]
        got = period.pareto(labels, same_p, prior)
        want = _pareto_by_definition(labels, same_p, prior)
        assert got == want
        checked += 1
        dropped += len(got) < n
    assert checked == 150 and dropped > 100


def test_raised_period_order_is_dps():
    """The layer's order by period raised to each state's floor (``period._by_raised_period``,
    numpy) is the one ``dp``'s compiled ``by_raised_period`` gives rows sorted by period,
    then fill."""
    from chainpipe.solvers.dp_period import kernel

    rng = np.random.default_rng(3)
    moved = 0
    for _ in range(60):
        sizes = rng.integers(0, 12, int(rng.integers(1, 6)))
        starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        S = np.zeros((int(starts[-1]), 5))
        S[:, 0] = rng.integers(0, 6, len(S)).astype(float)
        S[:, 2] = rng.integers(0, 6, len(S)).astype(float)
        for lo, hi in zip(starts, starts[1:]):  # per state by period, then fill
            S[lo:hi] = S[lo:hi][np.lexsort((S[lo:hi, 2], S[lo:hi, 0]))]
        floors = np.where(rng.random(len(sizes)) < 0.2, -np.inf,
                          rng.integers(0, 6, len(sizes)).astype(float))
        ids = np.arange(len(S), dtype=np.int64)
        kernel.by_raised_period(ids, S.copy(), starts, floors)
        got = period._by_raised_period(S, starts, floors)
        assert got.tolist() == ids.tolist()
        moved += not np.array_equal(got, np.arange(len(S)))
    assert moved > 20
