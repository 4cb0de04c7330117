"""How CBC's exit is read: a status or bound is a proof only when CBC's run proves it.

Session 27 once saw ``ilp-path`` with CBC, time-limited to 0.3 s, return a lower bound
above the optimum. The exits below are built from CBC 2.10's lines (``CbcSolver.cpp``,
``CbcModel.cpp``, ``CbcMessage.cpp``) in the order it prints them, but for the one
constructed sub-problem line of the first test; each was read as a proof (or a bound
above the truth) before the fix.
"""

from __future__ import annotations

import numpy as np

from chainpipe.deadline import Deadline
from chainpipe.solvers import cbc


class _Model:
    num_cols = 2
    cost = np.array([1.0, 0.0])
    offset = 0.0


STOPPED_HEAD = "Stopped on time (no integer solution - continuous used) - objective value 12.5\n"


def _log(*lines: str) -> str:
    return "\n".join(("Welcome to the CBC MILP Solver", "Version: 2.10.3") + lines)


def test_a_word_in_the_log_is_not_a_status():
    """A line about a sub-problem says nothing of the model (this one is constructed:
    the old reading matched "problem is infeasible" anywhere in the log)."""
    log = _log("Continuous objective value is 10 - 0.01 seconds",
               "Cbc0038I Problem is infeasible (RINS sub-problem)",
               "Cbc0020I Exiting on maximum time",
               "Result - Stopped on time limit", "No feasible solution found",
               "Lower bound:                    10.000")
    answer = cbc._answer(log, STOPPED_HEAD, _Model(), False, 0, limited=True)
    assert answer.status == "stopped" and answer.values is None
    assert 9.999 < answer.bound <= 10.0


def test_a_root_lp_stopped_by_the_limit_is_not_infeasible():
    """CBC 2.10 reports "Linear relaxation infeasible" when its root LP re-solve is not
    proven optimal, also when the time limit or a signal stopped it (the LP was solved
    once before: "Continuous objective value")."""
    log = _log("Continuous objective value is 1876.54 - 0.01 seconds",
               "Cbc0006I The LP relaxation is infeasible or too expensive",
               "Result - Linear relaxation infeasible")
    head = "Infeasible - objective value 1876.53562500\n"
    answer = cbc._answer(log, head, _Model(), False, 0, limited=True)
    assert answer.status == "stopped" and answer.bound is None
    # no limit met: the re-solve failed on its own (bounds tightened at the root), a proof
    assert cbc._answer(log, head, _Model(), False, 0).status == "infeasible"
    # with a heuristic's solution CBC turns the same exit into "Optimal solution found"
    found = log.replace("Linear relaxation infeasible", "Optimal solution found") \
        + "\nObjective value:                1900.00000000"
    answer = cbc._answer(found, "Optimal - objective value 1900.00000000\n      0 c0  1900  0\n",
                         _Model(), False, 0, limited=True)
    assert answer.status == "stopped" and answer.values is not None and answer.bound is None


def test_a_run_that_met_a_limit_proves_nothing_from_a_lost_log():
    """A signal's exit, or a limit met with the log lost: the file's first line is no proof."""
    for code, limited in ((-9, False), (-2, False), (0, True)):
        answer = cbc._answer("", "Infeasible - objective value 0\n", _Model(), False, code,
                             limited=limited)
        assert answer.status == "stopped", (code, limited)
        relaxed = cbc._answer("", "Infeasible - objective value 0\n", _Model(), True, code,
                              limited=limited)
        assert relaxed.status == "relaxed" and relaxed.bound is None


def test_completed_proofs_still_count():
    """The proofs CBC completes stay proofs, also near the limit: an exhausted search,
    an LP found infeasible before the search, a solution proven optimal."""
    proven = _log("Continuous objective value is 10 - 0.01 seconds",
                  "Cbc0001I Search completed - best objective 1e+50, took 3 iterations and "
                  "2 nodes (0.01 seconds)", "Result - Problem proven infeasible",
                  "No feasible solution found")
    lp = _log("Problem is infeasible - 0.00 seconds", "Result - Linear relaxation infeasible")
    for log in (proven, lp):
        for limited in (False, True):
            assert cbc._answer(log, "Infeasible - objective value 0\n", _Model(), False, 0,
                               limited=limited).status == "infeasible", (log, limited)
    assert cbc._answer(lp, "Infeasible - objective value 0\n", _Model(), True, 0,
                       limited=True).status == "infeasible"
    # the log lost, the run well within its limit: the file decides, as before
    assert cbc._answer("", "Infeasible - objective value 0\n", _Model(), False,
                       0).status == "infeasible"
    optimal = _log("Result - Optimal solution found", "Objective value:                3.00000000")
    answer = cbc._answer(optimal, "Optimal - objective value 3.00000000\n      0 c0  3  0\n",
                         _Model(), False, 0, limited=True)
    assert answer.status == "optimal" and answer.bound <= 3.0


def test_the_printed_lower_bound_is_read_below_its_rounding():
    """CBC prints a stopped run's bound to 3 decimals: 1876.5356 reads 1876.536."""
    log = _log("Result - Stopped on time limit", "Objective value:                1876.53562500",
               "Lower bound:                    1876.536", "Gap:                            0.00")
    head = "Stopped on time - objective value 1876.53562500\n      0 c0  1876.535625  0\n"
    answer = cbc._answer(log, head, _Model(), False, 0, limited=True)
    assert answer.status == "stopped" and answer.bound <= 1876.5356
    assert answer.bound >= 1876.5355 - 1e-9
    assert cbc._printed_bound("Lower bound: 1.5e3") == 1500.0 - 50.0
    assert cbc._printed_bound("Lower bound: -inf") is None


def test_a_limit_is_assumed_whenever_one_may_have_been_met():
    dl = Deadline(10.0)
    now = dl.start
    assert not cbc._maybe_limited(0, now, now + 1.0, 5.0, dl)
    assert cbc._maybe_limited(0, now, now + 5.0, 5.0, dl)  # its own limit
    assert cbc._maybe_limited(0, now, dl.at - 0.1, None, dl)  # asked to stop
    assert cbc._maybe_limited(-9, now, now + 0.1, 5.0, dl)  # killed
    assert not cbc._maybe_limited(0, now, now + 100.0, None, Deadline(None))
