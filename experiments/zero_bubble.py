"""What a zero-bubble schedule would gain: ZB-H1 and ZB-H2 replayed on the optimal plans.

For every instance of the committed sets, and every inter-DC degradation factor F
(bandwidth times F and latency divided by F on every MAN link, as
``generate(..., degrade=F)`` does), the plan ``dp`` proves optimal (under ``classic``,
one pipeline: the search every set solves in seconds) on the degraded network is
replayed under 1F1B, ZB-H1 and ZB-H2 (:func:`chainpipe.schedule.simulate_schedules`,
``W`` the compute of half of each layer's backward FLOP, ``M_W / M_B = 32/34``). Reported: each zero-bubble
schedule's simulated makespan over 1F1B's, the largest peak memory per device over
1F1B's, and whether the plan still fits its devices' memory.

    python experiments/zero_bubble.py [--quick]
"""

from __future__ import annotations

import dataclasses
import time

import chainpipe as cp
from chainpipe.instance import Link
from chainpipe.schedule import simulate_schedules
from common import HERE, fmt, geomean, parse, publish, pyplot, table

NAME = "zero_bubble"
SETS_QUICK = ("small", "hybrid/small")
SETS_FULL = ("small", "medium", "large", "hybrid/small", "hybrid/medium", "hybrid/large")
SCHEDULES = ("1f1b", "zb-h1", "zb-h2")
#: instance -> dp's status where it returned no plan (infeasible, or the time limit)
NO_PLAN: dict[str, str] = {}


def degrade(inst, factor: float):
    """Every MAN link's bandwidth times ``factor`` and its latency divided by it."""
    if factor == 1.0:
        return inst
    links = tuple(Link(lk.bandwidth_bytes_per_s * factor, lk.latency_s / factor)
                  for lk in inst.links)
    return dataclasses.replace(inst, name=f"{inst.name}-F{factor:g}", links=links)


def one_pipeline_classic(inst):
    """The instance under ``classic`` with one pipeline (dp's fast search)."""
    training = inst.training
    parallelism = dataclasses.replace(training.parallelism, pipelines=(1,))
    return dataclasses.replace(inst, training=dataclasses.replace(
        training, objective="classic", parallelism=parallelism))


def measure(inst, limit: float) -> dict | None:
    """The optimum's replays under :data:`SCHEDULES`, or ``None`` without a plan."""
    res = cp.solve(one_pipeline_classic(inst), "dp", time_limit=limit)
    if res.plan is None:
        NO_PLAN[inst.name] = str(res.status)
        return None
    sims = {s.schedule: s for s in simulate_schedules(inst, res.plan, SCHEDULES)}
    base = sims["1f1b"]
    peak = max(m.memory_bytes for m in base.memory)
    row = {"stages": res.plan.num_stages, "M": inst.microbatches, "1f1b": base.makespan_s,
           "T": base.iteration_time_s, "fits_1f1b": base.fits,
           "inter_dc": sum(1 for r in base.rows if r.kind == "link" and r.inter_dc)}
    for name in SCHEDULES[1:]:
        sim = sims[name]
        row[f"{name}_speedup"] = base.makespan_s / sim.makespan_s
        row[f"{name}_memory"] = max(m.memory_bytes for m in sim.memory) / peak
        row[f"{name}_fits"] = sim.fits
    for name, sim in sims.items():  # how far the replay is above the period-style bound
        row[f"{name}_over_bound"] = sim.makespan_s / sim.lower_bound_s
    return row


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    sets = SETS_QUICK if args.quick else SETS_FULL
    factors = (1.0, 0.1) if args.quick else (1.0, 0.5, 0.25, 0.1)
    limit = args.time_limit or 120.0
    start = time.perf_counter()
    files = [p for s in sets for p in sorted((HERE.parent / "instances" / s).glob("*.json"))
             if p.name != "manifest.json"]
    rows = {}  # (instance, F) -> measure
    for path in files:
        base = cp.read(path)
        for F in factors:
            rows[(base.name, F)] = measure(degrade(base, F), limit)
            r = rows[(base.name, F)]
            print(f"{base.name} F={F:g}: " + (f"no plan ({NO_PLAN[degrade(base, F).name]})"
                                               if r is None else
                  f"S={r['stages']} M={r['M']} 1f1b {r['1f1b']:.4g} s, zb-h1 x"
                  f"{r['zb-h1_speedup']:.3f}, zb-h2 x{r['zb-h2_speedup']:.3f}"), flush=True)
    names = list(dict.fromkeys(name for name, _ in rows))

    def summary(F, key):
        return geomean([rows[(n, F)][key] for n in names if rows[(n, F)] is not None])

    def share(F, key):
        vals = [rows[(n, F)][key] for n in names if rows[(n, F)] is not None]
        return f"{sum(vals)}/{len(vals)}"

    head = ["F", "plans", "ZB-H1 / 1F1B speed-up", "max", "ZB-H2 / 1F1B speed-up", "max",
            "ZB-H1 memory", "ZB-H2 memory", "fit 1F1B", "fit ZB-H1", "fit ZB-H2"]
    srows = []
    for F in factors:
        got = [rows[(n, F)] for n in names if rows[(n, F)] is not None]
        srows.append([f"{F:g}", len(got), fmt(summary(F, "zb-h1_speedup")),
                      fmt(max((r["zb-h1_speedup"] for r in got), default=None)),
                      fmt(summary(F, "zb-h2_speedup")),
                      fmt(max((r["zb-h2_speedup"] for r in got), default=None)),
                      fmt(summary(F, "zb-h1_memory")), fmt(summary(F, "zb-h2_memory")),
                      share(F, "fits_1f1b"), share(F, "zb-h1_fits"), share(F, "zb-h2_fits")])
    brows = []
    for F in factors:
        got = [rows[(n, F)] for n in names if rows[(n, F)] is not None]
        brows.append([f"{F:g}"] + [f"{fmt(summary(F, f'{k}_over_bound'), 4)} / "
                                   f"{fmt(max(r[f'{k}_over_bound'] for r in got), 4)}"
                                   for k in SCHEDULES])
    bound = ("## The replay against its lower bound\n\nSimulated makespan over "
             "`chainpipe.schedule.makespan_lower_bound` (devices, links, the stash limits' "
             "loops; the candidate for a closed form), geometric mean / max.\n\n"
             + table(["F"] + list(SCHEDULES), brows))
    sections = [bound, "## Summary\n\nGeometric means over the instances with a plan; speed-up = "
                "1F1B's simulated makespan / the zero-bubble schedule's; memory = the largest "
                "peak memory per device of any stage over 1F1B's.\n\n" + table(head, srows)]
    detail = []
    for n in names:
        for F in factors:
            r = rows[(n, F)]
            if r is None:
                why = NO_PLAN.get(n if F == 1.0 else f"{n}-F{F:g}", "")
                detail.append([n, f"{F:g}", "--", "--", "--", f"no plan ({why})", "--", "--",
                               "--"])
                continue
            detail.append([n, f"{F:g}", r["stages"], r["M"], r["inter_dc"], f"{r['1f1b']:.4g}",
                           f"{r['zb-h1_speedup']:.3f}" + ("" if r["zb-h1_fits"] else " (!)"),
                           f"{r['zb-h2_speedup']:.3f}" + ("" if r["zb-h2_fits"] else " (!)"),
                           f"{r['zb-h2_memory']:.3f}"])
    sections = [sections[1], sections[0]]
    sections.append("## Per instance\n\n(!): the plan does not fit its devices' memory under "
                    "that schedule.\n\n" + table(
                        ["instance", "F", "stages", "M", "inter-DC links", "1F1B makespan s",
                         "ZB-H1 speed-up", "ZB-H2 speed-up", "ZB-H2 memory / 1F1B"], detail))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, marker in (("zb-h1_speedup", "ZB-H1", "o"), ("zb-h2_speedup", "ZB-H2", "s")):
        ax.plot(factors, [summary(F, key) for F in factors], marker=marker, label=f"{label} "
                "(geometric mean)")
        ax.plot(factors, [max((rows[(n, F)][key] for n in names if rows[(n, F)]), default=1)
                          for F in factors], marker=marker, ls=":", label=f"{label} (max)")
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xticks(list(factors))
    ax.set_xticklabels([f"{F:g}" for F in factors])
    ax.set_xlabel("F (MAN bandwidth x F, latency / F)")
    ax.set_ylabel("1F1B makespan / zero-bubble makespan")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    intro = (f"Sets: {', '.join(sets)} ({len(names)} instances), each at F = "
             f"{', '.join(f'{F:g}' for F in factors)}; the plan is `dp`'s optimum under "
             f"`classic` with one pipeline on the degraded network (time limit {limit:g} s), "
             f"replayed by `chainpipe.schedule.simulate_schedules` with `W` the compute of "
             f"each layer's `weight_grad_share` of its backward FLOP (0.5: no set states "
             f"it) and `M_W / M_B = 32/34`. Figure: `{NAME}.png`.")
    publish(NAME, "Zero-bubble schedules on the optimal plans", fig, intro, sections,
            args.quick, time.perf_counter() - start, {})


if __name__ == "__main__":
    main()
