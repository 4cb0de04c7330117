"""A DC's floor under the period of a plan's prefix, from what its own devices hold.

``dp`` bounds the period of every completion of a state by the least bottleneck ``B``
under which the devices still free hold the prefix's FLOP (``dp.LayerCapacity``: per
group, an unbounded knapsack of the most FLOP one stage with ``C <= B`` holds and that
fits memory at the least stash; ``docs/dp.md``, "Bounds"). A CDynP agent knows only its
own devices, so it bounds the prefix ``[0, a)`` before a label of usage ``u`` by

- its own free devices' knapsack (``count - u`` per group, the same tables ``dp`` uses,
  built on the DC's own one-DC instance), plus
- ``A B`` for the devices of DCs ``1..k-1``: ``A`` is the prefix pass's bound on their
  FLOP/s (``docs/privacy.md``, "The prefix pass"), and stages on devices of ``r`` FLOP/s
  in all with every ``C <= B`` hold at most ``r B`` FLOP (``C`` is at least a stage's
  FLOP over its devices' rate; tensor-parallel all-reduces only add).

The floor is the least ``B`` at which the two together hold ``FLOP[0, a)``; at DC 1 of a
chain (``A = 0``) it is ``dp``'s own floor for a prefix on that DC. Nothing of it is sent:
it only prunes the DC's own labels (a label whose prefix cannot run within the bound).

This module is the agents' one entry to ``dp``'s knapsack (:class:`Floors`), so a change
there has one place to follow here.
"""

from __future__ import annotations

import numpy as np

from ...tables import CostTables


class Floors:
    """Floors under the period of the prefix ``[0, a)`` per own usage (module docstring).

    Parameters
    ----------
    tables : CostTables
        The DC's own one-DC tables: its uncapped ones (every option holds, a floor under
        any ``sync_cap``), or under a cap (options it may not use hold nothing).
    upstream : float
        ``A``: a bound on the FLOP/s of DCs ``1..k-1``'s devices (0 at DC 1).
    check : callable, optional
        The deadline's check.
    capacity : LayerCapacity, optional
        ``dp``'s knapsack of these tables (:attr:`capacity` of another :class:`Floors` of
        them: it does not read ``upstream``), else built here.
    """

    def __init__(self, tables: CostTables, upstream: float, check=None, capacity=None):
        from ..dp import HOLD_SLACK, LayerCapacity, usage_caps

        self.t, self.up = tables, float(upstream)
        self.count = usage_caps(tables)
        self.capacity = capacity or LayerCapacity(tables, self.count, check)
        self.flop = np.asarray(tables.flop_prefix, dtype=float) / HOLD_SLACK
        self._memo: dict[tuple, np.ndarray] = {}

    @staticmethod
    def affordable(tables: CostTables) -> bool:
        """Whether ``dp``'s knapsack tables stay within its size limit for this DC."""
        from ..dp import LayerCapacity

        return bool(tables.M > 1 and LayerCapacity.affordable(tables))

    def period(self, usage: tuple) -> np.ndarray:
        """Per prefix end ``a``: the floor under every ``C`` of a prefix ``[0, a)`` that
        runs upstream and on the own devices ``usage`` leaves free (0 at ``a = 0``,
        ``inf`` where they cannot hold it)."""
        got = self._memo.get(usage)
        if got is None:
            here = [(g, int(self.t.count[g]) - int(x)) for g, x in enumerate(usage)]
            points, values = self.capacity.curve([], here)
            got = self._memo[usage] = least_bottleneck(points, values, self.up, self.flop)
        return got


def least_bottleneck(points: np.ndarray, values: np.ndarray, rate: float,
                     flop: np.ndarray) -> np.ndarray:
    """The least ``B`` with ``held(B) + rate B >= flop`` per value of ``flop``.

    ``held`` is a step function: ``values[i]`` from ``points[i]`` on (0 before the first
    point), non-decreasing. On the step ``[points[i], points[i + 1])`` the least ``B`` is
    ``max(points[i], (flop - values[i]) / rate)`` if below the next point; before the first
    point it is ``flop / rate``. A ``flop`` of 0 or less (an empty prefix) gets 0.

    Parameters
    ----------
    points, values : numpy.ndarray
        The step function (``dp.LayerCapacity.curve``): breakpoints, ascending, and the
        FLOP held from each on.
    rate : float
        FLOP/s of the devices counted as a line (0: none).
    flop : numpy.ndarray
        The FLOP to hold, per prefix.

    Returns
    -------
    numpy.ndarray
        The least bottleneck per value of ``flop`` (``inf`` where none holds it).
    """
    from .period_fast import least_bottleneck as compiled

    flop = np.ascontiguousarray(flop, dtype=float)
    starts = np.concatenate(([0.0], np.asarray(points, dtype=float)))
    held = np.concatenate(([0.0], np.asarray(values, dtype=float)))
    # On step i the least B is max(starts[i], line(i)) if below ends[i] = starts[i + 1],
    # line(i) = (flop - held[i]) / rate (0 where nothing is left to hold). line(i) does not
    # rise with i (held does not fall; rounding is monotone) and starts rise, so "line(i)
    # <= starts[i]" holds from a first step i0 on (n: none), found by bisection per
    # prefix. From i0 on the least is starts[i0] (a repeated breakpoint's empty step gives
    # the next, equal one); before it only step i0 - 1 can reach below its end (on an
    # earlier step i, line(i) >= line(i + 1) > starts[i + 1], its end), at line(i0 - 1);
    # with no i0, the last step (no end) at line(n - 1). Compiled: the loop per prefix
    # (:func:`.period_fast.least_bottleneck`).
    return compiled(starts, held, float(rate), flop)
