"""The summary's points cut by the prefix-curve table a DC received
(:meth:`chainpipe.solvers.cdynp.agent.DCAgent._curve_cut`, ``docs/privacy.md``, "The
prefix-curve pass"): a point whose every completion's prefix, on the DCs before the
sender, cannot bring ``T`` within the run's bound is not sent. The run under a bound a
hair above ``dp``'s optimum still finds it, the cut drops points on many instances, and
made 10% too strong it loses an optimum (the test can fail)."""

from __future__ import annotations

import numpy as np
from test_cdynp_curve_pass import _instances, _run

from chainpipe.deadline import Deadline
from chainpipe.plan import evaluate
from chainpipe.solvers.cdynp import LocalOwner, curve, solve_chain
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.dp import run as dp_run


def _strong(self, pts, b, u, q, ub):
    """:meth:`DCAgent._curve_cut` with its floor 10% too high."""
    if self.curve is None or b == 0 or not pts:
        return pts
    S = np.array([(max(p[0], u), p[1], p[2] + q, p[3]) for p in pts], dtype=float)
    ok = curve.paired(S, self.curve.upstream[:, b], self.curve.grid, self.curve.below,
                      self.M, ub, scale=1.1)
    return [p for p, keep in zip(pts, ok.tolist()) if keep]


def test_summary_cut_keeps_the_optimum_and_drops_points(monkeypatch):
    """Per instance: the period run with the pass under ``1e-6`` above ``dp``'s optimum
    returns it; the summaries' cut drops points on several instances; with the cut's
    floor 10% too high some instance loses its optimum."""
    checked, cut, lost = 0, 0, 0
    for seed, inst in _instances(12):
        ref = dp_run(inst)
        if ref.plan is None:
            continue
        want = evaluate(inst, ref.plan).iteration_time_s
        out = solve_chain(LocalOwner(inst, False, 60).whole(), agent_options(), Deadline(None))
        low = out.stats.get("classic_s")
        if low is None:
            continue
        got = _run(inst, want * (1 + 1e-6), low)
        assert abs(got.estimate - want) <= 1e-9 * want, (seed, got.estimate, want)
        checked += 1
        cut += sum(a.get("curve_cut_points", 0) for a in got.agents) > 0
        with monkeypatch.context() as m:
            m.setattr(DCAgent, "_curve_cut", _strong)
            lost += _run(inst, want * (1 + 1e-6), low).estimate > want * (1 + 1e-9)
    # (measured: 12 checked, points cut on 7, the stronger cut lost the optimum on 3)
    assert checked >= 8 and cut >= 3 and lost >= 1, (checked, cut, lost)
