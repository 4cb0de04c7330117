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


def _cover_lp(rows: int = 3000, cols: int = 6000, per_row: int = 20, seed: int = 0
              ) -> LinearModel:
    """A random covering LP (``A x >= 10``, ``0 <= x <= 1``, one integer column, so HiGHS
    runs its MIP solver) whose root LP takes HiGHS's dual simplex about 3 CPU s: the MIP's
    LPs run in a second ``Highs`` without interrupt callbacks."""
    rng = np.random.default_rng(seed)
    index = np.concatenate([np.sort(rng.choice(cols, per_row, replace=False))
                            for _ in range(rows)]).astype(np.int32)
    integer = np.zeros(cols, dtype=bool)
    integer[0] = True
    return LinearModel(cost=rng.integers(1, 100, size=cols).astype(float),
                       col_lower=np.zeros(cols), col_upper=np.ones(cols), integer=integer,
                       row_lower=np.full(rows, 10.0), row_upper=np.full(rows, np.inf),
                       starts=np.arange(0, rows * per_row + 1, per_row, dtype=np.int32),
                       index=index, value=rng.integers(1, 10, size=index.size).astype(float),
                       offset=0.0, variables=[])


def test_a_mip_root_lp_stops_at_the_phases_cpu_end():
    """The root LP of a MIP calls no interrupt callback: under a phase of 0.3 CPU s in a
    60 s deadline HiGHS's own wall-clock limit must end it (fails with the wall-clock
    deadline's 60 s as that limit: the LP ran to its optimum, about 3 CPU s)."""
    model = _cover_lp()
    c0 = time.process_time()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(Deadline(60), 0.3))
    cpu = time.process_time() - c0
    assert answer.status == "stopped", answer.text
    assert cpu < 1.2, cpu


class _Overrated(CpuPhase):
    """A phase that believes the process gets two cores (as after a part run on two
    threads): HiGHS's first wall-clock limit is half its CPU seconds."""

    __slots__ = ()

    def rate(self) -> float:
        return 2.0


def test_highs_own_limit_follows_the_cpu_it_gets(monkeypatch):
    """A first wall-clock limit made for a larger share of a core than HiGHS gets is moved
    as it runs (its rate measured after ``RATE_AFTER_S``, here 0.2 s): a hard MIP under a
    phase of 1 CPU s uses most of it (fails without the moves: stopped at 0.5 s of wall
    clock, at most 0.5 CPU s)."""
    monkeypatch.setattr(highs, "RATE_AFTER_S", 0.2)
    phase = _Overrated(Deadline(40), 1.0)
    assert math.isclose(highs.own_limit(phase), 0.5, rel_tol=0.05)
    c0 = time.process_time()
    answer = highs.solve_highs(_market_split(), relax=False, deadline=phase)
    cpu = time.process_time() - c0
    assert answer.status == "stopped", answer.text
    assert 0.75 < cpu < 3.0, cpu


def test_the_limit_is_the_cpu_left_over_the_rate_and_never_past_the_wall():
    """``own_limit``: the wall-clock deadline's limit without a CPU end; under a phase
    the CPU seconds left at the process's rate, capped by the wall clock's."""
    assert highs.own_limit(Deadline(None)) is None
    assert math.isclose(highs.own_limit(Deadline(10)), 9.0, rel_tol=0.01)
    assert highs._cpu_as_wall(3.0, 0.5, None) == 6.0
    assert highs._cpu_as_wall(3.0, 0.5, 4.0) == 4.0
    assert highs._cpu_as_wall(-1.0, 0.5, None) == 0.05
    assert highs._cpu_as_wall(1.0, 0.0, None) == 1.0 / highs.MIN_RATE
    phase = CpuPhase(Deadline(40), 2.0)
    assert 1.5 < highs.own_limit(phase) <= 2.0  # rate 1.0 in the first second
