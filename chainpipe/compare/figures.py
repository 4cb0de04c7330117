"""The comparison figures of a sweep: performance profiles, gap over time, time against size.

Each figure is a PNG with its data beside it as CSV (same name, ``.csv``), so a
reader can re-plot or check the numbers. The data come from :mod:`.metrics`;
this module only draws. Solvers keep one style (colour, line style and marker)
across figures, in the order they first appear, so that curves that coincide
(exact solvers reaching the same optimum) stay distinguishable: the first
solver is drawn thickest, underneath, and each later one thinner on top.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..drawing import pyplot, save_figure, write_csv
from .metrics import charged_time, finished, gave_up, profile_curve

#: distinct colours (matplotlib's tab10, then ten darker or lighter ones from tab20b and
#: tab20c): more than there are solvers
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#393b79", "#637939", "#843c39",
          "#7b4173", "#8c6d31", "#3182bd", "#e6550d", "#31a354", "#756bb1")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)))
#: vertical shift between successive solvers' profile curves, as drawn
PROFILE_OFFSET = 0.006
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
#: the largest value a figure's log axis shows (seconds, or a profile's ratio): about 32
#: years, no practical limit. A time limit beyond it (up to ``1e308`` s) is drawn there,
#: said so on the axis; matplotlib's log ticks overflow near the largest double
AXIS_MAX = 1e9
#: what an axis label adds when something was drawn at :data:`AXIS_MAX`
CLIPPED = "beyond 1e9 drawn at 1e9 (no practical limit)"


def clip(value: float) -> float:
    """``value``, or :data:`AXIS_MAX` if larger: what a log axis can draw."""
    return min(value, AXIS_MAX)


def solver_style(index: int, count: int) -> dict:
    """Colour, line style, marker, width and drawing order of the ``index``-th solver of ``count``.

    Parameters
    ----------
    index : int
        Position of the solver (first seen first).
    count : int
        Number of solvers in the figure.

    Returns
    -------
    dict
        Keyword arguments for ``Axes.plot``/``Axes.step``: a colour, a line
        style and a marker that differ from the neighbours', a line width
        decreasing with ``index`` and a ``zorder`` increasing with it, so a
        curve drawn over an identical one leaves it visible around it.
    """
    width = 1.2 + 2.6 * (count - 1 - index) / max(count - 1, 1)
    return {"color": COLORS[index % len(COLORS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)],
            "marker": MARKERS[index % len(MARKERS)],
            "linewidth": width, "zorder": 2 + index, "alpha": 0.9}


def _styles(solvers: list[str], order: list[str] | None) -> dict[str, dict]:
    """Each solver's style by its place in ``order`` (all the sweep's solvers), else in ``solvers``."""
    order = list(order or [])
    order += [s for s in solvers if s not in order]
    return {s: solver_style(order.index(s), len(order)) for s in solvers}


def performance_profile(profile: dict, path: str | Path, title: str | None = None, *,
                        order: list[str] | None = None) -> Path:
    """Draw a Dolan-More performance profile.

    Parameters
    ----------
    profile : dict
        From :func:`chainpipe.compare.metrics.performance_profile`.
    path : path
        The PNG to write; its ``.csv`` twin gets ``solver, tau, fraction``.
    title : str, optional
        Figure title (default: names the measure).
    order : list of str, optional
        Every solver of the sweep, first seen first: a solver keeps its style
        in every figure, even one that shows only some of them.

    Returns
    -------
    Path
        ``path``.
    """
    plt = pyplot()
    path = Path(path)
    ratios = profile["ratios"]
    finite = [r for rs in ratios.values() for r in rs if math.isfinite(r)]
    tau_max = clip(max(finite + [1.0]) * 1.5) if finite else 2.0
    taus = sorted({1.0, tau_max, *map(clip, finite)})
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    rows = []
    styles = _styles(list(ratios), order)
    for i, (solver, rs) in enumerate(ratios.items()):
        ys = profile_curve(rs, taus)
        style = styles[solver]
        # drawn a hair lower per solver, so curves that coincide stay visible (CSV: exact)
        ax.step(taus, [y - PROFILE_OFFSET * i for y in ys], where="post", label=solver,
                markevery=max(1, len(taus) // 8), markersize=4 + style["linewidth"], **style)
        rows.extend([solver, t, y] for t, y in zip(taus, ys))
    if tau_max > 4:
        ax.set_xscale("log", base=2)
    ax.set_xlim(1.0, tau_max)
    ax.set_ylim(-0.02, 1.04)
    what = "solve time (finished runs)" if profile["measure"] == "time" else \
        "iteration time T / best known"
    ax.set_xlabel(f"tau: ratio to the best solver on {what}"
                  + (f"; {CLIPPED}" if max(finite, default=0.0) * 1.5 > AXIS_MAX else ""))
    ax.set_ylabel(f"fraction of the {profile['problems']} problems within tau\n"
                  f"(curves offset by {PROFILE_OFFSET:g} each to stay visible)", fontsize=9)
    title = title or f"Performance profile (Dolan-More) on {what}"
    left_out = profile.get("left_out", [])
    if left_out:
        title += (f"\n{len(left_out)} problem(s) without any plan (infeasible or unsolved) "
                  f"left out")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)
    plt.close(fig)
    write_csv(path.with_suffix(".csv"), ["solver", "tau", "fraction"], rows)
    return path


def gap_over_time(curves: list[dict], time_limit: float, path: str | Path, *,
                  order: list[str] | None = None) -> Path | None:
    """Draw the primal gap to the best known over time, for runs with an anytime trace.

    Parameters
    ----------
    curves : list of dict
        Rows of :func:`chainpipe.compare.metrics.gap_curves`. One thin line per
        run (solid: primal gap ``(T(t) - T*)/T(t)``; dotted: own gap
        ``(T(t) - bound(t))/T(t)`` where the solver reports a bound).
    time_limit : float
        Right end of the time axis, seconds.
    path : path
        The PNG to write; its ``.csv`` twin gets the rows.
    order : list of str, optional
        As for :func:`performance_profile`.

    Returns
    -------
    Path or None
        ``path``, or ``None`` (nothing written) if no run has a trace.
    """
    if not curves:
        return None
    plt = pyplot()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    runs: dict[tuple, list[dict]] = {}
    for row in curves:
        runs.setdefault((row["solver"], row["instance"], row["seed"]), []).append(row)
    solvers = list(dict.fromkeys(k[0] for k in runs))
    styles = _styles(solvers, order)
    t_min = max(min((r["t"] for r in curves if r["t"] > 0), default=1e-3) / 2, 1e-4)
    t_max = clip(time_limit)
    for (solver, _, _), rows in runs.items():
        color = styles[solver]["color"]
        ts = [clip(max(r["t"], t_min)) for r in rows] + [t_max]
        ax.step(ts, [r["primal_gap"] for r in rows] + [rows[-1]["primal_gap"]], where="post",
                color=color, alpha=0.7, linewidth=1)
        own = [(clip(max(r["t"], t_min)), r["own_gap"]) for r in rows
               if r["own_gap"] is not None]
        if own:
            ax.step([t for t, _ in own] + [t_max], [g for _, g in own] + [own[-1][1]],
                    where="post", color=color, alpha=0.5, linewidth=1, linestyle=":")
    for s in solvers:
        ax.plot([], [], color=styles[s]["color"], label=s)
    ax.plot([], [], color="0.4", linestyle=":", label="own gap (T - bound) / T")
    ax.set_xscale("log")
    ax.set_xlim(t_min, t_max)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("time (s)" + (f"; {CLIPPED}" if time_limit > AXIS_MAX else ""))
    ax.set_ylabel("primal gap (T(t) - T*) / T(t)")
    ax.set_title(f"Gap over time of the anytime solvers ({len(runs)} runs; T* = best known)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)
    write_csv(path.with_suffix(".csv"),
              ["solver", "instance", "seed", "t", "primal_gap", "own_gap"],
              [[r["solver"], r["instance"], r["seed"], r["t"], r["primal_gap"], r["own_gap"]]
               for r in curves])
    return path


def _trend(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Geometric mean of the times at each size, sizes in increasing order."""
    by_size: dict[float, list[float]] = {}
    for x, y in points:
        by_size.setdefault(x, []).append(y)
    xs = sorted(by_size)
    return xs, [math.exp(sum(math.log(v) for v in by_size[x]) / len(by_size[x])) for x in xs]


def time_vs_size(records: list[dict], path: str | Path, *,
                 order: list[str] | None = None) -> Path:
    """Draw solve time against instance size (layers x devices), one series per solver.

    Every run is a point (hollow: did not finish, drawn at its charged time,
    the limit); a line per solver joins the geometric means of its finished
    runs' times at each size, in order of size.

    Parameters
    ----------
    records : list of dict
        Run records of a sweep.
    path : path
        The PNG to write; its ``.csv`` twin gets ``solver, instance, seed,
        layers, devices, datacenters, device_types, size, solve_time_s, finished``.
    order : list of str, optional
        As for :func:`performance_profile`.

    Returns
    -------
    Path
        ``path``.
    """
    plt = pyplot()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    solvers = list(dict.fromkeys(r["solver"] for r in records))
    styles = _styles(solvers, order)
    rows = []
    for s in solvers:
        mine = [r for r in records if r["solver"] == s]
        style = styles[s]
        pts = [(r["num_layers"] * r["num_devices"], clip(max(charged_time(r), 1e-4)),
                finished(r)) for r in mine]
        xs, ys = _trend([(x, y) for x, y, f in pts if f])
        ax.plot(xs, ys, color=style["color"], linestyle=style["linestyle"], linewidth=1.2,
                alpha=0.8, zorder=style["zorder"], label=s, marker=style["marker"],
                markersize=0)
        done = [(x, y) for x, y, f in pts if f]
        quit_early = [(x, y) for (x, y, f), r in zip(pts, mine) if not f and gave_up(r)]
        late = [(x, y) for (x, y, f), r in zip(pts, mine) if not f and not gave_up(r)]
        ax.scatter([x for x, _ in quit_early], [y for _, y in quit_early], color=style["color"],
                   s=36, marker="x", zorder=style["zorder"])
        ax.scatter([x for x, _ in done], [y for _, y in done], color=style["color"], s=16,
                   marker=style["marker"], alpha=0.7, zorder=style["zorder"])
        ax.scatter([x for x, _ in late], [y for _, y in late], facecolors="none",
                   edgecolors=style["color"], s=30, marker=style["marker"],
                   zorder=style["zorder"])
        for r in mine:
            rows.append([s, r["instance"], r.get("seed", 0), r["num_layers"], r["num_devices"],
                         r["num_datacenters"], r["num_device_types"],
                         r["num_layers"] * r["num_devices"], r["solve_time_s"], finished(r)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("instance size: layers x devices")
    clipped = any(charged_time(r) > AXIS_MAX for r in records)
    ax.set_ylabel("solve time (s); hollow = out of time, x = gave up early without a plan "
                  "(both charged the limit)"
                  + (f"\n{CLIPPED}" if clipped else ""), fontsize=9 if clipped else None)
    ax.set_title("Solve time against instance size (lines: geometric mean of the finished "
                 "runs at each size)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)
    write_csv(path.with_suffix(".csv"),
              ["solver", "instance", "seed", "layers", "devices", "datacenters", "device_types",
               "size", "solve_time_s", "finished"], rows)
    return path


__all__ = ["gap_over_time", "performance_profile", "solver_style", "time_vs_size"]
