"""Metrics of simulation runs, and the files ``chainpipe simulate`` writes.

- ``jobs.csv``: one row per (policy, job request);
- ``summary.csv``: one row per policy (the columns of the command-line contract);
- ``summary.md``: the same with tail iteration time, waiting, link load,
  forecast errors (and a sentence when a forecast loses to the naive last value)
  and planning effort;
- ``utilisation.csv`` and ``utilisation.png``: GPUs held and span load over time;
- ``iteration_time.png``: each policy's iteration times of accepted jobs.

Utilisation is the time average of the share of GPUs held by jobs over the
arrival window ``[0, last arrival]`` (after it the stream drains and every
policy idles). Numbers are written with 6 significant digits, so the same
runs give the same bytes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..drawing import pyplot, save_figure, write_csv
from ..io import atomic_write, atomic_write_directory
from .simulator import Run

JOB_COLUMNS = ["policy", "job", "arrival_s", "status", "iteration_time_s", "datacenters",
               "devices", "wait_s", "reason"]
#: every file ``chainpipe simulate`` writes into ``--out``, in the order written
OUTPUT_FILES = ("jobs.csv", "summary.csv", "utilisation.csv", "summary.md", "utilisation.png",
                "iteration_time.png")
SUMMARY_COLUMNS = ["policy", "jobs", "accepted", "blocked", "blocking_rate",
                   "mean_iteration_time_s", "utilisation", "scenario", "seed"]


def num(x: float | None) -> str:
    """A number as the files write it: 6 significant digits, empty for none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.6g}"


@dataclass(frozen=True)
class Metrics:
    """Per-policy figures of one run."""

    policy: str
    jobs: int
    accepted: int
    blocked: int
    mean_T: float | None
    p95_T: float | None
    mean_wait_s: float
    utilisation: float
    span_load: float  # time average over the arrival window, jobs and background
    multi_dc: int

    @property
    def blocking_rate(self) -> float:
        return self.blocked / self.jobs if self.jobs else 0.0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0-1) by linear interpolation; None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def utilisation(run: Run) -> float:
    """Time-average share of the GPUs held over ``[0, last arrival]``."""
    horizon = max((r.job.arrival_s for r in run.records), default=0.0)
    total = run.total_gpus
    if horizon <= 0 or total == 0:
        return 0.0
    held = 0.0
    for r in run.records:
        p = r.placement
        if p is None:
            continue
        overlap = min(r.start_s + p.duration_s, horizon) - min(r.start_s, horizon)
        held += p.device_count * overlap
    return held / (total * horizon)


def time_average(samples, attr: str, horizon: float) -> float:
    """The time average over ``[0, horizon]`` of a sampled step function (each sample holds
    until the next one; the last sample of a time wins)."""
    if horizon <= 0 or not samples:
        return 0.0
    total = 0.0
    for s, nxt in zip(samples, samples[1:] + [None]):
        end = horizon if nxt is None else min(nxt.time_s, horizon)
        if end > s.time_s:
            total += getattr(s, attr) * (end - s.time_s)
    return total / horizon


def metrics(run: Run) -> Metrics:
    """The :class:`Metrics` of ``run``."""
    acc = [r for r in run.records if r.status == "accepted"]
    Ts = [r.placement.iteration_time_s for r in acc]
    horizon = max(r.job.arrival_s for r in run.records)
    return Metrics(
        run.policy, len(run.records), len(acc), len(run.records) - len(acc),
        statistics.fmean(Ts) if Ts else None, percentile(Ts, 0.95),
        statistics.fmean(r.wait_s for r in run.records) if run.records else 0.0,
        utilisation(run),
        time_average(run.samples, "span_load", horizon),
        sum(1 for r in acc if len(r.placement.datacenters) > 1))


def job_rows(run: Run) -> list[list]:
    """The ``jobs.csv`` rows of one run."""
    rows = []
    for r in run.records:
        p = r.placement
        rows.append([run.policy, r.job.id, num(r.job.arrival_s), r.status,
                     num(p.iteration_time_s) if p else "",
                     "+".join(p.datacenters) if p else "", p.device_count if p else 0,
                     num(r.wait_s), r.reason])
    return rows


def summary_row(m: Metrics, scenario: str, seed: int) -> list:
    """The ``summary.csv`` row of one policy."""
    return [m.policy, m.jobs, m.accepted, m.blocked, num(m.blocking_rate), num(m.mean_T),
            num(m.utilisation), scenario, seed]


def summary_markdown(runs: list[Run], scenario, seed: int) -> str:
    """``summary.md``: the policies side by side, then forecast errors and notes."""
    lines = [f"# Online simulation: {scenario.name}, seed {seed}", ""]
    if scenario.description:
        lines += [scenario.description, ""]
    jobs = scenario.jobs
    lines += [f"{len(runs[0].records) if runs else 0} job requests"
              + ("" if jobs.trace is not None else f", Poisson at {jobs.arrivals_per_hour:g} "
                 "per hour") + f", patience {jobs.patience_s:g} s, at most "
              f"{jobs.max_wavelengths} wavelengths per span; background load "
              f"{scenario.background.load:g} +- {scenario.background.swing:g}.", "",
              "| policy | accepted | blocked | blocking | mean T (s) | p95 T (s) | mean wait (s) "
              "| GPU utilisation | span load | multi-DC jobs | solver calls |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        m = metrics(run)
        lines.append(
            f"| {m.policy} | {m.accepted} | {m.blocked} | {m.blocking_rate:.1%} | "
            f"{num(m.mean_T) or '-'} | {num(m.p95_T) or '-'} | {m.mean_wait_s:.0f} | "
            f"{m.utilisation:.1%} | {m.span_load:.1%} | {m.multi_dc} | "
            f"{run.solver_calls} |")
    lines += ["", "T is each accepted job's iteration time by the cost model; utilisation is "
              "the time-average share of GPUs held over the arrival window; span load the "
              "mean share of wavelengths in use (jobs and background). Solver calls are the "
              "planning solves a policy caused that no earlier policy of the run had cached."]
    lines += adaptation_lines(runs, scenario)
    for run in runs:
        fc = run.extra.get("forecast")
        if not fc:
            continue
        lines += ["", f"## Forecasts of {run.policy}", "",
                  "One-step forecasts of every span's and DC's load at each background step, "
                  "against the load then seen (loads are fractions of capacity).", "",
                  "| method | forecasts | MAE | RMSE |", "|---|---:|---:|---:|"]
        for method, e in fc.items():
            lines.append(f"| {method} | {e['n']} | {num(e['mae'])} | {num(e['rmse'])} |")
        if verdict := forecast_verdict(fc, run.policy):
            lines += ["", verdict]
    return "\n".join(lines) + "\n"


def adaptation_lines(runs: list[Run], scenario) -> list[str]:
    """``summary.md``'s section on the scenario's link events: per policy, what it did with
    the running jobs they touched (:mod:`.adapt`); none without events."""
    if not getattr(scenario, "events", ()):
        return []
    lines = ["", "## Link events", "",
             f"{len(scenario.events)} link event(s). Per policy, the running jobs an event "
             "touched and what the policy did: keep the plan (at its new T), re-plan on the "
             "job's own devices, or move it (`chain-dp-replan` only); the time those decisions "
             "saved against keeping, net of the moves; the moves' seconds. T above is each "
             "job's at its placement.", "",
             "| policy | touched | keep | re-plan | move | saved (h) | moves (s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        e = run.extra
        n = sum(e.get(k, 0) for k in ("keep_count", "replan_count", "move_count"))
        lines.append(f"| {run.policy} | {n} | {e.get('keep_count', 0)} | "
                     f"{e.get('replan_count', 0)} | {e.get('move_count', 0)} | "
                     f"{e.get('adapt_gain_s', 0.0) / 3600:.3f} | "
                     f"{e.get('adapt_move_s', 0.0):.1f} |")
    return lines


#: what each forecast method of :class:`~chainpipe.online.forecast.LoadForecaster` is, for a reader
FORECAST_NAMES = {"gm11": "GM(1,1)", "gm11-markov": "grey-Markov",
                  "last-value": "the naive last-value forecast"}
NAIVE = "last-value"


def forecast_verdict(errors: dict[str, dict], policy: str = "gmc-mdp") -> str:
    """One sentence comparing each forecast's MAE with the naive last-value forecast's.

    Parameters
    ----------
    errors : dict
        ``LoadForecaster.error_summary()``: method -> ``{"n", "mae", "rmse"}``.
    policy : str
        The policy that steered by the grey-Markov forecast.

    Returns
    -------
    str
        Empty when there is no naive forecast or no scored forecast to compare.
    """
    naive = errors.get(NAIVE)
    if not naive or not naive["n"] or math.isnan(naive["mae"]):
        return ""
    scored = {m: e for m, e in errors.items()
              if m != NAIVE and e["n"] and not math.isnan(e["mae"])}
    if not scored:
        return ""
    base = naive["mae"]

    def named(ms):
        parts = [f"{FORECAST_NAMES.get(m, m)} (MAE {num(scored[m]['mae'])})" for m in ms]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    losers = [m for m in scored if scored[m]["mae"] > base]
    winners = [m for m in scored if scored[m]["mae"] <= base]
    text = []
    if losers:
        verb = "loses" if len(losers) == 1 else "lose"
        text.append(f"**{named(losers)} {verb} to the naive last-value forecast** "
                    f"(MAE {num(base)}): on this run, taking each load to stay as it was "
                    "predicts the next step better")
        if "gm11-markov" in losers:
            text[-1] += (f", so {policy}, which ranks chains and reserves wavelengths by "
                         "the grey-Markov forecast, steered by a less accurate forecast than "
                         "that")
        text[-1] += "."
    if winners:
        verb = "beats" if len(winners) == 1 else "beat"
        text.append(f"{named(winners)} {verb} the naive last-value forecast "
                    f"(MAE {num(base)}).")
    return " ".join(text)


def style(i: int) -> dict:
    """Colour, marker and line style of the ``i``-th policy, the same in every figure.

    Colours, markers and dashes repeat with different periods (6, 7 and 4), so no two
    of the first 84 policies share all three, and no two of the first 7 a marker.
    """
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
    markers = ("o", "s", "^", "D", "v", "P", "X")
    dashes = ("-", "--", "-.", ":")
    return {"color": colors[i % len(colors)], "marker": markers[i % len(markers)],
            "linestyle": dashes[i % len(dashes)]}


def line_style(i: int, n: int, spacing: float = 0.1) -> dict:
    """Keyword arguments for the ``i``-th of ``n`` curves of one axes.

    The policy's :func:`style`; the first curve thickest and lowest, each later one
    thinner and drawn above it, so curves that coincide all stay visible. Markers sit
    ``spacing`` of the axes' diagonal apart along each curve (matplotlib's float
    ``markevery``), each curve's shifted by ``spacing / n`` so they do not stack where
    curves coincide.
    """
    st = style(i)
    return {"color": st["color"], "marker": st["marker"], "linestyle": st["linestyle"],
            "lw": max(0.8, 2.4 - 0.4 * i), "alpha": 0.85, "zorder": 2 + i,
            "markersize": 5, "markeredgecolor": "white", "markeredgewidth": 0.6,
            "markevery": (spacing * i / max(1, n), spacing)}


def requests_of(runs: list[Run]) -> str:
    """``N job requests`` of a run's policies (they all see the same requests)."""
    n = len(runs[0].records) if runs else 0
    return f"{n} job request{'' if n == 1 else 's'}"


def utilisation_figure(runs: list[Run]):
    """The figure of ``utilisation.png``: GPUs held and span load over time, one line per
    policy; returns the matplotlib Figure (the caller saves and closes it)."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for i, run in enumerate(runs):
        t = [s.time_s / 3600 for s in run.samples]
        kw = line_style(i, len(runs), spacing=0.25)  # jagged curves: long paths
        axes[0].step(t, [s.gpu_utilisation for s in run.samples], where="post",
                     label=run.policy, **kw)
        axes[1].step(t, [s.span_load for s in run.samples], where="post",
                     label=run.policy, **kw)
    from matplotlib.ticker import PercentFormatter

    fig.suptitle(f"GPUs held and wavelengths in use over time, per policy "
                 f"({requests_of(runs)})", fontsize=11)
    axes[0].set_title("share of all GPUs held by jobs", fontsize=9)
    axes[1].set_title("share of wavelengths in use by jobs and background, mean over spans",
                      fontsize=9)
    axes[0].set_ylabel("GPUs held")
    axes[1].set_ylabel("wavelengths in use")
    axes[1].set_xlabel("simulated time (h)")
    for ax in axes:
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.grid(alpha=0.3)
    if runs:  # beside the axes: no curve under it
        axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                       title="policy", title_fontsize=8)
    return fig


def iteration_time_figure(runs: list[Run]):
    """The figure of ``iteration_time.png``: each policy's iteration times of accepted jobs
    as an empirical CDF; returns the matplotlib Figure (the caller saves and closes it)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.3))
    for i, run in enumerate(runs):
        Ts = sorted(r.placement.iteration_time_s for r in run.records if r.placement)
        if Ts:
            ax.step(Ts, [(k + 1) / len(Ts) for k in range(len(Ts))], where="post",
                    label=f"{run.policy} ({len(Ts)} jobs)", **line_style(i, len(runs)))
    ax.set_title(f"Iteration times of accepted jobs, per policy ({requests_of(runs)})\n"
                 "a curve further left and higher: faster jobs", fontsize=10)
    ax.set_xscale("log")
    ax.set_xlabel("iteration time of an accepted job (s)")
    ax.set_ylabel("share of accepted jobs")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="lower right", framealpha=0.9)
    else:
        ax.text(0.5, 0.5, "no job was accepted", ha="center", va="center",
                transform=ax.transAxes)
    return fig


def plot_utilisation(runs: list[Run], path: Path) -> None:
    """Save :func:`utilisation_figure` to ``path``."""
    fig = utilisation_figure(runs)
    try:
        save_figure(fig, path)
    finally:
        pyplot().close(fig)


def plot_iteration_times(runs: list[Run], path: Path) -> None:
    """Save :func:`iteration_time_figure` to ``path``."""
    fig = iteration_time_figure(runs)
    try:
        save_figure(fig, path)
    finally:
        pyplot().close(fig)


def write_outputs(runs: list[Run], scenario, seed: int, out: Path) -> list[Path]:
    """Write every file of ``chainpipe simulate`` into ``out`` as one set; returns their paths.

    The set is made in a new directory and swapped in whole
    (:func:`~chainpipe.io.atomic_write_directory`): an existing ``out`` is replaced, and
    only if it holds nothing but these files; an interruption leaves the old set.
    """
    atomic_write_directory(out, lambda tmp: _write_set(runs, scenario, seed, tmp), OUTPUT_FILES)
    return [Path(out, name) for name in OUTPUT_FILES]


def _write_set(runs: list[Run], scenario, seed: int, out: Path) -> None:
    """The files of :data:`OUTPUT_FILES` in the directory ``out``."""
    write_csv(out / "jobs.csv", JOB_COLUMNS, [row for run in runs for row in job_rows(run)])
    write_csv(out / "summary.csv", SUMMARY_COLUMNS,
              [summary_row(metrics(run), scenario.name, seed) for run in runs])
    write_csv(out / "utilisation.csv", ["policy", "time_s", "gpu_utilisation", "span_load",
                                        "reserved_share"],
              [[run.policy, num(s.time_s), num(s.gpu_utilisation), num(s.span_load),
                num(s.reserved_share)] for run in runs for s in run.samples])
    text = summary_markdown(runs, scenario, seed)
    atomic_write(out / "summary.md", lambda tmp: tmp.write_text(text, "utf-8"))
    plot_utilisation(runs, out / "utilisation.png")
    plot_iteration_times(runs, out / "iteration_time.png")


def draw_sweep(ax, rows: list[dict], key: str, ylabel: str, percent: bool = False) -> None:
    """One line per policy of ``key`` against the arrival rate, on the axes ``ax``.

    ``rows`` are a sweep's rows, each with ``policy``, ``rate``, ``key`` and
    optionally ``key + "_sd"`` (drawn as error bars: the spread over seeds).
    """
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for i, pol in enumerate(policies):
        pts = sorted((r["rate"], r[key], r.get(f"{key}_sd", 0.0)) for r in rows
                     if r["policy"] == pol and r[key] is not None)
        if not pts:
            continue
        st = style(i)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    label=pol, color=st["color"], marker=st["marker"], ls=st["linestyle"],
                    capsize=3, lw=1.3, alpha=0.9, zorder=2 + i)
    ax.set_xlabel("arrival rate (jobs per hour)")
    ax.set_ylabel(ylabel)
    if percent:
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
