"""What a zero-bubble schedule would gain: ZB-H1 and ZB-H2 replayed on the optimal plans.

For every instance of the committed sets, and every inter-DC degradation factor F
(bandwidth times F and latency divided by F on every MAN link, as
``generate(..., degrade=F)`` does), the plan ``dp`` proves optimal (under ``classic``,
one pipeline: the search every set solves in seconds) on the degraded network is
replayed under 1F1B, ZB-H1 and ZB-H2 (:func:`chainpipe.schedule.simulate_schedules`,
``M_W / M_B = 32/34``) twice: with ``W`` the compute of each layer's share of its
backward FLOP as the file states it (these sets state none: the simulator's default,
0.5), and with the shares the generator derives from the model's shape and writes into
a version-3 instance (:attr:`chainpipe.instances.models.Figures.weight_grad_share`,
taken from ``generate(preset, seed, version=3, **overrides)`` of the set's manifest
entry). Reported: each zero-bubble schedule's simulated makespan over 1F1B's, the
largest peak memory per device over 1F1B's, and whether the plan still fits its
devices' memory.

``--interleaved`` runs only the interleaved 1F1B what-if instead
(``results/zero_bubble_interleaved.md``): the same optimal plans (F = 1 and 0.1) replayed
under ``interleaved:2`` and ``interleaved:4`` on a copy with ``M`` rounded up to a multiple
of the plan's stages, against 1F1B and ZB-H1 at that ``M``.

    python experiments/zero_bubble.py [--quick] [--interleaved]
"""

from __future__ import annotations

import dataclasses
import sys
import time

import chainpipe as cp
from chainpipe.instance import Link, Model
from chainpipe.instances import generate
from chainpipe.instances.sets import ROOT, SETS
from chainpipe.schedule import simulate_schedules
from common import fmt, geomean, parse, publish, pyplot, table

NAME = "zero_bubble"
SETS_QUICK = ("small", "hybrid/small")
SETS_FULL = ("small", "medium", "large", "hybrid/small", "hybrid/medium", "hybrid/large")
SCHEDULES = ("1f1b", "zb-h1", "zb-h2")
#: instance -> dp's status where it returned no plan (infeasible, or the time limit)
NO_PLAN: dict[str, str] = {}
#: the two sources of each layer's weight-gradient share: the file's (the default 0.5
#: where it states none) and the generator's, derived from the model's shape
SHARES = ("file", "derived")


def derived_shares(inst, entry):
    """``inst`` with every layer's ``weight_grad_share`` as the generator derives it for
    the set's ``entry`` (its version-3 twin's layers: same model, same layer names)."""
    twin = generate(entry.preset, entry.seed, version=3, **entry.overrides).layers
    if [ly.name for ly in twin] != [ly.name for ly in inst.layers]:
        raise RuntimeError(f"{inst.name}: the generator's layers are not the file's")
    layers = tuple(dataclasses.replace(ly, weight_grad_share=t.weight_grad_share)
                   for ly, t in zip(inst.layers, twin))
    return dataclasses.replace(inst, model=Model(inst.model.name, layers))


def backward_share(inst, plan) -> float:
    """The plan's weight-gradient FLOP over its backward FLOP (shares as the file states
    them, 0.5 where it states none)."""
    w = sum((0.5 if ly.weight_grad_share is None else ly.weight_grad_share) * ly.bwd_flop
            for ly in inst.layers)
    return w / sum(ly.bwd_flop for ly in inst.layers)


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


def replays(inst, plan, prefix: str = "") -> dict:
    """The plan's replays under :data:`SCHEDULES`: speed-ups, memory, fit, bound ratios
    (keys after ``prefix``)."""
    sims = {s.schedule: s for s in simulate_schedules(inst, plan, SCHEDULES)}
    base = sims["1f1b"]
    peak = max(m.memory_bytes for m in base.memory)
    row = {}
    for name in SCHEDULES[1:]:
        sim = sims[name]
        row[f"{prefix}{name}_speedup"] = base.makespan_s / sim.makespan_s
        row[f"{prefix}{name}_memory"] = max(m.memory_bytes for m in sim.memory) / peak
        row[f"{prefix}{name}_fits"] = sim.fits
    for name, sim in sims.items():  # how far the replay is above the period-style bound
        row[f"{prefix}{name}_over_bound"] = sim.makespan_s / sim.lower_bound_s
    return row


def measure(inst, derived, limit: float) -> dict | None:
    """The optimum's replays under :data:`SCHEDULES` with the file's shares and with the
    ``derived`` instance's (keys ``derived_...``), or ``None`` without a plan."""
    res = cp.solve(one_pipeline_classic(inst), "dp", time_limit=limit)
    if res.plan is None:
        NO_PLAN[inst.name] = str(res.status)
        return None
    base = simulate_schedules(inst, res.plan, ("1f1b",))[0]
    row = {"status": str(res.status), "stages": res.plan.num_stages, "M": inst.microbatches,
           "1f1b": base.makespan_s,
           "T": base.iteration_time_s, "fits_1f1b": base.fits,
           "inter_dc": sum(1 for r in base.rows if r.kind == "link" and r.inter_dc),
           "share": backward_share(inst, res.plan),
           "derived_share": backward_share(derived, res.plan)}
    row.update(replays(inst, res.plan))
    row.update(replays(derived, res.plan, "derived_"))
    return row


def _cell(row: dict, key: str) -> str:
    """A speed-up, with ``(!)`` when the plan does not fit under that schedule."""
    return f"{row[key]:.3f}" + ("" if row[key.replace("speedup", "fits")] else " (!)")


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    sets = SETS_QUICK if args.quick else SETS_FULL
    factors = (1.0, 0.1) if args.quick else (1.0, 0.5, 0.25, 0.1)
    limit = args.time_limit or 120.0
    start = time.perf_counter()
    entries = [(s, e) for s in sets for e in sorted(SETS[s], key=lambda e: e.stem)]
    rows = {}  # (instance, F) -> measure
    for set_name, entry in entries:
        base = cp.read(ROOT / set_name / f"{entry.stem}.json")
        derived = derived_shares(base, entry)
        for F in factors:
            rows[(base.name, F)] = measure(degrade(base, F), degrade(derived, F), limit)
            r = rows[(base.name, F)]
            print(f"{base.name} F={F:g}: " + (f"no plan ({NO_PLAN[degrade(base, F).name]})"
                                               if r is None else
                  f"S={r['stages']} M={r['M']} 1f1b {r['1f1b']:.4g} s, zb-h1 x"
                  f"{r['zb-h1_speedup']:.3f} (derived x{r['derived_zb-h1_speedup']:.3f}), "
                  f"zb-h2 x{r['zb-h2_speedup']:.3f} (derived x"
                  f"{r['derived_zb-h2_speedup']:.3f})"), flush=True)
    names = list(dict.fromkeys(name for name, _ in rows))

    def got(F):
        return [rows[(n, F)] for n in names if rows[(n, F)] is not None]

    def summary(F, key):
        return geomean([r[key] for r in got(F)])

    def count(F, key):
        vals = [r[key] for r in got(F)]
        return f"{sum(vals)}/{len(vals)}"

    head = ["F", "plans", "W / backward", "ZB-H1 / 1F1B speed-up", "max",
            "ZB-H2 / 1F1B speed-up", "max", "ZB-H1 memory", "ZB-H2 memory", "fit 1F1B",
            "fit ZB-H1", "fit ZB-H2"]

    def summary_table(prefix: str) -> str:
        srows = []
        for F in factors:
            rs = got(F)
            srows.append([f"{F:g}", len(rs), fmt(summary(F, f"{prefix}share")),
                          fmt(summary(F, f"{prefix}zb-h1_speedup")),
                          fmt(max((r[f"{prefix}zb-h1_speedup"] for r in rs), default=None)),
                          fmt(summary(F, f"{prefix}zb-h2_speedup")),
                          fmt(max((r[f"{prefix}zb-h2_speedup"] for r in rs), default=None)),
                          fmt(summary(F, f"{prefix}zb-h1_memory")),
                          fmt(summary(F, f"{prefix}zb-h2_memory")),
                          count(F, "fits_1f1b"), count(F, f"{prefix}zb-h1_fits"),
                          count(F, f"{prefix}zb-h2_fits")])
        return table(head, srows)

    brows = []
    for F in factors:
        for label, prefix in (("file (0.5)", ""), ("derived", "derived_")):
            brows.append([f"{F:g}", label] + [
                f"{fmt(summary(F, f'{prefix}{k}_over_bound'), 4)} / "
                f"{fmt(max(r[f'{prefix}{k}_over_bound'] for r in got(F)), 4)}"
                for k in SCHEDULES])
    bound = ("## The replay against its lower bound\n\nSimulated makespan over "
             "`chainpipe.schedule.makespan_lower_bound` (devices, links, the stash limits' "
             "loops; the candidate for a closed form), geometric mean / max.\n\n"
             + table(["F", "shares"] + list(SCHEDULES), brows))
    intro_summary = ("Geometric means over the instances with a plan; W / backward = the "
                     "plan's weight-gradient FLOP over its backward FLOP; speed-up = 1F1B's "
                     "simulated makespan / the zero-bubble schedule's; memory = the largest "
                     "peak memory per device of any stage over 1F1B's.")
    sections = [
        "## Summary, with the shares the generator derives from the model's shape\n\n"
        + intro_summary + "\n\n" + summary_table("derived_"),
        "## Summary, with the files' shares (none stated: 0.5 for every layer)\n\n"
        + summary_table(""),
        bound,
    ]
    detail = []
    for n in names:
        for F in factors:
            r = rows[(n, F)]
            if r is None:
                why = NO_PLAN.get(n if F == 1.0 else f"{n}-F{F:g}", "")
                detail.append([n, f"{F:g}", "--", "--", "--", f"no plan ({why})"]
                              + ["--"] * 7)
                continue
            stages = r["stages"] if r["status"] == "optimal" else f"{r['stages']} ({r['status']})"
            detail.append([n, f"{F:g}", stages, r["M"], r["inter_dc"], f"{r['1f1b']:.4g}",
                           _cell(r, "zb-h1_speedup"), _cell(r, "zb-h2_speedup"),
                           f"{r['zb-h2_memory']:.3f}", f"{r['derived_share']:.3f}",
                           _cell(r, "derived_zb-h1_speedup"), _cell(r, "derived_zb-h2_speedup"),
                           f"{r['derived_zb-h2_memory']:.3f}"])
    sections.append("## Per instance\n\n(!): the plan does not fit its devices' memory under "
                    "that schedule; a status after the stages: dp's plan when it stopped at "
                    "the time limit, not proven optimal. 0.5: every layer's share 0.5 (the "
                    "files state none); "
                    "derived: the generator's shares, whose FLOP-weighted mean over the "
                    "plan's layers is `W / bwd`.\n\n" + table(
                        ["instance", "F", "stages", "M", "inter-DC links", "1F1B makespan s",
                         "ZB-H1 (0.5)", "ZB-H2 (0.5)", "ZB-H2 memory (0.5)", "W / bwd",
                         "ZB-H1 (derived)", "ZB-H2 (derived)", "ZB-H2 memory (derived)"],
                        detail))

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, marker in (("zb-h1_speedup", "ZB-H1", "o"), ("zb-h2_speedup", "ZB-H2", "s")):
        for prefix, what, ls in (("", "0.5", ":"), ("derived_", "derived", "-")):
            ax.plot(factors, [summary(F, prefix + key) for F in factors], marker=marker, ls=ls,
                    label=f"{label}, shares {what} (geometric mean)")
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.set_xticks(list(factors))
    ax.set_xticklabels([f"{F:g}" for F in factors])
    ax.set_xlabel("F (MAN bandwidth x F, latency / F)")
    ax.set_ylabel("1F1B makespan / zero-bubble makespan")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    unproven = [f"{n} at F = {F:g}" for (n, F), r in rows.items()
                if r is not None and r["status"] != "optimal"]
    intro = (f"Sets: {', '.join(sets)} ({len(names)} instances), each at F = "
             f"{', '.join(f'{F:g}' for F in factors)}; the plan is `dp`'s optimum under "
             f"`classic` with one pipeline on the degraded network (time limit {limit:g} s), "
             f"replayed by `chainpipe.schedule.simulate_schedules` with `W` the compute of "
             f"each layer's share of its backward FLOP and `M_W / M_B = 32/34`, twice: with "
             f"the files' shares (no set of these states one: 0.5, the simulator's default) "
             f"and with the shares the generator derives from the model's shape "
             f"(`Figures.weight_grad_share`, what it writes into a version-3 instance). "
             f"Plans not proven optimal within the limit (replayed all the same): "
             f"{', '.join(unproven) or 'none'}. Figure: `{NAME}.png`.")
    publish(NAME, "Zero-bubble schedules on the optimal plans", fig, intro, sections,
            args.quick, time.perf_counter() - start, {})


# --------------------------------------------------------------------------- interleaved 1F1B
INTERLEAVED_NAME = "zero_bubble_interleaved"
#: the schedules of the interleaved section; speed-ups are over the first
INTERLEAVED_SCHEDULES = ("1f1b", "interleaved:2", "interleaved:4", "zb-h1")


def interleaved_row(inst, limit: float) -> dict | None:
    """The optimum of ``inst`` (as :func:`measure`) replayed under
    :data:`INTERLEAVED_SCHEDULES` on a copy with ``M`` rounded up to a multiple of the
    plan's stages (Megatron's order needs it; 1F1B at the same ``M``): speed-ups over 1F1B,
    the largest peak memory per device over 1F1B's, fit, or the reason it does not apply."""
    res = cp.solve(one_pipeline_classic(inst), "dp", time_limit=limit)
    if res.plan is None:
        return None
    S = res.plan.num_stages
    M = -(-inst.microbatches // S) * S
    copy = dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                  microbatches=M))
    sims = simulate_schedules(copy, res.plan, INTERLEAVED_SCHEDULES)
    base = sims[0]
    peak = max(m.memory_bytes for m in base.memory)
    row = {"S": S, "M": inst.microbatches, "M'": M,
           "layers": min(st.end - st.start for st in res.plan.stages)}
    for sim in sims[1:]:
        if not hasattr(sim, "makespan_s"):
            row[sim.schedule] = None
            row[f"{sim.schedule} why"] = sim.reason
            continue
        row[sim.schedule] = base.makespan_s / sim.makespan_s
        row[f"{sim.schedule} memory"] = max(m.memory_bytes for m in sim.memory) / peak
        row[f"{sim.schedule} fits"] = sim.fits
    return row


def interleaved_main(quick: bool) -> None:
    """The interleaved section alone: writes ``results/zero_bubble_interleaved.md``."""
    from common import RESULTS, machine

    sets = SETS_QUICK if quick else SETS_FULL
    factors = (1.0, 0.1)
    start = time.perf_counter()
    rows = {}
    for set_name in sets:
        for entry in sorted(SETS[set_name], key=lambda e: e.stem):
            base = cp.read(ROOT / set_name / f"{entry.stem}.json")
            for F in factors:
                rows[(base.name, F)] = r = interleaved_row(degrade(base, F), 120.0)
                print(f"{base.name} F={F:g}: {r}", flush=True)
    out = []
    for F in factors:
        for name in INTERLEAVED_SCHEDULES[1:]:
            got = [r for (n, f), r in rows.items() if f == F and r is not None]
            ok = [r for r in got if r[name] is not None]
            out.append([f"{F:g}", name, f"{len(ok)} / {len(got)}",
                        fmt(geomean([r[name] for r in ok])),
                        fmt(min((r[name] for r in ok), default=None)),
                        fmt(max((r[name] for r in ok), default=None)),
                        fmt(geomean([r[f"{name} memory"] for r in ok])),
                        sum(1 for r in ok if r[f"{name} fits"])])
    detail = [[n, f"{F:g}", r["S"], r["M"], r["M'"], r["layers"]]
              + [("-" if r[k] is None else f"{r[k]:.3f}" + ("" if r[f"{k} fits"] else " (!)"))
                 for k in INTERLEAVED_SCHEDULES[1:]]
              for (n, F), r in rows.items() if r is not None]
    text = "\n".join([
        "# Interleaved 1F1B on the optimal plans", "",
        f"Machine: {machine()}. Run: `python experiments/zero_bubble.py --interleaved"
        f"{' --quick' if quick else ''}`, {time.perf_counter() - start:.0f} s in all.", "",
        f"Sets: {', '.join(sets)}, each at F = 1 and 0.1 (MAN bandwidth x F, latency / F); "
        f"the plan is `dp`'s optimum under `classic` with one pipeline (as in "
        f"`zero_bubble.md`), replayed on a copy of the instance with `M` rounded up to a "
        f"multiple of the plan's stages `S` (Megatron's interleaved order needs it; 1F1B and "
        f"ZB-H1 at the same `M'`) under `interleaved:2`, `interleaved:4` (the plan re-cut into "
        f"`V` chunks per stage, docs/schedule.md) and ZB-H1 with the files' shares. "
        f"Applicable: plans whose every stage holds at least `V` layers. Speed-up = 1F1B's "
        f"makespan over the schedule's (geometric mean, min, max); memory = the largest peak "
        f"memory per device over 1F1B's (geometric mean); fits = plans whose every stage fits "
        f"under that schedule.", "",
        table(["F", "schedule", "applicable", "speed-up", "min", "max", "memory", "fits"], out),
        "", "## Per plan", "",
        "(!): does not fit its devices' memory; -: not applicable (a stage of fewer than "
        "`V` layers).", "",
        table(["instance", "F", "S", "M", "M'", "fewest layers in a stage"]
              + list(INTERLEAVED_SCHEDULES[1:]), detail), ""])
    path = RESULTS / f"{INTERLEAVED_NAME}.md"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    if "--interleaved" in sys.argv:  # the interleaved section alone (its own results file)
        interleaved_main("--quick" in sys.argv)
    else:
        main()
