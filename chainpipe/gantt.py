"""A plan's pipeline as a Gantt chart, and the ``chainpipe plot`` command.

:func:`gantt` draws the schedule that :func:`chainpipe.schedule.simulate_pipeline`
simulates: one row per stage (its device) and, where asked, one row per stage
boundary (the link the activations cross; inter-datacenter paths shaded), with
every microbatch's forward and backward block and, for a stage of data-parallel
width ``d > 1``, its gradient synchronisation after its last backward. A stage
row is labelled with its devices, its ``d x t`` (when not ``1x1``) and its
layers. A plan of several pipelines draws them one above the other (labels
``p0 s0 ...``, ``p1 s0 ...``, a line between two pipelines), then one row per
chain link of the averaging of gradients across DCs (``R_X / H``) after them. The title gives both the
simulated makespan and the cost model's ``T`` (they differ: ``docs/schedule.md``).

A chart stays readable at any size: its time axis always covers the whole
iteration (fill, steady state, drain and synchronisation, with ``T`` dashed and
the simulated makespan solid), and by default only the first
:data:`DEFAULT_WINDOW` microbatches are drawn in full colour (the pipeline's
fill and the start of its steady state; later microbatches are drawn pale); rows of links inside one
datacenter are left out when there are many stages; the figure's height is
capped; where blocks would be narrower than :data:`DENSE_PX` pixels (every
microbatch of a long iteration), device rows show their busy spans instead.
Every rectangle of one colour in one row is drawn in a single call, so a plan
of 41 stages and 128 microbatches draws in a second or two.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from pathlib import Path

from .drawing import pyplot, save_figure
from .instance import Instance, InstanceError
from .plan import Plan
from .schedule import (
    CROSS_SYNC,
    DEFAULT_WEIGHT_MEMORY_SHARE,
    SYNC,
    WEIGHT,
    InapplicableSchedule,
    PipelineRow,
    PipelineSchedule,
    simulate_pipeline,
)
from .strict_json import quote

FORWARD_COLOR = "#4C78A8"
BACKWARD_COLOR = "#F58518"
FORWARD_PALE = "#C3D3E6"
BACKWARD_PALE = "#FBD3AE"
#: a zero-bubble schedule's weight-gradient block ``W``
WEIGHT_COLOR = "#E45756"
WEIGHT_PALE = "#F4BCBC"
INTER_DC_SHADE = "0.92"
BUSY_COLOR = "#6F5E86"
SYNC_COLOR = "#54A24B"
CROSS_SYNC_COLOR = "#B279A2"
#: a chart whose device blocks are narrower than this many pixels (median) shows busy spans
DENSE_PX = 2.0
#: microbatches drawn in full colour by default (``None`` draws every one)
DEFAULT_WINDOW = 16
#: with more stages than this, links inside one datacenter get no row of their own by default
LINK_ROWS_UP_TO = 16
WIDTH_IN = 13.0
MAX_HEIGHT_IN = 15.0
DPI = 120
LINK_CHOICES = ("auto", "all", "inter", "none")


def chart_rows(sim: PipelineSchedule, links: str = "auto") -> list[PipelineRow]:
    """The rows a chart shows, in chain order.

    Parameters
    ----------
    sim : PipelineSchedule
        The simulated schedule.
    links : {"auto", "all", "inter", "none"}
        Which link rows: every one, only inter-datacenter paths, none, or
        (``auto``) every one up to :data:`LINK_ROWS_UP_TO` stages and the
        inter-datacenter ones beyond.

    Returns
    -------
    list of PipelineRow
        Every stage row, the chosen link rows and every row of the averaging across
        DCs (several pipelines).

    Raises
    ------
    ValueError
        For an unknown ``links``.
    """
    if links not in LINK_CHOICES:
        raise ValueError(f"links must be one of {', '.join(LINK_CHOICES)}, not {links!r}")
    if links == "auto":
        links = "all" if sim.num_stages <= LINK_ROWS_UP_TO else "inter"
    return [r for r in sim.rows if r.kind != "link" or links == "all"
            or (links == "inter" and r.inter_dc)]


def window_end(sim: PipelineSchedule, window: int | None) -> float:
    """End of the time span a chart shows, seconds.

    Parameters
    ----------
    sim : PipelineSchedule
        The simulated schedule.
    window : int or None
        Microbatches drawn in full; ``None`` (or at least ``M``) for all.

    Returns
    -------
    float
        The end of the last block of a microbatch ``< window`` (synchronisation
        blocks, inside and across DCs, which come after every microbatch, aside); for
        all microbatches, the larger of the makespan and ``T``.
    """
    if window is None or window >= sim.microbatches:
        return max(sim.makespan_s, sim.iteration_time_s)
    return max((b.end for r in sim.rows for b in r.blocks
                if b.op not in (SYNC, CROSS_SYNC) and b.microbatch < window),
               default=sim.makespan_s)


def _title(sim: PipelineSchedule, stages: int, window: int | None, x_end: float,
           hidden_links: int) -> str:
    status = "" if sim.feasible else "  [plan INFEASIBLE: breaks a memory limit]"
    if sim.feasible and not sim.fits:
        status = "  [does not fit the devices' memory under this schedule]"
    shape = f"{stages} stages, {sim.microbatches} microbatches"
    if sim.num_pipelines > 1:
        shape = (f"{sim.num_pipelines} pipelines, {stages} stages, {sim.microbatches} "
                 f"microbatches ({' + '.join(map(str, sim.pipeline_microbatches))})")
    lines = [
        f"{sim.instance}: {sim.schedule.upper()} schedule of one iteration, {shape} "
        f"(simulated){status}",
        f"simulated makespan {sim.makespan_s:.6g} s; cost model T = "
        f"{sim.iteration_time_s:.6g} s ({sim.objective}); T / makespan = {sim.ratio:.4f}"
        + (f"; synchronisation max R_s = {sim.sync_s:.6g} s" if sim.sync_s > 0 else "")
        + (f"; across DCs R_X / H = {sim.cross_sync_s:.6g} s" if sim.num_pipelines > 1 else ""),
    ]
    notes = []
    if window is not None and window < sim.microbatches:
        notes.append(f"first {window} microbatches in full colour (to "
                     f"{window_end(sim, window):.4g} s), later ones pale")
    notes.append("dashed: T, solid: makespan")
    if hidden_links:
        notes.append(f"{hidden_links} links inside a datacenter not drawn")
    lines.append("; ".join(notes))
    return "\n".join(lines)


def merge_spans(bars: list[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """``(start, duration)`` intervals merged where less than ``gap`` apart, in time order."""
    out: list[list[float]] = []
    for start, dur in sorted(bars):
        if out and start - (out[-1][0] + out[-1][1]) <= gap:
            out[-1][1] = max(out[-1][1], start + dur - out[-1][0])
        else:
            out.append([start, dur])
    return [(a, d) for a, d in out]


def _draw_row(ax, row: PipelineRow, y: float, window: int | None, x_end: float,
              px_per_s: float, row_px: float, dense: bool) -> None:
    """Draw one row: one ``broken_barh`` per colour, numbers where they fit.

    In a ``dense`` chart the row is drawn as busy spans instead, blocks less
    than a pixel apart merged (a device's forward and backward in one colour;
    a link keeps its two directions).
    """
    if row.kind != "link":
        spans = {"F": (y - 0.38, 0.76), "B": (y - 0.38, 0.76), SYNC: (y - 0.38, 0.76),
                 CROSS_SYNC: (y - 0.38, 0.76), WEIGHT: (y - 0.38, 0.76)}
    else:  # activations in the upper half, gradients in the lower half
        spans = {"F": (y + 0.02, 0.36), "B": (y - 0.38, 0.36)}
    shown = [b for b in row.blocks if b.start <= x_end]
    if not shown:
        return
    alpha = 0.75 if row.kind == "link" else 1.0
    if dense and row.kind != "cross":
        gap = 1.0 / px_per_s
        if row.kind == "stage":
            merged = {("busy", BUSY_COLOR): merge_spans([(b.start, b.duration) for b in shown
                                                         if b.op != SYNC], gap),
                      (SYNC, SYNC_COLOR): [(b.start, b.duration) for b in shown
                                           if b.op == SYNC]}
        else:
            merged = {(op, color): merge_spans([(b.start, b.duration) for b in shown
                                                if b.op == op], gap)
                      for op, color in (("F", FORWARD_COLOR), ("B", BACKWARD_COLOR))}
        for (op, color), bars in merged.items():
            if not bars:
                continue
            ax.broken_barh(bars, spans.get(op, spans["F"]), facecolors=color,
                           edgecolors="none", alpha=alpha)
        return
    groups: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    labels = []
    for b in shown:
        full = window is None or b.microbatch < window
        groups.setdefault((b.op, full), []).append((b.start, b.duration))
        width_px = b.duration * px_per_s
        text = {SYNC: "sync", CROSS_SYNC: "R_X / H"}.get(b.op, str(b.microbatch))
        if b.chunk and row.kind == "stage":  # interleaved 1F1B: 3, 3', 3'' per chunk
            text += "'" * b.chunk if b.chunk <= 3 else f"^{b.chunk}"
        if row.kind != "link" and full and width_px >= 7 * len(text) + 3 and row_px >= 10:
            labels.append((b.start + b.duration / 2, text))
    for (op, full), bars in groups.items():
        if op in (SYNC, CROSS_SYNC):
            color = SYNC_COLOR if op == SYNC else CROSS_SYNC_COLOR
        elif full:
            color = {"F": FORWARD_COLOR, WEIGHT: WEIGHT_COLOR}.get(op, BACKWARD_COLOR)
        else:
            color = {"F": FORWARD_PALE, WEIGHT: WEIGHT_PALE}.get(op, BACKWARD_PALE)
        narrow = min(d for _, d in bars) * px_per_s < 6
        ax.broken_barh(bars, spans[op], facecolors=color,
                       edgecolors="none" if narrow else "white", linewidth=0.4, alpha=alpha)
    for x, text in labels:
        ax.text(x, y, text, ha="center", va="center", fontsize=7, color="white")


def _progress(rows: list[PipelineRow], blocks: int):
    """``rows``, behind a progress bar on stderr when there are many blocks to draw."""
    from .schedule import PROGRESS_BLOCKS

    if blocks <= PROGRESS_BLOCKS:
        return rows
    from tqdm import tqdm

    return tqdm(rows, desc="drawing", unit="row", delay=1.0, leave=False)


def draw(sim: PipelineSchedule, ax=None, *, window: int | None = DEFAULT_WINDOW,
         links: str = "auto"):
    """Draw a simulated schedule; returns the matplotlib figure.

    Parameters
    ----------
    sim : PipelineSchedule
        From :func:`chainpipe.schedule.simulate_pipeline`.
    ax : matplotlib Axes, optional
        Draw into these axes (default: a new figure sized for the rows, its
        height capped at :data:`MAX_HEIGHT_IN` inches).
    window : int or None
        Microbatches drawn in full colour (later ones pale); ``None`` draws every
        microbatch in full colour. The time axis covers the whole iteration either way.
    links : {"auto", "all", "inter", "none"}
        Which link rows to draw (see :func:`chart_rows`).

    Returns
    -------
    matplotlib Figure
        The figure drawn on (the caller closes it).
    """
    plt = pyplot()
    rows = chart_rows(sim, links)
    n = len(rows)
    stages = sum(1 for r in sim.rows if r.kind == "stage")
    hidden = sum(1 for r in sim.rows if r.kind == "link") - sum(1 for r in rows if r.kind == "link")
    if ax is None:
        height = min(2.2 + 0.36 * n, MAX_HEIGHT_IN)
        fig, ax = plt.subplots(figsize=(WIDTH_IN, height))
    fig = ax.figure
    window = None if window is None or window >= sim.microbatches else max(int(window), 1)
    x_end = window_end(sim, None) or 1.0  # the whole iteration, whatever the window
    fig_w, fig_h = fig.get_size_inches()
    pos = ax.get_position()
    px_per_s = fig_w * pos.width * DPI * 0.85 / (x_end * 1.02)
    row_px = fig_h * pos.height * DPI * 0.8 / max(n, 1)
    widths = [b.duration for r in rows if r.kind == "stage" for b in r.blocks if b.start <= x_end]
    dense = bool(widths) and statistics.median(widths) * px_per_s < DENSE_PX
    for i, row in enumerate(_progress(rows, sum(len(r.blocks) for r in rows))):
        y = n - 1 - i
        if row.kind == "link" and row.inter_dc:
            ax.axhspan(y - 0.5, y + 0.5, color=INTER_DC_SHADE, zorder=0)
        _draw_row(ax, row, y, window, x_end, px_per_s, row_px, dense)
    for i in range(1, n):  # a line between two pipelines, and before the averaging across DCs
        if rows[i].pipeline != rows[i - 1].pipeline:
            ax.axhline(n - i - 0.5, color="0.4", linewidth=0.8)
    ax.set_yticks(range(n))
    ax.set_yticklabels([r.label for r in reversed(rows)], fontsize=8 if n <= 30 else 6)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(0, x_end * 1.02)
    ax.axvline(sim.iteration_time_s, color="0.25", linestyle="--", linewidth=1)
    ax.axvline(sim.makespan_s, color="0.25", linestyle="-", linewidth=0.8)
    ax.set_xlabel("time within one iteration (s)")
    ax.set_title(_title(sim, stages, window, x_end, hidden), fontsize=9)
    from matplotlib.patches import Patch

    handles = [Patch(color=FORWARD_COLOR, label="forward (links: activations, upper half)"),
               Patch(color=BACKWARD_COLOR, label="backward (links: gradients, lower half)")]
    if any(b.op == WEIGHT for r in rows for b in r.blocks):
        handles[1] = Patch(color=BACKWARD_COLOR, label="B: input gradient (links: lower half)")
        handles.append(Patch(color=WEIGHT_COLOR, label="W: weight gradient"))
    if window is not None:
        handles.append(Patch(color=FORWARD_PALE, label=f"microbatches {window} and later"))
    if dense:
        handles.append(Patch(color=BUSY_COLOR, label=f"busy (blocks under {DENSE_PX:g} px "
                                                     f"merged)"))
    if any(b.op == SYNC and b.start <= x_end for r in rows for b in r.blocks):
        handles.append(Patch(color=SYNC_COLOR, label="gradient synchronisation R_s"))
    if any(r.kind == "cross" for r in rows):
        handles.append(Patch(color=CROSS_SYNC_COLOR, label="averaging across DCs R_X / H"))
    if any(r.inter_dc and r.kind == "link" for r in rows):
        handles.append(Patch(color=INTER_DC_SHADE, label="inter-DC path"))
    below = -0.5 / max(fig_h * pos.height, 1.0)  # under the axis label, in axes fraction
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, below),
              ncol=len(handles), fontsize=7, frameon=False)
    return fig


def gantt(instance: Instance, plan: Plan, ax=None, path: str | os.PathLike | None = None, *,
          window: int | None = DEFAULT_WINDOW, links: str = "auto",
          progress: bool | None = None, schedule: str | None = None,
          weight_share: float | None = None,
          weight_memory_share: float = DEFAULT_WEIGHT_MEMORY_SHARE) -> PipelineSchedule:
    """Simulate ``plan`` and draw its pipeline; save the figure to ``path`` if given.

    Parameters
    ----------
    instance, plan : Instance, Plan
        What to simulate (see :func:`chainpipe.schedule.simulate_pipeline`).
    ax : matplotlib Axes, optional
        Draw into these axes instead of a new figure.
    path : path, optional
        Save the figure there (format from the suffix: ``.png``, ``.svg``, ``.pdf``).
        Only that file is written.
    window, links
        See :func:`draw`.
    progress : bool, optional
        Progress bar on stderr for a long simulation (default: when it is large).
    schedule : {"1f1b", "gpipe", "zb-h1", "zb-h2"}, optional
        Replay this schedule instead of the instance's (a what-if).
    weight_share, weight_memory_share : float
        Zero-bubble schedules: see :func:`chainpipe.schedule.simulate_pipeline`.

    Returns
    -------
    PipelineSchedule
        The simulated schedule drawn.
    """
    sim = simulate_pipeline(instance, plan, schedule=schedule, weight_share=weight_share,
                            weight_memory_share=weight_memory_share, progress=progress)
    own = ax is None
    fig = draw(sim, ax, window=window, links=links)
    if path is not None:
        save_figure(fig, path, dpi=DPI)
    if own:
        pyplot().close(fig)
    return sim


# --------------------------------------------------------------------------- command line
def _check_outputs(args) -> tuple[Path, Path | None]:
    """Refuse, before any work, an output that is an input or has an unknown format."""
    from .drawing import image_formats
    from .paths import refuse_overwrite, same_file

    out = Path(args.output)
    data = Path(args.data) if args.data else None
    refuse_overwrite({"--output": out, "--data": data}, [args.instance, args.plan])
    problems = []
    formats = image_formats()
    if out.suffix.lstrip(".").lower() not in formats:
        problems.append(f"--output: {out}: unknown image format {out.suffix or '(none)'!r}; "
                        f"use .png, .svg or .pdf")
    if data is not None:
        if data.suffix.lower() not in (".json", ".csv"):
            problems.append(f"--data: {data}: name a .json or .csv file")
        if same_file(out, data):
            problems.append(f"--data: {data} is also --output")
    if problems:
        raise InstanceError(problems)
    return out, data


def _window(text: str) -> int | None:

    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InstanceError([f"--microbatches: {quote(text)} is neither a positive count nor 'all'"])
    return value


def cli_plot(args) -> int:
    """``chainpipe plot INSTANCE PLAN -o PNG [--data FILE]``: the Gantt chart of a plan.

    Outputs are checked against the inputs (and their formats) before
    anything is read or drawn; only ``-o`` is written, and ``--data`` if given.
    Prints both the cost model's ``T`` and the simulated makespan.

    Returns
    -------
    int
        0 (bad input raises :class:`~chainpipe.instance.InstanceError`: exit 2).
    """
    from .drawing import write_csv
    from .io import read, read_plan_for, write_json
    from .numeric import jsonable

    out, data = _check_outputs(args)
    window = _window(args.microbatches)
    inst = read(args.instance)
    plan, warnings = read_plan_for(args.plan, inst, force=args.force)
    for line in warnings:
        print(line, file=sys.stderr)
    try:
        sim = gantt(inst, plan, path=out, window=window, links=args.links,
                    schedule=getattr(args, "schedule", None),
                    weight_share=getattr(args, "weight_share", None),
                    weight_memory_share=getattr(args, "weight_memory_share",
                                                DEFAULT_WEIGHT_MEMORY_SHARE))
    except InstanceError as exc:  # the plan's violations: name the file they are in
        raise InstanceError([f"{args.plan}: {p}" for p in exc.problems]) from None
    except InapplicableSchedule as exc:  # interleaved:V on a plan it does not fit
        raise InstanceError([f"{args.plan}: {exc}"]) from None
    written = [str(out)]
    if data is not None:
        if data.suffix.lower() == ".csv":
            write_csv(data, *sim.csv_rows())
        else:
            write_json(jsonable(sim.to_dict()), data)
        written.append(str(data))
    shown = "" if window is None or window >= sim.microbatches else \
        f" (first {window} drawn in full; --microbatches all for every one)"
    pipes = f"{sim.num_pipelines} pipelines ({' + '.join(map(str, sim.pipeline_microbatches))} " \
        "microbatches), " if sim.num_pipelines > 1 else ""
    print(f"wrote {' and '.join(written)}: {sim.schedule} schedule, {pipes}{sim.num_stages} "
          f"stages, {sim.microbatches} microbatches{shown}")
    sync = f" (synchronisation max R_s = {sim.sync_s:.6g} s included)" if sim.sync_s > 0 else ""
    if sim.num_pipelines > 1:
        sync += f" (averaging across DCs R_X / H = {sim.cross_sync_s:.6g} s included)"
    print(f"cost model T = {sim.iteration_time_s:.6g} s, simulated makespan "
          f"{sim.makespan_s:.6g} s{sync}, T / makespan = {sim.ratio:.4f} (docs/schedule.md)")
    if not sim.feasible:
        print("warning: the plan is infeasible (see `chainpipe evaluate`)")
    elif not sim.fits:
        print(f"warning: under {sim.schedule} the plan does not fit the memory of "
              + ", ".join(f"s{m.stage}" for m in sim.memory if not m.fits)
              + " (see `chainpipe evaluate --schedules`)")
    if not math.isfinite(sim.ratio):
        print("warning: the schedule has no length (every stage takes no time)")
    return 0


__all__ = ["DEFAULT_WINDOW", "chart_rows", "cli_plot", "draw", "gantt", "merge_spans", "window_end"]
