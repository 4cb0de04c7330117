"""Formulation study: the MIP/CP routes to the DP's optimum, and what each strengthening buys.

    python benchmarks/formulations.py [--time-limit 30] [--sets small medium hybrid/small
                                      hybrid/medium v3/small v3/medium] [--solvers ilp-assign
                                      ilp-path cpsat] [--backends highs cbc] [--variants]
                                      [--limit N] [--ref-limit 60]

For every instance of the committed sets: the exact DP optimum (the reference), then for
each solver (and for the ILPs each backend): the LP-relaxation bound and its ratio to the
optimum (ILPs), the model size, the run's status, iteration time, proven bound and gap,
and the CPU time to proof (this process's CPU plus its children's: CBC runs as a child;
wall-clock times on the shared machine are noisy). With ``--variants`` the path ILP is
also run with each strengthening switched off alone (``dominance``, ``start``,
``prune``) and with all three off (the plain model), HiGHS only. With
``--device-states`` the path ILP runs as its arc-flow model (``-O device_states=true``,
``docs/formulations.md``) instead of the default one; ``--no-figure`` skips the profiles
(for a run written to its own ``--out`` file, e.g. ``formulations_flow.md``). A solver that cannot
take an instance (``cpsat`` before it plans data/tensor parallelism) is an ``error`` row.

Writes ``benchmarks/results/formulations.md``, the raw rows as
``benchmarks/results/formulations.json``, and Dolan-More performance profiles of the
CPU time to proof as ``docs/figures/formulations_profile.png``. When every set is a
version-3 set (``v3/...``) the results go to ``benchmarks/results/formulations_v3.md``
(and ``.json``) and no figure is drawn unless ``--figure`` names one; their rows also say
how many outer entries, one-pipeline sub-solves and joint models the enumeration of
several pipelines took (*outer*: entries / sub-solves / joint, docs/formulations.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "formulations.md"
FIGURE = ROOT / "docs" / "figures" / "formulations_profile.png"
SETS = ("small", "medium", "hybrid/small", "hybrid/medium")
#: the version-3 sets (``--sets v3/small v3/medium``): written to their own results file
V3_SETS = ("v3/small", "v3/medium")
OUT_V3 = ROOT / "benchmarks" / "results" / "formulations_v3.md"
ILPS = ("ilp-assign", "ilp-path")
#: ``--cpu-limit``: a run's wall-clock limit, in multiples of its CPU-second limit
CPU_WALL_FACTOR = 5.0
#: path-ILP variants measured with ``--variants``: (label, options)
VARIANTS = (
    ("no dominance", {"dominance": False}),
    ("no start", {"start": False}),
    ("no prune", {"prune": False}),
    ("plain", {"dominance": False, "start": False, "prune": False}),
)


def _fmt(x, spec=".4g"):
    return "-" if x is None else format(x, spec)


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def configurations(solvers, backends, variants: bool, device_states: bool = False
                   ) -> list[tuple[str, str, dict]]:
    """``(solver, label, options)`` of every run per instance."""
    out = []
    for solver in solvers:
        if solver == "ilp-path" and device_states:
            out += [(solver, f"{backend}, device states",
                     {"backend": backend, "device_states": True}) for backend in backends]
        elif solver in ILPS:
            out += [(solver, backend, {"backend": backend}) for backend in backends]
            if solver == "ilp-path" and variants:
                out += [(solver, f"highs, {label}", {"backend": "highs", **opts})
                        for label, opts in VARIANTS]
        else:
            out.append((solver, "-", {}))
    return out


def _size(st: dict) -> dict:
    """The model's size; for several pipelines that of the largest one-pipeline sub-model
    the outer enumeration solved (``stats["largest_sub_model"]``)."""
    size = st.get("largest_sub_model") or st
    return {"vars": size.get("variables"), "cons": size.get("constraints"),
            "nnz": size.get("nonzeros")}


def entry_lp(inst, plan, solver: str, options: dict, time_limit: float) -> float | None:
    """The LP bound of the outer entry holding ``plan`` (the DP's optimum) for an instance
    of several pipelines: each of its pipelines' DC range with its ``M_p`` as a
    one-pipeline sub-instance, the LP relaxation of the route's model of it (pruned by
    the sub-instance's heuristic plan, as every LP/opt here), the largest plus ``R_X / H``
    of the span. Each block's LP is at most the block's optimum, at most that pipeline's
    ``T_p + max R`` in ``plan``, so the value is at most the optimum: the strength of the
    models the enumeration solves where the optimum lies (the enumeration itself has no
    single LP). ``None`` when some LP is not solved."""
    from chainpipe.formulations.pipelines import cross_time, sub_instance
    from chainpipe.solve import solve

    index = {dc.name: k for k, dc in enumerate(inst.datacenters)}
    pipes = [(p.stages, p.microbatches or inst.microbatches) for p in plan.pipelines]
    values, spans = [], []
    for stages, m in pipes:
        dcs = [index[st.devices[0].split("/")[0]] for st in stages]
        spans += [min(dcs), max(dcs)]
        sub = sub_instance(inst, min(dcs), max(dcs), m)
        lp = solve(sub, solver, time_limit=time_limit, relax=True, **options).lower_bound
        if lp is None:
            return None
        values.append(lp)
    cross = cross_time(inst, min(spans), max(spans)) if len(pipes) > 1 else 0.0
    return max(values) + cross


def _solve_on_cpu(inst, solver: str, time_limit: float, options: dict):
    """``solve`` with a limit of ``time_limit`` CPU seconds of this process and its
    children (HiGHS's thread and forked HiGHS children included;
    :class:`~chainpipe.formulations.pipelines.CpuPhase`), and
    :data:`CPU_WALL_FACTOR` times that on the wall clock: the issue's targets count CPU
    seconds, which a wall-clock limit on a machine shared with other jobs cuts short."""
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.pipelines import CpuPhase
    from chainpipe.solve import check_options, finish, solver_function

    run = solver_function(solver)
    check_options(solver, options, run)
    deadline = CpuPhase(Deadline(CPU_WALL_FACTOR * time_limit), time_limit)
    out = run(inst, deadline=deadline, seed=0, threads=1, log=None, **options)
    return finish(inst, solver, out, deadline.elapsed())


def run_one(inst, solver: str, options: dict, time_limit: float, optimum,
            plan=None, lp: bool = True, cpu_limit: bool = False) -> dict:
    """One timed run (and, for the ILPs unless ``lp`` is false, its LP relaxation; for
    several pipelines that of the optimum's entry, :func:`entry_lp`), as a row;
    ``cpu_limit``: the limit counts CPU seconds (:func:`_solve_on_cpu`)."""
    from chainpipe.formulations.pipelines import several
    from chainpipe.solve import solve

    want_lp, lp = lp, None
    if solver in ILPS and want_lp:
        try:
            if several(inst):
                lp = None if plan is None else entry_lp(inst, plan, solver, options,
                                                        time_limit)
            else:
                lp = solve(inst, solver, time_limit=time_limit, relax=True,
                           **options).lower_bound
        except Exception:  # noqa: BLE001 - a benchmark row, never a crash
            lp = None
    c0, w0 = _cpu(), time.perf_counter()
    try:
        r = _solve_on_cpu(inst, solver, time_limit, options) if cpu_limit else \
            solve(inst, solver, time_limit=time_limit, **options)
        status, T, bound, gap, st, msg = (r.status, r.iteration_time, r.lower_bound, r.gap,
                                          r.stats, r.message)
    except Exception as exc:  # noqa: BLE001 - e.g. a solver that refuses an option
        status, T, bound, gap, st, msg = "error", None, None, None, {}, str(exc)
    cpu, wall = _cpu() - c0, time.perf_counter() - w0
    agrees = status != "optimal" or optimum is None or abs(T - optimum) <= 1e-6 * optimum
    return {
        "status": str(getattr(status, "value", status)), "T": T, "bound": bound, "gap": gap,
        "lp": lp, "lp_ratio": (lp / optimum) if (lp is not None and optimum) else None,
        **_size(st),
        "arcs": st.get("stage_arcs"), "cpu": cpu, "wall": wall,
        "outer": (f"{st['entries']}/{st['sub_solves']}/{st['joint_solves']}"
                  if "entries" in st else None),
        "proof_cpu": cpu if status == "optimal" else None, "agrees": agrees,
        "message": (msg or "")[:160],
    }


def profile(rows: list[dict], out: Path) -> None:
    """Dolan-More performance profiles of the CPU time to proof, one curve per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = sorted({r["config"] for r in rows})
    instances = sorted({r["instance"] for r in rows})
    time_of = {(r["config"], r["instance"]): r["proof_cpu"] for r in rows}
    ratios = {c: [] for c in configs}
    for inst in instances:
        times = [time_of.get((c, inst)) for c in configs]
        best = min((t for t in times if t is not None), default=None)
        for c, t in zip(configs, times):
            ratios[c].append(math.inf if (t is None or best is None) else max(t, 1e-3)
                             / max(best, 1e-3))
    finite = [x for v in ratios.values() for x in v if math.isfinite(x)]
    top = max(finite + [2.0]) * 1.5
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for c in configs:
        xs = sorted(ratios[c])
        taus = [1.0] + [x for x in xs if math.isfinite(x)] + [top]
        frac = [sum(x <= tau for x in xs) / len(xs) for tau in taus]
        ax.step(taus, frac, where="post", label=c)
    ax.set_xscale("log")
    ax.set_xlim(1.0, top)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("tau: CPU time to proof / best configuration's (log scale)")
    ax.set_ylabel("share of instances proven within tau")
    ax.set_title(f"Performance profiles over {len(instances)} instances")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


#: the ratios to the best configuration's CPU time the profile table reports
TAUS = (1, 2, 4, 10, 100)


def profile_table(rows: list[dict]) -> list[str]:
    """The performance profiles as a table: per configuration, the share of the instances
    (with a DP optimum) it proves within ``tau`` times the best configuration's CPU time,
    for each ``tau`` of :data:`TAUS`."""
    rows = [r for r in rows if r.get("ref") == "optimal"]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    instances = sorted({r["instance"] for r in rows})
    time_of = {(r["config"], r["instance"]): r["proof_cpu"] for r in rows}
    best = {i: min((time_of[c, i] for c in configs if time_of.get((c, i)) is not None),
                   default=None) for i in instances}
    lines = ["| configuration | " + " | ".join(f"tau = {t}" for t in TAUS) + " |",
             "|---|" + "---|" * len(TAUS)]
    for c in configs:
        mine = [i for i in instances if (c, i) in time_of]
        cells = []
        for tau in TAUS:
            hit = sum(time_of[c, i] is not None and best[i] is not None
                      and max(time_of[c, i], 1e-3) <= tau * max(best[i], 1e-3) for i in mine)
            cells.append(f"{hit}/{len(mine)}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines + [""]


def summary(rows: list[dict], sets) -> list[str]:
    """Per configuration and set: proven / instances, CPU to proof (geometric mean of the
    proven, and the largest), mean LP/opt."""
    lines = ["### Summary", "",
             "| configuration | " + " | ".join(sets) + " |",
             "|---|" + "---|" * len(sets)]
    configs = []
    for r in rows:
        if r["config"] not in configs:
            configs.append(r["config"])
    for c in configs:
        cells = []
        for s in sets:
            mine = [r for r in rows if r["config"] == c and r["set"] == s and r["ref"] == "optimal"]
            if not mine:
                cells.append("-")
                continue
            if all(r["status"] == "error" for r in mine):
                cells.append("error")
                continue
            proven = [r["proof_cpu"] for r in mine if r["proof_cpu"] is not None]
            geo = math.exp(sum(math.log(max(t, 1e-3)) for t in proven) / len(proven)) \
                if proven else None
            lps = [r["lp_ratio"] for r in mine if r["lp_ratio"] is not None]
            lp = f", LP/opt {sum(lps) / len(lps):.3f}" if lps else ""
            cells.append(f"{len(proven)}/{len(mine)}; {_fmt(geo, '.2f')} s geo, "
                         f"max {_fmt(max(proven) if proven else None, '.1f')} s{lp}")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines + [""]


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per run")
    ap.add_argument("--sets", nargs="+", default=list(SETS))
    ap.add_argument("--solvers", nargs="+", default=["ilp-assign", "ilp-path", "cpsat"])
    ap.add_argument("--backends", nargs="+", default=["highs", "cbc"])
    ap.add_argument("--variants", action="store_true",
                    help="also the path ILP with each strengthening off (HiGHS)")
    ap.add_argument("--device-states", action="store_true",
                    help="the path ILP as its arc-flow model (-O device_states=true) "
                         "instead of the default one")
    ap.add_argument("--no-figure", action="store_true", help="draw no profile figure")
    ap.add_argument("--limit", type=int, default=None, help="first N instances of each set")
    ap.add_argument("--ref-limit", type=float, default=60.0,
                    help="seconds for the DP reference (at least --time-limit)")
    ap.add_argument("--profile-with", type=Path, nargs="+", default=[],
                    help="result JSON files of earlier runs whose rows (of these sets) join "
                    "the summary and the profiles")
    ap.add_argument("--fresh", nargs="+", default=[], metavar="ENTRY:SEEDS",
                    help="instead of --sets: the committed set entry ENTRY (a file stem of "
                    "chainpipe.instances.sets, e.g. v3-medium-02-small-model) drawn again at "
                    "each seed of SEEDS (3-8 or 3,5,7): instances the solvers were never "
                    "tuned on")
    ap.add_argument("--no-lp", action="store_true",
                    help="skip the LP relaxations (the LP/opt column)")
    ap.add_argument("--cpu-limit", action="store_true",
                    help="--time-limit counts CPU seconds of each run (HiGHS's thread "
                    f"and children included), at most {CPU_WALL_FACTOR:g} times that of wall clock, "
                    "instead of wall-clock seconds")
    ap.add_argument("--wall-factor", type=float, default=CPU_WALL_FACTOR,
                    help="with --cpu-limit: the wall-clock cap as a multiple of the limit "
                    "(a loaded machine gives a run a tenth of a core)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--figure", type=Path, default=None)
    return ap


def fresh_seeds(text: str) -> list[int]:
    """The seeds of ``--fresh``'s ``SEEDS``: ``3-8`` (inclusive) or ``3,5,7``."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-", 1))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def fresh_instances(spec: str) -> tuple[str, list]:
    """``ENTRY:SEEDS`` as ``(set name, instances)``: the committed set entry ``ENTRY``
    (its preset, version and overrides, ``chainpipe.instances.sets``) generated again at
    each seed, named ``ENTRY-like-s<seed>`` (as ``benchmarks/dp_scaling.py`` draws them)."""
    from chainpipe.instances.sets import entry as committed

    stem, _, seeds = spec.partition(":")
    e = committed(stem)
    if e is None or not seeds:
        raise SystemExit(f"--fresh {spec!r}: want ENTRY:SEEDS with ENTRY a committed stem")
    if e.seed in fresh_seeds(seeds):
        raise SystemExit(f"--fresh {spec!r}: seed {e.seed} is the committed instance's own")
    return f"fresh/{stem}", [e.drawn(s) for s in fresh_seeds(seeds)]


def _groups(args) -> list[tuple[str, list]]:
    """``(set name, instances)`` to measure: ``--fresh``'s draws, else ``--sets``' files."""
    from chainpipe.io import read

    if args.fresh:
        return [fresh_instances(spec) for spec in args.fresh]
    out = []
    for set_name in args.sets:
        files = sorted(p for p in (ROOT / "instances" / set_name).glob("*.json")
                       if p.name != "manifest.json")
        out.append((set_name, [read(f) for f in files[: args.limit]]))
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _earlier_rows(paths, sets, rows: list[dict]) -> list[dict]:
    """The rows of earlier result files (``--profile-with``) of ``sets`` whose
    configuration this run did not measure, their configuration marked ``*``."""
    mine = {r["config"] for r in rows}
    out, seen = [], set()
    for path in paths:  # a configuration and instance in several files: the first one
        for r in json.loads(Path(path).read_text()):
            key = (r.get("config"), r.get("instance"))
            if r.get("set") in sets and r.get("config") not in mine and key not in seen:
                seen.add(key)
                out.append(dict(r, config=f"{r['config']} *"))
    return out


def _command(args) -> str:
    """The command line that reproduces this run."""
    chosen = (f"--fresh {' '.join(args.fresh)}" if args.fresh
              else f"--sets {' '.join(args.sets)}")
    return (f"python benchmarks/formulations.py --time-limit {args.time_limit:g} {chosen}"
            f" --solvers {' '.join(args.solvers)} --backends "
            f"{' '.join(args.backends)}" + (" --variants" if args.variants else "")
            + (" --device-states" if args.device_states else "")
            + (" --no-figure" if args.no_figure else "")
            + (f" --out {args.out.relative_to(ROOT)}" if args.out.is_relative_to(ROOT)
               and args.out not in (OUT, OUT_V3) else "")
            + (f" --limit {args.limit}" if args.limit else "")
            + (" --no-lp" if args.no_lp else "")
            + (" --cpu-limit" if args.cpu_limit else "")
            + (f" --wall-factor {args.wall_factor:g}" if args.wall_factor != 5.0 else "")
            + (" --profile-with " + " ".join(str(p) for p in args.profile_with)
               if args.profile_with else "")
            + (f" --figure {args.figure.relative_to(ROOT)}" if args.figure is not None
               and args.figure != FIGURE and args.figure.is_relative_to(ROOT) else "")
            + (f" --ref-limit {args.ref_limit:g}" if args.ref_limit != 60.0 else ""))


def _header(args) -> list[str]:
    """The results file's title and the paragraph that says what each column is."""
    command = _command(args)
    return [
        "## MIP and CP formulations: status, bounds, time to proof",
        "",
        f"Machine: 2 cores ({platform.machine()}), shared with other jobs while measured; "
        f"Python {platform.python_version()}; one thread per solver, time limit "
        f"{args.time_limit:g} s ("
        + (f"CPU seconds of the run, at most {args.wall_factor:g} times that of wall clock"
           if args.cpu_limit else "wall clock") + f") per run. Produced by `{command}`.",
        "",
        "*LP/opt* is the LP-relaxation bound over the DP optimum (ILPs); *bound* and *gap* "
        "the solver's proven bound and `(T - bound) / T`; *CPU* the CPU seconds of the run "
        "(CBC's child included), the time to proof when the status is `optimal`; *wall* its "
        "wall-clock seconds; *vars* / *cons* / *nnz* the model's size (several pipelines: "
        "the largest one-pipeline sub-model solved, 0 when every sub-solve was settled "
        "without a model; CP-SAT gives no *nnz*); for several pipelines, which have no "
        "single LP, *LP/opt* is that of the entry holding the DP's optimum: its "
        "pipelines' one-pipeline LP relaxations, the largest plus `R_X / H`, a bound on "
        "the optimum (benchmarks/formulations.py, `entry_lp`); *arcs* "
        "the path ILP's stage arcs kept; *outer* (several pipelines) the entries solved, "
        "one-pipeline sub-solves and joint models of the outer enumeration. *ok* says whether an `optimal` claim matches the DP "
        "optimum to 1e-6. The path ILP's default has every strengthening on (`dominance`, "
        "`start`, `prune`); the variant rows switch them off one at a time, *plain* all "
        "three (docs/formulations.md).",
        "",
    ]


def main(argv=None) -> None:
    args = _parser().parse_args(argv)
    global CPU_WALL_FACTOR
    CPU_WALL_FACTOR = args.wall_factor
    v3 = bool(args.fresh) or all(s.startswith("v3/") for s in args.sets)
    if args.out is None:
        args.out = OUT_V3 if v3 else OUT
    args.out = args.out.resolve()
    if args.figure is None and not v3 and not args.no_figure:
        args.figure = FIGURE
    if args.figure is not None:
        args.figure = args.figure.resolve()

    from chainpipe.solve import solve

    configs = configurations(args.solvers, args.backends, args.variants, args.device_states)
    lines = _header(args)
    rows: list[dict] = []
    body: list[str] = []
    groups = _groups(args)
    for set_name, instances in groups:
        title = (f"`{set_name}` (`--fresh`: drawn again, seeds "
                 f"{', '.join(i.name.rsplit('-s', 1)[1] for i in instances)})"
                 if set_name.startswith("fresh/") else f"`instances/{set_name}/`")
        body += [f"### {title}", "",
                 "| instance | DP T (s) | solver | backend / variant | status | T (s) | bound (s) "
                 "| gap | LP/opt | vars | cons | nnz | arcs | outer | CPU (s) | wall (s) | ok |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for inst in instances:
            ref = solve(inst, "dp", time_limit=max(args.time_limit, args.ref_limit))
            opt = ref.iteration_time if ref.status == "optimal" else None
            for solver, label, options in configs:
                r = run_one(inst, solver, options, args.time_limit, opt, ref.plan,
                            lp=not args.no_lp, cpu_limit=args.cpu_limit)
                r.update(instance=inst.name, set=set_name, ref=str(ref.status.value),
                         optimum=opt, solver=solver, label=label,
                         config=solver if label == "-" else f"{solver} ({label})")
                rows.append(r)
                body.append(
                    f"| {inst.name} | {_fmt(opt)} | {solver} | {label} | {r['status']} | "
                    f"{_fmt(r['T'])} | {_fmt(r['bound'])} | {_fmt(r['gap'], '.2%')} | "
                    f"{_fmt(r['lp_ratio'], '.3f')} | {_fmt(r['vars'], 'd')} | "
                    f"{_fmt(r['cons'], 'd')} | {_fmt(r['nnz'], 'd')} | {r['arcs'] or '-'} | "
                    f"{r['outer'] or '-'} | "
                    f"{r['cpu']:.2f} | {r['wall']:.1f} | "
                    f"{'yes' if r['agrees'] else 'NO'} |")
                print(body[-1], flush=True)
        body.append("")
    names = [g[0] for g in groups]
    earlier = _earlier_rows(args.profile_with, names, rows)
    lines += summary(rows + earlier, names)
    lines += ["Cells: proven / instances with a DP optimum; geometric mean and largest CPU "
              "seconds to proof over the proven ones; mean LP/opt."
              + (" Rows marked * are from earlier runs (" + ", ".join(
                  f"`{p.name}`" for p in args.profile_with) + "), measured at other loads."
                 if earlier else ""), ""]
    if len({r["config"] for r in rows + earlier}) > 1:
        lines += ["Performance profiles of the CPU time to proof (share of the instances "
                  "proven within tau times the best configuration's time):", ""]
        lines += profile_table(rows + earlier)
    if rows and args.figure is not None:
        profile(rows + earlier, args.figure)
        rel = args.figure.relative_to(ROOT / "docs") if args.figure.is_relative_to(
            ROOT / "docs") else Path(os.path.relpath(args.figure, args.out.parent))
        lines += [f"![Performance profiles of the time to proof]({rel.as_posix()})", "",
                  f"*Dolan-More performance profiles (`{_shown(args.figure)}`): for "
                  "each configuration the share of instances it proves within tau times the "
                  "best configuration's CPU time on that instance.*", ""]
    lines += body
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines).rstrip() + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
