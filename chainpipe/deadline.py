"""One way to stop: the :class:`Deadline` every solver checks.

A deadline is made once per solve, from the time limit, *before* any table or
model is built, so building counts against the limit. Solvers check it in
their loops (:meth:`Deadline.check` raises :class:`TimeUp`) and hand a backend
only what is left (:meth:`Deadline.backend_limit`, never zero or negative).
"""

from __future__ import annotations

import math
import time


class TimeUp(Exception):
    """The deadline passed; the solver returns what it has (status ``time_limit`` rules)."""


class Deadline:
    """A point on the monotonic clock by which a solve must end.

    Parameters
    ----------
    time_limit : float or None
        Seconds from now; ``None`` means no limit. Must be finite and ``>= 0``.

    Examples
    --------
    >>> d = Deadline(None)
    >>> d.expired()
    False
    >>> d.remaining() == float("inf")
    True
    """

    __slots__ = ("start", "limit", "at")

    def __init__(self, time_limit: float | None = None):
        if time_limit is not None:
            time_limit = float(time_limit)
            if not math.isfinite(time_limit) or time_limit < 0:
                raise ValueError(f"time limit must be a finite number >= 0, got {time_limit!r}")
        self.start = time.monotonic()
        self.limit = time_limit
        self.at = math.inf if time_limit is None else self.start + time_limit

    @classmethod
    def of(cls, value: Deadline | float | None) -> Deadline:
        """``value`` if it is a deadline already, else a new one from a time limit."""
        return value if isinstance(value, Deadline) else cls(value)

    @property
    def unlimited(self) -> bool:
        return self.limit is None

    def elapsed(self) -> float:
        """Seconds since the deadline was made."""
        return time.monotonic() - self.start

    def remaining(self) -> float:
        """Seconds left (``inf`` without a limit, ``0.0`` once past)."""
        if self.limit is None:
            return math.inf
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.limit is not None and time.monotonic() >= self.at

    def cpu_end(self) -> float:
        """The process CPU time (:func:`time.process_time`) at which the deadline ends:
        ``inf`` for one on the wall clock alone (a CPU phase of a solve says its own)."""
        return math.inf

    def wall(self) -> Deadline:
        """The deadline on the wall clock that bounds this one: itself here (a CPU
        phase gives the one it is part of), for a backend's own wall-clock limit."""
        return self

    def check(self) -> None:
        """Raise :class:`TimeUp` if the deadline has passed."""
        if self.expired():
            raise TimeUp

    def backend_limit(self, minimum: float = 0.05) -> float | None:
        """Seconds to give a backend: what is left, at least ``minimum`` (never 0 or below).

        ``None`` when there is no limit. A backend that reads 0 as "no limit" (CBC)
        must never be given 0, so a spent deadline still yields ``minimum``; callers
        check :meth:`expired` first when they would rather not start the backend.
        """
        if self.limit is None:
            return None
        return max(minimum, self.remaining())

    def __repr__(self) -> str:
        return f"Deadline(limit={self.limit!r}, remaining={self.remaining():.3f})"
