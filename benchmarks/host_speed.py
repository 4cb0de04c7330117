"""The host's speed on a fixed workload, so tables measured on different days compare.

The 2-core machines the benchmarks run on differ from one session to the next (the same
``dp`` code took 21.9 CPU s on ``v3-large-03`` one day and about 9 s on another). One
host drifts too: within one session the reference's Python figure went from 0.294 to
0.324 s and the same ``dp`` solves by up to 25 %, so timings that are compared are
taken back to back.
:func:`reference` times work that never changes with the package (the interpreter, and
numpy sorting and reducing), so a table that quotes it can be scaled to another day's:
divide both tables' times by their own reference.

    python benchmarks/host_speed.py     # prints the reference line
"""

from __future__ import annotations

import time

import numpy as np


def _python_work() -> int:
    """A fixed pure-Python loop (dict, tuple and integer work, as a search's Python layer)."""
    seen: dict = {}
    acc = 0
    for i in range(1_500_000):
        key = (i % 977, i % 13)
        acc = (acc + seen.get(key, i) * 31) % 1_000_003
        seen[key] = acc
    return acc


def _numpy_work() -> float:
    """A fixed numpy workload (sorting, cumulative and pairwise reductions)."""
    rng = np.random.default_rng(12345)
    total = 0.0
    for _ in range(45):
        a = rng.random((800, 400))
        a.sort(axis=1)
        total += float(np.maximum.accumulate(a, axis=0).sum() + np.minimum(a[:, :1], a).sum())
    return total


def _memory_work() -> float:
    """A fixed gather over 32 MB in random order (the last-level cache missed, as a
    search's tables and labels are read)."""
    rng = np.random.default_rng(54321)
    a = rng.random(4_000_000)
    idx = rng.permutation(len(a))
    return float(a[idx].sum() + a[idx[::-1]].sum())


def _cpu(fn) -> float:
    """The least CPU time of 3 runs of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def reference() -> dict:
    """CPU seconds of the fixed workloads (least of 3 runs each): ``python``, ``numpy``,
    ``memory``."""
    return {"python": _cpu(_python_work), "numpy": _cpu(_numpy_work),
            "memory": _cpu(_memory_work)}


def reference_line() -> str:
    """One line for a results table: the reference's CPU times."""
    ref = reference()
    return (f"Host speed reference (`benchmarks/host_speed.py`, fixed work, least of 3; "
            f"lower is faster): Python {ref['python']:.3f} CPU s, numpy {ref['numpy']:.3f} "
            f"CPU s, memory {ref['memory']:.3f} CPU s. Tables of different days compare "
            f"after dividing by it; within a day, compare timings back to back.")


if __name__ == "__main__":
    print(reference_line())
