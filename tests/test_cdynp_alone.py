"""A range run of one DC answered by ``dp``'s own search (``chainpipe/solvers/cdynp/
alone.py``): the same ``g`` as the agent's label DP, whatever the questions' order."""

from __future__ import annotations

import math
import random
from pathlib import Path

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, alone
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from helpers import random_v3_instance

ROOT = Path(__file__).resolve().parents[1]


def _answers(inst, questions, enabled: bool) -> list:
    """``T_p`` (``None``: no plan) of each question ``(k, m, theta, bound)``, a fresh owner
    asking them in order, with or without :mod:`.alone`."""
    keep = alone.ENABLED
    alone.ENABLED = enabled
    try:
        runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
        out = []
        for k, m, theta, bound in questions:
            got = runs._run(k, k, m, theta, bound)[0]  # every question a run (no owner memory)
            out.append(None if got is None else (got.time, got.sync < theta))
        return out
    finally:
        alone.ENABLED = keep


def _questions(inst, rng: random.Random) -> list:
    """Questions as the owner's search asks them: the same DC and ``M_p`` again at other
    bounds and lower limits on ``R``, and the first one unbounded."""
    out = []
    for k in range(inst.num_datacenters):
        for m in sorted({1, 2, inst.microbatches}):
            out.append((k, m, math.inf, math.inf))
            for _ in range(4):
                out.append((k, m, rng.choice([math.inf, 1e-3, 0.05, 0.5, 2.0, 10.0]),
                            rng.choice([math.inf, 0.5, 2.0, 5.0, 20.0, 80.0])))
    return out


def test_one_dc_range_runs_equal_the_label_dp():
    """On random v3 instances (``period`` ones), per DC, ``M_p`` and question: the plan
    found by ``dp``'s search has the least ``T_p`` the agent's own DP finds (1e-9), both
    find none alike, and every plan keeps its ``R`` below the limit."""
    checked = 0
    for seed in range(100, 180):  # v3-123: g far above the static floor (an unbounded trial)
        inst = random_v3_instance(seed)
        if inst.training.objective != "period" or inst.microbatches < 2:
            continue
        qs = _questions(inst, random.Random(seed))
        new, old = _answers(inst, qs, True), _answers(inst, qs, False)
        for q, a, b in zip(qs, new, old):
            assert (a is None) == (b is None), (seed, q, a, b)
            if a is not None:
                assert math.isclose(a[0], b[0], rel_tol=1e-9), (seed, q, a, b)
                assert a[1] and b[1], (seed, q)
                checked += 1
    assert checked >= 100, checked


def test_capped_tables_cut_the_uncapped_runs():
    """Tables under a ``sync_cap`` share the uncapped tables' options, and the period DP's
    candidate runs cut from the uncapped ones (``period._cut_runs``) are the runs the
    capped options give directly, for every group, end and cap."""
    import numpy as np

    from chainpipe.io import read
    from chainpipe.solvers.cdynp.agent import DCAgent, own_tables
    from chainpipe.solvers.cdynp.period import PeriodDP
    from chainpipe.solvers.cdynp.public import PublicInstance

    inst = read(ROOT / "instances/v3/medium/v3-medium-03-slow-sync8.json")
    public = PublicInstance.of(inst)
    compared = 0
    for k in (0, 3):
        for cap in (1e-3, 0.05, 0.2, 1.0):
            agent = DCAgent(public, k, inst.datacenters[k], sync_cap=cap)
            base = own_tables(agent.local, None)
            assert agent.tables.__dict__["_options"] is base.__dict__["_options"]
            dp = PeriodDP(agent.tables, position_cap=agent.R)
            for g in range(agent.tables.G):
                direct = dp._group_stages(g)  # from the capped tables' own options
                for x in range(1, agent.L + 1):
                    want = direct[x]
                    got = dp._group_runs(g, x)
                    for a, b in zip(got, want):
                        assert np.array_equal(a, b), (k, cap, g, x)
                    compared += len(want[2])
    assert compared > 1000, compared


def test_candidate_runs_follow_their_definition():
    """``PeriodDP._group_stages`` (built as arrays for every end at once) against the
    definition, pair by pair and end by end: per pair ``c`` (ascending) with a stage
    ending at ``x``, the stages ``[a, x)`` for ``a = x - 1, x - 2, ...`` down to just above
    the largest ``a`` whose in-flight limit is below the least need, each row ``(a, C, f,
    b, R, max in flight)``."""
    import numpy as np

    from chainpipe.io import read
    from chainpipe.solvers.cdynp.agent import DCAgent
    from chainpipe.solvers.cdynp.period import PeriodDP
    from chainpipe.solvers.cdynp.public import PublicInstance
    from chainpipe.solvers.dp_period import phase_options

    checked = 0
    for name, ks in (("v3/medium/v3-medium-04-gpipe", (0, 2)),
                     ("v3/small/v3-small-02-two-pipelines", (0, 1, 2))):
        inst = read(ROOT / f"instances/{name}.json")
        public = PublicInstance.of(inst)
        for k in ks:
            agent = DCAgent(public, k, inst.datacenters[k])
            t = agent.tables
            dp = PeriodDP(t, position_cap=agent.R)
            need = t.in_flight(1)
            for g in range(t.G):
                opts = t.options(g)
                f, b = phase_options(t, g)
                got = dp._group_stages(g)
                for x in range(t.L + 1):
                    pairs, rows, ptr = [], [], [0]
                    for c in range(len(opts.width)):
                        # the largest start that fits no microbatch ends the run
                        low = max([a for a in range(x) if opts.max_in_flight[c, a, x] < need],
                                  default=-1)
                        run = [(a, opts.compute_time[c, a, x], f[c, a, x], b[c, a, x],
                                opts.sync_time[c, a, x], opts.max_in_flight[c, a, x])
                               for a in range(x - 1, low, -1)]
                        if run:
                            pairs.append(c)
                            rows += run
                            ptr.append(len(rows))
                    want = (np.array(pairs, dtype=np.int64),
                            np.asarray(opts.width, dtype=np.int64)[pairs],
                            np.array(rows, dtype=float).reshape(-1, 6),
                            np.array(ptr, dtype=np.int64))
                    for a_, b_ in zip(got[x], want):
                        assert np.array_equal(a_, b_), (name, k, g, x)
                    checked += len(rows)
    assert checked > 1000, checked


def test_memory_across_microbatch_counts():
    """One memory per DC serves every ``M_p`` (``alone.memory``): questions at ``M_p`` in
    random order (each DC's tables grow past their first count on the way: ``LEAST_M``
    lowered to 2) get the answers of a memory made afresh for each question."""
    keep = alone.LEAST_M
    alone.LEAST_M = 2
    try:
        checked = 0
        for seed in range(100, 140):
            inst = random_v3_instance(seed)
            if inst.training.objective != "period" or inst.microbatches < 3:
                continue
            rng = random.Random(seed)
            qs = [(k, rng.randint(1, inst.microbatches),
                   rng.choice([math.inf, 0.05, 0.5, 2.0]),
                   rng.choice([math.inf, 2.0, 5.0, 20.0]))
                  for k in range(inst.num_datacenters) for _ in range(6)]
            alone.forget()
            shared = _answers(inst, qs, True)
            fresh = []
            for q in qs:
                alone.forget()
                fresh += _answers(inst, [q], True)
            for q, a, b in zip(qs, shared, fresh):
                assert (a is None) == (b is None), (seed, q, a, b)
                if a is not None:
                    assert math.isclose(a[0], b[0], rel_tol=1e-9), (seed, q, a, b)
                    checked += 1
        assert checked >= 30, checked
    finally:
        alone.LEAST_M = keep
        alone.forget()
