"""Experiment 3: inter-DC bandwidth down to 10% and latency up to 10x; how each plan degrades.

Instances: the ``metro`` preset with 4 DCs (MAN links of 10-400 Gbit/s over
10-100 km). Every inter-DC link is degraded by a factor F in (1, 0.5, 0.25,
0.1) along three axes: bandwidth times F, latency divided by F, and both
(``generate(..., degrade=F)``). For each method two numbers are measured, both
relative to the exact optimum of the undegraded network:

- re-planned: the method run again on the degraded network;
- fixed plan: the method's plan for the undegraded network, kept and evaluated
  on the degraded one (what happens when the network degrades under a plan).

A last table asks, per degradation level, whether to keep ``dp``'s running plan or
move to the new optimum (:func:`chainpipe.replan.replan`, horizon
``DEFAULT_HORIZON`` iterations): the time re-planning saves per iteration, the
move's cost in seconds (the parameter state of every layer that changes devices)
and the iterations the move takes to pay back.

``--online`` runs only the online part instead (``results/degraded_network_online.md``):
the ``metro-ring`` preset with seeded link events under running jobs, ``chain-dp``
keeping every job on its plan against ``chain-dp-replan`` keeping, re-planning or moving
it (:mod:`chainpipe.online.adapt`): the counts of each decision and what they gain.

    python experiments/degraded_network.py [--quick] [--online]
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import sys
import time

import chainpipe as cp
from chainpipe.instance import Link
from chainpipe.instances import generate
from chainpipe.replan import DEFAULT_HORIZON, replan
from common import (
    METHODS,
    RESULTS,
    STYLE,
    available,
    fmt,
    geomean,
    machine,
    parse,
    publish,
    pyplot,
    run,
    table,
)

NAME = "degraded_network"
AXES = ("bandwidth x F", "latency / F", "both")


def degrade(inst, axis: str, factor: float, model: str, seed: int, gpus: int):
    if factor == 1.0:
        return inst
    if axis == "both":
        return generate("metro", seed, model=model, datacenters=4, gpus_per_dc=gpus, degrade=factor)
    links = tuple(
        Link(lk.bandwidth_bytes_per_s * (factor if axis.startswith("bandwidth") else 1.0),
             lk.latency_s / (factor if axis.startswith("latency") else 1.0))
        for lk in inst.links)
    return dataclasses.replace(inst, name=f"{inst.name}-{axis.split()[0]}{factor:g}", links=links)


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    models = ("llama2-7b",) if args.quick else ("gpt3-6.7b", "llama2-7b", "llama2-13b")
    seeds = (0,) if args.quick else (0, 1, 2)
    gpus = 8 if args.quick else 16
    factors = (1.0, 0.1) if args.quick else (1.0, 0.5, 0.25, 0.1)
    limit = args.time_limit or (20.0 if args.quick else 60.0)
    methods, missing = available(METHODS)
    start = time.perf_counter()

    cases = [(model, seed) for model in models for seed in seeds]
    # replanned[(axis, F, model, seed, m)], fixed[...] in seconds; None: no plan
    replanned, fixed, reference = {}, {}, {}
    # moves[(axis, F, model, seed)]: chainpipe.replan.replan of dp's undegraded plan
    moves = {}
    for model, seed in cases:
        base = generate("metro", seed, model=model, datacenters=4, gpus_per_dc=gpus)
        original = {m: run(base, m, limit) for m in methods}
        reference[(model, seed)] = original["dp"].iteration_time
        print(f"{base.name}: links " + ", ".join(
            f"{lk.bandwidth_bytes_per_s * 8 / 1e9:g} Gbit/s {lk.latency_s * 1e3:.2f} ms"
            for lk in base.links), flush=True)
        for axis in AXES:
            for F in factors:
                inst = degrade(base, axis, F, model, seed, gpus)
                for m in methods:
                    res = original[m] if F == 1.0 else run(inst, m, limit)
                    replanned[(axis, F, model, seed, m)] = res.iteration_time
                    plan = original[m].plan
                    fixed[(axis, F, model, seed, m)] = (
                        None if plan is None else cp.evaluate(inst, plan).iteration_time_s)
                if F != 1.0 and original["dp"].plan is not None:
                    moves[(axis, F, model, seed)] = replan(
                        base, original["dp"].plan, inst, horizon=DEFAULT_HORIZON,
                        time_limit=limit)
                print(f"  {axis} F={F:g}: " + ", ".join(
                    f"{m} {fmt(replanned[(axis, F, model, seed, m)])}"
                    f"/{fmt(fixed[(axis, F, model, seed, m)])}" for m in methods), flush=True)

    def rel(table_, axis, F, m):
        vals = [table_[(axis, F, mo, s, m)] / reference[(mo, s)] for mo, s in cases
                if table_[(axis, F, mo, s, m)] is not None and reference[(mo, s)]]
        return geomean(vals)

    sections = []
    for axis in AXES:
        rows = []
        for m in methods:
            rows.append([f"`{m}`"] + [f"{fmt(rel(replanned, axis, F, m))} / {fmt(rel(fixed, axis, F, m))}"
                                      for F in factors])
        sections.append(
            f"## Inter-DC {axis}\n\nRe-planned / fixed original plan, geometric mean over "
            f"{len(cases)} instances of T / T\\*(undegraded network).\n\n"
            + table(["method"] + [f"F = {F:g}" for F in factors], rows))

    def move_row(axis, F):
        rs = [moves[(axis, F, mo, s)] for mo, s in cases if (axis, F, mo, s) in moves]
        gains = [r.old_on_new_s - r.new_time_s for r in rs
                 if r.new_time_s is not None and math.isfinite(r.old_on_new_s)]
        movers = [r for r in rs if r.move_bytes > 0 and math.isfinite(r.move_s)]
        paybacks = [r.move_s / (r.old_on_new_s - r.new_time_s) for r in movers
                    if r.new_time_s is not None and r.old_on_new_s - r.new_time_s > 1e-12]
        switch = sum(r.decision == "switch" for r in rs)
        return [f"{F:g}", f"{switch} / {len(rs)}", len(movers),
                fmt(statistics.mean(gains) if gains else None, 4),
                fmt(max(gains) if gains else None, 4),
                fmt(statistics.median([r.move_s for r in movers]) if movers else None, 1),
                fmt(statistics.median(paybacks) if paybacks else None, 0)]

    move_factors = [F for F in factors if F != 1.0]
    sections.append(
        "## Keep the running plan or move (`chainpipe.replan`)\n\n"
        f"`dp`'s plan for the undegraded network is running when the network degrades; "
        f"`replan` re-solves with `dp` and prices the move: every layer whose new stage "
        f"runs on other devices receives its parameter state (`bytes_per_param` per "
        f"parameter) over the degraded network, all transfers at once. It switches when "
        f"{DEFAULT_HORIZON} iterations of saving exceed the move. Per degradation level, "
        f"over {len(cases)} instances: how many switch, how many plans change at all "
        f"(move > 0 bytes), the time saved per iteration (T kept - T re-planned, mean and "
        f"max), the median move in seconds over the plans that change, and the median "
        f"iterations to pay it back (move / saving per iteration) over those that save.\n\n"
        + "\n\n".join(
            f"### Inter-DC {axis}\n\n" + table(
                ["F", f"switch at {DEFAULT_HORIZON} it.", "plans that change",
                 "saved s/iter (mean)", "saved s/iter (max)", "move s (median)",
                 "iterations to pay back (median)"],
                [move_row(axis, F) for F in move_factors])
            for axis in AXES))

    plt = pyplot()
    fig, axes = plt.subplots(1, len(AXES), figsize=(13, 4.3), sharey=True)
    for ax, axis in zip(axes, AXES):
        for m in methods:
            st = STYLE.get(m, {})
            for tab, ls, alpha, label in ((replanned, "-", 1.0, m), (fixed, ":", 0.6, None)):
                pts = [(F, rel(tab, axis, F, m)) for F in factors]
                pts = [p for p in pts if p[1] is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label,
                            **{**st, "ls": ls, "alpha": alpha})
        ax.set_xscale("log")
        ax.invert_xaxis()
        ax.set_xticks(list(factors))
        ax.set_xticklabels([f"{F:g}" for F in factors])
        ax.set_xlabel(f"F ({axis})")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.set_title(f"inter-DC {axis}", fontsize=10)
    axes[0].set_ylabel("T / T*(undegraded)  (log)")
    axes[-1].legend(fontsize=7, ncol=2, title="solid: re-planned, dotted: fixed plan",
                    title_fontsize=7)
    intro = (f"Instances: `generate('metro', seed, model=..., datacenters=4, gpus_per_dc={gpus})` "
             f"for models {', '.join(models)} and seeds {', '.join(map(str, seeds))} (GPU types "
             f"and MAN links drawn per seed); the 'both' axis is `degrade=F`, the other two scale "
             f"one field of every inter-DC link. Time limit {limit:g} s per solve. "
             f"Figure: `{NAME}.png`.")
    publish(NAME, "Degraded networks", fig, intro, sections, args.quick,
            time.perf_counter() - start, missing)


# --------------------------------------------------------------------------- online: keep, re-plan, move
ONLINE_NAME = "degraded_network_online"
#: the two policies compared: the same placements, then kept or adapted on a link event
ONLINE_POLICIES = ("chain-dp", "chain-dp-replan")
#: the jobs' GPU budgets: above most of the ring's DCs (16 to 32 GPUs), so jobs span DCs
ONLINE_GPUS = (24, 40, 48)


def link_events(scenario, seed: int, factor: float, every_s: float, lasting_s: float,
                until_s: float) -> list[dict]:
    """Seeded link events: every ``every_s`` seconds from ``every_s / 2`` on, a span not
    already degraded (drawn uniformly) runs at ``factor`` times its bandwidth and ``1 /
    factor`` times its delay for ``lasting_s`` seconds, then is restored."""
    rng = random.Random(f"{seed}/{factor}")
    spans = sorted(tuple(sorted((ln.a, ln.b))) for ln in scenario.links)
    events, busy = [], {}
    t = every_s / 2
    while t < until_s:
        free = [s for s in spans if busy.get(s, -1.0) <= t]
        if free:
            span = rng.choice(free)
            busy[span] = t + lasting_s
            events.append({"at_s": t, "between": list(span), "bandwidth": factor,
                           "latency": 1 / factor})
            events.append({"at_s": t + lasting_s, "between": list(span)})
        t += every_s
    return events


def online_runs(quick: bool):
    """Per factor and seed, the two policies' runs on ``metro-ring`` with link events."""
    from chainpipe.online.command import run_policies
    from chainpipe.online.jobs import job_stream
    from chainpipe.online.presets import preset_dict
    from chainpipe.online.scenario import scenario_from_dict

    jobs = 12 if quick else 40
    seeds = (0,) if quick else (0, 1, 2)
    factors = (0.1,) if quick else (0.5, 0.25, 0.1)
    out = {}
    for F in factors:
        for seed in seeds:
            data = preset_dict("metro-ring")
            data["jobs"].update(count=jobs, gpus=list(ONLINE_GPUS))
            base = scenario_from_dict(data)
            last = max(j.arrival_s for j in job_stream(base, seed))
            data["events"] = link_events(base, seed, F, 1800.0, 2700.0, last)
            scenario = scenario_from_dict(data)
            out[(F, seed)] = (scenario, run_policies(scenario, ONLINE_POLICIES, seed))
            print(f"  F={F:g} seed {seed}: {len(data['events']) // 2} degradations, "
                  + ", ".join(f"{r.policy} {r.extra}" for r in out[(F, seed)][1]), flush=True)
    return out, jobs, seeds, factors


def online_rows(out, factors) -> list[list]:
    """One row per factor: decisions, gains and job times of the two policies."""
    rows = []
    for F in factors:
        runs = [r for (f, _s), (_sc, rs) in out.items() if f == F for r in rs]
        kept = [r for r in runs if r.policy == "chain-dp"]
        adapt = [r for r in runs if r.policy == "chain-dp-replan"]

        def total(key, rs):
            return sum(r.extra.get(key, 0) for r in rs)

        def busy_h(rs):  # job hours from start to end, every accepted job
            return sum(x.end_s - x.start_s for r in rs for x in r.records
                       if x.status == "accepted") / 3600

        def accepted(rs):
            return sum(1 for r in rs for x in r.records if x.status == "accepted")

        rows.append([f"{F:g}", total("keep_count", kept),
                     f"{total('keep_count', adapt)} / {total('replan_count', adapt)} / "
                     f"{total('move_count', adapt)}",
                     fmt(total("adapt_gain_s", adapt) / 3600, 3),
                     f"{total('adapt_better_count', adapt)}, "
                     f"{fmt(total('adapt_better_s', adapt) / 3600, 3)}",
                     fmt(total("adapt_move_s", adapt), 1),
                     f"{accepted(kept)} / {accepted(adapt)}",
                     f"{fmt(busy_h(kept), 2)} / {fmt(busy_h(adapt), 2)}"])
    return rows


def online_verdict(out) -> str:
    """One paragraph: how much of the adaptive policy's gain repairs the events' damage and
    how much re-optimises on resources freed since the jobs' placements."""
    adapt = [r for _sc, rs in out.values() for r in rs if r.policy == "chain-dp-replan"]
    gain = sum(r.extra.get("adapt_gain_s", 0) for r in adapt)
    better = sum(r.extra.get("adapt_better_s", 0) for r in adapt)
    moves = sum(r.extra.get("adapt_move_s", 0) for r in adapt)
    hours = {}
    for (F, _seed), (_sc, rs) in out.items():
        for r in rs:
            if r.policy == "chain-dp":
                hours[F] = hours.get(F, 0.0) + sum(x.end_s - x.start_s for x in r.records
                                                   if x.status == "accepted") / 3600
    share = f"{100 * better / gain:.0f}%" if gain > 0 else "-"
    spread = ", ".join(f"{h:.2f} h at F = {F:g}" for F, h in sorted(hours.items(),
                                                                     reverse=True))
    return (f"In all, `chain-dp-replan` gains {gain / 3600:.2f} job hours against keeping "
            f"({moves:.0f} s of it spent moving). Of that, {better / 3600:.2f} h ({share}) is "
            f"below the jobs' own time before the event: the switches land on plans faster "
            f"than the job had before its link changed, on devices freed since its placement; "
            f"the event only triggered the question. The events themselves cost little here: "
            f"the job hours under `chain-dp`, which keeps every plan, are {spread}.")


def online_main(quick: bool) -> None:
    """The online part alone: writes ``results/degraded_network_online.md``."""
    start = time.perf_counter()
    out, jobs, seeds, factors = online_runs(quick)
    rows = online_rows(out, factors)
    head = ["F", "chain-dp: jobs kept at an event",
            "chain-dp-replan: keep / re-plan / move", "gain h (sum)",
            "switches faster than before the event, h of it", "move s (sum)",
            "accepted", "job hours chain-dp / chain-dp-replan"]
    text = "\n".join([
        "# Degraded networks online: keep, re-plan or move a running job", "",
        f"Machine: {machine()}. Run: `python experiments/degraded_network.py --online"
        f"{' --quick' if quick else ''}`, {time.perf_counter() - start:.0f} s in all.", "",
        f"The `metro-ring` preset with {jobs} jobs of {', '.join(map(str, ONLINE_GPUS))} GPUs "
        f"(so that jobs span DCs), seeds {', '.join(map(str, seeds))}, and "
        f"seeded link events (`link_events`): every half hour a span not already degraded runs "
        f"at F times its bandwidth and 1/F times its delay for 45 minutes, then is restored, "
        f"until the last arrival. `chain-dp` keeps every running job on its plan at the plan's "
        f"new T; `chain-dp-replan` (same placements) asks `chainpipe.replan` on each event "
        f"that touches a running job: keep, re-plan on the job's own devices, or move it "
        f"elsewhere, whichever leaves the least time (the move's parameter state over the "
        f"changed links included), over the iterations the job has left "
        f"(`chainpipe/online/adapt.py`, docs/online.md). Summed over the seeds: the "
        f"decisions at each event that touched a running job, the time the adaptive "
        f"decisions save against keeping (the jobs' own time, net of the moves; a restore "
        f"event counts as an event too), the moves' seconds, accepted jobs, and the jobs' "
        f"hours from start to end under each policy (a job kept or adapted shifts later "
        f"placements, so the two runs diverge after the first event). A switch may land on a "
        f"plan faster than the job had before the event: resources freed since its placement "
        f"make a better one; the fifth column counts those and the hours of the gain below "
        f"the job's pre-event time (a re-optimisation the event only triggered).", "",
        table(head, rows), "", online_verdict(out), ""])
    path = RESULTS / f"{ONLINE_NAME}.md"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    if "--online" in sys.argv:  # the online part alone (its own results file)
        online_main("--quick" in sys.argv)
    else:
        main()
