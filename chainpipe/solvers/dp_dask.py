"""``dp`` on a Dask cluster: the trial bounds of one run searched as tasks
(``-O scheduler=ADDRESS``).

The trials of :func:`chainpipe.solvers.dp.run` are independent searches ("is there a
plan with ``T`` below ``U``?", ``docs/dp.md``): one that finds a plan finds the
optimum, one that finds none proves ``U`` a lower bound. :mod:`.dp_parallel` runs them
in forked processes of one machine; here each is a task of a ``distributed`` cluster,
so a run can use the cores of several machines. The rules are the same:

- tasks are submitted lowest trial first, with that order as their priority, so a
  cluster of ``n`` worker threads walks the ladder ``n`` rungs at a time;
- the run ends at the first trial that finds a plan; a trial that finds none stops
  every trial below it (they would fail too), and every trial still running is stopped
  on every way out;
- a task gets only the instance (a worker builds the tables, first bound and option
  dominance once per instance and keeps the last instance's for the run's next trials:
  the set-up of a 256-GPU chain takes seconds) and returns ``(T, stages)`` and its
  counters, never the tables.

**Stopping.** A task that has not started is cancelled. A running one cannot be
interrupted by Dask, so each trial has a ``distributed.Event``; the task's deadline
(:class:`_Stoppable`) looks at it at most every :data:`POLL_S` seconds, besides its own
time limit, and the search stops at its next check. Every event of a run is set when
the run ends, whatever the way out, so no task of it outlives the run by more than a
poll (the worker processes themselves are the cluster's, not ours).

**Time.** The run's time limit covers the tasks: each gets the absolute end of the
run's deadline on the wall clock (``time.time()``), so a task that starts late has
only what is left; machines whose clocks disagree by more than the limit's slack
should not share a cluster.
"""

from __future__ import annotations

import threading
import time
import uuid

from ..deadline import Deadline, TimeUp
from ..instance import InstanceError
from ..result import OptionError
from .dp_parallel import settle

#: how often (seconds of wall time at most) a task asks whether its trial was stopped
POLL_S = 0.2
#: how long to try to reach the scheduler (a run's limit may be shorter: the smaller wins)
CONNECT_S = 10.0


class Unreachable(RuntimeError):
    """No scheduler answers at a well-formed address (the run's status is ``error``)."""


def check(scheduler) -> None:
    """Refuse an address Dask cannot read (:class:`~chainpipe.result.OptionError`)."""
    from ..dask_cluster import DaskMissing, check_scheduler

    try:
        check_scheduler(scheduler, "dp: -O scheduler")
    except InstanceError as exc:
        raise OptionError(exc.problems[0]) from None
    except DaskMissing as exc:
        raise OptionError(f"dp: -O scheduler: {exc}") from None


class _Stoppable(Deadline):
    """A task's deadline: its share of the run's time limit, or its trial's stop event,
    whichever comes first (the event is looked at every :data:`POLL_S` seconds)."""

    __slots__ = ("event", "polled")

    def __init__(self, seconds: float | None, event):
        super().__init__(seconds)
        self.event, self.polled = event, time.monotonic()

    def check(self) -> None:
        super().check()
        now = time.monotonic()
        if now - self.polled >= POLL_S:
            self.polled = now
            if self.event.is_set():
                raise TimeUp


def trial_task(instance, trial: float, ends_at: float | None, stop: str):
    """One trial on a worker: ``(kind, found, stats)`` with ``kind`` ``done``,
    ``timeout`` or ``error`` and ``found`` as the search's ``run()``.

    Parameters
    ----------
    instance : Instance
        The instance (a worker builds its own tables).
    trial : float
        The bound ``U``: is there a plan with ``T < U``?
    ends_at : float or None
        When the run's time limit ends, on the wall clock (``None``: no limit).
    stop : str
        The name of the trial's ``distributed.Event``.
    """
    from distributed import Event, get_client

    from .dp import trial_search

    seconds = None if ends_at is None else max(0.0, ends_at - time.time())
    deadline = _Stoppable(seconds, Event(stop, client=get_client()))  # the worker's client
    stats: dict = {}
    try:
        search = trial_search(_setup(instance, deadline), trial, deadline)
        found = search.run()
        return "done", found, dict(search.stats)
    except TimeUp:
        return "timeout", None, stats
    except Exception as exc:  # reported by the caller, which raises
        return "error", None, {"error": f"{type(exc).__name__}: {exc}"}


#: the worker's set-up of the last instance it searched: ``(digest, setup)``
_LAST: list = []
#: the deadline of the task a worker thread runs
_CURRENT = threading.local()


class _ThreadsDeadline:
    """The deadline a shared set-up checks (its option capacity keeps the check it was
    built with and calls it in later searches): the running thread's task's own."""

    @staticmethod
    def check() -> None:
        _CURRENT.deadline.check()


def _setup(instance, deadline: Deadline) -> tuple:
    """:func:`.dp.trial_setup` of ``instance``, made once per worker process and instance
    (the trials of a run share it; only the last instance's is kept). Tasks running side
    by side in one worker may both build it; the searches only read it, and every check
    of a deadline it makes is the running task's (:class:`_ThreadsDeadline`)."""
    from ..io import instance_digest
    from .dp import trial_setup

    _CURRENT.deadline = deadline
    key = instance_digest(instance)
    if _LAST and _LAST[0][0] == key:
        return _LAST[0][1]
    setup = trial_setup(instance, _ThreadsDeadline())
    _LAST[:] = [(key, setup)]
    return setup


def run_trials(instance, trials: list[float], deadline: Deadline, scheduler,
               on_result=None, check=None):
    """Search ``trials`` (ascending bounds) as tasks of the cluster at ``scheduler``.

    Parameters
    ----------
    instance : Instance
    trials : list of float
        The bounds, ascending.
    deadline : Deadline
        Bounds the whole run, connecting included; the tasks check it themselves too.
    scheduler : str or object
        The scheduler's address, a cluster or a ``distributed.Client``.
    on_result : callable, optional
        ``on_result(trial, found, stats)`` for each trial that ends, in that order.
    check : callable, optional
        Called once in this process once the trials are submitted: ``True`` proves that
        no trial can find a plan (the instance has none), which ends the run.

    Returns
    -------
    tuple
        ``(found, proven)`` as :func:`.dp_parallel.run_trials`.

    Raises
    ------
    TimeUp
        The deadline passed before a trial found a plan.
    """
    from ..dask_cluster import connect

    limit = min(CONNECT_S, deadline.remaining())
    if limit <= 0:
        raise TimeUp()
    try:
        client, own = connect(scheduler, timeout=f"{limit}s")
    except OSError as exc:  # no scheduler there (the address was well formed)
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Unreachable(f"dp: -O scheduler: no Dask scheduler answered at {scheduler} "
                          f"within {limit:g} s ({why})") from None
    try:
        return _walk(client, instance, sorted(trials), deadline, on_result, check)
    finally:
        if own:
            client.close()


def _walk(client, instance, trials, deadline: Deadline, on_result, check=None):
    """Submit the trials, take their results as they end (the lowest first of those
    that end together), stop what is not needed; ``check`` as :func:`run_trials`."""
    from distributed import Event, wait

    run = uuid.uuid4().hex
    ends_at = None if deadline.unlimited else time.time() + deadline.remaining()
    stops = {t: f"chainpipe-dp-stop-{run}-{i}" for i, t in enumerate(trials)}
    futures = {}
    for i, trial in enumerate(trials):
        fut = client.submit(trial_task, instance, trial, ends_at, stops[trial], pure=False,
                            priority=len(trials) - i, key=f"chainpipe-dp-{run}-{i}")
        futures[fut] = trial
    live = dict(futures)

    def stop(fut) -> None:
        live.pop(fut, None)
        fut.cancel()
        Event(stops[futures[fut]], client=client).set()

    proven = None
    try:
        if check is not None and check():
            return None, proven
        while live:
            left = None if deadline.unlimited else deadline.remaining() + 0.5
            try:
                done, _ = wait(list(live), timeout=left, return_when="FIRST_COMPLETED")
            except TimeoutError:  # distributed's is the built-in one
                raise TimeUp() from None
            for fut in sorted(done, key=futures.get):
                if fut not in live:
                    continue  # stopped below a proven bound while this batch was read
                trial = live.pop(fut)
                kind, found, stats = _result(fut)
                if settle(trial, kind, found, stats, "on the cluster", on_result):
                    return found, proven
                proven = trial if proven is None else max(proven, trial)
                for other in [f for f, t in live.items() if t <= trial]:
                    stop(other)  # below a proven bound: it would fail
        return None, proven
    finally:
        for fut in list(live):
            stop(fut)


def _result(fut):
    """A task's ``(kind, found, stats)``; a task the cluster lost reads as an error."""
    try:
        return fut.result()
    except Exception as exc:
        return "error", None, {"error": f"{type(exc).__name__}: {exc}"}
