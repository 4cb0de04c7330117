"""The ninth round of issue 33 in the arc-flow route's outer enumeration.

Levels of ``_joint_by_sync`` answered from a twin pipeline (the same DC with a lower
own-link latency) or from a solve stopped at its target, blocks of several DCs solved
first at the fewest microbatches an entry needs for sure, the loop LP given up once its
interior point method is below the upper bound, and the floor values shared per tables.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from test_ilp_flow_v3 import FLOW, every_split_checked

from chainpipe import Instance
from chainpipe.io import read
from chainpipe.solve import solve
from helpers import brute_force_v3, random_v3_instance

ROOT = Path(__file__).resolve().parents[1]


def _with_twin(seed: int, slower_first: bool = False) -> Instance | None:
    """A random v3 instance cut to its first DC, followed (or, ``slower_first``, preceded)
    by a copy of that DC under another name whose own link is slower by a latency of the
    order of the stage times (so that the copy's plans cost visibly more); pipelines
    ``[2]``."""
    inst = random_v3_instance(seed)
    if len(inst.datacenters) < 2:
        return None
    dc = inst.datacenters[0]
    lat = dc.link.latency_s * 1.5 + 0.05 * (1 + seed % 3)
    twin = dataclasses.replace(dc, name=dc.name + "x",
                               link=dataclasses.replace(dc.link, latency_s=lat))
    training = inst.training
    par = dataclasses.replace(training.parallelism, pipelines=(2,))
    return dataclasses.replace(inst, datacenters=(twin, dc) if slower_first else (dc, twin),
                               links=inst.links[:1],
                               training=dataclasses.replace(training, parallelism=par))


def test_twin_levels_give_the_joint_optimum(monkeypatch):
    """Two single-DC pipelines whose DCs differ only in the second's slower own link: the
    joint model by levels, with the second pipeline's levels answered from the first's
    where they settle it, proves the merged model's optimum on every split; the twin is
    found and answers at least one level over the seeds, and plans found before (the
    pipeline's own under other caps, its sibling's renamed) answer others. Fails with the
    twin looked up in the other direction (a faster twin's answers do not bound a slower
    pipeline), its plans taken as optimal whatever their gap, or a plan taken without
    checking that it fits the cap."""
    from chainpipe.solvers import ilp

    answered = []
    original = ilp._SyncBlock._from_twin

    def spy(self, *args):
        out = original(self, *args)
        answered.append((out, self.twin is None))
        return out

    monkeypatch.setattr(ilp._SyncBlock, "_from_twin", spy)
    opts = ilp._options("ilp-path", dict(FLOW))
    checked = 0
    for seed in range(40):
        inst = _with_twin(seed // 2, slower_first=seed % 2 == 1)
        if inst is None:
            continue
        cache, n = every_split_checked(inst, opts, seed)
        checked += n
        twins = [v for v in cache.twins.values() if v is not None]
        fast = inst.datacenters[seed % 2].name
        assert all(fast == t[1] for t in twins), seed
    assert checked >= 20
    assert any(out and not alone for out, alone in answered)  # by the slower twin's bound
    assert any(out and alone for out, alone in answered)  # by a sibling's or an own plan


def test_a_faster_dc_has_no_twin_that_is_slower():
    """``_twin`` pairs a pipeline only with one whose DC is the same but for a lower or
    equal own-link latency and the name."""
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.solvers import ilp

    inst = next(i for i in map(_with_twin, range(40)) if i is not None)
    cache = ilp._SyncCache()
    for k in (0, 1):
        cache.instances[((inst.datacenters[k].name,), 3)] = sub_instance(inst, k, k, 3)
    slow = ((inst.datacenters[1].name,), 3)
    fast = ((inst.datacenters[0].name,), 3)
    assert ilp._twin(cache, slow) == (fast, inst.datacenters[0].name, inst.datacenters[1].name)
    assert ilp._twin(cache, fast) is None
    other = dataclasses.replace(inst.datacenters[1], devices=tuple(
        dataclasses.replace(g, flop_per_s=g.flop_per_s * 2) for g in inst.datacenters[1].devices))
    cache = ilp._SyncCache()
    cache.instances[fast] = sub_instance(inst, 0, 0, 3)
    cache.instances[slow] = dataclasses.replace(sub_instance(inst, 1, 1, 3),
                                                datacenters=(other,))
    assert ilp._twin(cache, slow) is None


def test_blocks_needed_first_keep_the_optimum():
    """The enumeration with blocks of several DCs solved first at the fewest microbatches
    an entry needs for sure (``OuterSearch.needed_first``) proves the brute-force optimum
    of random v3 instances of three DCs, eight microbatches and two pipelines (and that
    it fired on some of them)."""
    fired = checked = 0
    for seed in range(60):
        inst = random_v3_instance(seed)
        if len(inst.datacenters) < 3:
            continue
        par = dataclasses.replace(inst.training.parallelism, pipelines=(2,))
        inst = dataclasses.replace(inst, training=dataclasses.replace(
            inst.training, microbatches=8, parallelism=par))
        opt = min((v[0] for v in brute_force_v3(inst).values()), default=math.inf)
        res = solve(inst, "ilp-path", time_limit=120, **FLOW)
        if not math.isfinite(opt):
            assert res.status == "infeasible", seed
            continue
        assert res.status == "optimal", (seed, res.message)
        assert math.isclose(res.iteration_time, opt, rel_tol=1e-6), seed
        fired += res.stats.get("needed_first", 0) > 0
        checked += 1
    assert checked >= 8 and fired >= 1, (checked, fired)


def test_needed_first_prunes_by_growth(monkeypatch):
    """On ``v3-medium-03`` the block of DCs 1-3 solved at 47 microbatches first prunes the
    entries giving it 48 to 50 by growth in ``M_p``: the enumeration solves it at 47 and
    at none of 48 to 50 (it solved all four before), and still proves the optimum. The
    sub-solves are replaced by a stand-in that proves every block's bound at the cutoff
    from 47 microbatches up (and its optimum below), so that only the order is tested."""
    from chainpipe.formulations import pipelines as pl

    calls = []

    def sub(self, a, b, m, cutoff=None):
        calls.append((a, b, m))
        res = pl.SubResult(None, math.inf, cutoff if cutoff is not None else 0.0, False,
                           cutoff=cutoff)
        self.subs[(a, b, m)] = res
        self.proven.setdefault((a, b), []).append((m, res.bound))
        return res

    search = pl.OuterSearch.__new__(pl.OuterSearch)
    inst = read(ROOT / "instances" / "v3" / "medium" / "v3-medium-03-slow-sync8.json")
    search.__init__(inst, None, None, None)
    monkeypatch.setattr(pl.OuterSearch, "sub", sub)
    search.best_T = 12.7146
    other = pl.Entry(((0, 0), (1, 3)), (17, 47), 1.3233)
    later = pl.Entry(((0, 0), (1, 3)), (14, 50), 1.3233)
    search.subs[(0, 0, 17)] = pl.SubResult(None, 10.9, 10.9, True)
    search.subs[(0, 0, 14)] = pl.SubResult(None, 9.0, 9.0, True)
    search.by_block = {(1, 3): [(47, other), (50, later)]}
    search.needed_first(1, 3, 50)
    assert calls == [(1, 3, 47)]
    assert search.grown(1, 3, 50) + later.cross >= search.best_T * (1 - 1e-9)
    calls.clear()
    other.visited = True
    search.subs.pop((1, 3, 47))
    search.proven.clear()
    search.needed_first(1, 3, 50)
    assert calls == []  # no open entry needs 47 for sure


def test_the_loop_lp_is_given_up_below_the_upper_bound():
    """``solve_lp_bound(give_up_below=...)``: above the LP's value the interior point
    method is given up (no bound); below it, the bound comes back as without. Fails with
    the comparison reversed."""
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.ilp_flow import FlowFormulation
    from chainpipe.solvers.highs import solve_lp_bound
    from chainpipe.tables import CostTables

    for name in ("v3-small-01-period", "v3-small-04-sync4"):
        tables = CostTables(read(ROOT / "instances" / "v3" / "small" / f"{name}.json"))
        form = FlowFormulation(tables, exits=False)
        assert form.flow_loops_apply()
        model = form.build(flow_loops=True)
        bound, _text = solve_lp_bound(model, deadline=Deadline(60))
        assert bound is not None and bound > 0
        assert solve_lp_bound(model, deadline=Deadline(60),
                              give_up_below=bound * 1.1) == (None, "given up")
        low, text = solve_lp_bound(model, deadline=Deadline(60), give_up_below=bound * 0.9)
        assert text != "given up" and math.isclose(low, bound, rel_tol=1e-9)


def test_floor_values_are_shared_per_tables_and_unchanged():
    """``FloorBound`` keeps its values per tables object: a second floor on the same
    tables and one on other tables give exactly the values computed afresh."""
    from chainpipe.formulations import cpsat
    from chainpipe.tables import CostTables

    a = CostTables(read(ROOT / "instances" / "v3" / "small" / "v3-small-01-period.json"))
    b = CostTables(read(ROOT / "instances" / "v3" / "small" / "v3-small-04-sync4.json"))
    values = np.unique(np.r_[cpsat.stage_arcs(a, None).compute,
                             cpsat.stage_arcs(b, None).compute])[:40]
    for tables in (a, a, b, b):
        floor = cpsat.FloorBound(tables, values)
        fresh = [tables.bound_with_floors([float(v)] * tables.K, float(v))
                 for v in floor.grid]
        fresh = np.where(np.isfinite(fresh), fresh, 0.0)
        assert np.array_equal(floor.values, fresh)
    assert len(cpsat._FLOOR_VALUES) >= 2
