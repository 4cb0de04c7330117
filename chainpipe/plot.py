"""Figures: a plan's pipeline as a Gantt chart, and the comparison figures.

Every figure is drawn with matplotlib's Agg backend (no display needed) and
comes with the data behind it (JSON or CSV beside the PNG), so a reader can
re-plot or check the numbers.

The Gantt chart (:func:`gantt`) shows one training iteration of a plan: one
row per stage (its device) and one row per stage boundary (the link the
activations cross; inter-datacenter paths shaded), with every microbatch's
forward and backward block. The schedule (1F1B or GPipe, as the instance
says) is *simulated* (:func:`simulate_pipeline`) from the per-stage compute
times and link occupancies/latencies that :func:`chainpipe.plan.evaluate`
reports; its makespan is close to, but not the same quantity as, the cost
model's ``T`` (a closed formula), and the title prints both.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .instance import Instance, InstanceError
from .plan import Plan, evaluate

FORWARD_COLOR = "#4C78A8"
BACKWARD_COLOR = "#F58518"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- pipeline schedule
@dataclass
class Block:
    start: float
    duration: float
    op: str  # "F" or "B"
    microbatch: int


@dataclass
class PipelineRow:
    label: str
    kind: str  # "stage" or "link"
    inter_dc: bool = False
    blocks: list[Block] = field(default_factory=list)


@dataclass
class PipelineSchedule:
    instance: str
    schedule: str
    microbatches: int
    iteration_time_s: float  # T from evaluate
    makespan_s: float  # of the simulated schedule
    feasible: bool
    rows: list[PipelineRow]

    def to_dict(self) -> dict:
        return {
            "instance": self.instance, "schedule": self.schedule,
            "microbatches": self.microbatches, "iteration_time_s": self.iteration_time_s,
            "makespan_s": self.makespan_s, "feasible": self.feasible,
            "rows": [{"label": r.label, "kind": r.kind, "inter_dc": r.inter_dc,
                      "blocks": [{"start": b.start, "duration": b.duration, "op": b.op,
                                  "microbatch": b.microbatch} for b in r.blocks]}
                     for r in self.rows],
        }


def stage_order(schedule: str, num_stages: int, s: int, M: int) -> list[tuple[str, int]]:
    """The order in which stage ``s`` (0-based) runs its forward and backward blocks.

    GPipe: every forward, then every backward in reverse microbatch order.
    1F1B (PipeDream-Flush): ``min(S - s - 1, M)`` warm-up forwards, then one
    forward and one backward alternately, then the remaining backwards.
    """
    if schedule == "gpipe":
        return [("F", m) for m in range(M)] + [("B", m) for m in reversed(range(M))]
    warm = min(num_stages - s - 1, M)
    order = [("F", m) for m in range(warm)]
    for i in range(M - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", m) for m in range(M - warm, M)]
    return order


def simulate_pipeline(instance: Instance, plan: Plan) -> PipelineSchedule:
    """Simulate one iteration of ``plan`` block by block (see the module doc).

    Stage ``s`` spends ``C_s * fwd/(fwd+bwd)`` on a forward block and the rest on
    a backward block (``C_s`` from evaluate, split by the stage's layer FLOP).
    A boundary's link carries each microbatch's activation forward and its
    gradient backward (full duplex, in the order they are produced), each
    occupying it ``U`` and arriving ``latency`` later.
    """
    ev = evaluate(instance, plan)
    if not math.isfinite(ev.iteration_time_s):
        raise InstanceError(list(ev.violations))
    M, S = instance.microbatches, plan.num_stages
    sched = instance.training.schedule
    fwd, bwd = [], []
    for st in ev.stages:
        part = instance.layers[st.start:st.end]
        f = sum(ly.fwd_flop for ly in part)
        total = f + sum(ly.bwd_flop for ly in part)
        share = f / total if total > 0 else 0.5
        fwd.append(st.compute_time_s * share)
        bwd.append(st.compute_time_s - fwd[-1])
    U = [b.occupancy_s for b in ev.boundaries]
    lat = [b.latency_s for b in ev.boundaries]

    orders = [stage_order(sched, S, s, M) for s in range(S)]
    pos = [0] * S
    dev_free = [0.0] * S
    f_end = [[None] * M for _ in range(S)]
    b_end = [[None] * M for _ in range(S)]
    arrive_f = [[None] * M for _ in range(S)]  # activation of m at stage s (s >= 1)
    arrive_b = [[None] * M for _ in range(S)]  # gradient of m at stage s (s <= S-2)
    link_f_free = [0.0] * max(S - 1, 0)
    link_b_free = [0.0] * max(S - 1, 0)
    stage_rows = [PipelineRow(f"s{s} {st.device} [{st.start},{st.end})", "stage")
                  for s, st in enumerate(plan.stages)]
    link_rows = []
    for b in ev.boundaries:
        inter = len(b.path) > 1
        name = "-".join(b.path) if inter else f"{b.path[0]} internal"
        link_rows.append(PipelineRow(f"link {name} (s{b.after_stage}->s{b.after_stage + 1})",
                                     "link", inter))

    remaining = 2 * M * S
    while remaining:
        progressed = False
        for s in range(S):
            while pos[s] < len(orders[s]):
                op, m = orders[s][pos[s]]
                if op == "F":
                    ready = 0.0 if s == 0 else arrive_f[s][m]
                else:
                    ready = f_end[s][m] if s == S - 1 else arrive_b[s][m]
                    if ready is not None and f_end[s][m] is None:
                        ready = None
                if ready is None:
                    break
                start = max(dev_free[s], ready)
                dur = fwd[s] if op == "F" else bwd[s]
                end = start + dur
                dev_free[s] = end
                stage_rows[s].blocks.append(Block(start, dur, op, m))
                if op == "F":
                    f_end[s][m] = end
                    if s < S - 1:
                        t0 = max(end, link_f_free[s])
                        link_f_free[s] = t0 + U[s]
                        arrive_f[s + 1][m] = t0 + U[s] + lat[s]
                        link_rows[s].blocks.append(Block(t0, U[s], "F", m))
                else:
                    b_end[s][m] = end
                    if s > 0:
                        t0 = max(end, link_b_free[s - 1])
                        link_b_free[s - 1] = t0 + U[s - 1]
                        arrive_b[s - 1][m] = t0 + U[s - 1] + lat[s - 1]
                        link_rows[s - 1].blocks.append(Block(t0, U[s - 1], "B", m))
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for the two schedules above
            raise RuntimeError("pipeline simulation deadlocked")
    makespan = max(dev_free) if dev_free else 0.0
    rows = []
    for s in range(S):
        rows.append(stage_rows[s])
        if s < S - 1:
            rows.append(link_rows[s])
    return PipelineSchedule(instance.name, sched, M, ev.iteration_time_s, makespan,
                            ev.feasible, rows)


def gantt(instance: Instance, plan: Plan, ax=None, path: str | Path | None = None):
    """Draw the simulated pipeline of ``plan``; save to ``path`` (PNG, plus ``.json`` data).

    Returns the :class:`PipelineSchedule` drawn.
    """
    sim = simulate_pipeline(instance, plan)
    plt = _pyplot()
    own_fig = ax is None
    n = len(sim.rows)
    if own_fig:
        fig, ax = plt.subplots(figsize=(12, 1.2 + 0.42 * n))
    else:
        fig = ax.figure
    label_min = 0.018 * max(sim.makespan_s, 1e-300)
    for i, row in enumerate(sim.rows):
        y = n - 1 - i
        if row.kind == "link" and row.inter_dc:
            ax.axhspan(y - 0.5, y + 0.5, color="0.93", zorder=0)
        for b in row.blocks:
            if row.kind == "stage":
                y0, h = y - 0.38, 0.76
                color = FORWARD_COLOR if b.op == "F" else BACKWARD_COLOR
            else:  # forward direction in the upper half, backward in the lower half
                y0, h = (y + 0.02, 0.34) if b.op == "F" else (y - 0.36, 0.34)
                color = FORWARD_COLOR if b.op == "F" else BACKWARD_COLOR
            ax.broken_barh([(b.start, b.duration)], (y0, h), facecolors=color,
                           edgecolors="white", linewidth=0.4,
                           alpha=1.0 if row.kind == "stage" else 0.65)
            if row.kind == "stage" and b.duration >= label_min and sim.microbatches <= 32:
                ax.text(b.start + b.duration / 2, y, str(b.microbatch), ha="center",
                        va="center", fontsize=7, color="white")
    ax.set_yticks(range(n))
    ax.set_yticklabels([r.label for r in reversed(sim.rows)], fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(0, max(sim.makespan_s, sim.iteration_time_s) * 1.02 or 1.0)
    ax.axvline(sim.iteration_time_s, color="0.3", linestyle="--", linewidth=1)
    ax.set_xlabel("time within one iteration (s)")
    status = "" if sim.feasible else "  [plan INFEASIBLE: breaks a memory limit]"
    ax.set_title(
        f"{sim.instance}: {sim.schedule.upper()} schedule of one iteration, {sim.microbatches} "
        f"microbatches, simulated from per-stage compute and link times{status}\n"
        f"simulated makespan {sim.makespan_s:.6g} s; cost model T = {sim.iteration_time_s:.6g} s "
        f"(evaluate, dashed line)", fontsize=9)
    from matplotlib.patches import Patch

    handles = [Patch(color=FORWARD_COLOR, label="forward (links: activations, upper half)"),
               Patch(color=BACKWARD_COLOR, label="backward (links: gradients, lower half)")]
    if any(r.inter_dc for r in sim.rows):
        handles.append(Patch(color="0.93", label="inter-DC path"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.5 / (1 + 0.3 * n)),
              ncol=len(handles), fontsize=7, frameon=False)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        path.with_suffix(".json").write_text(json.dumps(sim.to_dict(), indent=1) + "\n",
                                             encoding="utf-8")
    if own_fig:
        plt.close(fig)
    return sim


# --------------------------------------------------------------------------- comparison figures
def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def performance_profile(profile: dict, path: str | Path, title: str | None = None) -> Path:
    """Dolan-More profile from :func:`chainpipe.compare.metrics.performance_profile` data.

    Writes ``path`` (PNG) and ``path`` with ``.csv``: ``solver, tau, fraction``.
    """
    from .compare.metrics import profile_curve

    plt = _pyplot()
    path = Path(path)
    ratios = profile["ratios"]
    finite = [r for rs in ratios.values() for r in rs if math.isfinite(r)]
    tau_max = max(finite + [1.0]) * 1.5 if finite else 2.0
    taus = sorted({1.0, tau_max, *finite})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = []
    for solver, rs in ratios.items():
        ys = profile_curve(rs, taus)
        ax.step(taus, ys, where="post", label=solver)
        rows.extend([solver, t, y] for t, y in zip(taus, ys))
    ax.set_xscale("log", base=2)
    ax.set_xlim(1.0, tau_max)
    ax.set_ylim(-0.02, 1.02)
    what = "solve time (finished runs)" if profile["measure"] == "time" else \
        "iteration time T / best known"
    ax.set_xlabel(f"tau: ratio to the best solver on {what}")
    ax.set_ylabel(f"fraction of the {profile['problems']} problems within tau")
    ax.set_title(title or f"Performance profile (Dolan-More) on {what}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    _save(fig, path)
    plt.close(fig)
    _write_csv(path.with_suffix(".csv"), ["solver", "tau", "fraction"], rows)
    return path


def gap_over_time(curves: list[dict], time_limit: float, path: str | Path) -> Path | None:
    """Primal gap to the best known over time for runs with an anytime trace.

    ``curves``: rows of :func:`chainpipe.compare.metrics.gap_curves`. One thin line
    per run (solid: primal gap ``(T(t) - T*)/T(t)``; dotted: own gap
    ``(T(t) - bound(t))/T(t)`` where the solver reports a bound). Returns
    ``None`` (nothing written) if no run has a trace.
    """
    if not curves:
        return None
    plt = _pyplot()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    runs: dict[tuple, list[dict]] = {}
    for row in curves:
        runs.setdefault((row["solver"], row["instance"], row["seed"]), []).append(row)
    solvers = list(dict.fromkeys(k[0] for k in runs))
    t_min = max(min((r["t"] for r in curves if r["t"] > 0), default=1e-3) / 2, 1e-4)
    for (solver, _, _), rows in runs.items():
        color = colors[solvers.index(solver) % len(colors)]
        ts = [max(r["t"], t_min) for r in rows] + [time_limit]
        ax.step(ts, [r["primal_gap"] for r in rows] + [rows[-1]["primal_gap"]], where="post",
                color=color, alpha=0.7, linewidth=1)
        own = [(max(r["t"], t_min), r["own_gap"]) for r in rows if r["own_gap"] is not None]
        if own:
            ax.step([t for t, _ in own] + [time_limit], [g for _, g in own] + [own[-1][1]],
                    where="post", color=color, alpha=0.5, linewidth=1, linestyle=":")
    for i, s in enumerate(solvers):
        ax.plot([], [], color=colors[i % len(colors)], label=s)
    ax.plot([], [], color="0.4", linestyle=":", label="own gap (T - bound) / T")
    ax.set_xscale("log")
    ax.set_xlim(t_min, time_limit)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("primal gap (T(t) - T*) / T(t)")
    ax.set_title(f"Gap over time of the anytime solvers ({len(runs)} runs; T* = best known)",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
    _write_csv(path.with_suffix(".csv"),
               ["solver", "instance", "seed", "t", "primal_gap", "own_gap"],
               [[r["solver"], r["instance"], r["seed"], r["t"], r["primal_gap"], r["own_gap"]]
                for r in curves])
    return path


def time_vs_size(records: list[dict], path: str | Path) -> Path:
    """Solve time against instance size (layers x devices), one series per solver.

    Runs that did not finish are drawn hollow at their charged time (the limit).
    Writes ``path`` and ``.csv``: ``solver, instance, seed, layers, devices,
    datacenters, device_types, size, solve_time_s, finished``.
    """
    from .compare.metrics import charged_time, finished

    plt = _pyplot()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    solvers = list(dict.fromkeys(r["solver"] for r in records))
    rows = []
    for i, s in enumerate(solvers):
        mine = [r for r in records if r["solver"] == s]
        color = colors[i % len(colors)]
        pts = sorted((r["num_layers"] * r["num_devices"], max(charged_time(r), 1e-4),
                      finished(r)) for r in mine)
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], color=color, alpha=0.35, linewidth=0.8)
        ax.scatter([p[0] for p in pts if p[2]], [p[1] for p in pts if p[2]], color=color,
                   s=18, label=s)
        ax.scatter([p[0] for p in pts if not p[2]], [p[1] for p in pts if not p[2]],
                   facecolors="none", edgecolors=color, s=30)
        for r in mine:
            rows.append([s, r["instance"], r.get("seed", 0), r["num_layers"], r["num_devices"],
                         r["num_datacenters"], r["num_device_types"],
                         r["num_layers"] * r["num_devices"], r["solve_time_s"], finished(r)])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("instance size: layers x devices")
    ax.set_ylabel("solve time (s); hollow = did not finish (charged the limit)")
    ax.set_title("Solve time against instance size", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
    _write_csv(path.with_suffix(".csv"),
               ["solver", "instance", "seed", "layers", "devices", "datacenters", "device_types",
                "size", "solve_time_s", "finished"], rows)
    return path


# --------------------------------------------------------------------------- command line
def cli_plot(args) -> int:
    """``chainpipe plot INSTANCE PLAN -o PNG``: the Gantt chart of a plan."""
    from .io import read, read_plan

    inst = read(args.instance)
    plan = read_plan(args.plan)
    out = Path(args.output)
    sim = gantt(inst, plan, path=out)
    print(f"wrote {out} and {out.with_suffix('.json')}: {sim.schedule} schedule, "
          f"{plan.num_stages} stages, {sim.microbatches} microbatches; cost model "
          f"T = {sim.iteration_time_s:.6g} s, simulated makespan {sim.makespan_s:.6g} s")
    if not sim.feasible:
        print("warning: the plan is infeasible (see `chainpipe evaluate`)")
    return 0
