"""The prefix-curve pass: a floor under the prefix before a DC's labels, built along the
chain (``docs/privacy.md``, "The prefix-curve pass").

In a period run of one pipeline under 1F1B whose owner gives the public ``curve_low``
(run option: a floor under the optimum, the classic optimum say) and an ``upper_bound``,
every DC agrees on a public grid of period caps (:func:`cap_grid`). For each cap ``lam``,
DC ``k`` receives from DC ``k - 1`` (in its ``prefix`` message) a table ``E[a, q]``: the
least *fill* (compute plus the traversals between its own stages) of a prefix ``[0, a)``
of the model on DCs ``1..k-1`` whose every stage's ``C`` and boundary's ``U`` is at most
``lam`` and whose windows' running excess stays at most 0 (when every stage's loops count),
per bucket ``q`` of that excess. It walks its own devices from it
(:func:`.walk_fast.dc_walk`, ``dp``'s own rules), keeps per prefix end and own usage the
least fill of a prefix that leaves that usage's devices free (its *rows*, private), and
passes on the least of the incoming table and its own walk's (:meth:`CurvePass.sent`),
rounded *down* to the public grid ``2^(n / CURVE_STEPS)`` and with the rows of prefixes
shorter than :data:`.protocol.WITHHELD` layers replaced by 0: still a floor, revealing no prefix of
a layer or few.

A label of state ``(x, u)`` (suffix ``[x, L)``, own usage ``u``) is dropped when ``total +
sync + min_i (CF_i + (M - 1) max(x1, lam_(i-1)))``, over the caps ``lam_i >= x1`` (and ``(M
- 1) max(x1, lam_last)`` past the grid), lies above the run's bound (:func:`paired`): a
plan whose period lies in ``(lam_(i-1), lam_i]`` has a prefix that meets cap ``i``, whose
fill is at least ``CF_i`` (the boundary at ``x`` and the loops across it left out), and a
steady part of at least ``M - 1`` times the larger of the label's period and
``lam_(i-1)``. The last DC reads off its table the floor under every plan within the
grid's top (:meth:`CurvePass.floor`), which it reports to the owner (``curve_floor_s``):
the owner's ladder of public bounds starts there (:func:`chainpipe.solvers.cdynp.solve_chain`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import weakref
from collections import OrderedDict
from itertools import chain

import numpy as np

from ... import cost
from ...instance import Link
from ..prefix_curve import BUCKETS, _arrays, _walked_options
from ..prefix_kernel import SLACK
from . import protocol
from .protocol import CURVE_MOST, CURVE_STEPS, CURVE_ZERO

#: caps per doubling of the grid of period caps (:func:`cap_grid`: a step of about 2.2%;
#: measured on ``v3-large-01``'s whole solve, load 3.1: 64 per doubling 83.7 CPU s, 32
#: 67.0 s, 16 69.4 s; ``-02`` 57.4 -> 53.5 s with 32)
CAP_STEPS = 32

#: caps per doubling in a compressed run (a step of about 4.4%), and at most this many
#: caps: with one excess bucket its table (caps x prefix ends, about 0.65 KB per cap on
#: ``v3/large``) stays within the messages' size target of 16 KiB. Measured on
#: ``v3-large-01``'s one pipeline (digits=3, max_entries=4): 8 per doubling gave the floor
#: 5.66 s and the plan 7.17 s, 16 the floor 5.80 s and 7.09 s (exact: 6.57 s, 6.87 s)
COMPRESSED_CAP_STEPS = 16
COMPRESSED_CAPS_MOST = 16


def cap_grid(low: float, top: float, M: int, steps: int = CAP_STEPS,
             most: int = CURVE_MOST, keep_low: bool = False) -> np.ndarray:
    """The public grid of period caps of a run with floor ``low`` and bound ``top`` (both
    public) over ``M`` microbatches: ``2^(n / CAP_STEPS)`` for every ``n`` from the last
    point at or below ``low / (M - 1)`` up to the first at or above ``top / (M - 1)``, at
    most :data:`.protocol.CURVE_MOST` of them (the lowest dropped first: a weaker floor,
    still one). Empty when there is nothing to cap (one microbatch, or no finite bound).
    The points are absolute, so runs under different bounds share their caps' walks.
    ``steps``: caps per doubling (:data:`CAP_STEPS`; :data:`COMPRESSED_CAP_STEPS` in a
    compressed run), ``most`` caps at most (:data:`COMPRESSED_CAPS_MOST` compressed);
    ``keep_low`` (compressed): past ``most`` the highest caps go instead (a period past the
    grid still counts ``(M - 1) lam_last``). The lowest cap matters most to the floor: its
    term ``E_0[L] + (M - 1) 0`` is void unless no prefix meets it, and a one-bucket table
    (no loops) meets a cap sooner (``v3-large-01``: the floor fell from 5.80 s to 0.94 s
    when the 17th cap from the top, the lowest, was dropped)."""
    if M < 2 or not (0 < low <= top < math.inf):
        return np.empty(0)
    lo = math.floor(math.log2(low / (M - 1)) * steps)
    hi = math.ceil(math.log2(top / (M - 1)) * steps)
    most = min(most, CURVE_MOST)
    if keep_low:
        hi = min(hi, lo + most - 1)
    else:
        lo = max(lo, hi - most + 1)
    return 2.0 ** (np.arange(lo, hi + 1) / steps)


def windows_capped(tables) -> bool:
    """Whether every stage's loops count (1F1B with more microbatches than layers): the
    windows are then capped too, as ``dp``'s curve caps them."""
    return tables.schedule == "1f1b" and tables.M > tables.L


def encode_rows(E: np.ndarray) -> list:
    """The table ``E[cap, a, q]`` as sent: per cap, the rows of prefix ends ``a >=``
    :data:`.protocol.WITHHELD` (those below are 0 and not sent), each a list of integers
    ``n`` (the fill rounded down to ``2^(n / CURVE_STEPS)``; :data:`CURVE_ZERO`: 0) or
    ``null`` (no prefix meets the cap)."""
    part = E[:, protocol.WITHHELD:]
    n = _exponents(part).astype(object)
    n[~np.isfinite(part)] = None
    return n.tolist()


def _exponents(v: np.ndarray) -> np.ndarray:
    """Per entry the largest ``n`` with ``2^(n / CURVE_STEPS) <= v`` (:data:`CURVE_ZERO`
    for 0 or anything below the grid's least point; any value where ``v`` is not finite)."""
    v = np.asarray(v, dtype=float)
    ok = np.isfinite(v) & (v > 0)
    safe = np.where(ok, v, 1.0)
    n = np.floor(np.log2(safe) * CURVE_STEPS + 1e-9)
    n -= 2.0 ** (n / CURVE_STEPS) > safe  # log2 rounded up across a grid point
    n -= 2.0 ** (n / CURVE_STEPS) > safe
    return np.where(ok, np.maximum(n, CURVE_ZERO), CURVE_ZERO).astype(np.int64)


def _values(n: np.ndarray) -> np.ndarray:
    """:func:`_exponents` read back (:data:`CURVE_ZERO` as 0). The power is taken of the
    entries above :data:`CURVE_ZERO` only (``2^(CURVE_ZERO / CURVE_STEPS)`` underflows,
    a slow path of ``pow`` taken per entry: the tables' nulls and zeros are many), an
    array as before (NumPy's power of an array gives every entry the same bits whatever
    the array's length; a Python scalar's may differ in the last bit)."""
    n = np.asarray(n)
    out = np.zeros(n.shape)
    on = n > CURVE_ZERO
    out[on] = 2.0 ** (n[on] / CURVE_STEPS)
    return out


def decode_rows(rows: list, L: int, nb: int) -> np.ndarray:
    """:func:`encode_rows` read back: ``E[cap, a, q]`` over ``a = 0..L`` and ``nb``
    buckets, 0 below :data:`.protocol.WITHHELD` (the rows withheld, and the empty
    prefix)."""
    E = np.zeros((len(rows), L + 1, nb))
    if rows and rows[0]:  # (flat first: NumPy reads a flat list faster than nested ones)
        got = np.array(list(chain.from_iterable(chain.from_iterable(rows))),
                       dtype=float).reshape(len(rows), -1, nb)  # null: nan
        E[:, protocol.WITHHELD:] = np.where(np.isnan(got), np.inf,
                                            _values(np.nan_to_num(got, nan=0.0)))
    return E


def withhold(E: np.ndarray) -> np.ndarray:
    """``E`` as a floor that is sent: every fill rounded down to the public grid, the rows
    of prefixes shorter than :data:`.protocol.WITHHELD` layers 0."""
    out = np.where(np.isfinite(E), _values(_exponents(E)), E)
    out[:, :protocol.WITHHELD] = 0.0
    return out


def walk_key(tables, link_in: Link | None) -> bytes:
    """What a DC's walks (:func:`.walk_fast.dc_walk`) read of its tables and link, as a
    digest: the arrays of :func:`chainpipe.solvers.prefix_curve._arrays`, the boundaries'
    bytes, whether the windows are capped, and the link into the DC. The range runs ask one DC at many
    ``M_p`` whose tables differ in nothing a walk reads (an option fits one microbatch at
    every count or at none; compute times, widths and occupancies do not read it), so
    walks kept under this key serve every such ``M_p`` (:class:`CurvePass`' ``walks``).
    Kept on ``tables``. The compute times ``C`` (the bulk: options x ranges per group)
    enter as the digest of each group's ``compute_time`` (``_arrays`` copies them into
    ``C[g, :npairs[g]]``, ``inf`` after, so with ``C``'s shape and ``npairs`` they are
    ``C``), kept per array (:func:`_kept_digest`): a DC's tables at every ``M_p`` and cap
    share those arrays (``v3-large-03``: 62 keys per solve, 6 ms each on hashing ``C``)."""
    key = ("_cdynp_walk_key", None if link_in is None else (
        float(link_in.bandwidth_bytes_per_s), float(link_in.latency_s)))
    got = tables.__dict__.get(key)
    if got is None:
        radix, stride, nV, dc_groups, ngr, C, *rest = _arrays(tables)
        h = hashlib.blake2b(digest_size=20)
        for part in (radix, stride, nV, dc_groups, ngr, C.shape,
                     *(_kept_digest(tables.options(g).compute_time) for g in range(tables.G)),
                     *rest, np.asarray(tables.boundary_bytes, dtype=float),
                     windows_capped(tables), key[1]):
            _update(h, part)
        got = tables.__dict__[key] = h.digest()
    return got


def _update(h, part) -> None:
    """Feed ``part`` (an array: its type, shape and bytes; else its ``repr``) to ``h``."""
    if isinstance(part, np.ndarray):
        h.update(repr((part.dtype.str, part.shape)).encode())
        h.update(np.ascontiguousarray(part).tobytes())
    else:
        h.update(repr(part).encode())


#: :func:`_kept_digest`'s digests by the id of the array, with a weak reference to it
#: (a dead or another array under that id is not this one), the :data:`DIGESTS_KEPT` last
_DIGESTS: OrderedDict = OrderedDict()
DIGESTS_KEPT = 256
_DIGESTS_LOCK = threading.Lock()


def _kept_digest(a: np.ndarray) -> bytes:
    """The digest of array ``a`` (:func:`_update`), kept while ``a`` lives (it must not be
    changed in place: the tables' option arrays never are)."""
    with _DIGESTS_LOCK:
        got = _DIGESTS.get(id(a))
        if got is not None and got[0]() is a:
            _DIGESTS.move_to_end(id(a))
            return got[1]
    h = hashlib.blake2b(digest_size=20)
    _update(h, a)
    got = h.digest()
    with _DIGESTS_LOCK:
        _DIGESTS[id(a)] = (weakref.ref(a), got)
        _DIGESTS.move_to_end(id(a))
        while len(_DIGESTS) > DIGESTS_KEPT:
            _DIGESTS.popitem(last=False)
    return got


class CurvePass:
    """One DC's part of the pass for one run (module docstring).

    Parameters
    ----------
    tables : CostTables
        The DC's own tables (of its one-DC instance).
    grid : ndarray
        The run's public caps (:func:`cap_grid`), at least one.
    link_in : Link or None
        The chain link into this DC (``None`` at the first DC).
    incoming : ndarray or None
        The table received, ``E[cap, a, q]`` (``None`` at the first DC).
    walks : dict, optional
        A cache of walks by cap and incoming table (kept by the caller across runs: the
        caps are absolute points, so runs under different bounds share them).

    Notes
    -----
    Without the windows' buckets the walks leave out the options another option of their
    range outdoes (:func:`chainpipe.solvers.prefix_curve._walked_options`: no more devices,
    no larger ``C``): each prefix through one has a prefix through the other on no more
    devices at no more fill, so the minima kept (over the usages at or below each, and
    over all) are the same to the bit (``v3-large-03``: the one-bucket walks 0.43 to 0.31
    CPU s per solve). With the buckets they are not: the other lands in a lower bucket
    and the table sent is kept per bucket (there every walk of ``v3-large-03`` differed).
    """

    def __init__(self, tables, grid: np.ndarray, link_in: Link | None,
                 incoming: np.ndarray | None, walks: dict | None = None):
        from .walk_fast import dc_least

        L, M = tables.L, tables.M
        self.grid, self.M = grid, M
        self.below = np.concatenate(([0.0], grid[:-1]))
        windows = windows_capped(tables)
        nb = BUCKETS if windows else 1
        radix, stride, nV, dc_groups, ngr, C, ok, widths, npairs, U, Q = _arrays(tables)
        self.radix, self.stride = radix[0], stride[0]
        if link_in is None:
            U_in = Q_in = np.full(L + 1, np.inf)
            incoming = np.full((len(grid), L + 1, nb), np.inf)
        else:
            U_in = np.asarray(cost.occupancy(tables.boundary_bytes, link_in.bandwidth_bytes_per_s),
                              dtype=float)
            Q_in = np.asarray(cost.traversal(link_in.latency_s, U_in), dtype=float)
            if incoming.shape != (len(grid), L + 1, nb):
                raise ValueError("the incoming table does not match the run's grid")
        #: ``[cap, a]``: the least fill of a prefix ``[0, a)`` on the DCs before this one
        #: under each cap (the incoming table, least over its buckets; ``inf`` at DC 1)
        self.upstream = incoming.min(axis=2)
        walks = {} if walks is None else walks
        # the traversal of boundary a under each cap, on the own link and the link in
        own_add, in_add = _adds(grid, (U[:, 0, 0], Q[:, 0, 0]), (U_in, Q_in))
        up_in = self.upstream + in_add
        #: the usage index of the devices a base label (``u = 0``) leaves free: all of them
        self.full = self.room((0,) * len(self.radix))
        # ``joined[i, a, v]``, each cap a contiguous block (:attr:`CF` a view with the caps
        # last), and ``base[i, a]``; per entry the operations one cap at a time would make
        joined = np.empty((len(grid), L + 1, nV))
        base = np.empty((len(grid), L + 1))
        own = np.empty(incoming.shape)
        for i, lam in enumerate(grid):
            key = (float(lam), incoming[i].tobytes())
            walk = walks.get(key)
            if walk is None:  # kept: per prefix end and usage, and per bucket (not the walk)
                if not windows:  # one bucket: the options another outdoes change no minimum
                    ok = _walked_options(tables)[0]
                walk = walks[key] = dc_least(float(lam), np.ascontiguousarray(incoming[i]),
                                             U_in, Q_in, radix, stride, nV, dc_groups, ngr,
                                             C, ok, widths, npairs, U, Q, nb, windows)
            here, own[i] = walk
            np.minimum(here[:, self.full], self.upstream[i], out=base[i])
            np.add(here, own_add[i][:, None], out=joined[i])
        np.minimum(joined, up_in[:, :, None], out=joined)
        np.minimum(incoming, own, out=own)
        #: ``CF[a, v, i]``: the least fill of a prefix ``[0, a)`` under cap ``i`` that
        #: leaves own usage ``v``'s devices free, on this DC or before it, with the
        #: traversal of boundary ``a`` to a stage on this DC (:func:`_adds`; private)
        self.CF = joined.transpose(1, 2, 0)
        #: ``CF_base[a, i]``: ``CF[a, full, i]`` without the traversal, for the base labels
        #: (``u = 0``, all own devices free), whose first stage lies downstream and whose
        #: totals hold their boundary already (no other usage's row is read without it)
        self.CF_base = base.T
        #: the least of the incoming table and this DC's walk (before rounding)
        self.table = own

    def sent(self) -> np.ndarray:
        """The table passed on: :attr:`table` rounded down, short prefixes withheld."""
        return withhold(self.table)

    def floor(self) -> float:
        """A floor under ``T`` of every plan of the whole model on this DC and those before
        it: ``min_i (E_i[L] + (M - 1) lam_(i-1))``, and ``(M - 1) lam_last`` for a period
        past the grid (the bound itself when the grid's top reaches it)."""
        return least_time(self.grid, self.table[:, -1].min(axis=1), self.M)

    def period_floor(self, x: int, u: tuple) -> float:
        """A floor under the period of every completion of a label of state ``(x, u)``
        (:meth:`rows`' row): its prefix ``[0, x)`` cannot be placed under a cap whose
        least fill is ``inf``, so the period lies above the largest such cap below the
        first finite one (``grid[-1]`` when none is: past the grid; 0 when the lowest is
        finite: nothing known)."""
        row = self.CF[x, self.room(u)] if any(u) else self.CF_base[x]
        fits = np.flatnonzero(np.isfinite(row))
        return float(self.below[fits[0]]) if len(fits) else float(self.grid[-1])

    def room(self, u: tuple) -> int:
        """The usage index of the devices a label of own usage ``u`` leaves free."""
        return int(sum((int(self.radix[i]) - 1 - int(n)) * int(self.stride[i])
                       for i, n in enumerate(u)))

    def rows(self, x: int, usages: list) -> np.ndarray:
        """Per own usage of ``usages``, the row of caps the paired floor (:func:`paired`)
        tests a label of state ``(x, u)`` with (``(len(usages), caps)``): with the traversal
        of the boundary at ``x`` where the label's first stage lies on this DC (``u`` uses
        own devices), without it for a base label (``u = 0``: it holds its boundary)."""
        out = np.empty((len(usages), len(self.grid)))
        for i, u in enumerate(usages):
            out[i] = self.CF[x, self.room(u)] if any(u) else self.CF_base[x]
        return out


def least_time(grid: np.ndarray, fills: np.ndarray, M: int) -> float:
    """A floor under ``T`` of every plan of ``M`` microbatches whose fill under cap
    ``grid[i]`` is at least ``fills[i]`` (``inf``: no plan meets the cap): ``min_i (fills_i
    + (M - 1) lam_(i-1))`` (``lam_(-1) = 0``), and ``(M - 1) lam_last`` for a period past
    the grid. A plan whose period lies in ``(lam_(i-1), lam_i]`` meets cap ``i``, and its
    steady part is at least ``M - 1`` times its period."""
    below = np.concatenate(([0.0], grid[:-1]))
    whole = fills + (M - 1) * below
    return float(min(whole.min(), (M - 1) * grid[-1]))


def _adds(grid: np.ndarray, own_link: tuple, link_in: tuple) -> tuple[np.ndarray, np.ndarray]:
    """What a label's rows add, per cap ``lam`` of ``grid`` and boundary ``a`` before its
    first stage (on this DC), as ``dp``'s curve pays it (``docs/dp.md``, "The prefix
    curve"): a prefix whose last stage lies on this DC crosses the DC's own link
    (``own_link = (U, Q)`` per ``a``, private), one ending on a DC before it (the received
    table) at least the chain link into it (``link_in``, public: a longer path's occupancy
    and traversal are no less); a boundary whose occupancy is above ``lam`` cannot be
    crossed under it (``inf``). Returns ``(own, upstream)``, each ``[cap, a]``, 0 at ``a =
    0`` and ``a = L`` (no boundary)."""
    L1 = len(own_link[0])
    inner = np.zeros(L1, dtype=bool)
    inner[1:L1 - 1] = True
    reach_cap = (grid * (1 + SLACK))[:, None]
    return tuple(np.where(inner, np.where(U_link <= reach_cap, Q_link, np.inf), 0.0)
                 for U_link, Q_link in (own_link, link_in))


def paired_floor(S: np.ndarray, CF: np.ndarray, grid: np.ndarray, below: np.ndarray,
                 M: int) -> np.ndarray:
    """Per row of ``S`` (``x1, x2, total, sync, ...``), the floor :func:`paired` tests:
    ``total + sync + min_i (CF_i + (M - 1) max(x1 + x2, lam_(i-1)))`` over the caps ``lam_i
    >= x1 + x2``, and ``(M - 1) max(x1 + x2, lam_last)`` past the grid."""
    return S[:, 2] + S[:, 3] + _least_term(S[:, 0] + S[:, 1], CF, grid, below, M)


def paired(S: np.ndarray, CF: np.ndarray, grid: np.ndarray, below: np.ndarray, M: int,
           ub: float, scale: float = 1.0) -> np.ndarray:
    """The rows of ``S`` whose ``total + sync + scale * min_i (CF_i + (M - 1) max(x1 + x2,
    lam_(i-1)))`` over the caps ``lam_i >= x1 + x2`` (a period past the grid: ``(M - 1)
    max(x1 + x2, lam_last)``) stays within ``ub`` (relative slack ``1e-9``: rounding keeps
    a label, never cuts one). ``scale`` above 1 makes the floor too strong (the tests'
    mutation)."""
    floor = _least_term(S[:, 0] + S[:, 1], CF, grid, below, M)
    return S[:, 2] + S[:, 3] + scale * floor <= ub * (1 + 1e-9)


def _least_term(per: np.ndarray, CF: np.ndarray, grid: np.ndarray, below: np.ndarray,
                M: int) -> np.ndarray:
    """Per period ``per``: ``min_i (CF_i + (M - 1) max(per, below_i))`` over the caps
    ``grid_i >= per``, and ``(M - 1) max(per, grid_last)`` (:func:`paired_floor`).

    The grid ascends and ``below_i = grid_(i-1)``, so the caps at or above ``per`` are
    those from ``j`` (the first) on, and for ``i > j`` the max is ``below_i``: the terms
    past ``j`` do not depend on ``per`` and their least is a suffix minimum, read at
    ``j + 1``. Each term is the one a full ``(rows, caps)`` table would hold (the same
    operations), and a minimum is exact, so the result is the same to the bit."""
    n = len(grid)
    fixed = CF + (M - 1) * below  # the term of cap i once below_i >= per
    suffix = np.append(np.minimum.accumulate(fixed[::-1])[::-1], np.inf)
    j = np.searchsorted(grid, per, side="left")
    at = np.minimum(j, n - 1)
    first = np.where(j < n, CF[at] + (M - 1) * np.maximum(per, below[at]), np.inf)
    least = np.minimum(first, suffix[np.minimum(j + 1, n)])
    return np.minimum(least, (M - 1) * np.maximum(per, grid[-1]))
