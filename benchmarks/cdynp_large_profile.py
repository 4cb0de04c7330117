"""Where a ``v3/large`` one-pipeline CDynP period run spends its time, and what ``dp``'s
prefix curve would be worth to it (``docs/privacy.md``, "Where `v3/large`'s time goes").

One exact period run of the whole chain (:func:`chainpipe.solvers.cdynp.solve_chain` on
one pipeline of ``M`` microbatches: the classic solve first, then the period run under
the given public ``upper_bound``, or under the classic plan's ``T_e`` without one), under
:mod:`cProfile`. Per DC and trial: the bound, the base labels it got, the labels it kept
and its CPU time; and the share of the compiled kernels in the period DPs' time.

``--floor chain`` makes the same test's rows the decomposed way (:func:`chain_filter`: each
DC from its own tables and what the DC before it would pass on, by the protocol's own
kernel :func:`chainpipe.solvers.cdynp.walk_fast.dc_walk`; nothing is sent, no rounding:
the protocol's pass itself is :mod:`chainpipe.solvers.cdynp.curve`).
``--floor curve`` (or ``curve-nowin``) is an **oracle**, never a route: before a DC's
labels of a layer are filtered, a label at ``(a, u)`` is dropped when ``dp``'s paired
prefix-curve floor (``prefix_curve.PrefixCurve`` of the whole instance, which reads every
DC's devices: what no agent may do) puts every completion above the bound: ``total +
sync + min_i (CF_i + (M - 1) max(x, lam_(i-1)))`` over the caps ``lam_i`` of its grid at or
above the label's period ``x`` (and ``(M - 1) max(x, lam_last)`` for a period past the
grid) (``CF_i``: the least fill of the prefix ``[0, a)`` on DCs up
to the label's with ``u`` taken on its own, under cap ``lam_i``; the boundary at ``a`` and
the loops that cross it left out, so it is weaker than ``dp``'s). ``curve-nowin`` builds
the curve without the windows' cap (``C`` and ``U`` capped only). It measures how many
labels and how much time the floor a forward pass along the chain would give can save;
the result says nothing about privacy.

``--ladder TOP --low LOW`` runs the owner's ladder of public bounds with the decomposed
rows (:func:`ladder`): period runs only, from the floor the rows give, until one finds a
plan.

Run: ``python benchmarks/cdynp_large_profile.py --instance v3/large/v3-large-01 --bound
6.9 --floor curve``; appends a section to ``benchmarks/results/cdynp_large_profile.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cdynp_large_profile.md"
#: what a ``--floor`` reads its rows from (the report's words)
_ROWS = {"curve": "Oracle rows (dp's curve, every DC's data)",
         "curve-nowin": "Oracle rows (dp's curve, windows not capped)",
         "chain": "Decomposed rows (each DC its own tables; numba's compile included)"}
#: the compiled kernels whose own time the report lists (profile names)
KERNELS = ("across", "pareto", "extend", "keep_points")


def oracle_filter(instance, windows: bool, bound: float, scale: float = 1.0):
    """The oracle of the module docstring: a function ``(k, u, x, labels, ub) -> labels``
    that keeps the labels of DC ``k``'s state ``(x, u)`` that the paired floor leaves
    within the run's bound ``ub``, and the grid's size (its caps up to ``bound / (M -
    1)``, ``bound`` at least every run's). Built from ``dp``'s prefix curve of the whole
    instance (every DC's data). ``scale`` multiplies the floor: above 1 it is too strong
    (``tests/test_cdynp_curve_oracle.py`` shows that it then cuts optima)."""
    from chainpipe.solvers.prefix_curve import PrefixCurve
    from chainpipe.tables import CostTables

    K, M = instance.num_datacenters, instance.microbatches
    curve = PrefixCurve.of(CostTables(instance), 0, K - 1, False, windows)
    grid = curve.grid(bound / (M - 1) * (1 + 1e-9))[:curve.steps]
    below = np.concatenate(([0.0], grid[:-1]))

    def keep(k: int, u: tuple, x: int, labels, ub: float):
        if x == 0 or not len(grid) or not len(labels):
            return labels
        CF = curve.rows(k, tuple(int(v) for v in u), len(grid))[x, :len(grid)]
        return _paired(labels, CF, grid, below, M, scale, ub)

    return keep, len(grid)


def _paired(labels, CF, grid, below, M: int, scale: float, ub: float):
    """The labels whose total plus the paired floor ``min_i CF_i + (M - 1) max(period,
    lambda_{i-1})`` (a period past the grid's last cap: at least ``(M - 1)`` times that
    cap) stays within ``ub``."""
    per = labels.S[:, 0] + labels.S[:, 1]
    terms = CF[None, :] + (M - 1) * np.maximum(per[:, None], below[None, :])
    terms = np.where(grid[None, :] >= per[:, None], terms, np.inf)
    floor = np.minimum(terms.min(axis=1), (M - 1) * np.maximum(per, grid[-1]))
    total = labels.S[:, 2] + labels.S[:, 3] + scale * floor
    return labels.take(total <= ub * (1 + 1e-9))


def chain_filter(instance, bound: float, caps: int = 24, step: float = 0.01,
                 scale: float = 1.0, low: float | None = None):
    """:func:`oracle_filter`'s test with rows made the decomposed way: each DC walks its
    own devices only (its one-DC tables, as its agent has them) from what the DC before
    it passes on (per cap and prefix end, the least fill per excess bucket of a prefix on
    the DCs before, a prefix ending earlier passed on as it is), across the chain link
    into it as a floor under the path's ``U`` and ``Q`` (the path's bandwidth is at most
    that link's, its latency at least that link's). Caps on a public grid: ``bound / (M
    - 1)`` over ``(1 + step)^j``, ``j < caps`` (with ``low``, a public floor such as the
    classic optimum: ``caps`` caps evenly spaced in ratio from ``low / (M - 1)`` to ``bound
    / (M - 1)``). Nothing here is sent: it shows what such a
    pass would give, with no DC reading another's tables. Returns ``(keep, caps)``;
    ``keep.floor`` is the floor the last DC could read off its table under every plan
    whose ``T`` is within ``bound``: ``min_j (E_j + (M - 1) lam_(j-1))``, ``E_j`` the
    whole model's least fill under cap ``j`` (``lam_(-1) = 0``; a period past the grid
    costs ``(M - 1) lam_last``)."""
    from chainpipe import cost
    from chainpipe.instance import Instance
    from chainpipe.solvers.cdynp.agent import own_tables
    from chainpipe.solvers.cdynp.walk_fast import dc_walk as walk
    from chainpipe.solvers.prefix_curve import BUCKETS, _arrays, _at_most

    nb = BUCKETS
    M, L = instance.microbatches, instance.num_layers
    grid = (np.geomspace(low / (M - 1), bound / (M - 1), caps) if low
            else np.sort(bound / (M - 1) / (1 + step) ** np.arange(caps)))
    E = np.full((caps, L + 1, nb), np.inf)  # what DC k gets, per cap (none for DC 0)
    rows: list = []  # per DC: (CF over [a, v] per cap, radix, stride)
    for k, dc in enumerate(instance.datacenters):
        t = own_tables(Instance(instance.name, instance.model, instance.training, (dc,), ()),
                       None)
        radix, stride, nV, dc_groups, ngr, C, ok, widths, npairs, U, Q = _arrays(t)
        if k:
            link = instance.links[k - 1]
            U_in = np.asarray(cost.occupancy(t.boundary_bytes, link.bandwidth_bytes_per_s),
                              dtype=float)
            Q_in = np.asarray(cost.traversal(link.latency_s, U_in), dtype=float)
        else:
            U_in = Q_in = np.full(L + 1, np.inf)
        per_cap = []
        out = np.empty_like(E)
        for i, lam in enumerate(grid):
            F = walk(float(lam), E[i], U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok,
                     widths, npairs, U, Q, nb, True)
            here = _at_most(F.min(axis=3), radix)[:, 0]
            per_cap.append(np.minimum(here, E[i].min(axis=1)[:, None]))
            out[i] = np.minimum(E[i], F[:, 0].min(axis=1))
        rows.append((np.stack(per_cap, axis=2), radix[0], stride[0]))
        E = out
    below = np.concatenate(([0.0], grid[:-1]))
    # what the last DC could report: a floor under every plan within the grid's top cap
    whole = E[:, L].min(axis=1) + (M - 1) * below

    def keep(k: int, u: tuple, x: int, labels, ub: float):
        if x == 0 or not len(labels):
            return labels
        CFv, radix, stride = rows[k]
        room = int(sum((int(radix[i]) - 1 - int(n)) * int(stride[i]) for i, n in enumerate(u)))
        return _paired(labels, CFv[x, room], grid, below, M, scale, ub)

    keep.floor = float(min(whole.min(), (M - 1) * grid[-1]))
    return keep, caps


def instrument(trials: list, keep=None):
    """Record every period DP run in ``trials`` (DC, bound, base labels, labels kept,
    whether a plan starts there, CPU s); with ``keep`` (:func:`oracle_filter`) apply it
    to each layer of the whole chain's runs. Returns a function that undoes both."""
    from chainpipe.solvers.cdynp import agent, period

    run, finish, backward = (period.PeriodDP.run, period.PeriodDP._finish_layer,
                             agent.DCAgent._period_backward)
    whose: dict[int, int] = {}  # id(tables) -> DC index, in the whole chain's runs

    def _backward(self, t0):
        if self.sync_cap is None:
            whose[id(self.tables)] = self.k
        return backward(self, t0)

    def _finish(self, x, chunks, ub, zero, prefix):
        k = whose.get(id(self.t))
        if keep is not None and k is not None:
            for u in list(chunks):  # per usage, its chunks as one
                labels = period._Labels.joined(chunks[u])
                got = keep(k, u, x, labels, ub)
                # a cut by the bound: the DC's trials go on past a run that cut (a run
                # that cut nothing ends them as exhaustive)
                self.bound_cut |= len(got) < len(labels)
                chunks[u] = [got]
        return finish(self, x, chunks, ub, zero, prefix)

    def _run(self, base, ub, prefix=None):
        t0, done = time.process_time(), False
        try:
            run(self, base, ub, prefix)
            done = True
        finally:
            trials.append({"dc": whose.get(id(self.t)), "bound": ub,
                           "base": sum(len(v) for v in base.values()),
                           "labels": self.stats["labels"] if done else None,
                           "plan": bool(self.points.get(0)),
                           "cpu": time.process_time() - t0})

    agent.DCAgent._period_backward = _backward
    period.PeriodDP._finish_layer = _finish
    period.PeriodDP.run = _run

    def undo():
        agent.DCAgent._period_backward = backward
        period.PeriodDP._finish_layer = finish
        period.PeriodDP.run = run

    return undo


def measure(name: str, bound: float | None, floor: str, limit: float) -> dict:
    """One profiled solve of ``name``'s whole chain as one pipeline (module docstring)."""
    from chainpipe.deadline import Deadline
    from chainpipe.io import read
    from chainpipe.solvers.cdynp import LocalOwner, solve_chain
    from chainpipe.solvers.cdynp.drive import agent_options

    inst = read(ROOT / "instances" / f"{name}.json")
    keep, caps = None, 0
    t0 = time.process_time()
    if floor != "none":
        if bound is None:
            raise SystemExit("--floor needs --bound (the oracle's grid is cut at it)")
        if floor == "chain":
            keep, caps = chain_filter(inst, bound)
        else:
            keep, caps = oracle_filter(inst, floor == "curve", bound)
    curve_s = time.process_time() - t0
    trials: list = []
    undo = instrument(trials, keep)
    prof = cProfile.Profile()
    load = os.getloadavg()[0]
    t0 = time.process_time()
    try:
        prof.enable()
        out = solve_chain(LocalOwner(inst, False, 60).whole(),
                          {**agent_options(), "upper_bound": bound}, Deadline(limit))
        prof.disable()
    finally:
        undo()
    cpu = time.process_time() - t0
    own = {k: 0.0 for k in KERNELS}
    for (_path, _line, fn), row in pstats.Stats(prof).stats.items():
        for k in KERNELS:  # the compiled modules' functions: "<built-in method unit.k>"
            if fn.startswith("<built-in method") and fn.endswith(f".{k}>"):
                own[k] += row[2]
    return {"name": name, "bound": bound, "floor": floor, "caps": caps, "curve_s": curve_s,
            "cpu": cpu, "status": out.status, "timed_out": out.stats.get("timed_out", False),
            "trials": trials, "kernels": own, "load": (load, os.getloadavg()[0])}


#: the ladder's steps above the floor (``dp``'s, ``docs/dp.md``, "One pipeline, the answer")
STEPS = (0.005, 0.01, 0.02, 0.03, 0.045, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3)


def ladder(name: str, top: float, low: float | None, limit: float, caps: int = 40) -> str:
    """The owner's ladder with the decomposed rows (``--ladder``): the rows of
    :func:`chain_filter` for bounds from ``low`` up to ``top`` (both public: the classic
    optimum and the classic plan's ``T``, say; ``caps`` caps) and its floor ``F0``; then period runs of the whole chain (:func:`.drive.drive`, no
    classic run) under ``F0 (1 + d)`` for :data:`STEPS` below ``top``, then ``top``, each
    with the last failed bound as its public ``lower_bound``, until one finds a plan (the
    optimum: every plan below its bound was kept). Returns a markdown section."""
    from chainpipe.deadline import Deadline
    from chainpipe.io import read
    from chainpipe.solvers.cdynp import LocalOwner
    from chainpipe.solvers.cdynp.drive import agent_options, drive

    inst = read(ROOT / "instances" / f"{name}.json")
    t0 = time.process_time()
    keep, caps = chain_filter(inst, top, caps=caps, low=low)
    rows_s, floor = time.process_time() - t0, keep.floor
    floor = max(floor, low or 0.0)
    bounds = [floor * (1 + d) for d in STEPS if floor * (1 + d) < top] + [top]
    whole = LocalOwner(inst, False, 60).whole()
    deadline, below = Deadline(limit), floor * (1 - 1e-9)
    lines = [f"### `{name}`, the owner's ladder with decomposed rows, top {top:g} s", "",
             f"Rows: {caps} caps, {rows_s:.1f} CPU s (numba's compile included); the last "
             f"DC's floor {floor:.4f} s. Load {os.getloadavg()[0]:.2f} at the start.", "",
             "| bound | found | labels (all DCs) | CPU s |", "|---|---|---|---|"]
    total = 0.0
    for bound in bounds:
        trials: list = []
        undo = instrument(trials, keep)
        t1 = time.process_time()
        try:
            out = drive(whole, {**agent_options(), "upper_bound": bound,
                                "lower_bound": below}, deadline=deadline, probe=False)
        finally:
            undo()
        cpu = time.process_time() - t1
        total += cpu
        labels = sum(t["labels"] or 0 for t in trials)
        found = "cut" if out.stats.get("timed_out") else (
            f"{whole.evaluation(out.plan).iteration_time_s:.4f}" if out.plan else "none")
        lines.append(f"| {bound:.4f} | {found} | {labels:,} | {cpu:.2f} |")
        if out.plan is not None or out.stats.get("timed_out"):
            break
        below = bound
    lines += ["", f"Ladder {total:.1f} CPU s, rows {rows_s:.1f} s; load "
              f"{os.getloadavg()[0]:.2f} at the end.", ""]
    return "\n".join(lines)


def report(got: dict) -> str:
    """A markdown section of one :func:`measure`."""
    bound = "T_e (none given)" if got["bound"] is None else f"{got['bound']:g} s"
    runs = sum(t["cpu"] for t in got["trials"])
    lines = [f"### `{got['name']}`, bound {bound}, floor `{got['floor']}`", "",
             f"Status `{got['status']}`{' (time limit)' if got['timed_out'] else ''}, "
             f"{got['cpu']:.1f} CPU s under cProfile, period DPs {runs:.1f} s; load "
             f"{got['load'][0]:.2f} -> {got['load'][1]:.2f}."
             + (f" {_ROWS[got['floor']]}: {got['caps']} caps, "
                f"{got.get('buckets') or 'default'} excess buckets, built in "
                f"{got['curve_s']:.1f} s (not in the CPU s)." if got["floor"] != "none" else ""),
             "Compiled kernels' own time: " + ", ".join(
                 f"`{k}` {v:.1f} s" for k, v in got["kernels"].items()) + ".", "",
             "| DC (0-based) | bound | base labels | labels kept | plan starts here | CPU s |",
             "|---|---|---|---|---|---|"]
    for t in got["trials"]:
        kept = "cut" if t["labels"] is None else f"{t['labels']:,}"
        lines.append(f"| {t['dc']} | {t['bound']:.4f} | {t['base']:,} | {kept} | "
                     f"{'yes' if t['plan'] else 'no'} | {t['cpu']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    """Measure and append the section to :data:`OUT`."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instance", default="v3/large/v3-large-01")
    ap.add_argument("--bound", type=float, default=None)
    ap.add_argument("--floor", choices=("none", "curve", "curve-nowin", "chain"), default="none")
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--buckets", type=int, default=None,
                    help="the oracle curve's excess buckets (prefix_curve.BUCKETS)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--ladder", type=float, default=None, metavar="TOP",
                    help="the owner's ladder with decomposed rows up to TOP (ladder())")
    ap.add_argument("--low", type=float, default=None,
                    help="the ladder's public floor (the classic optimum, say)")
    args = ap.parse_args(argv)
    if args.ladder is not None:
        text = ladder(args.instance, args.ladder, args.low, args.time_limit)
        print(text)
        with args.out.open("a") as fh:
            fh.write(text + "\n")
        return
    if args.buckets:
        from chainpipe.solvers import prefix_curve

        prefix_curve.BUCKETS = args.buckets  # read per walk
    got = measure(args.instance, args.bound, args.floor, args.time_limit)
    got["buckets"] = args.buckets
    text = report(got)
    print(text)
    if not args.out.exists():
        args.out.write_text("# CDynP on `v3/large`: one pipeline's period run, profiled\n\n"
                            "Written by `benchmarks/cdynp_large_profile.py` (see its "
                            "docstring: `--floor curve` is an oracle, not a route).\n\n")
    with args.out.open("a") as fh:
        fh.write(text + "\n")


if __name__ == "__main__":
    main()
