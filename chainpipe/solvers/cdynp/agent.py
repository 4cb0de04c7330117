"""A DC agent: one datacenter's private data and its part of the chain DP.

The agent of DC ``k`` knows the public instance and its own devices and
internal link, nothing else. In the backward pass it receives the summary of
DC ``k+1`` (suffix plans downstream), prepends runs of its own stages to them
and sends DC ``k-1`` the merged summary. In the forward pass it is told which
point of its summary to realise, rebuilds its own stages from its memo and
tells DC ``k+1`` which of *its* points the plan continues with.

Work per backward step (all of it private; see :meth:`DCAgent._search`):
the DC's own label DP (:mod:`.local`, or :mod:`.wide` vectorised for wide
DPs) over suffix plans that begin here, joined to the incoming points, run
under an upper bound ``U`` on the optimum so that only partial plans that
could still be part of a plan with ``T <= U`` are kept. ``U`` is the best
complete plan known: from the incoming ``b = 0`` entry, a user's
``upper_bound``, or found by the DC itself (trials ``LB (1 + d)`` as in
``dp``, or a greedy probe). DC 1 then decides; DC 2..K merge their frontiers
with the passed-through downstream points into the summary for DC ``k-1``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...instance import Datacenter, Instance
from ...tables import CostTables
from ..labels import TRIALS
from . import protocol
from .local import END, IN, OWN, Deadline, LocalDP
from .public import PublicInstance
from .summary import cap_keep, epsilon_keep, frontier, round_digits, round_up
from .wide import WideDP

#: trials of DC 2..K, which want some good plan rather than a proof: bolder steps
#: (measured on medium/: fewer failed trials, and the bound is only used for pruning)
_BOUND_TRIALS = (0.2, 0.5, 1.0, 3.0)

#: layers x usage states from which DC 2..K run :class:`WideDP` (measured: medium/ has
#: at most 6,642 and runs 1.3-5x faster with :class:`LocalDP`; large/ has 27,450 and
#: more and runs 2.5-9x faster with :class:`WideDP`)
_WIDE_SIZE = 10_000


class DCAgent:
    def __init__(self, public: PublicInstance, index: int, datacenter: Datacenter, *,
                 epsilon: float = 0.0, quantum: float = 0.0, max_entries: int = 0,
                 digits: int = 0, upper_bound: float | None = None,
                 deadline: float | None = None):
        if public.datacenter_names[index] != datacenter.name:
            raise ValueError(f"agent {index} holds {datacenter.name!r}, the chain has "
                             f"{public.datacenter_names[index]!r} there")
        self.public = public
        self.k = index
        self.dc = datacenter
        self.name = datacenter.name
        self.epsilon = float(epsilon)
        self.quantum = float(quantum)
        self.digits = int(digits or 0)
        self.initial_bound = math.inf if upper_bound is None else float(upper_bound)
        self.max_entries = int(max_entries or 0)
        self.deadline = deadline
        local = Instance(public.name, public.model, public.training, (datacenter,), ())
        self.tables = CostTables(local)  # this DC's groups only: private
        self.L = public.num_layers
        self.M = public.microbatches
        self.R = public.position_cap
        self.bytes = public.boundary_bytes()
        self.stats: dict = {}
        caps = np.minimum(self.tables.count, self.L)
        self._size = self.L * float(np.prod(caps + 1))  # layers x usage states: DP width
        # memo of the backward pass
        self._out_origin: list[list[tuple]] = []
        self._incoming: list[tuple] = []  # (b, bw, points) of each entry received
        self.stages: list[tuple[int, int, str]] = []  # learned in the forward pass
        self.boundaries: dict[str, int | None] = {}

    # ------------------------------------------------------------------ helpers
    def _link_to_prev(self):
        return self.public.links[self.k - 1] if self.k > 0 else None

    # ------------------------------------------------------------------ backward pass
    def backward(self, incoming: dict | None) -> dict | None:
        """Process DC k+1's summary; return the summary for DC k-1 (``None`` for DC 1,
        which keeps its decision for :meth:`decide`)."""
        t0 = time.perf_counter()
        M = self.M
        entries = incoming["entries"] if incoming is not None else []
        self._incoming = [(e["b"], e["bw"], e["points"]) for e in entries]
        ub = self.initial_bound  # an upper bound on the optimum: complete plans already known
        for b, _bw, pts in self._incoming:
            if b == 0:
                ub = min(ub, min(sm + (M - 1) * bn for _r, bn, sm in pts))

        # base labels (u = 0): the downstream suffixes joined through the inter-DC boundary
        base: dict[int, list] = {self.L: [(0.0, 0.0, 0, (END, 0, 0))]}
        for i, e in enumerate(entries):
            b = e["b"]
            if b == 0:
                continue
            u = self.bytes[b] / e["bw"]
            base.setdefault(b, []).extend(
                (max(bn, u), sm + 2.0 * u, r, (IN, i, j)) for j, (r, bn, sm) in enumerate(e["points"]))
        try:
            ub, dp = self._search(base, ub)
        except Deadline:
            raise Deadline(f"time limit reached in {self.name}") from None
        self._dp = dp
        out = None if self.k == 0 else self._summary(dp.points, ub)
        self.stats["backward_s"] = time.perf_counter() - t0
        return out

    def _search(self, base: dict, ub: float) -> tuple[float, LocalDP | WideDP]:
        """The DP run whose labels this DC keeps, and the upper bound it proves.

        Trial bounds ``LB (1 + d)`` from a lower bound ``LB`` on plans that start here,
        as in ``dp``: a run with bound ``U`` keeps every partial plan that could be part
        of a plan with ``T <= U``, so if it finds a complete plan within ``U`` the run is
        exact (and the optimum is at most that plan's ``T``); if not, the next trial is
        larger, ending with ``ub`` itself (a known plan's ``T``, or infinity). A run whose
        bound cut nothing was exhaustive and ends the trials too.

        DC 1 decides, so it may prune with an optimistic prefix cost (its prefix runs on
        its own devices) and keeps dp's fine trial steps. The other DCs build a summary,
        which must keep suffix plans that faster upstream DCs could complete: no prefix
        cost, and bolder steps. A failed trial of a wide DP is costly, so a wide DC
        instead runs a greedy probe (one label per state) and takes the best complete
        plan it finds as the bound of one exact run.
        """
        self.stats = {"labels": 0, "trials": []}
        if self.k > 0 and self._size >= _WIDE_SIZE:
            # wide: a greedy probe (one label per state) for a plan, then one exact run
            probe = self._run(WideDP, base, ub, None, greedy=True)
            ub = min(ub, self._best(probe))
            dp = self._run(WideDP, base, ub, None)
            return min(ub, self._best(dp)), dp
        prefix = self._prefix_bound()
        lb = self._lower_bound(base, prefix)
        schedule = TRIALS if self.k == 0 else _BOUND_TRIALS
        trials = [lb * (1 + d) for d in schedule if math.isfinite(d) and lb * (1 + d) < ub] + [ub]
        for trial in trials:
            dp = self._run(LocalDP, base, trial, prefix if self.k == 0 else None)
            best = self._best(dp)
            if best <= trial * (1 + 1e-12) or trial >= ub or not dp.bound_cut:
                return min(ub, best), dp
        raise AssertionError("the last trial is ub itself")

    def _run(self, engine, base: dict, ub: float, prefix, **options):
        dp = engine(self.tables, num_layers=self.L, microbatches=self.M,
                    position_cap=self.R, gpipe=self.public.training.schedule == "gpipe",
                    boundary_bytes=self.bytes, link=self.dc.link, deadline=self.deadline)
        dp.run(base, ub, prefix, **options)
        self.stats["labels"] += dp.stats["labels"]
        self.stats["trials"].append({"upper_bound": float(ub) if ub < math.inf else None,
                                     "labels": dp.stats["labels"],
                                     "engine": "wide" if engine is WideDP else "local",
                                     **({"greedy": True} if options.get("greedy") else {})})
        return dp

    def _best(self, dp) -> float:
        """The least ``T`` of the complete plans a run found (``inf``: none)."""
        return min((sm + (self.M - 1) * bn for _r, bn, sm, _i in dp.points.get(0, ())),
                   default=math.inf)

    def _lower_bound(self, base: dict, prefix) -> float:
        """A lower bound on ``T`` of every complete plan whose first stage is in this DC:
        own devices alone (:attr:`CostTables.lower_bound`), or a prefix ``[0, b)`` on
        own devices before a downstream suffix plan joined at ``b``."""
        pre_sum, pre_max = prefix
        Mm1 = self.M - 1
        lb = self.tables.lower_bound
        for b, labels in base.items():
            if b < self.L:
                for bn, sm, _r, _ref in labels:
                    lb = min(lb, sm + pre_sum[b] + Mm1 * max(bn, pre_max[b]))
        return lb

    def _prefix_bound(self) -> tuple[list, list]:
        """An optimistic cost of the prefix ``[0, a)`` of a plan that starts in this DC
        (it runs on own devices only), as ``(sum, bottleneck)`` lists over ``a``: the sum
        is at least FLOP / fastest own rate; the bottleneck at least the largest layer's
        time on the fastest device, and at least the FLOP spread over the ``min(a, D)``
        fastest own devices in proportion to their rates."""
        tab = self.tables
        rmax = float(tab.rate.max())
        flop = tab.flop_prefix
        layer_max = np.concatenate(([0.0], np.maximum.accumulate(np.diff(flop))))
        rates = np.sort(np.repeat(tab.rate, np.minimum(tab.count, self.L)))[::-1]
        top = np.concatenate(([0.0], np.cumsum(rates)))  # top[n]: the n fastest devices
        spread = flop / top[np.minimum(np.arange(self.L + 1), len(rates))].clip(min=rmax)
        return (flop / rmax).tolist(), np.maximum(layer_max / rmax, spread).tolist()

    def _summary(self, own_pts: dict, ub: float) -> dict:
        """Merge own and passed-through points per (b, bw), prune, compress."""
        M = self.M
        prev = self._link_to_prev()
        groups: dict[tuple, list] = {}  # (b, bw) -> [(r, bn, sm, origin)]
        for a, pts in own_pts.items():
            key = (a, prev.bandwidth_bytes_per_s if a > 0 else None)
            lat = 2.0 * prev.latency_s if a > 0 else 0.0
            groups.setdefault(key, []).extend((r, bn, sm + lat, ("own", i)) for r, bn, sm, i in pts)
        for e, (b, bw, pts) in enumerate(self._incoming):
            key = (b, min(bw, prev.bandwidth_bytes_per_s)) if b > 0 else (0, None)
            lat = 2.0 * prev.latency_s if b > 0 else 0.0
            groups.setdefault(key, []).extend(
                (r, bn, sm + lat, ("in", e, j)) for j, (r, bn, sm) in enumerate(pts))
        entries, origins = [], []
        by_b: dict[int, list] = {}
        for key in groups:
            by_b.setdefault(key[0], []).append(key[1])
        limit = ub * (1 + 1e-12)
        for b in sorted(by_b):
            # higher path bandwidth first: a point of a class with a larger bandwidth
            # dominates an equal-or-worse point of a class with a smaller one
            kept: list[tuple] = []
            for bw in sorted(by_b[b], key=lambda v: -math.inf if v is None else -v):
                pts = groups[(b, bw)]
                if ub < math.inf:
                    # the bound applies to the true values (rounding up comes after it):
                    # any completion pays at least this boundary, over a path no wider
                    u = self.bytes[b] / bw if bw is not None else 0.0
                    pts = [p for p in pts if p[2] + 2.0 * u + (M - 1) * max(p[1], u) <= limit]
                if self.quantum > 0 or self.digits > 0:
                    q, d = self.quantum, self.digits
                    pts = [(r, round_digits(round_up(bn, q), d), round_digits(round_up(sm, q), d), o)
                           for r, bn, sm, o in pts]
                pts = [pts[i] for i in frontier(pts, kept)]
                if self.epsilon > 0:
                    pts = [pts[i] for i in epsilon_keep(pts, self.epsilon)]
                if self.max_entries:
                    pts = [pts[i] for i in cap_keep(pts, M, self.max_entries)]
                if not pts:
                    continue
                pts.sort(key=lambda p: p[:3])
                kept.extend(pts)
                entries.append({"b": int(b), "bw": bw, "points": [[r, bn, sm] for r, bn, sm, _ in pts]})
                origins.append([p[3] for p in pts])
        self._out_origin = origins
        return protocol.summary(self.name, self.public.datacenter_names[self.k - 1], entries)

    # ------------------------------------------------------------------ decision (DC 1)
    def decide(self) -> tuple[dict | None, float]:
        """DC 1 picks the best complete plan; returns its own realise-request and T estimate."""
        M = self.M
        best, choice = math.inf, None
        for _r, bn, sm, i in self._dp.points.get(0, ()):
            t = sm + (M - 1) * bn
            if t < best:
                best, choice = t, ("own", i)
        for e, (b, _bw, pts) in enumerate(self._incoming):
            if b == 0:
                for j, (_r, bn, sm) in enumerate(pts):
                    t = sm + (M - 1) * bn
                    if t < best:
                        best, choice = t, ("in", e, j)
        self.estimate = best
        return choice, best

    # ------------------------------------------------------------------ forward pass
    def realise_origin(self, origin) -> dict | None:
        """Rebuild own stages for ``origin``; return the request for DC k+1."""
        if origin is None:
            self.stages = []
            return None
        if origin[0] == "in":
            _, e, p = origin
            self.stages = []
            b = self._incoming[e][0]
            self.boundaries = {"passes": int(b)}
            return {"entry": e, "point": p, "b": int(b)}
        i = origin[1]
        stages = []
        while True:
            start, g, (kind, j, p) = self._dp.label(i)
            end = self._dp.label(j)[0] if kind == OWN else (self.L if kind == END else
                                                       self._incoming[j][0])
            stages.append((start, end, g))
            if kind != OWN:
                break
            i = j
        used: dict[int, int] = {}
        self.stages = []
        for start, end, g in stages:
            n = used.get(g, 0)
            used[g] = n + 1
            self.stages.append((start, end, Instance.device_name(self.dc, self.dc.devices[g], n)))
        first, last = self.stages[0][0], self.stages[-1][1]
        self.boundaries = {"from_upstream": first if first > 0 else None,
                           "to_downstream": last if last < self.L else None}
        if kind == END:
            return None
        return {"entry": j, "point": p, "b": int(self._incoming[j][0])}

    def forward(self, request: dict | None) -> dict | None:
        """Handle an ``assemble`` request from DC k-1 (a point of the summary we sent)."""
        rz = request["realise"] if request is not None else None
        if rz is None:
            return self.realise_origin(None)
        try:
            origin = self._out_origin[rz["entry"]][rz["point"]]
        except IndexError:
            raise protocol.ProtocolError(
                f"{self.name}: asked to realise an unknown point {rz}") from None
        return self.realise_origin(origin)
