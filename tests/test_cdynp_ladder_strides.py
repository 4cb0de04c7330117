"""The exact one-pipeline ladder (:func:`chainpipe.solvers.cdynp._curve_ladder`) climbs by
``dp``'s strides (:data:`~chainpipe.solvers.cdynp.CURVE_STRIDES`,
:meth:`chainpipe.solvers.dp_ranges.RangeTimes._stride`): after a miss whose agents kept
fewer than :data:`~chainpipe.solvers.dp_ranges.FAR` labels the next rung is left out,
while the labels grow slowly from rung to rung the steps double (up to
:data:`~chainpipe.solvers.dp_ranges.STRIDE` rungs), after a dear miss each rung is asked,
and the bound itself is never left out. A compressed ladder asks every rung.

The ladder's runs are replaced by a recorder whose agents report chosen label counts, so
the test reads which bounds the ladder asks for; the exact answers on real instances are
checked by the other ``tests/test_cdynp*.py`` (every one equal to ``dp``'s).
"""

from __future__ import annotations

import pytest

import chainpipe.solvers.cdynp as cdynp
from chainpipe.deadline import Deadline
from chainpipe.result import Outcome
from chainpipe.solvers import dp_ranges

_LOW, _FLOOR = 10.0, 10.0


class _Backend:
    count_sync = True


def _ladder(monkeypatch, labels, bound: float, found_at: float = float("inf"),
            **compressed) -> list[float]:
    """The bounds the ladder asks for when a run under ``ub`` keeps ``labels(ub)`` labels
    (split over two agents) and finds a plan from ``found_at`` on."""
    asked = []

    def fake_drive(backend, options, *, deadline, probe, trace_dir):
        ub = options["upper_bound"]
        asked.append(ub)
        n = labels(ub)
        agents = [{"labels": n // 2}, {"labels": n - n // 2, "curve_floor_s": _FLOOR}]
        if ub >= found_at:
            return Outcome("feasible", plan=object(), stats={"messages": [], "agents": agents})
        return Outcome("no_solution", stats={"messages": [], "agents": agents})

    monkeypatch.setattr(cdynp, "drive", fake_drive)
    options = {"lower_bound": _LOW, "upper_bound": bound, "max_entries": 0, "epsilon": 0.0,
               "quantum": 0.0, "digits": 0, **compressed}
    out = cdynp._curve_ladder(_Backend(), options, bound, Deadline(None), None)
    assert [s["upper_bound"] for s in out.stats["ladder"]] == asked
    return asked


def _rungs(bound: float) -> list[float]:
    """Every bound of the ladder without strides: the first run's (a hair above the classic
    optimum), the steps from it (the floor reported lies below it), the bound."""
    first = _LOW * (1 + 2e-9)
    return [first] + [first * (1 + d) for d in cdynp.LADDER_STEPS
                      if first * (1 + d) < bound] + [bound]


def _at(every: list[float], b: float) -> int:
    """The rung of ``every`` that ``b`` is (an error if none)."""
    return next(i for i, r in enumerate(every) if r == pytest.approx(b, rel=1e-12))


def test_without_strides_every_rung(monkeypatch):
    monkeypatch.setattr(cdynp, "CURVE_STRIDES", False)
    asked = _ladder(monkeypatch, lambda ub: 0, 13.0)
    assert asked == [pytest.approx(b, rel=1e-12) for b in _rungs(13.0)]


@pytest.mark.parametrize("kept, first_gaps", [(100, [2, 4, 4]), (0, [2, 2, 2])])
def test_cheap_misses_leave_rungs_out_but_never_the_bound(monkeypatch, kept, first_gaps):
    every = _rungs(13.0)
    asked = _ladder(monkeypatch, lambda ub: kept, 13.0)
    at = [_at(every, b) for b in asked]
    assert at[0] == 0 and asked[-1] == 13.0 and len(asked) < len(every)
    # after each cheap miss at least two rungs up; while the labels stay flat (and are
    # some) the steps double, up to STRIDE rungs; the last step may be shorter (the bound
    # is never left out)
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert gaps[:3] == first_gaps
    assert all(2 <= g <= dp_ranges.STRIDE for g in gaps[:-1]) and 1 <= gaps[-1]


def test_dear_misses_ask_every_rung(monkeypatch):
    monkeypatch.setattr(cdynp, "CURVE_CLOSE", False)
    asked = _ladder(monkeypatch, lambda ub: dp_ranges.CLOSE + 1, 13.0)
    assert asked == [pytest.approx(b, rel=1e-12) for b in _rungs(13.0)]


def test_after_a_dear_miss_the_rungs_go_close(monkeypatch):
    """:data:`~chainpipe.solvers.cdynp.CURVE_CLOSE`: from the first miss whose agents kept
    more than :data:`~chainpipe.solvers.dp_ranges.CLOSE` labels, each rung lies
    :data:`~chainpipe.solvers.dp_ranges.CLOSE_STEP` above the last (where the steps were
    wider), up to the bound; before it, the ladder's own rungs; a plan found ends it."""
    every = _rungs(13.0)

    def steep(ub: float) -> int:  # steep (no stride), past CLOSE where rungs are wide
        return int(1000 * 3.0 ** ((ub - _LOW) / 0.2))

    asked = _ladder(monkeypatch, steep, 13.0, found_at=11.9)
    at = next(i for i, b in enumerate(asked) if steep(b) > dp_ranges.CLOSE)
    for b in asked[:at + 1]:  # the ladder's own rungs up to the dear miss
        _at(every, b)
    wide = every[_at(every, asked[at]) + 1]
    assert wide > asked[at] * (1 + dp_ranges.CLOSE_STEP)  # where they were wider
    steps = [b / a - 1 for a, b in zip(asked[at:], asked[at + 1:])]
    assert steps and all(s == pytest.approx(dp_ranges.CLOSE_STEP, rel=1e-9) for s in steps)
    assert asked[-1] >= 11.9 > asked[-2]


def test_close_rungs_keep_the_bound_and_finer_steps():
    """:func:`~chainpipe.solvers.cdynp._close_rungs` alone: a cheap miss, or a next rung
    already within the close step, leaves the rungs as they are; a dear miss makes the
    rungs above it close, the last one (the owner's bound) kept."""
    step = dp_ranges.CLOSE_STEP
    rungs = [10.0, 10.5, 11.0, 12.0]
    cheap = list(rungs)
    cdynp._close_rungs(cheap, 1, dp_ranges.CLOSE)
    assert cheap == rungs
    near = [10.0, 10.5, 10.5 * (1 + step / 2), 12.0]
    cdynp._close_rungs(near, 1, dp_ranges.CLOSE + 1)
    assert near == [10.0, 10.5, 10.5 * (1 + step / 2), 12.0]
    dear = list(rungs)
    cdynp._close_rungs(dear, 1, dp_ranges.CLOSE + 1)
    want = [10.5 * (1 + step) ** k for k in range(1, 20) if 10.5 * (1 + step) ** k < 12.0]
    assert dear == [10.0, 10.5] + [pytest.approx(w, rel=1e-12) for w in want] + [12.0]
    last = [10.0, 12.0]  # the bound next: nothing to make close
    cdynp._close_rungs(last, 0, dp_ranges.CLOSE + 1)
    assert last == [10.0, 12.0]


def test_steeply_growing_labels_ask_every_rung(monkeypatch):
    # labels far above FAR, three times more a rung: near the optimum, no stride
    monkeypatch.setattr(cdynp, "CURVE_CLOSE", False)
    asked = _ladder(monkeypatch, lambda ub: int(1000 * 3.0 ** ((ub - _LOW) / 0.05)), 10.8)
    assert asked == [pytest.approx(b, rel=1e-12) for b in _rungs(10.8)]


def test_the_plan_found_ends_the_ladder(monkeypatch):
    every = _rungs(13.0)
    asked = _ladder(monkeypatch, lambda ub: 0, 13.0, found_at=every[3])
    at = [_at(every, b) for b in asked]
    assert at == [0, 2, 4]  # rungs 1 and 3 left out: rung 4 finds the plan


def test_a_compressed_ladder_asks_every_rung(monkeypatch):
    monkeypatch.setattr(cdynp, "DESCENT", False)
    asked = _ladder(monkeypatch, lambda ub: 0, 13.0, digits=3)
    first = _LOW * (1 + 2e-9)
    assert asked == [pytest.approx(b, rel=1e-12) for b in [first] + [
        first * (1 + d) for d in cdynp.COMPRESSED_STEPS if first * (1 + d) < 13.0] + [13.0]]
