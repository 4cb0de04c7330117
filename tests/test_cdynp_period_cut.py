"""A period run the time limit cuts is never taken for a proof (``solve_chain``).

``drive`` returns ``no_solution`` without messages when the time limit ends a run; the
period run of a one-pipeline solve must then give the classic plan as ``feasible`` (not
``optimal``: nothing below its bound was searched to the end), and a range run must
raise ``TimeUp`` in the owner (not stand for "no plan below the bound", which the owner
would keep as a floor).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import chainpipe.solvers.cdynp as cdynp
from chainpipe.deadline import Deadline, TimeUp
from chainpipe.io import read
from chainpipe.result import Outcome
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns

ROOT = Path(__file__).resolve().parents[1]


def _cut_period_runs(monkeypatch) -> list:
    """Make every period run (the one with a public ``lower_bound``) end as a run the
    time limit cut does; returns the list the cut runs are noted in."""
    cut, real = [], cdynp.drive

    def drive(backend, options, **kw):
        if "lower_bound" not in options:
            return real(backend, options, **kw)
        cut.append(options["upper_bound"])
        return Outcome("no_solution", message="cdynp: time limit reached in dc1",
                       stats={"protocol_s": 0.0, "timed_out": True})

    monkeypatch.setattr(cdynp, "drive", drive)
    return cut


def _with_period_run():
    """A committed v3/small instance whose classic plan is not optimal under
    ``period`` (so a one-pipeline solve makes its period run), with one pipeline."""
    for path in sorted((ROOT / "instances/v3/small").glob("v3-*.json")):
        inst = read(path)
        par = dataclasses.replace(inst.training.parallelism, pipelines=(1,))
        inst = dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                      parallelism=par))
        owner = cdynp.LocalOwner(inst, False, 60.0)
        out = cdynp.solve_chain(owner.whole(), agent_options(), Deadline.of(60.0))
        if "classic_plan_s" in out.stats and out.stats["classic_plan_s"] > out.stats[
                "classic_s"] * (1 + 1e-9):
            return inst
    pytest.skip("no committed v3/small instance makes a period run")


def test_a_cut_period_run_is_not_a_proof(monkeypatch):
    inst = _with_period_run()
    cut = _cut_period_runs(monkeypatch)
    owner = cdynp.LocalOwner(inst, False, 60.0)
    out = cdynp.solve_chain(owner.whole(), agent_options(), Deadline.of(60.0))
    assert cut, "the period run was not made"
    assert out.status == "feasible" and out.plan is not None
    assert "time limit" in (out.message or "")


def test_a_cut_range_run_raises_time_up(monkeypatch):
    inst = _with_period_run()
    cut = _cut_period_runs(monkeypatch)
    owner = cdynp.LocalOwner(inst, False, 60.0)
    runs = RangeRuns(owner, agent_options(), Deadline.of(60.0))
    K, M = inst.num_datacenters, inst.microbatches
    with pytest.raises(TimeUp):
        for i in range(K - 1):  # a range of two DCs or more makes a classic solve first
            runs._run(i, K - 1, M, math.inf, 1e9)
    assert cut
