"""Python's cyclic garbage collector paced for a solve (:func:`fewer_collections`).

A search allocates many small containers (tuples of labels and keys, lists of moves,
dictionaries of states) that live for the whole solve and never form cycles; the
collector, which runs its youngest generation every 700 allocations by default, walks
them again and again and its older generations walk every cache the solve has built.
Measured (back to back, one process, the same answers): ``dp`` on ``v3-large-03``
6.36 and 6.84 CPU s with the default thresholds against 6.10 and 6.20 s with those of
:data:`THRESHOLDS`; ``cdynp`` in process on ``v3-large-01`` 13.71 and 13.60 against
12.97 and 12.81 s (``py-spy --native``: ``gc_collect_main`` 9.5 % of its samples).
Objects free themselves by reference counting as before; only cyclic garbage waits
longer (a few tens of thousands of allocations more), so memory is unchanged.
"""

from __future__ import annotations

import contextlib
import gc
import threading

#: the collector's thresholds during a solve (generation 0, 1, 2; Python's: 700, 10, 10)
THRESHOLDS = (50_000, 20, 100)

_lock = threading.Lock()
_depth = 0
_saved: tuple = ()


@contextlib.contextmanager
def fewer_collections():
    """Run the body with the collector's thresholds at :data:`THRESHOLDS` (never lower
    than they were), restoring them when the outermost such body ends, whatever the way
    out. Nested and concurrent uses (threads of one process) share one change."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*(max(a, b) for a, b in zip(THRESHOLDS, _saved)))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
