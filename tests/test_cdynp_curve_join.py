"""The agents' prefix-curve rows with the boundary joined (``chainpipe/solvers/cdynp/
curve.py``, :func:`~chainpipe.solvers.cdynp.curve._join`; ``docs/privacy.md``, "The
prefix-curve pass"): a label whose first stage lies on DC ``k`` after a prefix ``[0, a)``
pays the traversal of boundary ``a``, as ``dp``'s curve pays it (``PrefixCurve.walk``).

The rows a DC reads (its own, never sent) stay floors under ``dp``'s joined walk of the
whole instance (every DC's data, the oracle no agent may read) and lie above the rows
without the join on every instance with a boundary to pay; the whole solve still proves
``dp``'s optimum (``tests/test_cdynp_curve_pass.py``)."""

from __future__ import annotations

import numpy as np
from test_cdynp_curve_pass import _instances, _run

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, curve, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.prefix_curve import PrefixCurve
from chainpipe.tables import CostTables


def _passes(monkeypatch, inst, low: float) -> list:
    """The :class:`~chainpipe.solvers.cdynp.curve.CurvePass` of each DC, in chain order,
    of one period run with the pass under ``2 low``."""
    made = []
    real = curve.CurvePass.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    with monkeypatch.context() as m:
        m.setattr(curve.CurvePass, "__init__", spy)
        _run(inst, 2.0 * low, low)
    return made


def test_joined_rows_are_floors_under_dps_joined_walk(monkeypatch):
    """Per DC ``k``, cap and own usage ``v``: the joined row ``CF[a, v]`` is at most
    ``dp``'s ``PrefixCurve.walk(cap)[a, k, v]`` (the least fill of a prefix before a
    stage on ``k`` with its boundary's traversal, every DC's data), and above the row
    without the join somewhere on most instances. It fails when a traversal is counted
    twice (the first DC's rows equal ``dp``'s there) or when the join is left out (the
    base labels' row, all own devices free: ``CF_base``, the only one kept without it)."""
    checked, raised, runs = 0, 0, 0
    for _seed, inst in _instances(10, least_layers=4):
        whole = LocalOwner(inst, False, 60).whole()
        low = solve_chain(whole, agent_options(), Deadline(None)).stats.get("classic_s")
        if low is None:
            continue
        t = CostTables(inst)
        pc = PrefixCurve.of(t, 0, inst.num_datacenters - 1, False, curve.windows_capped(t))
        radix = pc._local[0]
        passes = _passes(monkeypatch, inst, low)
        assert len(passes) == inst.num_datacenters
        runs += 1
        for k, cp in enumerate(passes):
            n = int(np.prod(cp.radix))
            assert np.array_equal(cp.radix, radix[k][:len(cp.radix)])
            for i, lam in enumerate(cp.grid):
                want = pc.walk(float(lam))[:, k, :n]
                got = cp.CF[:, :n, i]
                assert np.all(got <= want * (1 + 1e-12) + 1e-15), (inst.name, k, i)
                checked += 1
            raised += bool(np.any(cp.CF[:, cp.full] > cp.CF_base))
    # (measured: 10 runs, 884 caps checked, the join raised rows of 24 of 26 DCs)
    assert runs >= 6 and checked >= 60 and raised >= runs, (runs, checked, raised)
