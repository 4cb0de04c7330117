"""Pipeline, replicate, or mix: one pipeline through the chain, one per DC, or several over ranges of DCs.

Part A reproduces and explains the issue's first measurement: on the committed
``hybrid/medium/`` instances, two pipelines, each on one side of a cut of the
chain (the best cut), each the classic DP optimum of its DCs with half the
microbatches (or a share by speed), gradients averaged over the whole span
(``R_X``), against one pipeline, at the instances' ``M = 64`` and at
``M = 1024``, under ``classic`` (the issue's measurement) and ``period``.

Part B sweeps the exact DP's optimum with ``P`` pipelines, ``P = 1 .. K`` one
count at a time (``pipelines = (P,)``, objective ``period``, 1F1B), against MAN
bandwidth, model size, sequence length, global batch and the sync period ``H``,
one axis at a time around a base point, then bandwidth against sequence length:
``P = 1`` is a pipeline through the chain, ``P = K`` replication (one pipeline
per DC), anything between a mix.

    python experiments/pipeline_or_replicate.py [--quick] [--time-limit S]
"""

from __future__ import annotations

import time
from pathlib import Path

from what_runs import (
    best_split,
    man_occupancy,
    solve,
    status_mark,
    v3_copy,
    with_man,
)

import chainpipe as cp
from chainpipe.instances import generate
from chainpipe.paths import instance_files
from chainpipe.solvers import dp
from chainpipe.solvers.baselines.replicate import classic_copy
from common import fmt, parse, publish, pyplot, table

NAME = "pipeline_or_replicate"
ROOT = Path(__file__).resolve().parents[1]
#: the base point of part B (each axis varies one of these)
BASE = {"gbit": 100.0, "model": "llama2-7b", "seq": 4096, "batch": 256, "H": 1}
AXES = {
    "gbit": ("MAN bandwidth per link (Gbit/s)", (10.0, 25.0, 50.0, 100.0, 200.0, 400.0)),
    "model": ("model", ("gpt3-1.3b", "llama2-7b", "llama2-13b", "llama2-70b")),
    "seq": ("sequence length (tokens)", (2048, 4096, 8192, 16384, 32768)),
    "batch": ("global batch (sequences)", (64, 256, 1024, 4096)),
    "H": ("sync period H (iterations)", (1, 8, 64)),
}
QUICK_AXES = {"gbit": (10.0, 100.0, 400.0), "model": ("gpt3-1.3b", "llama2-7b"),
              "seq": (2048, 16384), "batch": (64, 1024), "H": (1, 64)}
#: the cluster of part B: the ``hybrid`` preset's draw, 4 DCs x 8 GPUs
CLUSTER = {"preset": "hybrid", "seed": 0, "datacenters": 4, "gpus_per_dc": 8}
MICROBATCH = 8  # sequences per microbatch (the lcm of the widths 1, 2, 4, 8)


# --------------------------------------------------------------------------- part A


def first_measurement(inst, M: int, objective: str) -> dict:
    """One pipeline (the classic DP optimum) against the best even and by-speed split in
    two, all evaluated under ``objective`` with ``M`` microbatches."""
    one = v3_copy(inst, objective, (1,), microbatches=M)
    plan1 = dp.run(classic_copy(inst, M)).plan
    ev1 = cp.evaluate(one, plan1)
    two = v3_copy(inst, objective, (2,), microbatches=M)
    out = {"name": inst.name, "M": M, "objective": objective, "T1": ev1.iteration_time_s,
           "lam1": ev1.bottleneck_s, "fill1": ev1.fill_drain_s, "R1": ev1.sync_s,
           "paced1": ev1.paced_by, "U1": man_occupancy(ev1)}
    for shares in ("even", "speed"):
        ev, plan, groups = best_split(two, 2, shares)
        tp = max(p.time_s for p in ev.pipelines)
        out[shares] = {"T": ev.iteration_time_s, "Tp": tp, "R": ev.sync_s,
                       "RX": ev.cross_sync_s, "cut": groups[1].start,
                       "Mp": [p.microbatches for p in ev.pipelines],
                       "lam": [p.period_s for p in ev.pipelines]}
    return out


def part_a(Ms, objectives) -> list[dict]:
    rows = []
    for path in instance_files([ROOT / "instances" / "hybrid" / "medium"]):
        inst = cp.read(path)
        for objective in objectives:
            for M in Ms:
                r = first_measurement(inst, M, objective)
                rows.append(r)
                print(f"A {inst.name} {objective} M={M}: one {fmt(r['T1'])}, two even "
                      f"{fmt(r['even']['T'])} ({fmt(r['even']['T'] / r['T1'])}x), by speed "
                      f"{fmt(r['speed']['T'])}, R_X {fmt(r['even']['RX'])}", flush=True)
    return rows


def break_even_H(r: dict, key: str = "even") -> str:
    """The sync period ``H`` from which the split beats one pipeline (``never`` if its
    pipelines alone are no faster)."""
    s = r[key]
    gain = r["T1"] - (s["Tp"] + s["R"])
    return "never" if gain <= 0 else f"{s['RX'] / gain:.1f}"


def _span(values, unit: str = " s") -> str:
    values = [v for v in values if v is not None]
    return f"{min(values):.2g} to {max(values):.2g}{unit}" if values else "--"


def _explain_a(classic) -> str:
    """:data:`EXPLAIN_A` with the measured ``R_X`` and iteration times at ``M = 64``."""
    at = [r for r in classic if r["M"] == 64] or classic
    T64 = {r["name"]: r["T1"] for r in at}
    longer = [r["T1"] / T64[r["name"]] for r in classic if r["M"] == 1024 and r["name"] in T64]
    return EXPLAIN_A.format(rx=_span(r["even"]["RX"] for r in at),
                            t1=_span(r["T1"] for r in at), longer=_span(longer, ""))


def section_a(rows) -> str:
    body = []
    for r in rows:
        e, s = r["even"], r["speed"]
        body.append([r["name"], r["objective"], r["M"], fmt(r["T1"]), r["paced1"],
                     fmt(r["lam1"], 4), f"{e['cut']}, {e['Mp']}",
                     fmt(e["Tp"]), fmt(e["RX"]), fmt(e["T"]), fmt(e["T"] / r["T1"], 2) + "x",
                     f"{s['Mp']}", fmt(s["T"] / r["T1"], 2) + "x", break_even_H(r, "speed")])
    classic = [r for r in rows if r["objective"] == "classic"]
    lines = []
    for M in sorted({r["M"] for r in classic}):
        at = [r for r in classic if r["M"] == M]
        ratios = sorted(r["even"]["T"] / r["T1"] for r in at)
        speed = sorted(r["speed"]["T"] / r["T1"] for r in at)
        pipes = [(r["even"]["Tp"] + r["even"]["R"]) / r["T1"] for r in at]
        share = [r["even"]["RX"] / (r["even"]["T"] - r["T1"]) for r in at
                 if r["even"]["T"] > r["T1"]]
        lines.append(
            f"- M = {M}: two even pipelines lose by {ratios[0]:.2f}x to {ratios[-1]:.2f}x "
            f"({sum(x > 1 for x in ratios)} of {len(at)} lose; with microbatches shared by "
            f"speed {speed[0]:.2f}x to {speed[-1]:.2f}x); their even pipelines alone "
            f"(max T_p + max R) take {min(pipes):.2f} to {max(pipes):.2f} times the one "
            f"pipeline's T, so R_X makes {100 * min(share, default=0):.0f}% to "
            f"{100 * max(share, default=0):.0f}% of the loss.")
    per = [r for r in rows if r["objective"] == "period"]
    won = [f"`{r['name']}` at M = {r['M']} ({r['speed']['T'] / r['T1']:.3f}x)" for r in per
           if r["speed"]["T"] < r["T1"]]
    if per:
        lines.append(
            "- Under `period` both sides are the same classic plans costed under `period` "
            "(the one pipeline is the classic optimum, not the period optimum, whose search "
            "takes up to minutes here): the split by speed is faster on "
            + (", ".join(won) or "none") + "; there the one classic plan is paced by a 1F1B "
            "loop through the MAN, which pipelines inside fewer DCs avoid. The period optimum "
            "of one pipeline can be much faster than the classic plan (see "
            "`classic_cost.md`), so these are not wins over the best one pipeline.")
    return ("## A. The first measurement: two evenly split pipelines on `hybrid/medium/`\n\n"
            + "\n".join(lines) + "\n\n" + _explain_a(classic) + "\n\n" + table(
                ["instance", "objective", "M", "one pipeline T (s)", "paced by",
                 "its period (s)", "cut (first DC of pipeline 2), M_p", "two: max T_p (s)",
                 "R_X (s)", "two, even: T (s)", "even / one", "by speed: M_p",
                 "by speed / one", "H from which by speed wins"], body))


EXPLAIN_A = (
    "Why, in the model: a pipeline on half the chain has half the devices, so its "
    "period is about twice the one pipeline's, and it runs half the microbatches: "
    "`(M/2 - 1) * 2 lambda = (M - 2) lambda`, one period less than the one pipeline's "
    "`(M - 1) lambda`. Its fill and drain (`sum C + sum Q`) is about the same (each "
    "stage holds twice the layers on the same width) minus the MAN traversals it no "
    "longer makes. So the two pipelines' own time is close to the one pipeline's (above "
    "it where a half is slower than the other, or where its memory forces narrower "
    "stages), and the averaging across DCs, `R_X = gamma * params / B_X + 2 lat_X` over "
    "the whole span, comes on top: it is a whole-model gradient over the slowest MAN "
    "link, {rx} here against iterations of {t1} at M = 64. At M = 1024 "
    "the iteration is {longer} times longer and R_X no longer dominates; what remains is the "
    "split's imbalance (the halves of the chain are not equally fast: an even share "
    "leaves the faster half idle; the share by speed removes most of it) and R_X itself. "
    "Replication pays off only where the one pipeline wastes more than R_X / H per "
    "iteration: a link-paced or loop-paced steady state, or many MAN traversals per "
    "microbatch; the last column is the H from which the split by speed wins.")


# --------------------------------------------------------------------------- part B


def point_instance(gbit: float, model: str, seq: int, batch: int, H: int, P: int):
    """The base cluster with one point's MAN bandwidth, model, sequence length, batch
    and ``H``, made version 3 with ``pipelines = (P,)``."""
    base = generate(CLUSTER["preset"], CLUSTER["seed"], model=model,
                    datacenters=CLUSTER["datacenters"], gpus_per_dc=CLUSTER["gpus_per_dc"],
                    seq_len=seq, microbatch_size=MICROBATCH, global_batch=batch)
    return v3_copy(with_man(base, gbit=gbit), "period", (P,), sync_period=H)


def measure_point(point: dict, limit: float, Ps) -> dict:
    """``T`` of the exact DP's optimum for each ``P`` at ``point``, with what explains it."""
    out = {"point": point, "P": {}}
    for P in Ps:
        inst = point_instance(point["gbit"], point["model"], point["seq"], point["batch"],
                              point["H"], P)
        s = solve(inst, limit)
        rec = {"T": s.T, "status": s.status, "seconds": s.seconds}
        if s.ev is not None:
            ev = s.ev
            rec.update(Tp=max(p.time_s for p in ev.pipelines), R=ev.sync_s,
                       RX=ev.cross_sync_s / ev.cross_sync_period, paced=ev.paced_by,
                       lam=ev.bottleneck_s, U=man_occupancy(ev),
                       Mp=[p.microbatches for p in ev.pipelines],
                       S=[len(p.stages) for p in ev.pipelines])
        out["P"][P] = rec
    found = {P: r["T"] for P, r in out["P"].items() if r["T"] is not None}
    out["best"] = min(found, key=found.get) if found else None
    return out


def sweep(limit: float, axes: dict, Ps) -> list[dict]:
    rows = []
    for axis, values in axes.items():
        for v in values:
            point = dict(BASE, **{axis: v})
            r = measure_point(point, limit, Ps)
            r["axis"] = axis
            rows.append(r)
            print(f"B {axis}={v}: " + ", ".join(
                f"P={P} {fmt(x['T'])}{status_mark(x['status'])} [{x['seconds']:.1f}s]"
                for P, x in r["P"].items()), flush=True)
    return rows


def grid(limit: float, gbits, seqs, Ps, model: str) -> list[dict]:
    rows = []
    for g in gbits:
        for s in seqs:
            r = measure_point(dict(BASE, gbit=g, seq=s, model=model), limit, Ps)
            rows.append(r)
            print(f"G {g} Gbit/s seq {s}: best P={r['best']}", flush=True)
    return rows


def verdict(r: dict, K: int) -> str:
    P = r["best"]
    if P is None:
        return "--"
    return "pipeline" if P == 1 else "replicate" if P == K else f"mix ({P} pipelines)"


def _label(axis: str, v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _cell(rec: dict) -> str:
    return fmt(rec["T"]) + status_mark(rec["status"])


def why(r: dict, K: int) -> str:
    """The numbers behind one point's verdict: the one pipeline's pace and MAN load, and
    replication's averaging per iteration against what its pipelines save."""
    one, rep = r["P"].get(1, {}), r["P"].get(K, {})
    if one.get("T") is None or rep.get("T") is None:
        return "--"
    saved = one["T"] - (rep["Tp"] + rep["R"])
    return (f"P=1 paced by {one['paced']} (period {fmt(one['lam'], 4)} s, MAN U "
            f"{fmt(one['U'], 4)} s); P={K}: pipelines save {fmt(saved)} s, R_X/H "
            f"{fmt(rep['RX'])} s")


def sweep_table(rows, Ps, K: int) -> str:
    body = []
    for r in rows:
        axis = r["axis"]
        one = r["P"][1]["T"]
        best = r["best"]
        body.append([AXES[axis][0], _label(axis, r["point"][axis])]
                    + [_cell(r["P"][P]) for P in Ps]
                    + [verdict(r, K), fmt(one / r["P"][best]["T"], 3) + "x" if best and one
                       else "--", why(r, K)])
    return table(["axis", "value"] + [f"T, P={P} (s)" for P in Ps]
                 + ["fastest", "T(P=1) / T(best)", "why (P=1 and P=K)"], body)


def prose_b(rows, Ps, K: int) -> str:
    """What the sweep says, computed from its rows."""
    lines = []
    for axis in dict.fromkeys(r["axis"] for r in rows):
        mine = [r for r in rows if r["axis"] == axis]
        parts = [f"{_label(axis, r['point'][axis])}: {verdict(r, K)}" for r in mine]
        lines.append(f"- {AXES[axis][0]}: " + "; ".join(parts) + ".")
    wins = [r for r in rows if r["best"] not in (None, 1)]
    best_gain = max(wins, key=lambda r: r["P"][1]["T"] / r["P"][r["best"]]["T"], default=None)
    if best_gain is not None:
        g = best_gain["P"][1]["T"] / best_gain["P"][best_gain["best"]]["T"]
        pt = best_gain["point"]
        lines.append(f"- The largest win of several pipelines over one: {g:.2f}x "
                     f"(`{best_gain['axis']}` = {_label(best_gain['axis'], pt[best_gain['axis']])},"
                     f" P = {best_gain['best']}).")
    open_ = sum(1 for r in rows for x in r["P"].values() if x["status"] != "optimal")
    lines.append(f"- {open_} of {sum(len(r['P']) for r in rows)} searches were stopped by the "
                 f"time limit (marked after their T: the best plan found, not proven).")
    return "\n".join(lines)


EXPLAIN_B = (
    "How to read it. With `P` pipelines each pipeline holds the whole model on about "
    "`1/P` of the devices and runs `M/P` microbatches: its steady state costs about what "
    "the one pipeline's does (`(M/P - 1) * P lambda`), so what decides is (i) what the one "
    "pipeline loses to the MAN: the traversals `Q` of its inter-DC boundaries in the fill "
    "and drain, a steady state paced by a MAN link (`U = X / B` of the activation bytes "
    "`X` per microbatch) or, under `period`, by a 1F1B loop through the MAN's latency; "
    "against (ii) what replication pays: `R_X / H`, the whole model's gradients (`gamma * "
    "params` bytes) over the slowest MAN link once every `H` iterations, and the "
    "memory of a whole model on fewer devices (narrower stages, more of them). "
    "Activation bytes per microbatch grow with the sequence length and the microbatch "
    "(and `hidden`); gradient bytes only with the parameters. So replication wins for "
    "long sequences on thin links, small models, and large `H`; one pipeline wins for "
    "large models (R_X per iteration on this chain: {rx}), short iterations (small "
    "global batch) and `H = 1`. Memory bounds replication: a replica holds the whole "
    "model and its stashed activations on one DC's devices, so long sequences (the stash "
    "grows with the tokens per microbatch) and large models make `P = K` infeasible or "
    "force narrow stages ('infeasible' in the table). A mix of two pipelines on two DCs "
    "each wins where both pull: a whole chain's 1F1B loops through the MAN pace the one "
    "pipeline, yet one DC alone holds the model poorly; with many microbatches (large "
    "batch) or a large `H` the averaging is paid back.")


def _explain_b(rows, K: int) -> str:
    """:data:`EXPLAIN_B` with the model axis's ``R_X`` (at ``P = K``, base bandwidth)."""
    rx = [f"{r['point']['model']} {fmt(r['P'][K].get('RX'), 2)} s" for r in rows
          if r["axis"] == "model" and r["P"][K].get("RX") is not None]
    return EXPLAIN_B.format(rx=", ".join(rx) or "not measured")


def figure(rows, Ps, K: int, grid_rows, gbits, seqs):
    plt = pyplot()
    axes_used = list(dict.fromkeys(r["axis"] for r in rows))
    fig, axes = plt.subplots(1, len(axes_used) + (1 if grid_rows else 0),
                             figsize=(3.3 * (len(axes_used) + 1), 3.6))
    for ax, axis in zip(axes, axes_used):
        mine = [r for r in rows if r["axis"] == axis]
        xs = list(range(len(mine)))
        for P in Ps[1:]:
            ys = [r["P"][P]["T"] / r["P"][1]["T"] if r["P"][P]["T"] and r["P"][1]["T"]
                  else float("nan") for r in mine]
            ax.plot(xs, ys, marker="o", label=f"P = {P}")
        ax.axhline(1.0, color="black", lw=1)
        ax.set_xticks(xs, [_label(axis, r["point"][axis]) for r in mine], fontsize=7,
                      rotation=30)
        ax.set_xlabel(AXES[axis][0], fontsize=8)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("T(P) / T(P = 1)   (< 1: P pipelines win)")
    axes[0].legend(fontsize=7)
    if grid_rows:
        ax = axes[-1]
        best = [[next(r["best"] for r in grid_rows if r["point"]["gbit"] == g
                      and r["point"]["seq"] == s) or 0 for s in seqs] for g in gbits]
        im = ax.imshow(best, cmap="viridis", vmin=1, vmax=K, origin="lower", aspect="auto")
        ax.set_xticks(range(len(seqs)), [str(s) for s in seqs], fontsize=7)
        ax.set_yticks(range(len(gbits)), [f"{g:g}" for g in gbits], fontsize=7)
        ax.set_xlabel("sequence length", fontsize=8)
        ax.set_ylabel("MAN Gbit/s per link", fontsize=8)
        ax.set_title("fastest P", fontsize=9)
        fig.colorbar(im, ax=ax, ticks=list(range(1, K + 1)))
    fig.suptitle("Pipeline (P = 1), mix, or replicate (P = K): the exact optimum per P")
    return fig


def grid_table(grid_rows, gbits, seqs, K: int) -> str:
    body = []
    for g in gbits:
        cells = []
        for s in seqs:
            r = next(x for x in grid_rows if x["point"]["gbit"] == g and x["point"]["seq"] == s)
            best = r["best"]
            gain = r["P"][1]["T"] / r["P"][best]["T"] if best and r["P"][1]["T"] else None
            cells.append(f"{verdict(r, K)} ({fmt(gain, 2)}x)")
        body.append([f"{g:g}"] + cells)
    return table(["MAN Gbit/s"] + [f"seq {s}" for s in seqs], body)


def main() -> None:


    args = parse(__doc__.splitlines()[0])
    quick = args.quick
    limit = args.time_limit or (10.0 if quick else 30.0)
    start = time.perf_counter()
    K = CLUSTER["datacenters"]
    Ps = (1, 2, 4) if quick else tuple(range(1, K + 1))
    rows_a = part_a((64,) if quick else (64, 1024), ("classic",) if quick else
                    ("classic", "period"))
    axes = {a: (QUICK_AXES if quick else {k: v for k, (_, v) in AXES.items()})[a] for a in AXES}
    rows_b = sweep(limit, axes, Ps)
    gbits, seqs = ((10.0, 100.0), (2048, 16384)) if quick else \
        ((10.0, 25.0, 100.0, 400.0), (2048, 8192, 32768))
    grid_model = "gpt3-1.3b"
    rows_g = grid(limit, gbits, seqs, Ps, grid_model)
    base = ", ".join(f"{k} = {v}" for k, v in BASE.items())
    sec_b = ("## B. P pipelines against the MAN, the model, the sequence, the batch and H\n\n"
             f"Cluster: `generate('hybrid', 0, datacenters=4, gpus_per_dc=8, model, seq_len, "
             f"microbatch_size=8, global_batch)` (32 GPUs, d and t in {{1,2,4,8}}, ZeRO-1, "
             f"1F1B), every MAN link at the bandwidth shown (latencies as drawn), made "
             f"version 3 with objective `period`, `pipelines = (P,)` and `H`. Base point: "
             f"{base}; each row varies one. `dp` per P within {limit:g} s.\n\n"
             + prose_b(rows_b, Ps, K) + "\n\n" + _explain_b(rows_b, K) + "\n\n"
             + sweep_table(rows_b, Ps, K))
    sec_g = (f"## C. Bandwidth against sequence length ({grid_model}, H = {BASE['H']})\n\n"
             "The fastest P and its speed-up over one pipeline.\n\n"
             + grid_table(rows_g, gbits, seqs, K))
    intro = ("Every T is `chainpipe.plan.evaluate`'s; the splits of part A are built from the "
             "classic DP optimum of each range of DCs (`experiments/what_runs.py: "
             "best_split`), part B's plans are the exact DP's for each P. "
             f"Figure: `{NAME}.png`.")
    publish(NAME, "Pipeline, replicate, or mix", figure(rows_b, Ps, K, rows_g, gbits, seqs),
            intro, [section_a(rows_a), sec_b, sec_g], quick, time.perf_counter() - start, {})


if __name__ == "__main__":
    main()
