"""The twenty-third round of issue 33: the outer enumeration's earlier plans as incumbents.

The arc-flow route's sub-solves start from the fastest plan of the same block at another
``M_p`` or of a sibling DC (renamed) when it beats the cheap heuristics
(``solvers/ilp.py:_earlier_plan``), and a level of a joint model is pruned at the
fastest such plan that fits its cap (``_SyncBlock.hint``, ``_hinted``).
"""

from __future__ import annotations

import dataclasses
import math

from test_ilp_flow_v3 import FLOW
from test_ilp_sync_twins import _with_twin

from chainpipe.plan import evaluate
from chainpipe.solve import solve
from helpers import brute_force_v3, random_v3_instance


def _instances():
    """Random v3 instances with two DCs of which the second is the first's twin
    (:func:`_with_twin`), then random v3 instances, each with pipelines ``[1, 2]``."""
    for inst in [_with_twin(s // 2, slower_first=s % 2 == 1) for s in range(16)] + [
            random_v3_instance(s) for s in range(24)]:
        if inst is not None:
            par = dataclasses.replace(inst.training.parallelism, pipelines=(1, 2))
            yield dataclasses.replace(inst, training=dataclasses.replace(
                inst.training, parallelism=par))


def test_earlier_plans_keep_the_brute_force_optimum(monkeypatch):
    """The enumeration with earlier plans as the sub-solves' incumbents and the levels
    pruned at their hints proves the brute-force optimum; both are taken (a sub-solve's
    incumbent, a level solved under a hint) on some instances. The sub-solves' cheap
    heuristics are switched off (on these small blocks they find the optimum), so that
    every earlier plan is taken. Fails with a hint taken as a proof (its plan called
    optimal without the pruned model's answer), a hint that does not fit the level's
    cap, or a plan costed on the DC it came from."""
    from chainpipe.solvers import ilp

    used = {"sub": 0, "level": 0}
    incumbent, hinted = ilp._incumbent, ilp._hinted
    monkeypatch.setattr(ilp, "heuristic_plan", lambda *a, **k: (None, math.inf, None))

    def spy_incumbent(*args, **kwargs):
        out = incumbent(*args, **kwargs)
        used["sub"] += out is not None and out[2] == "an earlier sub-solve's plan"
        return out

    def spy_hinted(level, hint, below):
        used["level"] += hint is not None
        return hinted(level, hint, below)

    monkeypatch.setattr(ilp, "_incumbent", spy_incumbent)
    monkeypatch.setattr(ilp, "_hinted", spy_hinted)
    checked = 0
    for n, inst in enumerate(_instances()):
        opt = min(v[0] for v in brute_force_v3(inst).values())
        res = solve(inst, "ilp-path", time_limit=60, **FLOW)
        if not math.isfinite(opt):
            assert res.status == "infeasible", n
            continue
        assert res.status == "optimal", (n, res.message)
        assert math.isclose(res.iteration_time, opt, rel_tol=1e-6), (n, opt)
        checked += 1
    assert checked >= 20
    assert used["sub"] >= 10 and used["level"] >= 1, used


def test_an_earlier_plan_is_renamed_and_costed_here():
    """``_earlier_plan``: a sibling DC's plan comes back renamed to this DC's devices at
    this DC's ``T`` (its slower own link costs more), the same block's plan at another
    ``M_p`` at this ``M_p``'s ``T``; a DC with other device groups gets none."""
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.solvers import ilp

    inst = next(i for i in map(_with_twin, range(40)) if i is not None)
    fast, slow = inst.datacenters
    dcs = {dc.name: dc for dc in inst.datacenters}
    plan = solve(sub_instance(inst, 0, 0, 3), "ilp-path", time_limit=60, **FLOW).plan
    earlier = {(fast.name,): [plan]}
    sub = sub_instance(inst, 1, 1, 3)
    got, T = ilp._earlier_plan(sub, earlier, dcs)
    assert all(d.startswith(f"{slow.name}/") for st in got.stages for d in st.devices)
    assert T == float(evaluate(sub, got).iteration_time_s)
    assert T > float(evaluate(sub_instance(inst, 0, 0, 3), plan).iteration_time_s)
    two = sub_instance(inst, 0, 0, 2)
    got, T = ilp._earlier_plan(two, earlier, dcs)
    assert got is plan and T == float(evaluate(two, plan).iteration_time_s)
    other = dataclasses.replace(fast, devices=tuple(
        dataclasses.replace(g, flop_per_s=g.flop_per_s * 2) for g in fast.devices))
    assert ilp._earlier_plan(sub, earlier, dict(dcs, **{fast.name: other})) is None


def test_a_hint_answers_a_level_only_when_the_solve_found_nothing_as_fast():
    """``_hinted``: a level solved below the hint without a plan takes the hint's plan,
    its proof kept (``optimal``: nothing left out is faster) and its bound at most the
    hint's ``T'``; a level with a plan at least as fast is kept as it is."""
    from chainpipe.solvers import ilp

    plan, other = object(), object()
    empty = ilp._Level(0.5, False, 0.9, None, math.inf, math.inf, math.inf, 0.9, True)
    got = ilp._hinted(empty, (plan, 0.9, 0.4), 1.2)
    assert (got.plan, got.T, got.R, got.sync, got.lb, got.optimal, got.below) == \
        (plan, 0.9, 0.4, 0.4, 0.9, True, 1.2)
    stopped = dataclasses.replace(empty, lb=0.7, optimal=False)
    assert ilp._hinted(stopped, (plan, 0.9, 0.4), 1.2).lb == 0.7
    assert not ilp._hinted(stopped, (plan, 0.9, 0.4), 1.2).optimal
    faster = dataclasses.replace(empty, plan=other, T=0.8, R=0.3, sync=0.3, lb=0.8)
    assert ilp._hinted(faster, (plan, 0.9, 0.4), 1.2) is faster
    assert ilp._hinted(empty, None, 1.2) is empty
