"""``dp`` on several cores: the trial bounds of one run searched at once (``threads``).

Every trial of :func:`chainpipe.solvers.dp.run` is an independent search: "is there a
plan with ``T`` below ``U``?". A trial that finds one finds the optimum (it keeps the
best plan below its bound, and the optimum is below it), and one that finds none
proves ``U`` a lower bound, so that every trial below ``U`` would fail too. So the
trials can run side by side in any order: the run ends at the first that succeeds,
and a failed one stops every running trial below it. With ``n`` processes the
ladder is walked ``n`` rungs at a time, lowest first.

The searches run in forked processes (:class:`chainpipe.solvers.forked.Fork`: they share
the built tables without copying them, and the compiled kernels, which hold the GIL only
between their calls, need processes to run in parallel). Each child dies with the run's
process and is killed on every way out of :func:`run_trials`; only ``(T, stages)`` and
the search's counters come back.
"""

from __future__ import annotations

import contextlib
import os
import select

from ..deadline import Deadline, TimeUp
from .forked import Fork


def available() -> bool:
    """Whether forked processes can run the trials (POSIX with ``fork``)."""
    return hasattr(os, "fork")


def run_trials(make_search, trials: list[float], deadline: Deadline, processes: int,
               on_result=None, check=None):
    """Search ``trials`` (ascending bounds) in up to ``processes`` forked processes.

    Parameters
    ----------
    make_search : callable
        ``make_search(trial)`` returns a search whose ``run()`` gives ``(T, stages)`` or
        ``None`` and whose ``stats`` is a dict; called in the child.
    trials : list of float
        The bounds, ascending.
    deadline : Deadline
        Bounds the whole run; the children check it themselves too.
    processes : int
        How many trials run at once.
    on_result : callable, optional
        ``on_result(trial, found, stats)`` for each trial that ends (``found`` as the
        search's ``run()``); in the order they end.
    check : callable, optional
        Called once in this process while the first trials run: ``True`` proves that no
        trial can find a plan (the instance has none), which ends the run.

    Returns
    -------
    tuple
        ``(found, proven)``: the first plan found as ``(T, stages)`` (``None`` if no
        trial found one) and the largest bound a failed trial proved (``None`` if none).

    Raises
    ------
    TimeUp
        The deadline passed before a trial found a plan.
    """
    waiting = sorted(trials)
    running: dict = {}  # Fork -> trial
    proven = None
    try:
        while waiting or running:
            while waiting and len(running) < processes:
                trial = waiting.pop(0)
                running[Fork(lambda _emit, t=trial: _search(make_search, t))] = trial
            if check is not None:
                if check():
                    return None, proven
                check = None
            ready, _, _ = select.select(list(running), [], [], None if deadline.unlimited
                                        else max(deadline.remaining(), 0.0) + 0.5)
            if not ready:
                raise TimeUp()
            for child in ready:
                if child not in running or child.take() is None:
                    continue  # stopped below a bound just proven, or part of its answer
                trial = running.pop(child)
                child.stop()
                kind, value, word = _told(child.outcome)
                found, stats = value if kind == "done" else (None, {"error": word})
                if settle(trial, kind, found, stats, "in its process", on_result):
                    return found, proven
                proven = trial if proven is None else max(proven, trial)
                for other in [c for c, t in running.items() if t <= trial]:
                    running.pop(other)
                    other.stop()  # below a proven bound: it would fail
                waiting = [t for t in waiting if t > trial]
        return None, proven
    finally:
        for child in running:
            child.stop()


def settle(trial: float, kind: str, found, stats: dict, where: str, on_result) -> bool:
    """What one ended trial says (``kind`` ``done``, ``timeout`` or ``error``, as its
    process or task sent it): raise :class:`TimeUp` or ``RuntimeError`` (naming
    ``where`` it ran), else report it to ``on_result`` and return whether it found a
    plan. Shared by the forked processes and the Dask tasks (:mod:`.dp_dask`)."""
    if kind == "timeout":
        raise TimeUp()
    if kind == "error":
        raise RuntimeError(f"dp: the search of trial T < {trial:.6g} s failed {where} "
                           f"({stats.get('error', 'no word')})")
    if on_result is not None:
        on_result(trial, found, stats)
    return found is not None


class Beside:
    """One piece of work run in a forked process while this process does another.

    ``Beside(work, deadline)`` forks at once; the child calls ``work()`` and sends its
    value back. :meth:`result` waits for it (no longer than the deadline allows, and
    raises :class:`TimeUp` or ``RuntimeError`` as :func:`settle` does); :meth:`stop`
    kills the child unread. Used as a context manager, the child never outlives the
    block. The child sees this process's state as it was at the fork: whatever it
    builds besides ``work()``'s value (caches, walks) is lost with it.
    """

    def __init__(self, work, deadline: Deadline):
        self.deadline = deadline
        self.child = Fork(lambda _emit: work())

    def result(self):
        """The value ``work()`` returned in the child."""
        timeout = None if self.deadline.unlimited else max(self.deadline.remaining(), 0.0) + 0.5
        try:
            if self.child.wait(timeout) is None:
                raise TimeUp()
            kind, value, word = _told(self.child.outcome)
        finally:
            self.stop()
        if kind == "timeout":
            raise TimeUp()
        if kind == "error":
            raise RuntimeError(f"dp: a search beside this one failed in its process ({word})")
        return value

    def stop(self) -> None:
        """Kill the child (if it still runs) and reap it."""
        self.child.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def spread(work, items: list, deadline: Deadline, processes: int) -> list:
    """``[work(x) for x in items]``, the items shared round-robin between this process
    and ``processes - 1`` forked ones (:class:`Beside`): for independent pieces of work
    whose values are small (each child's list comes back pickled)."""
    if processes < 2 or len(items) < 2 or not available():
        return [work(x) for x in items]
    n = min(processes, len(items))
    with contextlib.ExitStack() as stack:
        others = [stack.enter_context(Beside(lambda k=k: [work(x) for x in items[k::n]],
                                             deadline)) for k in range(1, n)]
        shares = [[work(x) for x in items[0::n]]] + [b.result() for b in others]
    return [shares[q % n][q // n] for q in range(len(items))]


def _search(make_search, trial: float) -> tuple:
    """One trial, in its forked process: ``(found, stats)`` of ``make_search(trial)``."""
    search = make_search(trial)
    return search.run(), dict(search.stats)


def _told(outcome: tuple) -> tuple:
    """``(kind, value, word)`` from a :class:`Fork`'s outcome: ``kind`` as :func:`settle`
    reads it (``done``, ``timeout`` or ``error``), ``work``'s value when done, and for an
    error what it raised (or that the child ended without a word: killed, out of
    memory)."""
    kind, payload = outcome
    if kind == "done":
        return "done", payload, None
    if kind == "error" and isinstance(payload, TimeUp):
        return "timeout", None, None
    word = "no word" if kind == "gone" else f"{type(payload).__name__}: {payload}"
    return "error", None, word
