"""``dp`` on several cores: the trial bounds of one run searched at once (``threads``).

Every trial of :func:`chainpipe.solvers.dp.run` is an independent search: "is there a
plan with ``T`` below ``U``?". A trial that finds one finds the optimum (it keeps the
best plan below its bound, and the optimum is below it), and one that finds none
proves ``U`` a lower bound, so that every trial below ``U`` would fail too. So the
trials can run side by side in any order: the run ends at the first that succeeds,
and a failed one stops every running trial below it. With ``n`` processes the
ladder is walked ``n`` rungs at a time, lowest first.

The searches run in forked processes (they share the built tables without copying
them, and the compiled kernels, which hold the GIL only between their calls, need
processes to run in parallel). Each child is killed when the run's process dies
(:func:`chainpipe.lifeline.die_with_parent`) and on every way out of
:func:`run_trials`; only ``(T, stages)`` and the search's counters come back.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from multiprocessing.connection import wait

from ..deadline import Deadline, TimeUp
from ..lifeline import die_with_parent


def available() -> bool:
    """Whether forked processes can run the trials (POSIX with ``fork``)."""
    return "fork" in mp.get_all_start_methods()


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
    ctx = mp.get_context("fork")
    parent = os.getpid()
    waiting = sorted(trials)
    running: dict = {}  # connection -> (process, trial)
    proven = None
    try:
        while waiting or running:
            while waiting and len(running) < processes:
                trial = waiting.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                child = ctx.Process(target=_child, args=(make_search, trial, send, parent),
                                    daemon=True)
                child.start()
                send.close()
                running[receive] = (child, trial)
            if check is not None:
                if check():
                    return None, proven
                check = None
            ready = wait(list(running), timeout=None if deadline.unlimited
                         else max(deadline.remaining(), 0.0) + 0.5)
            if not ready:
                raise TimeUp()
            for conn in ready:
                child, trial = running.pop(conn)
                try:
                    kind, found, stats = conn.recv()
                except EOFError:  # the child died without a word (killed, out of memory)
                    kind, found, stats = "error", None, {}
                conn.close()
                child.join()
                if settle(trial, kind, found, stats, "in its process", on_result):
                    return found, proven
                proven = trial if proven is None else max(proven, trial)
                for other in [c for c, (_, t) in running.items() if t <= trial]:
                    _stop(*running.pop(other))  # below a proven bound: it would fail
                waiting = [t for t in waiting if t > trial]
        return None, proven
    finally:
        for child, _ in running.values():
            _stop(child)


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
        ctx = mp.get_context("fork")
        self.deadline = deadline
        self.receive, send = ctx.Pipe(duplex=False)
        self.child = ctx.Process(target=_beside, args=(work, send, os.getpid()), daemon=True)
        self.child.start()
        send.close()

    def result(self):
        """The value ``work()`` returned in the child."""
        timeout = None if self.deadline.unlimited else max(self.deadline.remaining(), 0.0) + 0.5
        try:
            if not wait([self.receive], timeout=timeout):
                raise TimeUp()
            try:
                kind, value = self.receive.recv()
            except EOFError:  # the child died without a word (killed, out of memory)
                kind, value = "error", "no word"
        finally:
            self.stop()
        if kind == "timeout":
            raise TimeUp()
        if kind == "error":
            raise RuntimeError(f"dp: a search beside this one failed in its process ({value})")
        return value

    def stop(self) -> None:
        """Kill the child (if it still runs) and reap it."""
        if self.child is not None:
            _stop(self.child)
            self.receive.close()
            self.child = None

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


def _beside(work, send, parent: int) -> None:
    """The child of :class:`Beside`: ``work()``'s value sent as ``(kind, value)``."""
    die_with_parent(parent)
    try:
        send.send(("done", work()))
    except TimeUp:
        send.send(("timeout", None))
    except Exception as exc:  # reported by the parent, which raises
        send.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        send.close()


def _stop(child, *_trial) -> None:
    """Kill a trial's process and reap it."""
    child.kill()
    child.join()


def _child(make_search, trial: float, send, parent: int) -> None:
    """One trial in a forked process: its outcome sent as ``(kind, found, stats)``."""
    die_with_parent(parent)
    search = make_search(trial)
    try:
        found = search.run()
        send.send(("done", found, dict(search.stats)))
    except TimeUp:
        send.send(("timeout", None, dict(search.stats)))
    except Exception as exc:  # reported by the parent, which raises
        send.send(("error", None, {"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        send.close()
