"""Experiment 5: hybrid parallelism inside a stage (contract v2) and how much the MAN matters now.

Part A, the same clusters planned twice by the exact DP: once with one device
per stage (``parallelism="off"``, the version-1 problem) and once with the
version-2 freedom (``d`` and ``t`` in {1, 2, 4, 8}, ZeRO-1; ``"on"``). Both
instances have the same devices, links and model; only what a stage may use
differs. Reported: T, GPUs used, stages, the stage shapes and the speed-up.

Part B, how much the network between DCs costs, under v1 and v2 side by side,
on a fixed pool of 32 GPUs split over 1 to 4 DCs (``pool`` preset, as in
``one_to_four_dcs.py``) and on the 64-GPU ``hybrid`` clusters, each on its
MAN links and on links degraded to ``F = 0.1`` (``degrade=0.1``: bandwidth x
0.1, latency x 10). Three plans are compared with the optimum ``T*``:

- ``comm-unaware`` (the baseline): the exact DP with every link free, inside
  DCs and between them. Under v2 the DC link also carries each stage's
  gradient all-reduce ``R_s``, so this plan ignores the synchronisation too;
- MAN-unaware: the exact DP with only the inter-DC links free (the DC links
  and so ``R_s`` still counted), then evaluated with the real links;
- ``T*(free MAN)``: the optimum when the inter-DC links cost nothing. ``T* /
  T*(free MAN) - 1`` is what the MAN costs the optimal plan itself.

    python experiments/hybrid.py [--quick]
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import chainpipe as cp
from chainpipe.instance import Link
from chainpipe.instances import generate
from chainpipe.solvers.baselines import FREE_BANDWIDTH
from common import fmt, geomean, parse, publish, pyplot, run, table

NAME = "hybrid"
#: the two sides of every comparison: the version-1 problem and the version-2 one
SIDES = ("off", "on")
SIDE_LABEL = {"off": "v1 (one device per stage)", "on": "v2 (d, t in {1,2,4,8}, ZeRO-1)"}
NETWORKS = ((None, "MAN links as drawn"), (0.1, "MAN degraded, F = 0.1"))


@dataclasses.dataclass
class Solved:
    """One plan of one instance: its T and what it is made of (None fields: no plan)."""

    T: float | None
    status: str
    gpus: int | None = None
    stages: int | None = None
    shapes: str = "--"
    paced_by: str = "--"
    sync_s: float | None = None
    seconds: float = 0.0


def shapes(plan) -> str:
    """The stage shapes of a plan, ``d x t`` with their counts, widest first."""
    count = Counter((st.data_parallel, st.tensor_parallel) for st in plan.stages)
    return ", ".join(f"{n} x ({d}x{t})" if n > 1 else f"{d}x{t}"
                     for (d, t), n in sorted(count.items(), key=lambda kv: -kv[0][0] * kv[0][1]))


def measured(instance, res: cp.Result, seconds: float) -> Solved:
    """``res`` re-evaluated on ``instance`` (the real links, whatever it was solved on)."""
    if res.plan is None:
        return Solved(None, res.status, seconds=seconds)
    ev = cp.evaluate(instance, res.plan)
    return Solved(ev.iteration_time_s, res.status, sum(st.width for st in res.plan.stages),
                  len(res.plan.stages), shapes(res.plan), ev.paced_by, ev.sync_s, seconds)


def solve(instance, method: str, limit: float, on=None) -> Solved:
    """``method`` run on ``on`` (default: ``instance``), its plan evaluated on ``instance``."""
    start = time.perf_counter()
    res = run(on or instance, method, limit)
    return measured(instance, res, time.perf_counter() - start)


def man_free(instance):
    """The same instance with every inter-DC link free (the links inside DCs kept)."""
    free = Link(FREE_BANDWIDTH, 0.0)
    return dataclasses.replace(instance, name=f"{instance.name}-freeman",
                               links=tuple(free for _ in instance.links))


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def pct(x: float | None) -> str:
    """``x - 1`` as a signed percentage; within rounding noise of 1 (ties) is 0."""
    if x is not None and abs(x - 1.0) < 1e-9:
        x = 1.0
    return fmt(None if x is None else x - 1.0, pct=True)


def overrides(kw: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


# --------------------------------------------------------------------------- part A


def part_a(cases, limit):
    """{(preset, seed, kw): {side: Solved}} and the instances' summaries."""
    out, about = {}, {}
    for preset, seed, kw in cases:
        row = {}
        for side in SIDES:
            inst = generate(preset, seed, parallelism=side, **kw)
            row[side] = solve(inst, "dp", limit)
        about[(preset, seed, tuple(kw.items()))] = (
            inst.model.name, len(inst.layers), len(inst.datacenters),
            sum(dc.device_count for dc in inst.datacenters), inst.training.microbatches)
        out[(preset, seed, tuple(kw.items()))] = row
        print(f"A {inst.name}: v1 {fmt(row['off'].T)} s on {row['off'].gpus} GPUs "
              f"({row['off'].seconds:.1f} s), v2 {fmt(row['on'].T)} s on {row['on'].gpus} GPUs "
              f"[{row['on'].shapes}] ({row['on'].seconds:.1f} s)", flush=True)
    return out, about


def table_a(res, about) -> str:
    rows = []
    for key, row in res.items():
        preset, seed, kw = key
        model, layers, k, gpus, m = about[key]
        v1, v2 = row["off"], row["on"]
        rows.append([
            f"`{preset}` s{seed}" + (f" ({overrides(dict(kw))})" if kw else ""),
            f"{model}, {layers} layers, M={m}", f"{k} DCs, {gpus}",
            fmt(v1.T, 4) if v1.T is not None else v1.status,
            "--" if v1.gpus is None else f"{v1.gpus} / {v1.stages}",
            fmt(v2.T, 4) if v2.T is not None else v2.status,
            "--" if v2.gpus is None else f"{v2.gpus} / {v2.stages}", v2.shapes,
            f"{v2.paced_by}, sync {fmt(v2.sync_s, 3)} s",
            fmt(ratio(v1.T, v2.T), 2) + "x" if v1.T and v2.T else "--",
            f"{v1.seconds:.1f} / {v2.seconds:.1f}"])
    return table(["instance (preset, seed, overrides)", "model", "cluster (GPUs)", "v1 T* (s)",
                  "v1 GPUs / stages", "v2 T* (s)", "v2 GPUs / stages", "v2 stages d x t",
                  "v2 paced by", "speed-up v1/v2", "dp s (v1 / v2)"], rows)


# --------------------------------------------------------------------------- part B


def measure_man(inst, limit, k: int) -> dict[str, Solved]:
    """The optimum, the comm-unaware plan, the MAN-unaware plan and the free-MAN optimum."""
    out = {"dp": solve(inst, "dp", limit), "comm-unaware": solve(inst, "comm-unaware", limit)}
    if k == 1:  # no MAN: the MAN-free copy is the instance itself
        out["man-unaware"] = out["free-man"] = out["dp"]
    else:
        free = man_free(inst)
        out["man-unaware"] = solve(inst, "dp", limit, on=free)
        out["free-man"] = solve(free, "dp", limit)
    return out


def part_b(models, seeds, hybrid_seeds, limit):
    """{(cluster, model, seed, k, F, side): {plan: Solved}}."""
    out = {}
    for model in models:
        for seed in seeds:
            for F, _ in NETWORKS:
                for k in (1, 2, 3, 4):
                    for side in SIDES:
                        if k == 1 and F is not None:  # one DC has no MAN to degrade
                            out[("pool", model, seed, k, F, side)] = \
                                out[("pool", model, seed, k, None, side)]
                            continue
                        inst = generate("pool", seed, model=model, datacenters=k, degrade=F,
                                        parallelism=side)
                        out[("pool", model, seed, k, F, side)] = r = measure_man(inst, limit, k)
                        print(f"B {inst.name}: T* {fmt(r['dp'].T)}, comm-unaware "
                              f"{pct(ratio(r['comm-unaware'].T, r['dp'].T))}, MAN-unaware "
                              f"{pct(ratio(r['man-unaware'].T, r['dp'].T))}, MAN price "
                              f"{pct(ratio(r['dp'].T, r['free-man'].T))}", flush=True)
    for seed in hybrid_seeds:
        for F, _ in NETWORKS:
            for side in SIDES:
                inst = generate("hybrid", seed, degrade=F, parallelism=side)
                out[("hybrid", inst.model.name, seed, 4, F, side)] = r = measure_man(inst, limit, 4)
                print(f"B {inst.name}: T* {fmt(r['dp'].T)}, comm-unaware "
                      f"{pct(ratio(r['comm-unaware'].T, r['dp'].T))}, MAN-unaware "
                      f"{pct(ratio(r['man-unaware'].T, r['dp'].T))}, MAN price "
                      f"{pct(ratio(r['dp'].T, r['free-man'].T))}", flush=True)
    return out


def gaps(res, cluster, k, F, side, plan):
    """The ratios ``plan`` / ``T*`` (``free-man``: ``T*`` / ``T*(free MAN)``) of the cases."""
    vals = []
    for key, r in res.items():
        if key[0] == cluster and key[3] == k and key[4] == F and key[5] == side:
            num, den = (r["dp"].T, r["free-man"].T) if plan == "free-man" else (r[plan].T,
                                                                                 r["dp"].T)
            if num is not None and den:
                vals.append(num / den)
    return vals


def summary(vals) -> str:
    return "--" if not vals else f"{pct(geomean(vals))} (max {pct(max(vals))})"


def table_b(res, cluster, ks) -> str:
    rows = []
    for F, net in NETWORKS:
        for side in SIDES:
            for k in ks:
                if k == 1 and F is not None:
                    continue
                rows.append([net if k != 1 else "no MAN (1 DC)", SIDE_LABEL[side], k] + [
                    summary(gaps(res, cluster, k, F, side, p))
                    for p in ("comm-unaware", "man-unaware", "free-man")])
    return table(["network", "problem", "DCs", "comm-unaware vs T*", "MAN-unaware vs T*",
                  "T* vs T*(free MAN)"], rows)


def split_price(res, models, seeds) -> str:
    """T*(k DCs) / T*(1 DC) of the pool, under v1 and v2, and the v1/v2 speed-up per k."""
    rows = []
    for F, net in NETWORKS:
        for side in SIDES:
            vals = []
            for k in (1, 2, 3, 4):
                vals.append(geomean([
                    res[("pool", mo, s, k, F, side)]["dp"].T
                    / res[("pool", mo, s, 1, F, side)]["dp"].T for mo in models for s in seeds
                    if res[("pool", mo, s, k, F, side)]["dp"].T
                    and res[("pool", mo, s, 1, F, side)]["dp"].T]))
            rows.append([net, SIDE_LABEL[side]] + [fmt(v) for v in vals])
        speed = [geomean([
            res[("pool", mo, s, k, F, "off")]["dp"].T / res[("pool", mo, s, k, F, "on")]["dp"].T
            for mo in models for s in seeds if res[("pool", mo, s, k, F, "off")]["dp"].T
            and res[("pool", mo, s, k, F, "on")]["dp"].T]) for k in (1, 2, 3, 4)]
        rows.append([net, "speed-up v1 / v2"] + [fmt(v, 2) + "x" if v else "--" for v in speed])
    return table(["network", "problem", "1 DC", "2 DCs", "3 DCs", "4 DCs"], rows)


def detail_b(res) -> str:
    rows = []
    for (cluster, model, seed, k, F, side), r in res.items():
        if k == 1 and F is not None:
            continue
        rows.append([f"`{cluster}` s{seed}", model, k, "1" if F is None else f"{F:g}",
                     side, fmt(r["dp"].T, 4), r["dp"].shapes if side == "on" else
                     f"{r['dp'].stages} stages",
                     pct(ratio(r["comm-unaware"].T, r["dp"].T)),
                     pct(ratio(r["man-unaware"].T, r["dp"].T)),
                     pct(ratio(r["dp"].T, r["free-man"].T))])
    return table(["cluster, seed", "model", "DCs", "F", "parallelism", "T* (s)", "optimal stages",
                  "comm-unaware", "MAN-unaware", "MAN price"], rows)


# --------------------------------------------------------------------------- figure


def figure(res_a, res_b):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    labels = [f"{p} s{s}" for p, s, _ in res_a]
    speed = [ratio(r["off"].T, r["on"].T) or 0.0 for r in res_a.values()]
    bars = ax.bar(range(len(speed)), speed, color="tab:blue")
    for b, r in zip(bars, res_a.values()):
        note = (f"{r['off'].gpus}->{r['on'].gpus}" if r["off"].T and r["on"].T
                else ("v1 infeasible" if r["on"].T else "--"))
        ax.annotate(note, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                    va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("T*(v1) / T*(v2)")
    ax.set_title("A. v2 speed-up on the same cluster (labels: GPUs used v1->v2)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.margins(y=0.25)
    style = {("off", None): ("tab:gray", "-"), ("off", 0.1): ("tab:gray", "--"),
             ("on", None): ("tab:red", "-"), ("on", 0.1): ("tab:red", "--")}
    for ax, plan, title in ((axes[1], "comm-unaware", "B. plans ignoring communication vs T* (pool)"),
                            (axes[2], "free-man", "B. T* vs T*(free MAN): the MAN's price "
                                                  "(pool)")):
        for (side, F), (color, ls) in style.items():
            ys = [geomean(gaps(res_b, "pool", k, None if k == 1 else F, side, plan))
                  for k in (1, 2, 3, 4)]
            pts = [(k, 100 * (y - 1)) for k, y in zip((1, 2, 3, 4), ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, ls=ls, marker="o",
                    label=f"{'v2' if side == 'on' else 'v1'}, "
                          f"{'F = 0.1' if F else 'MAN as drawn'}")
            if plan == "comm-unaware":
                ys = [geomean(gaps(res_b, "pool", k, None if k == 1 else F, side,
                                   "man-unaware")) for k in (1, 2, 3, 4)]
                pts = [(k, 100 * (y - 1)) for k, y in zip((1, 2, 3, 4), ys) if y is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, ls=ls,
                        marker="x", alpha=0.5, lw=1)
        ax.set_xticks([1, 2, 3, 4])
        ax.set_xlabel("datacenters the 32-GPU pool is split over")
        ax.set_ylabel("% above (geometric mean)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].text(0.03, 0.55, "o, thick: comm-unaware (every link free)\n"
                             "x, thin: MAN-unaware (only the MAN free)",
                 transform=axes[1].transAxes, va="center", fontsize=8)
    axes[2].legend(fontsize=8)
    fig.suptitle("Hybrid parallelism (contract v2) against one device per stage, and the MAN",
                 fontsize=11)
    return fig


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    limit = args.time_limit or (20.0 if args.quick else 120.0)
    if args.quick:
        cases_a = [("hybrid-small", s, {}) for s in (0, 1, 2)] + [
            ("hybrid", 0, {}), ("metro", 0, {})]
        models, seeds, hybrid_seeds = ("gpt3-1.3b",), (0,), (0,)
    else:
        cases_a = ([("hybrid", s, {}) for s in (0, 1, 2, 3)]
                   + [("metro", s, {}) for s in (0, 1, 2, 3)]
                   + [("metro-large", 0, {}), ("hybrid-large", 0, {})])
        models = ("gpt3-6.7b", "gpt3-13b", "llama2-7b", "llama2-13b")
        seeds, hybrid_seeds = (0, 1, 2), (0, 1, 2, 3)
    start = time.perf_counter()
    res_a, about = part_a(cases_a, limit)
    res_b = part_b(models, seeds, hybrid_seeds, limit)

    sections = [
        "## A. The same clusters: v1 optimum against v2 optimum\n\n"
        "Each instance twice, `generate(preset, seed, parallelism='off')` (one device per "
        "stage) and `parallelism='on'` (`d, t` in {1, 2, 4, 8}, ZeRO-1; the `hybrid-small` "
        "preset's own lists `d` in {1, 2, 3}, `t` in {1, 2}); both solved by `dp` "
        "(proven optima). GPUs / stages: the devices the optimal plan uses and its stage "
        "count. `n x (dxt)`: n stages of d replicas of t tensor-parallel devices.\n\n"
        + table_a(res_a, about),
        "## B1. A fixed pool of 32 GPUs over 1 to 4 DCs: what ignoring the network costs\n\n"
        f"`generate('pool', seed, model=..., datacenters=k, degrade=F, parallelism=side)` for "
        f"models {', '.join(models)} and pool seeds {', '.join(map(str, seeds))}: each entry is "
        f"the geometric mean over the {len(models) * len(seeds)} cases of the plan's T over "
        "the optimum T\\* minus one, with the largest case in brackets.\n\n"
        + table_b(res_b, "pool", (1, 2, 3, 4)),
        "## B2. The pool's T\\*(k DCs) / T\\*(1 DC), and the v2 speed-up per split\n\n"
        "The split changes more than the network under v2: a group keeps nodes of the largest "
        "power of two (at most 8) dividing its count, and the three-DC split cuts the 8-GPU "
        "blocks into 11, 11 and 10 GPUs (groups of 3, 5, 6 or 2 GPUs, nodes of 1 or 2), "
        "which limits `t`; the MAN's own price at 3 DCs is in B1's last column.\n\n"
        + split_price(res_b, models, seeds),
        "## B3. The 64-GPU `hybrid` clusters (4 DCs, MAN 100-400 Gbit/s as drawn)\n\n"
        f"`generate('hybrid', seed, degrade=F, parallelism=side)`, seeds "
        f"{', '.join(map(str, hybrid_seeds))}.\n\n" + table_b(res_b, "hybrid", (4,)),
        "## Every instance of part B\n\nMAN price: T\\* / T\\*(free MAN) - 1.\n\n"
        + detail_b(res_b),
    ]
    intro = (
        "Every T is `chainpipe.solve` then `chainpipe.evaluate` on the instance with its real "
        f"links; every optimum is `dp`'s (time limit {limit:g} s per solve). `comm-unaware` is "
        "the baseline (the exact DP with every link free, inside DCs too, so under v2 it also "
        "ignores the gradient all-reduce R_s); MAN-unaware is the exact DP with only the "
        "inter-DC links free; T\\*(free MAN) is the optimum of that copy. `F = 0.1` is "
        "`degrade=0.1`: every MAN bandwidth x 0.1 and latency x 10 (the links inside DCs "
        f"unchanged). Figure: `{NAME}.png` (left: part A; middle and right: the pool of B1).")
    fig = figure(res_a, res_b)
    publish(NAME, "Hybrid parallelism (contract v2) and the MAN", fig, intro, sections,
            args.quick, time.perf_counter() - start, {})


if __name__ == "__main__":
    main()
