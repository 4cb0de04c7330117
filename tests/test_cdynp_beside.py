"""Across hosts the owner searches several pipelines beside the one-pipeline solve's period
run (``pipelines.BESIDE``, ``docs/privacy.md``, "Session 44"): in a thread of its own,
once the incumbent beats the one-pipeline solve's classic plan, under that incumbent,
lowered to the period run's answer when it comes.

The answer stays ``dp``'s optimum and the plan the in-process one's; the one-pipeline
solve's answer wins a tie, as it does when the search comes after it; a failure on either
side ends the solve with that failure, and no thread of the search outlives it. The
owners here keep their agents in this process but say they are across hosts
(``mode = "tls"``); ``test_cdynp_hosts_v3`` runs the search beside over TLS, with
agents in their own processes.
"""

from __future__ import annotations

import math
import threading

import pytest

import chainpipe.solvers.cdynp as cdynp
from chainpipe.deadline import Deadline, TimeUp
from chainpipe.plan import Plan
from chainpipe.result import Outcome
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import LocalOwner, pipelines
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import Halted, RangeRuns, solve_several
from chainpipe.solvers.cdynp.questions import OwnerBest
from chainpipe.solvers.cdynp.runner import AgentFailure
from helpers import random_period_chains


class _AcrossHosts(LocalOwner):
    """An owner whose agents are in this process but which says it is across hosts."""

    def __init__(self, inst):
        super().__init__(inst, False, 60)
        self.mode = "tls"


def _alive() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("chainpipe-several")]


def _instances(n: int):
    """Random period chains of 2 or 3 DCs allowing 1, 2 and 3 pipelines: on those of 3 DCs
    whose span of one pipeline per DC beats the classic plan, 2 pipelines are searched
    beside the period run."""
    return random_period_chains(n, pipelines=(1, 2, 3))


def _beside_instance():
    """The first of :func:`_instances` on which the search ran beside a period run that
    searched (not one left empty by an incumbent under the classic optimum)."""
    for _seed, inst in _instances(40):
        got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
        if got.stats.get("several_beside") and not got.stats["one_pipeline"].get("skipped"):
            return inst, got
    raise AssertionError("no instance searched beside")


def test_the_search_beside_gives_dps_optimum_and_the_in_process_plan():
    """On 30 random chains the owner across hosts proves ``dp``'s optimum with the plan the
    in-process owner finds (the search ran beside on 5 of them), and no thread of the
    search is left; in process and traced it never runs beside."""
    beside = 0
    for seed, inst in _instances(30):
        want = solve(inst, "dp")
        got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
        local = solve_several(LocalOwner(inst, False, 60), agent_options(), Deadline(120))
        assert got.status == local.status == want.status.value, seed
        if want.iteration_time is not None:
            T = LocalOwner(inst, False, 60).evaluation(got.plan).iteration_time_s
            assert math.isclose(T, want.iteration_time, rel_tol=1e-9), seed
            assert got.plan == local.plan, seed
        assert not local.stats.get("several_beside")
        beside += bool(got.stats.get("several_beside"))
        assert not _alive()
    assert beside >= 3, beside


def test_traced_across_hosts_the_search_comes_after(tmp_path):
    """A traced solve across hosts searches in the order of the in-process one (its trace
    is that one's)."""
    inst, _ = _beside_instance()
    runs = RangeRuns(_AcrossHosts(inst), agent_options(), Deadline(120), tmp_path)
    stats: dict = {}
    pipelines._search(runs.owner, agent_options(), Deadline(120), tmp_path, None, runs,
                      stats, [math.inf, None])
    assert stats["several_beside"] is False


def test_the_one_pipeline_answer_wins_a_tie():
    """The incumbent takes an offer below it, and one equal to it only when asked to (the
    one-pipeline solve's answer, which a search after it would not have beaten)."""
    a, b = Plan([]), Plan([])
    best = OwnerBest(2.0)
    assert best.offer(2.0, a, ties=True) and best.plan is a
    assert not best.offer(2.0, b) and best.plan is a
    assert best.offer(1.5, b) and (best.T, best.plan) == (1.5, b)
    assert not best.offer(1.7, a, ties=True)


def test_a_halted_range_runs_starts_no_run():
    """Once halted, every run of the solve raises :class:`Halted` instead of starting."""
    inst, _ = _beside_instance()
    runs = RangeRuns(_AcrossHosts(inst), agent_options(), Deadline(None))
    runs.halt()
    with pytest.raises(Halted):
        runs.least(0, 0, 2, math.inf)
    assert runs.runs == 0


@pytest.mark.parametrize("how", ["raised", "error", "timeup"])
def test_a_failed_period_run_stops_the_search_beside(monkeypatch, how):
    """The one-pipeline solve's period run fails (an agent failure raised or reported, or
    the time limit) while the search runs beside it: the solve ends with that failure (the
    time limit: the best plan known, ``feasible``), and the search's thread is gone."""
    inst, _ = _beside_instance()
    made = cdynp._period_runs

    def fails(backend, *args, **kwargs):
        if not backend.count_sync:  # a range run's
            return made(backend, *args, **kwargs)
        if how == "raised":
            raise AgentFailure("the agent of DC 'x' died", "x")
        if how == "timeup":
            raise TimeUp("time limit reached in x")
        return Outcome("error", message="cdynp: the agent of DC 'x' died",
                       stats={"failed_datacenter": "x"})

    monkeypatch.setattr(cdynp, "_period_runs", fails)
    got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
    if how == "timeup":
        assert got.status == "feasible" and got.plan is not None
    else:
        assert got.status == "error" and "died" in got.message
    assert not _alive()


def test_a_failure_beside_is_the_solves():
    """A range run of the search beside fails (an agent gone): the solve ends with that
    failure, naming the DC, and the thread is gone."""
    inst, _ = _beside_instance()
    made = RangeRuns._run

    def gone(self, *args, **kwargs):
        if threading.current_thread().name.startswith("chainpipe-several"):
            raise AgentFailure("the agent of DC 'y' is gone", "y")
        return made(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(RangeRuns, "_run", gone)
        got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
    assert got.status == "error" and "is gone" in got.message
    assert got.stats["failed_datacenter"] == "y"
    assert not _alive()


def test_without_beside_the_search_comes_after(monkeypatch):
    """``BESIDE = False``: the owner across hosts searches after the period run, with the
    same answer."""
    inst, want = _beside_instance()
    monkeypatch.setattr(pipelines, "BESIDE", False)
    got = solve_several(_AcrossHosts(inst), agent_options(), Deadline(120))
    assert got.stats["several_beside"] is False
    assert got.status == want.status and got.plan == want.plan
