"""The one-pipeline ladder (:func:`chainpipe.solvers.cdynp._curve_ladder`) makes no run
under its bound when the prefix-curve floor its first run reported is not below that
bound: no one-pipeline plan's ``T`` lies under the floor, so that run would find nothing
(``v3-large-02``: the incumbent of 8 pipelines, 17.516 s, under the floor 17.686 s). When
the floor lies below the classic optimum, the steps start from the classic optimum, as
``dp``'s trials start from the larger of the two (a fresh ``v3-large-01``-like draw, seed
21, went from the classic optimum 5.615 s straight to the incumbent 7.587 s and ran for
more than ten minutes under it; the optimum is 6.487 s). The caps start at
:data:`~chainpipe.solvers.cdynp.CURVE_LOW` times the classic optimum, so that the floor
has caps under it to stand on.

The ladder's runs are replaced by a recorder that reports a chosen floor, so the test
reads which bounds the ladder asks for; the exact answers on real instances are checked
by the other ``tests/test_cdynp*.py`` (every one equal to ``dp``'s).
"""

from __future__ import annotations

import pytest

import chainpipe.solvers.cdynp as cdynp
from chainpipe.deadline import Deadline
from chainpipe.result import Outcome


class _Backend:
    count_sync = True


def _ladder(monkeypatch, floor: float, bound: float) -> list[float]:
    asked = []

    def fake_drive(backend, options, *, deadline, probe, trace_dir):
        asked.append(options["upper_bound"])
        assert options["curve_low"] == pytest.approx(10.0 * cdynp.CURVE_LOW)
        assert options["curve_top"] == bound
        return Outcome("no_solution", stats={"messages": [], "agents": [
            {"curve_floor_s": floor}]})

    monkeypatch.setattr(cdynp, "drive", fake_drive)
    out = cdynp._curve_ladder(_Backend(), {"lower_bound": 10.0, "upper_bound": bound,
                                           "max_entries": 0, "epsilon": 0.0, "quantum": 0.0,
                                           "digits": 0}, bound, Deadline(None), None)
    assert out.plan is None
    assert out.stats["curve_floor_s"] == floor
    assert [s["upper_bound"] for s in out.stats["ladder"]] == asked
    return asked


@pytest.mark.parametrize("floor", [13.0, 13.5])
def test_no_run_under_the_bound_when_the_floor_is_not_below_it(monkeypatch, floor):
    asked = _ladder(monkeypatch, floor, 13.0)
    assert asked == [pytest.approx(10.0)]


def test_the_steps_and_the_bound_when_the_floor_is_below_it(monkeypatch):
    asked = _ladder(monkeypatch, 12.0, 13.0)
    assert asked[0] == pytest.approx(10.0)
    assert asked[-1] == 13.0
    assert all(12.0 < b < 13.0 for b in asked[1:-1]) and len(asked) > 2


def test_the_steps_from_the_classic_optimum_when_the_floor_is_below_it(monkeypatch):
    monkeypatch.setattr(cdynp, "CURVE_STRIDES", False)  # every rung (the strides: their test)
    asked = _ladder(monkeypatch, 9.0, 13.0)
    assert asked[0] == pytest.approx(10.0)
    assert asked[1:] == [pytest.approx(10.0 * (1 + d)) for d in cdynp.LADDER_STEPS
                         if 10.0 * (1 + d) < 13.0] + [13.0]
