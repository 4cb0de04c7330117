"""What a sweep writes: ``results.csv``, the summary table (terminal and Markdown), figures."""

from __future__ import annotations

import csv
from pathlib import Path

from ..io import atomic_write, write_json
from ..numeric import jsonable
from . import metrics

CSV_COLUMNS = ["instance", "solver", "status", "iteration_time_s", "lower_bound_s", "gap",
               "gap_to_best", "solve_time_s", "devices_used", "devices_total"]

STATUS_SHORT = {"optimal": "opt", "feasible": "feas", "infeasible": "infeas",
                "no_solution": "no sol", "error": "error"}


def devices_used(rec: dict) -> int | None:
    """The devices a run's plan uses (``d * t`` over its stages, every pipeline), or None."""
    if rec.get("devices_used") is not None:
        return int(rec["devices_used"])
    plan = rec.get("plan")
    if not plan:
        return None
    pipelines = plan.get("pipelines") or [plan]
    return sum(len(st.get("devices") or [st.get("device")])
               for p in pipelines for st in p.get("stages", []))


def _num(x, fmt=".6g"):
    return "" if x is None else format(x, fmt)


def write_results_csv(records: list[dict], path: Path, with_seed: bool) -> None:
    """One row per run, with exactly the documented columns of ``results.csv`` (plus ``seed`` last if asked)."""
    rows = metrics.annotate(records)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(CSV_COLUMNS + (["seed"] if with_seed else []))
            for r in rows:
                w.writerow([r["instance"], r["solver"], r["status"],
                            _num(r["iteration_time_s"], ".9g"), _num(r["lower_bound_s"], ".9g"),
                            _num(r["gap"], ".6g"), _num(r["gap_to_best"], ".6g"),
                            f"{r['solve_time_s']:.4f}", _num(devices_used(r), "d"),
                            _num(r.get("num_devices"), "d")]
                           + ([r.get("seed", 0)] if with_seed else []))

    atomic_write(path, write)


# --------------------------------------------------------------------------- tables
def _pct(x):
    return "-" if x is None else f"{100 * x:.2f}%"


def _sec(x):
    return "-" if x is None else f"{x:.3g}"


SOLVER_HEADER = ["solver", "kind", "runs", "optimal", "feasible", "infeasible", "no sol",
                 "gave up", "error", "wins", "gap to best (mean)", "gap to best (max)", "own gap (mean)",
                 "SGM time s", "primal integral s"]


def solver_table(summary: list[dict]) -> list[list[str]]:
    rows = []
    for s in summary:
        rows.append([s["solver"], "exact" if s["exact"] else "heuristic", str(s["runs"]),
                     str(s["optimal"]), str(s["feasible"]), str(s["infeasible"]),
                     str(s["no_solution"] - s["gave_up"]), str(s["gave_up"]), str(s["error"]),
                     str(s["wins"]),
                     _pct(s["mean_gap_to_best"]), _pct(s["max_gap_to_best"]),
                     _pct(s["mean_gap"]), _sec(s["sgm_time_s"]),
                     _sec(s["mean_primal_integral_s"])])
    return rows


def instance_table(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per instance: size, best known T* (``*`` proven), and each solver's gap to it."""
    recs = metrics.annotate(records)
    best = metrics.best_known(records)
    solvers = list(dict.fromkeys(r["solver"] for r in recs))
    insts = list(dict.fromkeys(r["instance_path"] for r in recs))
    header = ["instance", "L", "devices", "DCs", "best T s"] + solvers
    rows = []
    for path in insts:
        mine = [r for r in recs if r["instance_path"] == path]
        first = mine[0]
        b = best[path]
        if b["best"] is None:
            best_txt = "infeasible" if b["infeasible"] else "-"
        else:
            best_txt = f"{b['best']:.6g}" + ("*" if b["proven"] else "")
        row = [first["instance"], str(first["num_layers"]), str(first["num_devices"]),
               str(first["num_datacenters"]), best_txt]
        for s in solvers:
            cells = []
            for r in (x for x in mine if x["solver"] == s):
                if r["gap_to_best"] is not None:
                    used = devices_used(r)
                    gpus = "" if used is None else f", {used}/{first['num_devices']} GPUs"
                    cells.append(f"{_pct(r['gap_to_best'])} {STATUS_SHORT[r['status']]}{gpus}")
                elif metrics.gave_up(r):
                    cells.append("gave up")
                else:
                    cells.append(STATUS_SHORT.get(r["status"], r["status"]))
            row.append("; ".join(cells) if cells else "-")
        rows.append(row)
    return header, rows


def aligned(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def fmt(row):
        cells = []
        for i, (c, w) in enumerate(zip(row, widths)):
            cells.append(c.ljust(w) if i == 0 else c.rjust(w))
        return "  ".join(cells).rstrip()

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return str(c).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def caption(records: list[dict]) -> str:
    limits = sorted({r["time_limit_s"] for r in records})
    threads = sorted({r["threads"] for r in records})
    seeds = sorted({r.get("seed", 0) for r in records})
    insts = len({r["instance_path"] for r in records})
    return (
        f"{insts} instances, {len(seeds)} seed(s), time limit "
        f"{', '.join(f'{x:g}' for x in limits)} s, {', '.join(map(str, threads))} thread(s) per "
        f"run, every run in its own process. "
        f"**wins**: runs whose iteration time T is within {metrics.WIN_RTOL:g} (relative) of the "
        f"best known T* (the least T any solver found; `*` marks a proven optimum). "
        f"**gap to best** = (T - T*) / T*. **own gap** = (T - bound) / T, the solver's own "
        f"proven lower bound. **SGM time**: shifted geometric mean of solve times, shift "
        f"{metrics.SHIFT_S:g} s; runs that did not finish (no solution, error, killed, over the "
        f"limit, or an exact solver stopped without proof) are charged the time limit, "
        f"those that gave up early too (MIPLIB's rule; **gave up** counts them apart from "
        f"**no sol**, the runs out of time). "
        f"**primal integral**: mean over runs of the integral of (T(t) - T*) / T(t) over "
        f"[0, limit] (Berthold), 1 while no plan is known; anytime solvers contribute their "
        f"traced incumbents, the others their final plan from the moment they return it."
    )


def summary_markdown(records: list[dict], figures: dict[str, str], notes: str = "") -> str:
    """``summary.md``: per solver, per instance, contradictions, failures, figures, then ``notes``."""
    summary = metrics.solver_summary(records)
    best = metrics.best_known(records)
    conflicts = [c for b in best.values() for c in b["conflicts"]]
    ih, irows = instance_table(records)
    out = ["# Comparison summary", "", caption(records), "", "## Per solver", "",
           markdown(SOLVER_HEADER, solver_table(summary)), "",
           "## Per instance: gap to the best known and status", "",
           ("Cells: (T - T*) / T*, the status (opt = proven optimal, feas = feasible without "
           "proof, no sol = no plan in the limit, gave up = the solver stopped early without "
           "a plan, error = the run failed) and the GPUs the plan uses of the instance's."), "",
           markdown(ih, irows), ""]
    if conflicts:
        out += ["## Contradictions between solvers", ""]
        out += [f"- {c}" for c in conflicts] + [""]
    quit_early = [r for r in records if metrics.gave_up(r)]
    if quit_early:
        out += ["## Runs that gave up", "",
                "These ended on their own, well before their limit, without a plan; the SGM "
                "time still charges them the limit (they did not finish with an answer), but "
                "they did not run out of time:", ""]
        out += [f"- {r['instance']} / {r['solver']} (seed {r.get('seed', 0)}, "
                f"{r['solve_time_s']:.3g} s): {r.get('message') or 'no message'}"
                for r in quit_early] + [""]
    errors = [r for r in records if r["status"] == "error" or r.get("stats", {}).get("killed")]
    if errors:
        out += ["## Failed runs", ""]
        out += [f"- {r['instance']} / {r['solver']} (seed {r.get('seed', 0)}): {r['status']}: "
                f"{r.get('message') or ''}".rstrip() for r in errors] + [""]
    if figures:
        out += ["## Figures", ""]
        out += [f"- {what}: `{name}`" for what, name in figures.items()] + [""]
    if notes:
        out += [notes]
    return "\n".join(out)


def terminal_summary(records: list[dict]) -> str:
    summary = metrics.solver_summary(records)
    return aligned(SOLVER_HEADER, solver_table(summary))


# --------------------------------------------------------------------------- figures
def write_figures(records: list[dict], out_dir: Path) -> dict[str, str]:
    """Draw the comparison figures into ``out_dir``.

    Parameters
    ----------
    records : list of dict
        Run records of a sweep.
    out_dir : Path
        Directory of the sweep's outputs.

    Returns
    -------
    dict
        ``{description: file name}`` of the figures written; the description of
        the quality profile says how many problems without any plan it leaves out.
    """
    from . import figures as fig

    figures = {}
    if not records:
        return figures
    order = list(dict.fromkeys(r["solver"] for r in records))  # one style per solver
    exact = [r for r in records if r.get("exact")]
    if exact:
        p = fig.performance_profile(metrics.performance_profile(exact, "time"),
                                    out_dir / "profile_time.png",
                                    "Performance profile on solve time (exact solvers, "
                                    "finished runs)", order=order)
        figures["performance profile on solve time (exact solvers)"] = p.name
    quality = metrics.performance_profile(records, "quality")
    p = fig.performance_profile(quality, out_dir / "profile_quality.png", order=order)
    note = ""
    if quality["left_out"]:
        note = (f" ({len(quality['left_out'])} problem(s) without any plan, infeasible or "
                f"unsolved, left out)")
    figures[f"performance profile on plan quality T / T*{note}"] = p.name
    limit = max(r["time_limit_s"] for r in records)
    p = fig.gap_over_time(metrics.gap_curves(records), limit, out_dir / "gap_over_time.png",
                          order=order)
    if p is not None:
        figures["gap over time (anytime solvers)"] = p.name
    p = fig.time_vs_size(records, out_dir / "time_vs_size.png", order=order)
    figures["solve time against instance size"] = p.name
    return figures


def write_report(records: list[dict], out_dir: Path, with_seed: bool,
                 figures: bool = True, notes: str = "") -> dict[str, str]:
    """results.csv, metrics.json, figures and summary.md, each written whole (atomically).

    ``notes`` (Markdown) ends ``summary.md``. Returns the figures written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    write_results_csv(records, out_dir / "results.csv", with_seed)
    figs = write_figures(records, out_dir) if figures else {}
    write_json(jsonable({"definitions": caption(records),
                         "solvers": metrics.solver_summary(records),
                         "best_known": metrics.best_known(records)}), out_dir / "metrics.json")
    text = summary_markdown(records, figs, notes)
    atomic_write(out_dir / "summary.md", lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return figs
