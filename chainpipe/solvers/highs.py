"""HiGHS in-process (highspy), kept to the deadline and to Ctrl-C.

The model is passed as arrays in one call. HiGHS runs in a worker thread
(:func:`~chainpipe.solvers.interrupt.run_stoppable`); its interrupt callbacks stop the
search when the caller presses Ctrl-C or the deadline has passed by more than
:data:`OVERRUN_S` (HiGHS's own ``time_limit``, set a little short of the deadline by
:func:`~chainpipe.solvers.mip.backend_seconds`, normally stops it first), or when a
deadline that ends on CPU time (a :class:`~chainpipe.formulations.pipelines.CpuPhase`)
has used its CPU seconds (:meth:`~chainpipe.deadline.Deadline.cpu_end`: on a loaded
machine a phase of ``c`` CPU seconds then does ``c`` CPU seconds of work, not what a
wall-clock limit of ``c`` seconds allows). HiGHS calls no interrupt callback inside the
LPs of its branch and bound (their solver is a second ``Highs`` without callbacks),
its sub-MIPs or its presolve: under a CPU phase its own wall-clock ``time_limit`` is
therefore the CPU seconds left at the share of a core the process gets
(:func:`own_limit`), moved while it runs (:class:`_Retime`). Before, that limit was the
whole run's wall-clock one, and a MIP root LP given 3.6 CPU s ran 81 (fresh
``v3-medium-02``-like seed 3, ``docs/formulations.md``, "Seventeenth round"). It is
never more wall-clock seconds than the whole run's CPU seconds left, and past a CPU end
it stays put ("Eighteenth round"). Its
log goes to ``log`` through the logging callback, never to the console.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time

import numpy as np

from ..deadline import Deadline
from ..formulations.cpu_clock import cpu_clock
from ..formulations.pipelines import MIN_RATE, RATE_AFTER_S
from .forked import Killed, kill_points, run_forked
from .interrupt import Abandoned, run_stoppable
from .logs import line_logger
from .mip import ABS_GAP, PRIMAL_TOL, MipAnswer, backend_seconds, pass_model

#: seconds past the deadline after which the interrupt callback stops HiGHS itself
OVERRUN_S = 0.2
#: seconds past the deadline after which the caller stops waiting for HiGHS: its
#: presolve does not call the interrupt callbacks (on a loaded machine it ran 2-3 s
#: past its limit on ``large-01``); HiGHS finishes in its thread, its answer unread.
#: 0.25 s, was 0.5 s: ilp-assign's presolve on hybrid/large/ ended runs at 6.19-6.24 s of
#: the 6.25 s a 5 s limit allows
ABANDON_S = 0.25


#: HiGHS presolve rules switched off (``presolve_rule_off`` bits). Bit 13, "Parallel rows
#: and columns": HiGHS 1.14.0's presolve reduced a 6-column path ILP (flow rows ``x_0 = y``,
#: ``x_2 = y``; random v3 seed 108 with ``M = 2`` and ``classic``, see
#: ``tests/test_formulations_v3.py``) to an empty model and called the 2-stage plan
#: (objective 2764) optimal where the 1-stage plan (2104) is feasible. With this rule off,
#: or presolve off, it finds 2104; no other single rule does (bit 9, "Doubleton equation",
#: only when the same model is read from an LP file). An optimal claim must be right.
PRESOLVE_RULES_OFF = 1 << 13


def solve_highs(model, *, relax: bool, deadline: Deadline, seed: int = 0, threads: int = 1,
                log=None, on_bounds=None) -> MipAnswer:
    """Solve ``model`` (a :class:`~chainpipe.formulations.matrix.LinearModel`) with HiGHS.

    Parameters
    ----------
    model : LinearModel
        The scaled model.
    relax : bool
        Solve the LP relaxation only.
    deadline : Deadline
        HiGHS gets ``deadline.backend_limit()`` seconds.
    seed, threads : int
        HiGHS's ``random_seed`` and ``threads``.
    log : callable, optional
        Receives each line of HiGHS's log.
    on_bounds : callable, optional
        Called as ``on_bounds(incumbent, bound)`` (the model's objective, ``None`` when
        not known) whenever HiGHS's branch and bound reports them.

    Returns
    -------
    MipAnswer

    Raises
    ------
    KeyboardInterrupt
        After HiGHS has stopped, when the caller pressed Ctrl-C.

    Notes
    -----
    A model of :data:`FORK_MIN_NONZEROS` nonzeros or more under a deadline is solved in
    a forked child (:func:`forked_solve`), killed if it runs past its limit.
    """
    if forks(model, deadline):
        return forked_solve(_solve_here, model, deadline, log, on_bounds, relax=relax,
                            seed=seed, threads=threads)
    return _solve_here(model, relax=relax, deadline=deadline, seed=seed, threads=threads,
                       log=log, on_bounds=on_bounds)


#: models with at least this many nonzeros are solved in a forked child under a deadline
#: (:mod:`chainpipe.solvers.forked`): HiGHS's MIP root can run past every limit it is
#: given, and only a process can be killed (the overruns seen were in models of 390 000
#: nonzeros or more). Smaller ones stay in a thread: a fork of a large process costs
#: tens of milliseconds in page-table copies and copy-on-write faults (committed
#: ``v3-medium-02``: 40 forks at 50 000 nonzeros, 25.8 CPU s against 23.5 in threads;
#: 26 at 200 000, 23.6; ``docs/formulations.md``, "Twenty-first round")
FORK_MIN_NONZEROS = 200_000


def forks(model, deadline: Deadline) -> bool:
    """Whether :func:`solve_highs` and :func:`solve_lp_bound` solve ``model`` under
    ``deadline`` in a forked child: a deadline with a limit, a model of
    :data:`FORK_MIN_NONZEROS` nonzeros or more, and :func:`os.fork` at hand."""
    return (not deadline.unlimited and model.nonzeros >= FORK_MIN_NONZEROS
            and hasattr(os, "fork"))


def forked_solve(solve, model, deadline: Deadline, log, on_bounds, **kwargs):
    """``solve(model, deadline=..., log=..., on_bounds=..., **kwargs)`` in a forked child
    (:func:`~chainpipe.solvers.forked.run_forked`), its log lines and bounds passed to
    ``log`` and ``on_bounds`` here as they come; killed at the deadline's CPU end plus
    :data:`~chainpipe.solvers.forked.KILL_GRACE_CPU`, the run's plus
    :data:`~chainpipe.solvers.forked.KILL_GRACE_RUN`, or :data:`ABANDON_S` past the
    wall-clock deadline. A killed solve answers ``MipAnswer("stopped", None, None, ...)``
    (``solve_lp_bound``: ``(None, text)``).

    Parameters
    ----------
    solve : callable
        :func:`solve_highs`'s or :func:`solve_lp_bound`'s in-process body.
    model : LinearModel
    deadline : Deadline
    log, on_bounds : callable or None
    **kwargs
        Passed on to ``solve``.

    Returns
    -------
    MipAnswer or tuple
        What ``solve`` returned in the child.
    """
    import highspy  # noqa: F401 - imported before the fork, never in the child

    def work(emit):
        child_log = None if log is None else (lambda line: emit(("log", line)))
        extra = {} if on_bounds is None else {"on_bounds": lambda a, b: emit(("bounds", a, b))}
        return solve(model, deadline=deadline, log=child_log, **extra, **kwargs)

    def on_event(event):
        if event[0] == "log":
            log(event[1])
        else:
            on_bounds(event[1], event[2])

    kill_cpu, kill_wall = kill_points(deadline, ABANDON_S)
    try:
        return run_forked(work, kill_cpu=kill_cpu, kill_wall=kill_wall, on_event=on_event)
    except Killed as exc:
        text = f"HiGHS {exc} (its child process)"
        if solve is _solve_lp_here:
            return None, text
        return MipAnswer("stopped", None, None, text)


def _solve_here(model, *, relax: bool, deadline: Deadline, seed: int = 0, threads: int = 1,
                log=None, on_bounds=None) -> MipAnswer:
    """:func:`solve_highs` in this process."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", log is not None)
    h.setOptionValue("log_to_console", False)
    listening = threading.Event()
    listening.set()
    if log is not None:
        feed = line_logger(log)
        h.cbLogging += lambda event: feed(event.message) if listening.is_set() else None
    for key, value in (("random_seed", int(seed)), ("primal_feasibility_tolerance", PRIMAL_TOL),
                       ("mip_rel_gap", 0.0), ("mip_abs_gap", ABS_GAP),
                       ("threads", max(1, int(threads))),
                       ("presolve_rule_off", PRESOLVE_RULES_OFF)):
        h.setOptionValue(key, value)
    for key, value in getattr(model, "highs_options", {}).items():  # the model's own
        h.setOptionValue(key, value)
    limit = own_limit(deadline)
    if limit is not None:
        h.setOptionValue("time_limit", float(limit))
    pass_model(h, model, relax)
    if model.start is not None and not relax:
        h.setSolution(model.num_cols, np.arange(model.num_cols, dtype=np.int32),
                      np.asarray(model.start, dtype=float))
    try:
        _run(h, deadline, on_bounds, limit)
    except Abandoned:
        listening.clear()  # HiGHS ends in its own thread; its later lines are not ours
        return MipAnswer("stopped", None, None,
                         f"HiGHS still busy {ABANDON_S:g} s after the time limit (presolve); "
                         "its answer was not awaited")
    return _answer(h, relax)


def own_limit(deadline: Deadline) -> float | None:
    """HiGHS's own ``time_limit`` (wall-clock seconds from now; ``None``: none): what the
    wall-clock deadline leaves (:func:`~chainpipe.solvers.mip.backend_seconds`) and, under
    a deadline that ends on CPU time, at most its CPU seconds left divided by the share of
    a core the process has had (:meth:`~chainpipe.formulations.pipelines.CpuPhase.rate`):
    the parts of HiGHS that call no interrupt callback then end about when the CPU
    seconds do, and their overrun is at most what a rise of that share gives.

    Parameters
    ----------
    deadline : Deadline
        The solve's deadline.

    Returns
    -------
    float or None
        Seconds, at least 0.05.
    """
    limit = backend_seconds(deadline.wall())
    cpu_at = deadline.cpu_end()
    if math.isinf(cpu_at):
        return limit
    now = cpu_clock()
    return min(_cpu_as_wall(cpu_at - now, deadline.rate(), limit),
               _cpu_as_wall(_run_end(deadline) - now, 1.0, None))


def _run_end(deadline: Deadline) -> float:
    """The CPU time at which the whole run ends (the outermost phase's end:
    :meth:`~chainpipe.formulations.pipelines.CpuPhase.run_cpu_end`). HiGHS's own limit is
    never more wall-clock seconds than the CPU seconds left before it: a one-thread HiGHS
    cannot use more CPU seconds than wall-clock ones, so no LP that calls no interrupt
    callback (a MIP's root LP keeps the limit it began with) runs past the run's end,
    however the process's share of a core rises. A phase inside the run is timed at the
    run's rate, and one that runs past its own end takes the seconds from the rest."""
    end = getattr(deadline, "run_cpu_end", None)
    return end() if end is not None else deadline.cpu_end()


def _cpu_as_wall(cpu_left: float, rate: float, wall_limit: float | None) -> float:
    """``cpu_left`` CPU seconds as wall-clock seconds at ``rate`` CPU seconds per second
    (at least :data:`MIN_RATE`), at least 0.05 and at most ``wall_limit``."""
    seconds = max(0.05, cpu_left / max(rate, MIN_RATE))
    return seconds if wall_limit is None else min(wall_limit, seconds)


#: :class:`_Retime` sets HiGHS's ``time_limit`` again when it moves by more than this
#: share of the one set
RETIME_RTOL = 0.02


class _Retime:
    """While HiGHS runs under a deadline that ends on CPU time (called every
    :data:`~chainpipe.solvers.interrupt.POLL_S` in the caller's thread): its own
    ``time_limit`` set to the wall-clock seconds it has run plus the CPU seconds left
    over the larger of the rate at which it has got CPU time (after
    :data:`~chainpipe.formulations.pipelines.RATE_AFTER_S` of its run) and the deadline's
    :meth:`~chainpipe.formulations.pipelines.CpuPhase.rate`, at most what the wall-clock
    deadline leaves (``limit``: the one set at the start, seconds from it). The branch
    and bound, the presolve and each new LP read the option as they go, so one that gets
    more CPU than the run had ends sooner; an LP already running keeps the limit it
    began with. Near the run's end (the outermost phase's) the limit is at most the run's
    CPU seconds left as wall-clock ones, which a one-thread HiGHS cannot outrun; past its
    CPU end it never moves on. The larger rate errs on the early side: a phase cut short on the wall
    clock leaves its CPU seconds to the rest of the run, one that runs past its CPU end
    takes them from it (fresh ``-02``-like seed 3: a window's MIP given 3.76 CPU s ran
    6.21 in 9.2 s of wall clock, so a limit set from a rate of at most 0.41 where the
    run's was 0.8)."""

    def __init__(self, h, deadline: Deadline, limit: float | None):
        self.h, self.deadline, self.limit = h, deadline, limit
        self.cap = backend_seconds(deadline.wall())
        self.cpu_at, self.run_end = deadline.cpu_end(), _run_end(deadline)
        self.t0, self.c0 = time.monotonic(), cpu_clock()

    def __call__(self) -> None:
        ran, cpu = time.monotonic() - self.t0, cpu_clock()
        rate = self.deadline.rate()
        if ran >= RATE_AFTER_S:
            rate = max(rate, (cpu - self.c0) / ran)
        # no floor here: past the CPU end the limit stays where it is (a floor of 0.05 s
        # past ``ran`` moved it on at every call, and a presolve that checks nothing else
        # ran on: 4.4 CPU s after the run's end on fresh -02-like seed 3)
        limit = ran + min(max(0.0, self.cpu_at - cpu) / max(rate, MIN_RATE),
                          max(0.0, self.run_end - cpu))
        if cpu >= min(self.cpu_at, self.run_end) and self.limit is not None:
            limit = min(limit, self.limit)
        if self.cap is not None:
            limit = min(limit, self.cap)
        if self.limit is None or abs(limit - self.limit) > RETIME_RTOL * self.limit:
            self.h.setOptionValue("time_limit", float(limit))
            self.limit = limit


def _run(h, deadline: Deadline, on_bounds=None, limit: float | None = None) -> None:
    """``h.run()`` in a worker; interrupted on Ctrl-C or well past the deadline; the
    branch and bound's incumbent and bound told to ``on_bounds`` as it goes; under a
    deadline that ends on CPU time, HiGHS's own limit ``limit`` moved as it runs
    (:class:`_Retime`)."""
    stop = threading.Event()
    hard = math.inf if deadline.unlimited else deadline.at + OVERRUN_S
    cpu_at = deadline.cpu_end()

    def interrupt(event):
        if stop.is_set() or time.monotonic() >= hard or cpu_clock() >= cpu_at:
            event.interrupt()

    def mip_interrupt(event):
        if on_bounds is not None:
            out = event.data_out
            primal, dual = out.mip_primal_bound, out.mip_dual_bound
            on_bounds(primal if math.isfinite(primal) else None,
                      dual if math.isfinite(dual) else None)
        interrupt(event)

    h.cbSimplexInterrupt += interrupt
    h.cbIpmInterrupt += interrupt
    h.cbMipInterrupt += mip_interrupt
    abandon = None if deadline.unlimited else deadline.at + ABANDON_S
    retime = _Retime(h, deadline, limit) if math.isfinite(cpu_at) else None
    run_stoppable(h.run, stop.set, name="highs", abandon_at=abandon, poll=retime)


def _answer(h, relax: bool) -> MipAnswer:
    import highspy

    S = highspy.HighsModelStatus
    ms = h.getModelStatus()
    text = h.modelStatusToString(ms)
    info = h.getInfo()
    if ms in (S.kInfeasible, S.kUnboundedOrInfeasible):
        return MipAnswer("infeasible", None, None, text)
    has_solution = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    values = _values(h) if has_solution else None
    objective = info.objective_function_value if has_solution else None
    if relax:
        return MipAnswer("relaxed", objective if ms == S.kOptimal else None, None, text)
    dual = info.mip_dual_bound
    bound = dual if dual is not None and math.isfinite(dual) else None
    if ms == S.kOptimal and has_solution:
        bound = objective if bound is None else min(bound, objective)
        return MipAnswer("optimal", bound, values, f"{text} (gap {info.mip_gap:.3g})")
    return MipAnswer("stopped", bound, values, text)


def _values(h):
    return np.asarray(h.getSolution().col_value, dtype=float)


def lagrangian_bound(model, row_dual) -> float:
    """A lower bound on ``model``'s LP optimum from any row multipliers ``row_dual``.

    For every ``y``, ``cost @ x = (cost - A' y) @ x + y @ (A x)``; each term is bounded
    below over the column and row bounds. ``y_i`` is first projected onto the sign its
    row allows (0 where the needed row bound is infinite), so the bound holds whatever
    the accuracy of ``y`` (an interior point method's duals without crossover); it is
    ``-inf`` only if some column with a negative (positive) reduced cost has no upper
    (lower) bound.

    Parameters
    ----------
    model : LinearModel
    row_dual : array_like
        One multiplier per row.

    Returns
    -------
    float
        The bound, including ``model.offset``.
    """
    y = np.asarray(row_dual, dtype=float).copy()
    y[~np.isfinite(model.row_lower)] = np.minimum(y[~np.isfinite(model.row_lower)], 0.0)
    y[~np.isfinite(model.row_upper)] = np.maximum(y[~np.isfinite(model.row_upper)], 0.0)
    rows = np.repeat(np.arange(model.num_rows), np.diff(model.starts))
    aty = np.zeros(model.num_cols)
    np.add.at(aty, model.index, model.value * y[rows])
    d = model.cost - aty
    with np.errstate(invalid="ignore"):
        cols = np.where(d > 0, d * model.col_lower, np.where(d < 0, d * model.col_upper, 0.0))
        rws = np.where(y > 0, y * model.row_lower, np.where(y < 0, y * model.row_upper, 0.0))
    total = float(cols.sum() + rws.sum()) + float(model.offset)
    return total if not math.isnan(total) else -math.inf


def solve_lp_bound(model, *, deadline: Deadline, seed: int = 0, threads: int = 1,
                   log=None, tolerance: float = 1e-6,
                   give_up_below: float | None = None) -> tuple[float | None, str]:
    """A proven lower bound on ``model``'s LP relaxation by HiGHS's interior point method
    without crossover (:func:`lagrangian_bound` of its duals), or ``None`` when the method
    did not end; and HiGHS's model status text. ``tolerance`` is the method's optimality
    tolerance: a looser one stops earlier with a bound a little lower.

    Parameters
    ----------
    model : LinearModel
    deadline : Deadline
    seed, threads : int
    log : callable, optional
    tolerance : float
    give_up_below : float, optional
        What the bound is wanted for (in the model's units): the method is stopped, and
        ``(None, "given up")`` returned, once an iterate that is nearly feasible
        (:data:`GIVE_UP_PINF`) has an objective below it by :data:`GIVE_UP_MARGIN`: the
        LP's value is then below it too, and so would its bound be.

    Returns
    -------
    tuple
        ``(bound or None, status text)``; ``inf`` when HiGHS proves the LP infeasible.
        A large model is solved in a forked child (:func:`forks`).
    """
    kwargs = {"seed": seed, "threads": threads, "tolerance": tolerance,
              "give_up_below": give_up_below}
    if forks(model, deadline):
        return forked_solve(_solve_lp_here, model, deadline, log, None, **kwargs)
    return _solve_lp_here(model, deadline=deadline, log=log, **kwargs)


def _solve_lp_here(model, *, deadline: Deadline, seed: int = 0, threads: int = 1, log=None,
                   tolerance: float = 1e-6, give_up_below: float | None = None
                   ) -> tuple[float | None, str]:
    """:func:`solve_lp_bound` in this process."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", log is not None or give_up_below is not None)
    h.setOptionValue("log_to_console", False)
    if log is not None:
        feed = line_logger(log)
        h.cbLogging += lambda event: feed(event.message)
    given_up = _give_up(h, give_up_below)
    for key, value in (("random_seed", int(seed)), ("threads", max(1, int(threads))),
                       ("presolve_rule_off", PRESOLVE_RULES_OFF), ("solver", "ipm"),
                       ("run_crossover", "off"), ("ipm_optimality_tolerance", tolerance)):
        h.setOptionValue(key, value)
    for key, value in getattr(model, "highs_options", {}).items():
        if key not in ("solver", "objective_bound", "mip_allow_restart"):
            h.setOptionValue(key, value)
    limit = own_limit(deadline)
    if limit is not None:
        h.setOptionValue("time_limit", float(limit))
    pass_model(h, model, True)
    try:
        _run(h, deadline, limit=limit)
    except Abandoned:
        return None, "abandoned"
    if given_up.is_set():
        return None, "given up"
    S = highspy.HighsModelStatus
    ms = h.getModelStatus()
    text = h.modelStatusToString(ms)
    if ms == S.kInfeasible:
        return math.inf, text
    sol = h.getSolution()
    if ms not in (S.kOptimal, S.kUnknown) or not sol.dual_valid:
        return None, text
    bound = lagrangian_bound(model, sol.row_dual)
    return (bound if math.isfinite(bound) else None), text


#: :func:`solve_lp_bound` gives up at an iterate whose primal infeasibility is at most
#: this and whose objective is below what is wanted by a relative :data:`GIVE_UP_MARGIN`
GIVE_UP_PINF = 1e-6
GIVE_UP_MARGIN = 1e-3
_IPX_ROW = re.compile(r"^\s*\d+\*?\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+\S+\s*$")


def _give_up(h, below: float | None) -> threading.Event:
    """An event set (and the interior point method interrupted) once an iteration line of
    IPX's log shows a primal objective below ``below`` (less a relative
    :data:`GIVE_UP_MARGIN`) at a primal infeasibility of at most :data:`GIVE_UP_PINF`
    (``docs/formulations.md``, "Ninth round"). Never set without ``below``."""
    event = threading.Event()
    if below is None or not math.isfinite(below):
        return event
    limit = below - GIVE_UP_MARGIN * abs(below)

    def read(ev):
        m = _IPX_ROW.match(ev.message)
        if m is None:
            return
        try:
            primal, pinf = float(m.group(1)), float(m.group(3))
        except ValueError:
            return
        if primal < limit and pinf <= GIVE_UP_PINF:
            event.set()

    def interrupt(ev):
        if event.is_set():
            ev.interrupt()

    h.cbLogging += read
    h.cbIpmInterrupt += interrupt
    return event
