"""``drive``'s exact ``bound`` (the owner's seed bounding the one-pipeline classic solve,
``chainpipe.solvers.cdynp.pipelines.CLASSIC_SEED``): the probe stays on, the main run goes
under the lesser of the bound and the probe's ``T``; above the optimum the answer is the
unbounded one's, below it ``no_solution`` with the run's messages and the bound as the
proven lower bound.
"""

from __future__ import annotations

import dataclasses

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner
from chainpipe.solvers.cdynp.drive import agent_options, drive
from helpers import random_v3_chains


def test_a_bound_keeps_the_probe_and_the_answer():
    """On random v3 chains under ``classic``: a bound 10% above the optimum gives the same
    ``T`` with the probe run; a bound a hair below it gives ``no_solution``, the run's
    messages, and the bound as lower bound (a bound ignored, or taken as the probe's
    when above it, fails here)."""
    checked = probed = 0
    for seed, inst in random_v3_chains(2, objective="classic", seeds=range(60)):
        one = dataclasses.replace(inst, training=dataclasses.replace(
            inst.training, parallelism=dataclasses.replace(inst.parallelism,
                                                           pipelines=(1,))))
        backend = LocalOwner(one, False, 60).whole()
        free = drive(backend, agent_options(), deadline=Deadline(None), probe=True)
        if free.plan is None:
            continue
        T = backend.iteration_time(free.plan)
        above = drive(backend, agent_options(), deadline=Deadline(None), probe=True,
                      bound=T * 1.1)
        assert above.plan is not None, seed
        assert abs(backend.iteration_time(above.plan) - T) <= 1e-9 * T, seed
        probed += "probe" in above.stats
        below = drive(backend, agent_options(), deadline=Deadline(None), probe=True,
                      bound=T * (1 - 1e-6))
        assert below.status == "no_solution" and below.plan is None, (seed, below.status)
        assert "messages" in below.stats, seed
        assert below.lower_bound == T * (1 - 1e-6), (seed, below.lower_bound)
        checked += 1
    assert checked >= 8 and probed >= 5, (checked, probed)
