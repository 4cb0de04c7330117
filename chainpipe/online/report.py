"""Metrics of simulation runs, and the files ``chainpipe simulate`` writes.

- ``jobs.csv``: one row per (policy, job request);
- ``summary.csv``: one row per policy (the columns of the command-line contract);
- ``summary.md``: the same with tail iteration time, waiting, link load,
  forecast errors and planning effort;
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
    return "\n".join(lines) + "\n"


def style(i: int) -> dict:
    """Colour and marker of the ``i``-th policy, the same in every figure."""
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
    markers = ("o", "s", "^", "D", "v", "P")
    return {"color": colors[i % len(colors)], "marker": markers[i % len(markers)]}


def plot_utilisation(runs: list[Run], path: Path) -> None:
    """GPUs held and span load over time, one line per policy."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for i, run in enumerate(runs):
        t = [s.time_s / 3600 for s in run.samples]
        st = style(i)
        # the first policy thickest, underneath: lines that coincide stay visible
        lw = max(0.6, 2.2 - 0.4 * i)
        axes[0].step(t, [s.gpu_utilisation for s in run.samples], where="post",
                     color=st["color"], label=run.policy, lw=lw, alpha=0.85)
        axes[1].step(t, [s.span_load for s in run.samples], where="post",
                     color=st["color"], label=run.policy, lw=lw, alpha=0.85)
    from matplotlib.ticker import PercentFormatter

    axes[0].set_ylabel("GPUs held")
    axes[1].set_ylabel("wavelengths in use\n(mean over spans)")
    axes[1].set_xlabel("simulated time (h)")
    for ax in axes:
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.grid(alpha=0.3)
    axes[0].legend(ncol=min(5, len(runs)), fontsize=8, loc="upper right")
    save_figure(fig, path)
    plt.close(fig)


def plot_iteration_times(runs: list[Run], path: Path) -> None:
    """Each policy's iteration times of accepted jobs, as an empirical CDF."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run in enumerate(runs):
        Ts = sorted(r.placement.iteration_time_s for r in run.records if r.placement)
        if Ts:
            ax.step(Ts, [(k + 1) / len(Ts) for k in range(len(Ts))], where="post",
                    color=style(i)["color"], label=f"{run.policy} ({len(Ts)} jobs)")
    ax.set_xscale("log")
    ax.set_xlabel("iteration time of an accepted job (s)")
    ax.set_ylabel("share of accepted jobs")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


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
                    label=pol, color=st["color"], marker=st["marker"], capsize=3, lw=1.3)
    ax.set_xlabel("arrival rate (jobs per hour)")
    ax.set_ylabel(ylabel)
    if percent:
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
