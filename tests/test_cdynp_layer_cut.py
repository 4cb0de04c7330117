"""A period-DP layer whose labels the paired curve floor cuts whole
(``PeriodDP._filtered``'s early return): it keeps nothing, extends nothing and notes the
cut, while the same layer uncut keeps its label and extends it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from chainpipe.instance import Instance
from chainpipe.io import read
from chainpipe.solvers.cdynp import period, period_fast
from chainpipe.solvers.cdynp.agent import own_tables

ROOT = Path(__file__).resolve().parents[1]


def _layer() -> tuple:
    """``v3-medium-01``'s first DC alone: its model's end layer (the end label) finished
    and extended; the DP, the kept labels, references and the states filed."""
    inst = read(ROOT / "instances" / "v3" / "medium" / "v3-medium-01.json")
    one = Instance(inst.name, inst.model, inst.training, (inst.datacenters[0],), ())
    tables = own_tables(one, None)
    dp = period.PeriodDP(tables, position_cap=tables.M - 1)
    dp.run({tables.L: [period.PeriodDP.end_label()]}, math.inf)  # sets the run's fields
    dp.bound_cut = False
    zero, L = (0,) * tables.G, tables.L
    chunks = {zero: [period._Labels.of_base([period.PeriodDP.end_label()])]}
    layer, refs = dp._finish_layer(L, chunks, math.inf, zero, None)
    states = [dict() for _ in range(L + 1)]
    dp._extend_layer(L, layer, refs, states, math.inf, zero, None)
    return dp, layer, refs, states


def test_a_layer_cut_whole_keeps_and_extends_nothing(monkeypatch):
    dp, layer, refs, states = _layer()
    assert [len(v) for v in layer.values()] == [1] and len(refs) == 1
    assert any(states) and not dp.bound_cut
    real = period_fast.order_layer

    def cut_all(*args):  # the curve's floor above the bound for every row
        order, counts, _ = real(*args)
        return order[:0], np.zeros_like(counts), True

    monkeypatch.setattr(period_fast, "order_layer", cut_all)
    dp, layer, refs, states = _layer()
    assert [len(v) for v in layer.values()] == [0] and refs == {}
    assert not any(states) and dp.bound_cut and dp.points == {}
