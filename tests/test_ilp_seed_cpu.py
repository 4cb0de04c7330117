"""The MIP routes' cheap heuristics under a CPU-time limit (issue 33, fifteenth round).

``benchmarks/formulations.py --cpu-limit`` counts CPU seconds; the enumeration's slices
are CPU seconds then (``pipelines.share``), and so must the heuristics' share be: on the
wall clock a loaded run got a worse first incumbent, other cutoffs and another path
(fresh ``v3-medium-04``-like seed 3, ``docs/formulations.md``).
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import pytest

from chainpipe.deadline import Deadline
from chainpipe.formulations.pipelines import CpuPhase, heuristic_plan
from chainpipe.io import read
from chainpipe.result import Outcome, Status
from chainpipe.solvers import incumbent

SMALL = Path(__file__).resolve().parent.parent / "instances" / "v3" / "small"


@pytest.fixture
def idle_heuristics(monkeypatch):
    """Each heuristic waits 0.1 s of wall clock (no CPU) and finds no plan; the list of
    the calls, in order. The heuristics' share is 0.25 s."""
    calls = []
    for target in incumbent.HEURISTICS:
        module, func = target.split(":")

        def idle(instance, deadline=None, _name=func):
            calls.append(_name)
            time.sleep(0.1)
            return Outcome(Status.NO_SOLUTION)

        monkeypatch.setattr(importlib.import_module(f"chainpipe.solvers.baselines.{module}"),
                            func, idle)
    monkeypatch.setattr(incumbent, "MAX_S", 0.25)
    return calls


def test_the_heuristics_share_is_cpu_seconds_under_a_cpu_limit(idle_heuristics):
    inst = read(sorted(SMALL.glob("v3-small-*.json"))[0])
    assert heuristic_plan(inst, CpuPhase(Deadline(60.0), 30.0)) == (None, float("inf"), None)
    assert len(idle_heuristics) == len(incumbent.HEURISTICS)  # waiting costs no CPU
    idle_heuristics.clear()
    heuristic_plan(inst, Deadline(60.0))  # on the wall clock, as before: 3 of them
    assert len(idle_heuristics) == 3


def test_the_heuristics_under_a_cpu_limit_find_the_same_plan():
    inst = read(sorted(SMALL.glob("v3-small-*.json"))[0])
    plan, T, name = heuristic_plan(inst, CpuPhase(Deadline(600.0), 300.0))
    assert plan is not None and name is not None
    assert T == pytest.approx(incumbent.heuristic_plan(inst, Deadline(600.0))[1], rel=1e-12)
