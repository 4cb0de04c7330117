"""HiGHS kept to a deadline that ends on CPU time (``Deadline.cpu_end``,
``Deadline.wall``; :class:`~chainpipe.formulations.pipelines.CpuPhase`): its own ``time_limit``
is the wall-clock deadline above the phase, and the interrupt callbacks stop it once the
process has used the phase's CPU seconds."""

from __future__ import annotations

import math
import os
import time

import numpy as np

from chainpipe.deadline import Deadline
from chainpipe.formulations.cpu_clock import cpu_clock
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
    c0, w0 = cpu_clock(), time.monotonic()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(Deadline(40), 0.5))
    cpu, wall = cpu_clock() - c0, time.monotonic() - w0
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
    c0 = cpu_clock()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(Deadline(60), 0.3))
    cpu = cpu_clock() - c0
    assert answer.status == "stopped", answer.text
    assert cpu < 1.2, cpu


class _Clock:
    """Monotonic and process times that a test moves by hand."""

    def __init__(self):
        self.wall, self.cpu = 100.0, 10.0

    def monotonic(self):
        return self.wall

    def process_time(self):
        return self.cpu


class _Phase:
    """What :class:`highs._Retime` reads of a deadline: its CPU end, the run's rate and
    the wall-clock deadline above it."""

    def __init__(self, cpu_at: float, rate: float, run_end: float = math.inf):
        self.cpu_at, self._rate, self.run_end = cpu_at, rate, run_end

    def cpu_end(self):
        return self.cpu_at

    def run_cpu_end(self):
        return self.run_end

    def rate(self):
        return self._rate

    def wall(self):
        return Deadline(1000)


class _Options:
    """A ``Highs`` that records the options set."""

    def __init__(self):
        self.set = []

    def setOptionValue(self, key, value):
        self.set.append((key, value))


def test_highs_own_limit_moves_with_the_larger_of_its_rate_and_the_runs(monkeypatch):
    """:class:`highs._Retime`: HiGHS's ``time_limit`` is what it has run plus the CPU
    seconds left over the larger of its own rate (after ``RATE_AFTER_S``) and the run's.
    A slow first second (0.4 of a core against the run's 0.8) does not stretch it (fails
    with its own rate alone: 1 + 3.6 / 0.4 s); a larger share than the run's shortens
    it; never past the wall-clock deadline's."""
    clock = _Clock()
    monkeypatch.setattr(highs, "time", clock)
    monkeypatch.setattr(highs, "cpu_clock", clock.process_time)
    h = _Options()
    retime = highs._Retime(h, _Phase(cpu_at=14.0, rate=0.8), 5.0)  # 4 CPU s left
    clock.wall, clock.cpu = 101.0, 10.4
    retime()
    assert h.set and math.isclose(h.set[-1][1], 1.0 + 3.6 / 0.8), h.set
    clock.wall, clock.cpu = 103.0, 12.4  # 2.4 CPU s in 3 s: the run's rate still larger
    retime()
    assert math.isclose(h.set[-1][1], 3.0 + 1.6 / 0.8), h.set
    clock.wall, clock.cpu = 104.0, 13.9  # 3.9 in 4 s: its own rate is the larger
    retime()
    assert math.isclose(h.set[-1][1], 4.0 + 0.1 / (3.9 / 4.0)), h.set
    far = highs._Retime(h, _Phase(cpu_at=1e6, rate=0.8), None)
    clock.wall += 2.0
    far()
    assert h.set[-1][1] <= 999.0, h.set


def test_highs_own_limit_never_outlasts_the_runs_cpu_seconds_at_a_whole_core(monkeypatch):
    """Near the run's end (the outermost phase's), HiGHS's limit is at most the run's CPU
    seconds left as wall-clock seconds (rate 1), whatever the run's rate: an LP that
    began under it cannot use more (fails with the phase's seconds over the run's rate,
    1 + 3.6 / 0.5 s)."""
    clock = _Clock()
    monkeypatch.setattr(highs, "time", clock)
    monkeypatch.setattr(highs, "cpu_clock", clock.process_time)
    h = _Options()
    retime = highs._Retime(h, _Phase(cpu_at=14.0, rate=0.5, run_end=14.0), 5.0)
    clock.wall, clock.cpu = 101.0, 10.4
    retime()
    assert h.set and math.isclose(h.set[-1][1], 1.0 + 3.6), h.set
    inner = highs._Retime(h, _Phase(cpu_at=14.0, rate=0.5, run_end=30.0), 5.0)
    clock.wall, clock.cpu = 102.0, 10.8  # far from the run's end: the run's rate
    inner()
    assert math.isclose(h.set[-1][1], 1.0 + 3.2 / 0.5), h.set


def test_a_mip_root_lp_ends_by_the_runs_cpu_end_after_a_slow_start():
    """A run that waited 1.2 s (its rate near 0) with 0.3 CPU s left: a MIP's root LP
    (about 3 CPU s to its optimum, no interrupt callback) must still end near the run's
    CPU end. Fails with the CPU seconds left over the run's rate as HiGHS's limit (0.3 /
    0.02 = 15 s of wall clock: the LP ran to its optimum)."""
    model = _cover_lp()
    run = CpuPhase(Deadline(60), 0.3)
    time.sleep(1.2)
    c0 = cpu_clock()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(run, 100.0))
    cpu = cpu_clock() - c0
    assert answer.status == "stopped", answer.text
    assert cpu < 1.2, cpu


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


def test_highs_own_limit_stays_put_past_the_cpu_end(monkeypatch):
    """Once the CPU seconds are used, the limit no longer moves on with the wall clock:
    a presolve that calls no interrupt callback must meet it (fails with a floor of
    0.05 s past the time run at every call: the limit then runs ahead of HiGHS)."""
    clock = _Clock()
    monkeypatch.setattr(highs, "time", clock)
    monkeypatch.setattr(highs, "cpu_clock", clock.process_time)
    h = _Options()
    retime = highs._Retime(h, _Phase(cpu_at=11.0, rate=0.5, run_end=11.0), 2.0)
    clock.wall, clock.cpu = 101.5, 11.2  # past the end
    retime()
    first = h.set[-1][1]
    assert first <= 1.5, h.set
    for step in range(1, 6):
        clock.wall, clock.cpu = 101.5 + step, 11.2 + 0.5 * step
        retime()
        assert h.set[-1][1] <= first, h.set


def _deaf_run(h, deadline, on_bounds=None, limit=None):
    """``highs._run`` for a HiGHS that reads no limit and no interrupt, as the root work
    of HiGHS 1.14's MIP after its presolve does (``docs/formulations.md``, "Twentieth
    round")."""
    h.setOptionValue("time_limit", math.inf)
    h.run()


def test_a_highs_solve_deaf_to_its_limits_is_killed_at_the_cpu_end(monkeypatch):
    """Under a phase of 0.3 CPU s a solve that reads no limit (about 3 CPU s to its root
    LP's optimum) is solved in a forked child and killed near the CPU end; the child's
    CPU seconds are counted by ``cpu_clock``. Fails in a thread (the whole 3 CPU s)."""
    model = _cover_lp()
    monkeypatch.setattr(highs, "FORK_MIN_NONZEROS", model.nonzeros)
    assert highs.forks(model, Deadline(60))
    monkeypatch.setattr(highs, "_run", _deaf_run)
    c0 = cpu_clock()
    answer = highs.solve_highs(model, relax=False, deadline=CpuPhase(Deadline(60), 0.3))
    cpu = cpu_clock() - c0
    assert answer.status == "stopped" and answer.values is None, answer.text
    assert 0.25 < cpu < 1.0, cpu


def test_a_forked_solve_answers_as_one_in_this_process(monkeypatch):
    """The same small MIP solved in this process and in a forked child (the threshold
    lowered): the same status, objective and solution, the log lines and bounds passed
    back; an LP bound the same."""
    model = _cover_lp(rows=300, cols=600, per_row=10, seed=3)
    here_log, here_bounds = [], []
    here = highs.solve_highs(model, relax=False, deadline=Deadline(30), log=here_log.append,
                             on_bounds=lambda a, b: here_bounds.append((a, b)))
    lp_here = highs.solve_lp_bound(model, deadline=Deadline(30))
    monkeypatch.setattr(highs, "FORK_MIN_NONZEROS", 1)
    assert highs.forks(model, Deadline(30)) and not highs.forks(model, Deadline(None))
    pid = os.getpid()
    child_log, child_bounds = [], []
    child = highs.solve_highs(model, relax=False, deadline=Deadline(30),
                              log=child_log.append,
                              on_bounds=lambda a, b: child_bounds.append((a, b, os.getpid())))
    assert here.status == child.status == "optimal", (here.text, child.text)
    assert math.isclose(here.bound, child.bound, rel_tol=1e-9)
    assert np.allclose(here.values, child.values)
    assert any("Solving report" in line for line in child_log)
    assert len(child_log) == len(here_log)
    assert child_bounds and {b[2] for b in child_bounds} == {pid}
    assert len(child_bounds) == len(here_bounds)
    lp_child = highs.solve_lp_bound(model, deadline=Deadline(30))
    assert math.isclose(lp_here[0], lp_child[0], rel_tol=1e-9), (lp_here, lp_child)
