"""The floor a range run's last DC reports under the period of every plan on the range
(``agent.DCAgent._report_floor``, ``docs/privacy.md``, "A floor under a range's period"):
never above ``dp``'s own floor for that range, which is under every plan's period."""

from __future__ import annotations

import math

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, alone
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from chainpipe.solvers.dp_pipelines import shared_holds
from chainpipe.solvers.dp_ranges import RangeTimes
from chainpipe.tables import CostTables
from helpers import random_v3_instance


def test_reported_floor_is_under_dps_floor():
    """On random v3 instances with several DCs, per range and ``M_p``: the floor reported
    by a range run (with or without a plan) is at most ``dp``'s least bottleneck under
    which the range's devices hold the model (``RangeTimes._period_floor``, a floor under
    every plan's period), and is reported on many ranges."""
    reported = 0
    for seed in range(60):
        inst = random_v3_instance(seed)
        if inst.num_datacenters < 2 or inst.microbatches < 2:
            continue
        tables = CostTables(inst)
        ref = RangeTimes(tables, Deadline(None), math.inf, shared_holds(tables, Deadline(None)))
        if ref.holds is None:
            continue
        alone.forget()
        runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
        K = inst.num_datacenters
        for i in range(K):
            for j in range(i, K):
                for m in sorted({2, inst.microbatches}):
                    got = runs._run(i, j, m, math.inf, math.inf)[1]
                    want = ref._period_floor(i, j, m)
                    assert got <= want * (1 + 1e-9), (seed, i, j, m, got, want)
                    reported += got > 0
    assert reported >= 40, reported
