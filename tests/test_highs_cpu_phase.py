"""HiGHS kept to a deadline that ends on CPU time (``Deadline.cpu_end``,
``Deadline.wall``; :class:`~chainpipe.formulations.pipelines.CpuPhase`): its own ``time_limit``
is the wall-clock deadline above the phase, and the interrupt callbacks stop it once the
process has used the phase's CPU seconds."""

from __future__ import annotations

import math
import time

import numpy as np

from chainpipe.deadline import Deadline
from chainpipe.formulations.matrix import LinearModel
from chainpipe.formulations.pipelines import CpuPhase
from chainpipe.solvers import highs


def _market_split(m: int = 4, n: int = 34, seed: int = 1) -> LinearModel:
    """A market-split feasibility MIP (Cornuejols-Dawande): ``m`` equality rows over
    ``n`` binaries with random coefficients, hard for branch and bound (HiGHS needs far
    more than a second on it), with slack columns so that it is always feasible and a
    minimisation of the slacks."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 100, size=(m, n)).astype(float)
    rhs = np.floor(a.sum(axis=1) / 2)
    # columns: n binaries, then m slacks s+ and m slacks s- (a x + s+ - s- = rhs)
    cols = n + 2 * m
    starts, index, value = [0], [], []
    for i in range(m):
        index += list(range(n)) + [n + i, n + m + i]
        value += a[i].tolist() + [1.0, -1.0]
        starts.append(len(index))
    cost = np.r_[np.zeros(n), np.ones(2 * m)]
    return LinearModel(cost=cost, col_lower=np.zeros(cols),
                       col_upper=np.r_[np.ones(n), np.full(2 * m, np.inf)],
                       integer=np.r_[np.ones(n, dtype=bool), np.zeros(2 * m, dtype=bool)],
                       row_lower=rhs, row_upper=rhs,
                       starts=np.asarray(starts, dtype=np.int32),
                       index=np.asarray(index, dtype=np.int32),
                       value=np.asarray(value, dtype=float), offset=0.0, variables=[])


def test_a_cpu_phase_gives_highs_its_parents_wall_limit_and_its_own_cpu_end():
    """The wall-clock limit HiGHS gets is the first ancestor's on the wall clock, the CPU
    end the earliest of the nested phases'; a plain deadline has no CPU end."""
    outer = Deadline(50)
    assert outer.wall() is outer and outer.cpu_end() == math.inf
    phase = CpuPhase(outer, 5.0)
    assert phase.wall() is outer
    assert math.isclose(phase.cpu_end(), phase.cpu_at)
    inner = CpuPhase(phase, 100.0)  # the outer phase ends first
    assert inner.wall() is outer
    assert math.isclose(inner.cpu_end(), phase.cpu_at)
    assert CpuPhase(phase, 1.0).cpu_end() < phase.cpu_at


def test_highs_stops_at_the_phases_cpu_end_not_at_the_wall_limit():
    """A hard MIP under a phase of 0.5 CPU s inside a 40 s wall-clock deadline: HiGHS is
    stopped by the CPU end (about 0.5 CPU s of this process), not by its wall-clock
    limit of 40 s."""
    model = _market_split()
    c0, w0 = time.process_time(), time.monotonic()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(Deadline(40), 0.5))
    cpu, wall = time.process_time() - c0, time.monotonic() - w0
    assert answer.status == "stopped", answer.text
    assert cpu < 3.0 and wall < 20.0, (cpu, wall)
