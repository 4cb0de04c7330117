"""The ``chainpipe`` command line: parse, call the API, print.

Exit status: 0 the job is done (an instance solved as infeasible included),
2 bad input (one line per problem, naming its JSON path or the option), 1
anything else, 130 interrupted (Ctrl-C). No command writes over a file it
reads: an output pointed at an input is refused before any work.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import reprlib
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__, numba_start
from .instance import OBJECTIVES, SCHEDULES, InstanceError
from .instances import PRESETS
from .instances.generator import SWITCH
from .instances.models import MODELS, model_shape
from .instances.network import check_degrade
from .io import (
    atomic_write,
    instance_to_dict,
    read,
    read_plan_for,
    write,
    write_json,
    write_plan,
)
from .names import unknown_name
from .numeric import jsonable
from .online.catalogue import EXTRA_POLICY_LINES, POLICY_LINES
from .online.presets import PRESETS as SCENARIOS
from .paths import MANIFEST, instance_files, refuse_overwrite, same_file
from .plan import evaluate, idle_devices
from .result import OptionError
from .solve import MAX_THREADS, SOLVERS
from .strict_json import quote

#: exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it
EXIT_INTERRUPTED = 130
FORMATS = ("table", "json")


# --------------------------------------------------------------------------- argument types
def argument_type(convert: Callable[[str], Any], accept: Callable[[Any], bool],
                  rule: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert(text)``, refused in one line unless ``accept`` holds.

    ``accept`` may also raise :class:`ValueError` to refuse a value.
    """

    def parse(text: str):
        try:
            value = convert(text)
            ok = accept(value)
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {rule}, got {reprlib.repr(text)}")
        return value

    return parse


#: ``--time-limit``
seconds = argument_type(float, lambda v: math.isfinite(v) and v >= 0,
                        "a finite number of seconds >= 0")
#: a bound that must leave some time: ``agent serve --idle-timeout``
positive_seconds = argument_type(float, lambda v: math.isfinite(v) and v > 0,
                                 "a finite number of seconds > 0")
#: a count: ``--threads``, ``--microbatches``, ...
positive_int = argument_type(int, lambda v: v >= 1, "an integer >= 1")
#: ``--threads``: 1 to :data:`chainpipe.solve.MAX_THREADS` (what every backend accepts)
thread_count = argument_type(int, lambda v: 1 <= v <= MAX_THREADS,
                             f"an integer from 1 to {MAX_THREADS}")
#: ``solve --seed``: what every backend accepts
seed = argument_type(int, lambda v: 0 <= v < 2**31, "an integer in [0, 2^31)")
#: ``--weight-share``, ``--weight-memory-share`` (zero-bubble what-ifs)
share = argument_type(float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def simulated_schedule(text: str) -> str:
    """``plot --schedule``: one simulated schedule, ``interleaved:V`` included."""
    from .schedule import INTERLEAVED, parse_schedule
    from .schedule import SCHEDULES as SIMULATED

    name = text.strip()
    try:
        parse_schedule(name)
    except ValueError as exc:
        if name.startswith(INTERLEAVED + ":"):
            raise argparse.ArgumentTypeError(str(exc)) from None
        raise argparse.ArgumentTypeError(
            unknown_name("schedule", name, (*SIMULATED, "interleaved:V"))) from None
    return name


def schedule_list(text: str) -> tuple[str, ...]:
    """``evaluate --schedules``: ``all`` (the four plain schedules) or names of simulated
    schedules, comma-separated (``interleaved:V`` included)."""
    from .schedule import SCHEDULES as SIMULATED

    if text == "all":
        return SIMULATED
    return tuple(dict.fromkeys(simulated_schedule(x) for x in text.split(",")))


#: ``generate --degrade``
degrade_factor = argument_type(float, lambda v: check_degrade(v) is None, "a number in (0, 1]")


def name_of(kind: str, known) -> Callable[[str], str]:
    """An argument type accepting one of ``known``; others get the "did you mean" line."""
    known = list(known)

    def check(text: str) -> str:
        if text not in known:
            raise argparse.ArgumentTypeError(unknown_name(kind, text, known))
        return text

    return check


# --------------------------------------------------------------------------- shared steps
def read_instance(path, strict: bool):
    """Read and validate the instance file ``path``, then voice its plausibility warnings.

    Each warning goes to stderr as ``warning: <path>: <json path>: ...``; with
    ``strict`` they are problems instead (:class:`InstanceError`, exit 2).
    """
    from .plausibility import plausibility_warnings

    inst = read(path)
    warnings = [f"{path}: {w}" for w in plausibility_warnings(inst)]
    if strict and warnings:
        raise InstanceError(warnings)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return inst


def log_to_stderr(line: str) -> None:
    """``solve --log``: one progress line on stderr, at once (stdout keeps the result only)."""
    print(line, file=sys.stderr, flush=True)


def solver_rows(infos) -> dict[str, str]:
    """``{name: "exact|heuristic  what it does"}`` for each solver of ``infos``."""
    return {info.name: f"{'exact' if info.exact else 'heuristic':<9} {info.summary}"
            for info in infos}


# --------------------------------------------------------------------------- commands
def cmd_validate(args) -> int:
    """``chainpipe validate INSTANCE_OR_DIR...``: one line per file; exit 2 if any is bad."""
    manifests = [a for a in args.instances if Path(a).name == MANIFEST and Path(a).is_file()]
    rest = [a for a in args.instances if a not in manifests]
    what = "a manifest describes an instance set; it is not an instance"
    if not rest:
        raise InstanceError([f"{m}: {what}: give the set's directory or its instance files"
                             for m in manifests])
    for m in manifests:
        print(f"{m}: skipped ({what})")
    problems, seen = [], set()
    for arg in rest:
        try:  # a directory stands for its instance files; a file is read as it is
            files = instance_files([arg]) if Path(arg).is_dir() else [Path(arg)]
        except InstanceError as exc:
            problems.extend(exc.problems)
            continue
        for path in files:
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            try:
                inst = read_instance(path, args.strict)
            except InstanceError as exc:
                problems.extend(exc.problems)
            else:
                print(f"{path}: valid ({inst.num_layers} layers, {inst.num_datacenters} "
                      f"datacenters, {inst.num_devices} devices)")
    if problems:
        raise InstanceError(problems)
    return 0


def cmd_evaluate(args) -> int:
    """``chainpipe evaluate INSTANCE PLAN``: ``T`` and its breakdown for a plan file."""

    inst = read_instance(args.instance, args.strict)
    plan = plan_for(args, inst)
    ev = evaluate(inst, plan)
    sims = []
    if args.schedules and math.isfinite(ev.iteration_time_s):
        from .schedule import simulate_schedules

        sims = simulate_schedules(inst, plan, args.schedules, weight_share=args.weight_share,
                                  weight_memory_share=args.weight_memory_share)
    if args.format == "json":
        data = ev.to_dict()
        if args.schedules:
            data["schedules"] = [sim.summary() for sim in sims]
        print(json.dumps(jsonable(data), indent=1))
    else:
        text = format_evaluation(inst, ev)
        if sims:
            text += "\n\n" + format_schedules(inst, sims)
        print(text)
    return 0 if ev.feasible else 1


def _bytes(x: float, limit: float) -> str:
    """Memory as GiB (3 decimals), or in bytes when the limit is under 1 MiB (toy instances)."""
    return f"{x / GIB:.3f}" if limit >= 2**20 else f"{x:.6g} B"


def format_schedules(inst, sims) -> str:
    """``evaluate --schedules``: each simulated schedule's makespan (and against the
    instance's own schedule), its lower bound and whether every stage's peak memory fits;
    then the peak memory per device of each stage under each schedule."""
    skipped = [s for s in sims if not hasattr(s, "makespan_s")]
    sims = [s for s in sims if hasattr(s, "makespan_s")]
    if not sims:
        return "\n".join(f"what-if schedules: {s.schedule} inapplicable: {s.reason}"
                         for s in skipped)
    own = next((s for s in sims if s.schedule == inst.training.schedule), sims[0])
    zb = [s for s in sims if s.schedule.startswith("zb")]
    share = ("each layer's weight_grad_share of its backward FLOP (0.5 where not given)"
             if zb and zb[0].weight_share is None
             else f"{zb[0].weight_share:g} of each layer's backward FLOP" if zb else "")
    shares = f"; W = {share}, M_W / M_B {zb[0].weight_memory_share:.4g}" if zb else ""
    lines = [f"what-if schedules: the same plan, blocks and links, replayed (docs/schedule.md)"
             f"{shares}"]
    rows = [("schedule", "makespan s", f"/ {own.schedule}", "lower bound s", "memory")]
    for sim in sims:
        over = [m for m in sim.memory if not m.fits]
        names = ", ".join((f"p{m.pipeline} " if sim.num_pipelines > 1 else "") + f"s{m.stage}"
                          for m in over)
        rows.append((sim.schedule, f"{sim.makespan_s:.6g}",
                     f"{sim.makespan_s / own.makespan_s:.4f}" if own.makespan_s > 0 else "-",
                     f"{sim.lower_bound_s:.6g}",
                     "fits" if not over else f"does not fit on {names}"))
    rows += [(s.schedule, "-", "-", "-", f"inapplicable: {s.reason}") for s in skipped]
    lines += _table(rows)
    unit = "GiB" if max(m.memory_limit_bytes for m in sims[0].memory) >= 2**20 else ""
    head = ("stage", f"limit {unit}".strip()) + tuple(f"{s.schedule} {unit}".strip()
                                                      for s in sims)
    mem = [head]
    for k, m in enumerate(sims[0].memory):
        label = (f"p{m.pipeline} " if sims[0].num_pipelines > 1 else "") + f"s{m.stage}"
        mem.append((label, _bytes(m.memory_limit_bytes, m.memory_limit_bytes))
                   + tuple(_bytes(s.memory[k].memory_bytes, m.memory_limit_bytes)
                           + ("" if s.memory[k].fits else " !") for s in sims))
    lines += ["", "peak memory per device (! does not fit)"] + _table(mem)
    return "\n".join(lines)


def plan_for(args, inst):
    """The plan file ``args.plan`` for ``inst``: refused (exit 2) when written for another
    instance unless ``--force``; its warnings on stderr."""
    plan, warnings = read_plan_for(args.plan, inst, force=getattr(args, "force", False))
    for line in warnings:
        print(line, file=sys.stderr)
    return plan


def cmd_generate(args) -> int:
    """``chainpipe generate --preset NAME | --cluster FILE``: an instance on stdout or in ``-o``."""
    from .instances import generate
    from .instances.cluster_file import generate_for_cluster
    from .instances.generator import check_version, versioned
    from .instances.hf_config import config_path, read_model_config

    # the files it reads: --model-config DIR reads DIR/config.json
    inputs = [args.cluster, args.model_config and config_path(args.model_config)]
    refuse_overwrite({"-o/--output": args.output}, [p for p in inputs if p])
    config_only = {"--seq-len": args.seq_len, "--precision": args.precision,
                   "--model-name": args.model_name}
    cluster_not = {"--seed": args.seed, "--datacenters": args.datacenters,
                   "--gpus-per-dc": args.gpus_per_dc, "--degrade": args.degrade}
    problems = [f"{k}: applies to --model-config only" for k, v in config_only.items()
                if v is not None and not args.model_config]
    if args.model_config and args.model:
        problems.append("--model: give --model or --model-config, not both")
    if args.cluster:
        problems += [f"{k}: has no meaning with --cluster (the cluster file describes the "
                     f"datacenters)" for k, v in cluster_not.items() if v is not None]
        if not (args.model or args.model_config):
            problems.append("--cluster: needs the model, --model-config PATH or --model NAME")
    if problems:
        raise InstanceError(problems)
    model = args.model
    if args.model_config:
        model = read_model_config(args.model_config, seq_len=args.seq_len,
                                  precision=args.precision or "bf16", name=args.model_name)
    common = {"microbatches": args.microbatches, "schedule": args.schedule,
              "parallelism": args.parallelism, "data_parallel": args.data_parallel,
              "tensor_parallel": args.tensor_parallel, "zero": args.zero,
              "microbatch_size": args.microbatch_size, "global_batch": args.global_batch}
    common = {k: v for k, v in common.items() if v is not None}
    v3 = {"objective": args.objective, "pipelines": args.pipelines,
          "sync_period": args.sync_period}
    try:
        if args.cluster:
            if isinstance(model, str):
                model = model_shape(model)
            check_version(3, **v3)
            inst = versioned(generate_for_cluster(args.cluster, model, **common), **v3)
        else:
            overrides = {"model": model, "datacenters": args.datacenters,
                         "gpus_per_dc": args.gpus_per_dc, "degrade": args.degrade}
            inst = generate(args.preset, seed=args.seed or 0, **common, version=3, **v3,
                            **{k: v for k, v in overrides.items() if v is not None})
    except (KeyError, ValueError) as exc:
        if isinstance(exc, InstanceError):
            raise
        raise InstanceError([f"generate: {exc.args[0] if exc.args else exc}"]) from None
    if args.output:
        write(inst, args.output)
        print(f"wrote {args.output}: {inst.name} ({inst.num_layers} layers, "
              f"{inst.num_datacenters} datacenters, {inst.num_devices} devices)", file=sys.stderr)
    else:
        print(json.dumps(instance_to_dict(inst), indent=1))
    return 0


def cmd_export(args) -> int:
    """``chainpipe export INSTANCE PLAN --to FORMAT``: the plan as a framework reads it."""
    from .export import Inexpressible, Unsupported, export

    refuse_overwrite({"-o/--output": args.output, "--nearest-out": args.nearest_out},
                     [args.instance, args.plan])
    if args.csv and args.to != "ranks":
        raise InstanceError([f"--csv: applies to --to ranks only, not {args.to}"])
    if args.module_names and args.to != "torchtitan":
        raise InstanceError([f"--module-names: applies to --to torchtitan only, not {args.to}"])
    inst = read_instance(args.instance, args.strict)
    plan = plan_for(args, inst)
    try:
        text = export(inst, plan, args.to, csv=args.csv, microbatch_size=args.microbatch_size,
                      module_names=args.module_names)
    except Unsupported as exc:
        print(f"chainpipe export: {exc}", file=sys.stderr)
        return 1
    except Inexpressible as exc:
        if exc.nearest is not None and args.nearest_out:
            write_plan(exc.nearest.plan, args.nearest_out, inst)
        print(f"chainpipe export: {exc}", file=sys.stderr)
        return 1
    if args.output:
        atomic_write(args.output, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        print(f"wrote {args.output}: {args.to} for {len(plan.all_stages)} stages", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def solver_options(pairs: list[str] | None) -> dict:
    """``-O KEY=VALUE`` pairs as a dict; a value is JSON if it parses as JSON, else a string."""
    opts = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise InstanceError([f"--option: expected KEY=VALUE, got {quote(pair)}"])
        key, value = pair.split("=", 1)
        try:
            opts[key] = json.loads(value)
        except ValueError:
            opts[key] = value
    return opts


def cmd_solve(args) -> int:
    """``chainpipe solve INSTANCE --solver NAME``: the result, and the plan with ``--plan-out``."""
    from .solve import solve

    options = solver_options(args.option)
    tls = [o for o, v in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                          ("--tls-key", args.tls_key)) if v]
    if tls and not args.agents:
        raise InstanceError([f"{tls[0]}: only with --agents (cdynp across hosts)"])
    model_file = options.get("write_model")
    refuse_overwrite({"--plan-out": args.plan_out,
                      "-O write_model": model_file if isinstance(model_file, str) else None},
                     [p for p in (args.instance, args.agents, args.tls_ca, args.tls_cert,
                                   args.tls_key) if p],
                     {"--trace": args.trace})
    if args.plan_out and isinstance(model_file, str) and same_file(args.plan_out, model_file):
        raise InstanceError([f"-O write_model: {model_file} is also --plan-out; give two files"])
    if args.trace and args.solver != "cdynp":
        raise InstanceError(["--trace: only the cdynp solver exchanges messages"])
    if args.agents:
        from .cli_agents import solve_across_hosts

        return solve_across_hosts(args, options)
    if args.trace:
        options["trace_dir"] = args.trace
    inst = read_instance(args.instance, args.strict)
    try:
        with progress_line(args):
            res = solve(inst, solver=args.solver, time_limit=args.time_limit, seed=args.seed,
                        threads=args.threads, log=log_to_stderr if args.log else None,
                        **options)
    except OptionError as exc:
        raise InstanceError([f"--option: {exc}"]) from None
    if args.plan_out and res.plan is not None:
        write_json(res.plan_document(), args.plan_out)
    elif args.plan_out:
        print(f"--plan-out: no plan (status {res.status}); {args.plan_out} not written",
              file=sys.stderr)
    if args.format == "json":
        print(json.dumps(res.to_dict()))
    else:
        print(format_result(res))
        for line in idle_lines(inst, res.plan):
            print(line)
        if res.plan is not None:
            print()
            print(format_evaluation(inst, evaluate(inst, res.plan)))
    return 1 if res.status == "error" else 0


def progress_line(args):
    """A live line of incumbent, bound and gap on stderr while ``solve`` runs, when stderr is
    a terminal and neither ``--quiet`` nor ``--log`` (which streams the backend's own log)."""
    import contextlib

    from .progress import ProgressLine

    if args.quiet or args.log or not sys.stderr.isatty():
        return contextlib.nullcontext()
    return ProgressLine(sys.stderr, args.solver)


def idle_lines(inst, plan) -> list[str]:
    """``idle            gamma/H100 x 8``: one line per device group the plan leaves
    (partly) unused."""
    if plan is None:
        return []
    return [f"idle            {dc}/{kind} x {idle}" + ("" if idle == count else f" of {count}")
            for dc, kind, idle, count in idle_devices(inst, plan)]



def cmd_group(args) -> int:
    """``chainpipe group INVENTORY --max-groups K [-o cluster.toml]``: devices grouped by
    their measured profile, the capacity lost per DC, and the cluster file."""
    from .grouping import cluster_toml, group_inventory, read_inventory, report_rows
    from .instances.cluster_file import parse_cluster, tomllib

    refuse_overwrite({"-o/--output": args.output}, [args.inventory])
    devices, links = read_inventory(args.inventory)
    if args.link is not None:
        if links is not None:
            raise InstanceError([f"--link: {args.inventory} lists its links already"])
        links = [args.link] * (len({d.dc for d in devices}) - 1)
    dcs = group_inventory(devices, args.max_groups)
    name = args.name or Path(args.inventory).stem
    text = cluster_toml(dcs, links, name=name, dc_latency=args.dc_latency,
                        source=Path(args.inventory).name)
    parse_cluster(tomllib.loads(text), str(args.output or "cluster"))  # generate reads it
    report = report_rows(dcs)
    lines = [json.dumps(jsonable({"max_groups": args.max_groups, "datacenters": report}),
                        indent=1)] if args.format == "json" else _group_table(report)
    if args.output:
        atomic_write(args.output, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        lines.append(f"wrote {args.output}: {sum(len(d.groups) for d in dcs)} groups in "
                     f"{len(dcs)} datacenters (generate --cluster {args.output} ...)")
        print("\n".join(lines))
    else:
        print(text)
        print("\n".join(lines), file=sys.stderr)
    return 0


def _group_table(report: list[dict]) -> list[str]:
    rows = [("datacenter", "devices", "nodes", "groups", "measured TFLOP/s", "grouped TFLOP/s",
             "compute lost", "memory lost")]
    for r in report:
        rows.append((r["datacenter"], str(r["devices"]), str(r["nodes"]), str(r["groups"]),
                     f"{r['measured_flop_per_s'] / 1e12:.6g}",
                     f"{r['grouped_flop_per_s'] / 1e12:.6g}", f"{100 * r['flop_lost']:.2f}%",
                     f"{100 * r['memory_lost']:.2f}%"))
    return _table(rows)


def cmd_replan(args) -> int:
    """``chainpipe replan INSTANCE PLAN NEW_INSTANCE [--horizon N]``: keep the running plan
    or move to the new optimum, at a stated cost."""
    from .replan import format_replan, replan

    refuse_overwrite({"--plan-out": args.plan_out},
                     [args.instance, args.plan, args.new_instance])
    inst = read_instance(args.instance, args.strict)
    new = read_instance(args.new_instance, args.strict)
    plan = plan_for(args, inst)
    try:
        r = replan(inst, plan, new, horizon=args.horizon, solver=args.solver,
                   time_limit=args.time_limit)
    except ValueError as exc:
        raise InstanceError([f"{args.new_instance}: {exc}"]) from None
    if args.plan_out and r.new_plan is not None:
        write_plan(r.new_plan, args.plan_out, new)
    if args.format == "json":
        print(json.dumps(jsonable(r.to_dict()), indent=1))
    else:
        print(format_replan(r))
    if args.plan_out:
        print(f"wrote {args.plan_out}" if r.new_plan is not None else
              f"{args.plan_out}: not written (no new plan)", file=sys.stderr)
    return 0


def cmd_solvers(args) -> int:
    """``chainpipe solvers``: the installed solvers, one line each."""
    from .solve import available_solvers

    for name, row in solver_rows(available_solvers()).items():
        print(f"{name:<14} {row}")
    return 0


def cmd_split(args) -> int:
    """``chainpipe split INSTANCE OUTDIR [--certs]``: the public file and one private file
    per DC, and with ``--certs`` a development CA and a certificate per party."""
    from .solvers.cdynp import split_instance

    outdir = Path(args.outdir)
    refuse_overwrite({}, [args.instance], {"OUTDIR": outdir})
    # nor may a file that split writes there (a link, say) be the input
    for existing in [*outdir.glob("public.json"), *outdir.glob("private-*.json")]:
        refuse_overwrite({"OUTDIR": existing}, [args.instance])
    inst = read_instance(args.instance, strict=False)
    if args.certs:
        from .cli_agents import make_split_certs

        names = [dc.name for dc in inst.datacenters]
        make_split_certs(outdir, names)  # first: it refuses to overwrite certificates
    for p in split_instance(inst, outdir):
        print(p)
    if args.certs:
        print(Path(outdir, "certs"))
    return 0


def cmd_agent(args) -> int:
    """``chainpipe agent serve PRIVATE --public PUBLIC --listen HOST:PORT --tls-...``."""
    from .cli_agents import cmd_agent_serve

    return cmd_agent_serve(args)


def cmd_compare(args) -> int:
    from .compare import cli_compare

    args.solver_options = per_solver_options(args.option)
    return cli_compare(args)


def per_solver_options(pairs: list[str] | None) -> dict:
    """``compare -O SOLVER.KEY=VALUE`` pairs as ``{solver: {key: value}}`` (values as
    :func:`solver_options` reads them)."""
    out: dict = {}
    for pair in pairs or []:
        name, eq, text = pair.partition("=")
        solver, dot, key = name.partition(".")
        if not (eq and dot and solver and key):
            raise InstanceError([f"--option: expected SOLVER.KEY=VALUE, got {quote(pair)}"])
        out.setdefault(solver, {}).update(solver_options([f"{key}={text}"]))
    return out


def cmd_plot(args) -> int:
    from .gantt import cli_plot

    return cli_plot(args)


def cmd_simulate(args) -> int:
    from .online.command import cli_simulate

    return cli_simulate(args)


# --------------------------------------------------------------------------- formatting
def format_result(res) -> str:
    """A :class:`~chainpipe.Result` as the table ``solve`` prints."""
    def num(x, unit="s"):
        return "-" if x is None else f"{x:.6g} {unit}".strip()

    gap = "-" if res.gap is None else f"{100 * res.gap:.4f}%"
    lines = [
        f"instance        {res.instance}",
        f"solver          {res.solver}",
        f"status          {res.status}",
        f"iteration time  {num(res.iteration_time)}",
        f"lower bound     {num(res.lower_bound)}",
        f"gap             {gap}",
        f"solve time      {res.solve_time:.3f} s",
    ]
    if res.devices_used is not None:
        total = "" if res.devices_total is None else f" of {res.devices_total}"
        lines.append(f"devices used    {res.devices_used}{total}")
    if res.message:
        lines.append(f"message         {res.message}")
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


#: bytes a human reads are shown in binary units: 1 GiB = 2**30 bytes (a card sold as
#: "80 GB" holds 80 GiB)
GIB = 2**30


def format_evaluation(inst, ev) -> str:
    """An :class:`~chainpipe.Evaluation` as the stage and boundary tables ``evaluate`` prints.

    Per stage: layers, ``d x t``, its devices (``a/g/0..7`` for a run of indices),
    compute time ``C_s``, microbatches in flight, memory per device and its limit, and
    the gradient synchronisation ``R_s``; then the parts of ``T``, the largest ``R_s``
    (and its stage) and which term paces the iteration: a device, a link, a 1F1B loop
    (its stages and make-up) or the synchronisation. With several pipelines, every row
    names its pipeline, one line per pipeline gives ``T_p`` and its pacing, and one the
    averaging across DCs ``R_X / H``. An infeasible plan gets no breakdown (its times are undefined), only
    ``INFEASIBLE`` and what it breaks, one line each.
    """
    from .plan import devices_label

    if ev.violations:
        return "\n".join([f"INFEASIBLE: the plan breaks {len(ev.violations)} rule(s) of "
                          f"{inst.name}:"] + [f"  {v}" for v in ev.violations])
    # with several pipelines every row says its pipeline first
    multi = len(ev.pipelines) > 1
    pipe = (lambda x: (str(x.pipeline),)) if multi else (lambda x: ())
    rows = [("pipeline",) * multi + ("stage", "layers", "d x t", "devices", "compute s",
                                     "in flight", "memory/device GiB", "limit GiB", "sync s")]
    for st in ev.stages:
        rows.append(pipe(st) + (str(st.index), f"[{st.start}, {st.end})",
                     f"{st.data_parallel}x{st.tensor_parallel}", devices_label(st.devices),
                     f"{st.compute_time_s:.6g}", str(st.in_flight),
                     f"{st.memory_bytes / GIB:.3f}", f"{st.memory_limit_bytes / GIB:.3f}",
                     f"{st.sync_time_s:.6g}"))
    out = _table(rows)
    if ev.boundaries:
        brow = [("pipeline",) * multi + ("after", "bytes", "path", "bandwidth GB/s",
                                         "latency s", "occupancy s")]
        for b in ev.boundaries:
            brow.append(pipe(b) + (str(b.after_stage), f"{b.bytes:.4g}", "-".join(b.path),
                         f"{b.bandwidth_bytes_per_s / 1e9:.4g}", f"{b.latency_s:.4g}",
                         f"{b.occupancy_s:.6g}"))
        out.append("")
        out.extend(_table(brow))
    sync = f"max R_s, {ev.sync}" if ev.sync_s > 0 else "none: every stage has d = 1"
    out.append("")
    out.extend(_pipeline_lines(ev) if multi else [
        f"fill + drain    {ev.fill_drain_s:.6g} s",
        f"steady state    {ev.steady_s:.6g} s  (M - 1 = "
        f"{(ev.pipelines[0].microbatches if ev.pipelines else inst.microbatches) - 1} x "
        f"{ev.bottleneck_s:.6g} s, paced by {ev.bottleneck})"])
    out.append(f"synchronisation {ev.sync_s:.6g} s  ({sync})")
    if multi:
        out.append(f"across DCs      {ev.cross_sync_s / ev.cross_sync_period:.6g} s  (R_X = "
                   f"{ev.cross_sync_s:.6g} s every {ev.cross_sync_period} iteration(s), "
                   f"{ev.cross_sync})")
    paced = f"  (paced by {_pacing(ev)})" if math.isfinite(ev.iteration_time_s) else ""
    out.append(f"iteration time  {ev.iteration_time_s:.6g} s{paced}")
    return "\n".join(out)


def _pipeline_lines(ev) -> list[str]:
    """One line per pipeline of a plan of several: ``T_p``, its parts and what paces it."""
    return [f"pipeline {p.index}      {p.time_s:.6g} s  (M_p = {p.microbatches} on "
            f"{'..'.join(p.datacenters)}: fill + drain {p.fill_drain_s:.6g} s + "
            f"{p.microbatches - 1} x {p.period_s:.6g} s, paced by {p.bottleneck})"
            for p in ev.pipelines]


def _pacing(ev) -> str:
    """Which term paces ``T`` after the fill, in words: a device, a link, a 1F1B loop, the
    synchronisation inside a stage or across DCs."""
    if ev.paced_by == "synchronisation across DCs":
        return "the synchronisation across DCs: R_X / H above the steady state and max R_s"
    if ev.paced_by == "synchronisation":
        return "the synchronisation: max R_s above the steady state"
    return f"a {ev.paced_by}: the steady state above max R_s" if ev.sync_s > 0 else \
        f"a {ev.paced_by}"


# --------------------------------------------------------------------------- parser
class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default (when it has one) and keeps epilogs as written."""

    def _format_action(self, action) -> str:
        if not action.help and action.option_strings and self._has_default(action):
            action = copy.copy(action)  # an option without help text still shows its default
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action) -> str:
        if not self._has_default(action):
            return action.help or ""
        return super()._get_help_string(action)

    @staticmethod
    def _has_default(action) -> bool:
        return not any(action.default is x for x in (None, False, argparse.SUPPRESS))


class Parser(argparse.ArgumentParser):
    """Every sub-command's parser: defaults in ``--help``, a usage error in one line (exit 2)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see '{self.prog} --help')\n")


def listing(title: str, rows: dict[str, str], width: int = 79) -> str:
    """An epilog: ``title:`` then one entry per row, its text wrapped under itself."""
    key = max(map(len, rows))
    lines = [f"{title}:"]
    for name, text in rows.items():
        lines.extend(textwrap.wrap(text, width, initial_indent=f"  {name:<{key}}  ",
                                   subsequent_indent=" " * (key + 4)))
    return "\n".join(lines)


def _tls_arguments(p) -> None:
    p.add_argument("--tls-ca", metavar="CA", help="the agreed CA's certificate (PEM)")
    p.add_argument("--tls-cert", metavar="CERT", help="this party's certificate (PEM)")
    p.add_argument("--tls-key", metavar="KEY", help="this party's private key (PEM)")


def _force_argument(p) -> None:
    p.add_argument("--force", action="store_true",
                   help="use a plan written for another instance (its file names the instance "
                        "by SHA-256; without --force such a plan is refused, exit 2)")


def _add_validate(sub) -> None:
    """The ``validate`` sub-command."""
    s = sub.add_parser(
        "validate", help="check instance files (exit 0 if all valid)",
        description="Check instance files and directories; print one line per valid file, one "
                    "line per problem on stderr (exit 2 if any), and a warning for each value "
                    "that is valid but implausible (a unit slip such as memory_bytes: 80).",
        epilog=f"A directory stands for its *.json files except {MANIFEST}. A {MANIFEST} "
               "describes an instance set (the files, their presets and seeds); it is not an "
               "instance: given among other files (as `validate instances/medium/*.json` does) "
               "it is skipped with a note, given alone it is an error (exit 2).")
    s.add_argument("instances", nargs="+", metavar="INSTANCE_OR_DIR",
                   help="instance files (JSON) and directories of them")
    s.add_argument("--strict", action="store_true",
                   help="treat plausibility warnings as errors (exit 2)")
    s.set_defaults(func=cmd_validate)


def _add_solve(sub) -> None:
    """The ``solve`` sub-command."""
    s = sub.add_parser(
        "solve", help="solve an instance with one solver",
        epilog=listing("solvers (exact ones prove optimality; `chainpipe solvers` lists the "
                       "installed ones)",
                       solver_rows(SOLVERS.values())))
    s.add_argument("instance", metavar="INSTANCE", help="an instance file (JSON)")
    s.add_argument("--solver", default="dp", type=name_of("solver", SOLVERS),
                   choices=list(SOLVERS), metavar="NAME", help="one of %(choices)s")
    s.add_argument("--time-limit", type=seconds, metavar="SECONDS",
                   help="for the whole solve, building tables and models included "
                        "(default: no limit)")
    s.add_argument("--seed", type=seed, default=0, metavar="N",
                   help="random seed of CP-SAT and the MIP backends")
    s.add_argument("--threads", type=thread_count, default=1, metavar="N",
                   help="threads a backend may use")
    s.add_argument("--format", choices=FORMATS, default="table", help="output: %(choices)s")
    s.add_argument("--plan-out", metavar="FILE",
                   help="also write the plan as JSON (never over the instance)")
    s.add_argument("--trace", metavar="DIR",
                   help="cdynp: write every message exchanged there, one file each")
    s.add_argument("--option", "-O", action="append", metavar="KEY=VALUE",
                   help="solver option, e.g. -O backend=cbc -O epsilon=0.01 (repeatable); "
                        "-O write_model=FILE.pbtxt (or .txt, .pb) writes cpsat's model, the "
                        "monolithic first round, as a CP-SAT CpModelProto")
    s.add_argument("--log", "--verbose", action="store_true",
                   help="stream progress on stderr: the DP's trials, the backend's own log "
                        "(HiGHS, CBC, CP-SAT); stdout keeps the result alone")
    s.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line (on a terminal, a search shows its elapsed time, "
                        "incumbent, bound and gap on stderr by default)")
    s.add_argument("--strict", action="store_true",
                   help="treat the instance's plausibility warnings as errors (exit 2)")
    s.add_argument("--agents", metavar="AGENTS",
                   help="cdynp across hosts: INSTANCE is a public.json and AGENTS a JSON file "
                        "{\"<dc>\": \"host:port\", ...} of the DCs' agents; needs --tls-*")
    _tls_arguments(s)
    s.set_defaults(func=cmd_solve)


def _add_evaluate(sub) -> None:
    """The ``evaluate`` sub-command."""
    s = sub.add_parser("evaluate", help="iteration time and breakdown of a plan")
    s.add_argument("instance", metavar="INSTANCE", help="an instance file (JSON)")
    s.add_argument("plan", metavar="PLAN", help="a plan file, or a `solve --format json` result")
    s.add_argument("--format", choices=FORMATS, default="table", help="output: %(choices)s")
    s.add_argument("--strict", action="store_true",
                   help="treat the instance's plausibility warnings as errors (exit 2)")
    s.add_argument("--schedules", type=schedule_list, metavar="LIST|all",
                   help="also replay the plan under these schedules (1f1b, gpipe, zb-h1, "
                        "zb-h2, interleaved:V with V virtual stages per device, "
                        "comma-separated, or all: the first four): each one's simulated "
                        "makespan, lower bound and peak memory per stage, and whether the "
                        "plan fits")
    _what_if_arguments(s)
    _force_argument(s)
    s.set_defaults(func=cmd_evaluate)


def _what_if_arguments(p) -> None:
    from .schedule import DEFAULT_WEIGHT_MEMORY_SHARE

    p.add_argument("--weight-share", type=share, metavar="X",
                   help="zero-bubble schedules: share of every layer's backward FLOP that is "
                        "the weight gradient W (default: each layer's weight_grad_share, 0.5 "
                        "where not given: B = W, two matmuls of the forward's size)")
    p.add_argument("--weight-memory-share", type=share, default=DEFAULT_WEIGHT_MEMORY_SHARE,
                   metavar="X",
                   help="zero-bubble schedules: memory a microbatch holds between its B and "
                        "its W, as a share of its stash (M_W / M_B = 32/34, the paper's Table 1 "
                        "without stored attention scores)")


def _add_generate(sub) -> None:
    """The ``generate`` sub-command."""
    s = sub.add_parser("generate", help="generate an instance from a preset or a cluster file",
                       epilog=listing("presets", PRESETS) + "\n\n" + textwrap.fill(
                           "With --cluster FILE (TOML, figures in units such as '80 GiB', "
                           "'400 Gbit/s', '5 us', '312 TFLOP/s'; see docs/launch.md) the "
                           "datacenters come from the file instead of a preset; --model-config "
                           "reads a model's config.json (llama, mistral, qwen2, gpt2, gpt_neox).",
                           79))
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--preset", type=name_of("preset", PRESETS), choices=list(PRESETS),
                       metavar="NAME", help="one of %(choices)s")
    where.add_argument("--cluster", metavar="FILE",
                       help="a cluster file (TOML) in human units, instead of a preset")
    s.add_argument("--seed", type=int, metavar="N",
                   help="the same seed gives the same instance (default: 0)")
    s.add_argument("-o", "--output", metavar="FILE", help="write there (default: stdout)")
    s.add_argument("--model-config", metavar="PATH",
                   help="the model from its Hugging Face-style config.json (or a directory "
                        "holding one), replacing the preset's model")
    s.add_argument("--seq-len", type=positive_int, metavar="N",
                   help="--model-config: tokens per sequence (default: the model's context "
                        "length)")
    s.add_argument("--precision", choices=("bf16", "fp16", "fp32"),
                   help="--model-config: training precision (default: bf16)")
    s.add_argument("--model-name", metavar="NAME",
                   help="--model-config: the model's name (default: its directory's)")
    s.add_argument("--microbatch-size", type=positive_int, metavar="B",
                   help="sequences per microbatch, written as training.microbatch_size; every "
                        "stage's data-parallel width must divide it (default: the least common "
                        "multiple of the data-parallel widths)")
    s.add_argument("--global-batch", type=positive_int, metavar="G",
                   help="sequences per iteration: M = G / B (B must divide G)")
    s.add_argument("--model", type=name_of("model", MODELS), choices=list(MODELS),
                   metavar="NAME", help="the model (default: drawn by the preset): %(choices)s")
    s.add_argument("--datacenters", type=positive_int, metavar="N",
                   help="datacenters in the chain")
    s.add_argument("--gpus-per-dc", type=positive_int, metavar="N", help="GPUs per datacenter")
    s.add_argument("--microbatches", type=positive_int, metavar="M",
                   help="microbatches per iteration")
    s.add_argument("--schedule", choices=SCHEDULES,
                   help="pipeline schedule (default: the preset's): %(choices)s")
    s.add_argument("--degrade", type=degrade_factor, metavar="F",
                   help="degraded network: inter-DC bandwidth times F, latency divided by F, "
                        "0 < F <= 1")
    s.add_argument("--parallelism", choices=SWITCH,
                   help="hybrid parallelism (format version 2): on adds node sizes, node "
                        "bandwidths, tensor-parallel all-reduce bytes and the lists below "
                        "(default 1,2,4,8 with ZeRO-1); off gives the version-1 instance "
                        "(default: the preset's, on for the hybrid presets)")
    s.add_argument("--data-parallel", metavar="LIST", help="data-parallel widths, e.g. 1,2,4,8",
                   type=argument_type(lambda v: tuple(int(x) for x in v.split(",")),
                                      lambda v: all(1 <= x < 2**31 for x in v)
                                      and len(set(v)) == len(v),
                                      "comma-separated integers >= 1 without repeats"))
    s.add_argument("--tensor-parallel", metavar="LIST",
                   help="tensor-parallel degrees, e.g. 1,2,4,8",
                   type=argument_type(lambda v: tuple(int(x) for x in v.split(",")),
                                      lambda v: all(1 <= x < 2**31 and x & (x - 1) == 0
                                                    for x in v) and len(set(v)) == len(v),
                                      "comma-separated powers of two without repeats"))
    s.add_argument("--zero", action=argparse.BooleanOptionalAction, default=None,
                   help="ZeRO-1: shard the optimizer state over a stage's replicas")
    s.add_argument("--pipelines", metavar="LIST",
                   help="pipeline counts a plan may run, each on its own range of DCs "
                        "(parallelism.pipelines), e.g. 1,2,4; each at most the DCs and M "
                        "(default: the powers of two up to both, at most 8)",
                   type=argument_type(lambda v: tuple(int(x) for x in v.split(",")),
                                      lambda v: all(1 <= x < 2**31 for x in v)
                                      and len(set(v)) == len(v),
                                      "comma-separated integers >= 1 without repeats"))
    s.add_argument("--sync-period", type=positive_int, metavar="H",
                   help="iterations between two gradient averagings across pipelines "
                        "(training.pipeline_sync_period; default: 1, synchronous)")
    s.add_argument("--objective", choices=OBJECTIVES,
                   help="what T is (training.objective): the schedule's own period, or the "
                        "classic sum + (M - 1) max of format version 2 (default: period)")
    s.set_defaults(func=cmd_generate)


def _add_split(sub) -> None:
    """The ``split`` sub-command."""
    s = sub.add_parser(
        "split", help="split an instance into public.json and one private file per DC",
        epilog="OUTDIR may not hold the instance: split refuses to write beside its input.")
    s.add_argument("instance", metavar="INSTANCE", help="an instance file (JSON)")
    s.add_argument("outdir", metavar="OUTDIR",
                   help="where to write public.json and private-NN-<dc>.json")
    s.add_argument("--certs", action="store_true",
                   help="also write a development CA and a key and certificate per party "
                        "(each DC, and 'owner') in OUTDIR/certs, for agents across hosts")
    s.set_defaults(func=cmd_split)


def _add_agent(sub) -> None:
    """The ``agent`` sub-command."""
    s = sub.add_parser("agent", help="run one DC's CDynP agent (across hosts, over TLS)")
    agent_sub = s.add_subparsers(dest="agent_command", required=True, metavar="ACTION")
    a = agent_sub.add_parser(
        "serve", help="serve one DC's agent until SIGINT or SIGTERM",
        epilog="Prints 'agent DC: listening on HOST:PORT' once it listens; logs every run "
               "and every refused connection or message on stderr.")
    a.add_argument("private", metavar="PRIVATE", help="this DC's private-NN-<dc>.json")
    a.add_argument("--public", required=True, metavar="PUBLIC", help="the public.json")
    a.add_argument("--listen", required=True, metavar="HOST:PORT",
                   help="address to listen on (port 0: any free port)")
    _tls_arguments(a)
    a.add_argument("--peer-timeout", type=seconds, default=600.0, metavar="SECONDS",
                   help="how long a run without a time limit waits for a neighbour's message")
    a.add_argument("--idle-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                   help="how long a connection may stay open between two requests before "
                        "this agent closes it (default 30)")
    a.add_argument("--no-trace", action="store_true",
                   help="refuse runs whose owner traces (it would receive this DC's messages)")
    a.add_argument("--no-prefix-bound", action="store_true",
                   help="send null in the prefix pass, whatever the owner asks: the DCs "
                        "downstream learn no bound on this DC's compute (and search more)")
    a.set_defaults(func=cmd_agent)


def _add_export(sub) -> None:
    """The ``export`` sub-command."""
    s = sub.add_parser(
        "export", help="write a plan as a training framework reads it",
        description=textwrap.fill(
            "Write a plan for a training framework: ranks (each global rank's device, stage, "
            "data- and tensor-parallel rank and layers; JSON, or CSV), megatron (Megatron-Core "
            "arguments with --pipeline-model-parallel-layout) or torchtitan (a job "
            "configuration with each stage's modules). See docs/launch.md.", 79),
        epilog=textwrap.fill(
            "megatron and torchtitan express the plans whose stages share one data-parallel "
            "width and one tensor-parallel degree; for another plan export exits 1 with one "
            "line naming the nearest plan they express and its T (--nearest-out writes it).",
            79))
    s.add_argument("instance", metavar="INSTANCE", help="an instance file (JSON)")
    s.add_argument("plan", metavar="PLAN", help="a plan file, or a `solve --format json` result")
    s.add_argument("--to", required=True, choices=("ranks", "megatron", "torchtitan"),
                   help="the format: %(choices)s")
    s.add_argument("-o", "--output", metavar="FILE", help="write there (default: stdout)")
    s.add_argument("--csv", action="store_true", help="ranks: CSV instead of JSON")
    s.add_argument("--nearest-out", metavar="FILE",
                   help="when the format cannot express the plan, write the nearest plan it "
                        "can express there")
    s.add_argument("--strict", action="store_true",
                   help="treat the instance's plausibility warnings as errors (exit 2)")
    s.add_argument("--microbatch-size", type=positive_int, metavar="B",
                   help="sequences per microbatch, for an instance that does not state "
                        "training.microbatch_size (megatron and torchtitan need it)")
    s.add_argument("--module-names", choices=("llama",),
                   help="torchtitan: write the Llama-style module names (tok_embeddings, "
                        "layers.<i>, norm, output) for a model not recognised as a Llama, "
                        "Mistral or Qwen2 model (refused without it)")
    _force_argument(s)
    s.set_defaults(func=cmd_export)


def _add_compare(sub) -> None:
    """The ``compare`` sub-command."""
    s = sub.add_parser("compare", help="run several solvers on instances and compare them")
    s.add_argument("inputs", nargs="+", metavar="INSTANCE_OR_DIR")
    s.add_argument("--solvers", required=True,
                   help="comma-separated solver names, or 'all' for every installed solver")
    s.add_argument("--time-limit", type=seconds, default=60.0, metavar="S",
                   help="seconds per run; a run still going after the limit plus "
                        "max(5 s, 20%%) is killed and recorded no_solution")
    s.add_argument("--out", required=True, metavar="DIR")
    s.add_argument("--seeds", type=positive_int, default=1, metavar="N")
    s.add_argument("--threads", type=thread_count, default=1, metavar="N")
    s.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                   help="runs at once on this machine (at most 1024)")
    s.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
    s.add_argument("--option", "-O", action="append", metavar="SOLVER.KEY=VALUE",
                   help="an option of one solver's runs, e.g. -O dp.scheduler=tcp://host:8786 "
                        "(dp's trial bounds as tasks of that Dask cluster) or "
                        "-O ilp-path.backend=cbc (repeatable)")
    s.add_argument("--skip-invalid", action="store_true",
                   help="run the valid instances and list the invalid files (default: refuse all)")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    s.set_defaults(func=cmd_compare)


def _add_plot(sub) -> None:
    """The ``plot`` sub-command."""
    s = sub.add_parser("plot", help="draw a plan's pipeline as a Gantt chart")
    s.add_argument("instance", metavar="INSTANCE")
    s.add_argument("plan", metavar="PLAN")
    s.add_argument("-o", "--output", required=True, metavar="PNG",
                   help="the chart (.png, .svg or .pdf); the only file written unless --data")
    s.add_argument("--data", metavar="FILE",
                   help="also write the simulated schedule, every block (.json or .csv)")
    s.add_argument("--microbatches", default="16", metavar="N|all",
                   help="draw the first N microbatches in full colour on the time they "
                        "occupy, or all of them over the whole iteration (default: %(default)s)")
    s.add_argument("--links", choices=["auto", "all", "inter", "none"], default="auto",
                   help="link rows: all, inter-DC only, none, or auto (all up to 16 stages, "
                        "inter-DC beyond; default: %(default)s)")
    s.add_argument("--schedule", type=simulated_schedule, metavar="NAME",
                   help="replay this schedule instead of the instance's: 1f1b, gpipe, zb-h1, "
                        "zb-h2 or interleaved:V (a what-if; T stays the cost model's)")
    _what_if_arguments(s)
    _force_argument(s)
    s.set_defaults(func=cmd_plot)


def _add_simulate(sub) -> None:
    """The ``simulate`` sub-command."""
    s = sub.add_parser(
        "simulate", help="online multi-job simulation of placement policies on a metro network",
        epilog="Writes DIR/jobs.csv, summary.csv, summary.md, utilisation.csv and two PNG "
               "figures; the same scenario and seed give the same files (docs/online.md).")
    s.add_argument("scenario", nargs="?", metavar="SCENARIO", help="a scenario file (JSON)")
    s.add_argument("--preset", metavar="NAME",
                   help="a built-in scenario instead of a file: one of "
                        f"{', '.join(SCENARIOS)}; 'list' prints them with a line each")
    s.add_argument("--policies", metavar="A,B,C",
                   help="comma-separated policies (default: all but the last): "
                        + "; ".join(f"{k}: {v}" for k, v in
                                    {**POLICY_LINES, **EXTRA_POLICY_LINES}.items()))
    s.add_argument("--seed", type=seed, default=None, metavar="N",
                   help="random seed of the job stream and the background traffic "
                        "(default: the scenario's)")
    s.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="job requests in the stream, at most 100000 (default: the "
                        "scenario's)")
    s.add_argument("--out", metavar="DIR", help="output directory (required to simulate)")
    s.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: only when stderr is a terminal)")
    s.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bar and no summary on stdout")
    s.set_defaults(func=cmd_simulate)


def link_table(text: str) -> dict:
    """``group --link``: ``bandwidth=100 Gbit/s,distance=40 km`` as a cluster file's link."""
    out = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("bandwidth", "latency", "distance") or not value.strip():
            raise argparse.ArgumentTypeError(
                f"must be bandwidth=QUANTITY with latency=QUANTITY or distance=QUANTITY, "
                f"comma-separated, got {reprlib.repr(text)}")
        out[key] = value.strip()
    if "bandwidth" not in out:
        raise argparse.ArgumentTypeError(f"names no bandwidth: {reprlib.repr(text)}")
    return out


def _add_group(sub) -> None:
    """The ``group`` sub-command."""
    s = sub.add_parser(
        "group", help="group measured devices by profile into a cluster file",
        description="Form at most K device groups per datacenter from an inventory of "
                    "measured devices (CSV with a header row, or JSON), each group of whole "
                    "nodes priced by its slowest member, chosen to lose the least compute "
                    "capacity (an exact DP on the nodes sorted by rate). Prints the capacity "
                    "lost per datacenter and writes the cluster file that `generate "
                    "--cluster` reads. Inventory fields: dc, node, type, flop_per_s "
                    "(sustained), memory_bytes (free), node_bandwidth_bytes_per_s, "
                    "nic_bandwidth_bytes_per_s.")
    s.add_argument("inventory", metavar="INVENTORY", help="the devices (.csv or .json)")
    s.add_argument("--max-groups", type=positive_int, required=True, metavar="K",
                   help="at most this many groups per datacenter")
    s.add_argument("-o", "--output", metavar="FILE",
                   help="write the cluster file there (default: stdout, the report on stderr)")
    s.add_argument("--link", type=link_table, metavar="SPEC",
                   help="every chain link, when the inventory lists none: "
                        "'bandwidth=100 Gbit/s,distance=40 km' (or latency=...)")
    s.add_argument("--dc-latency", default="5 us", metavar="QUANTITY",
                   help="latency of each datacenter's own link")
    s.add_argument("--name", metavar="NAME", help="the cluster's name (default: the file's stem)")
    s.add_argument("--format", choices=FORMATS, default="table", help="report: %(choices)s")
    s.set_defaults(func=cmd_group)


def _add_replan(sub) -> None:
    """The ``replan`` sub-command."""
    from .replan import DEFAULT_HORIZON

    s = sub.add_parser(
        "replan", help="keep a running plan on a changed network, or move at a stated cost",
        description="The new optimum on NEW_INSTANCE (changed links or devices, the same "
                    "model), the old plan re-evaluated there (or why it no longer runs), the "
                    "cost of moving (the parameter and optimizer state of every layer whose "
                    "devices change, over the new instance's links), and the decision: switch "
                    "when the time saved over the horizon exceeds the move.")
    s.add_argument("instance", metavar="INSTANCE", help="the instance the plan was made for")
    s.add_argument("plan", metavar="PLAN", help="the running plan")
    s.add_argument("new_instance", metavar="NEW_INSTANCE", help="the changed instance")
    s.add_argument("--horizon", type=positive_int, default=DEFAULT_HORIZON, metavar="N",
                   help="iterations the saving is counted over")
    s.add_argument("--solver", default="dp", type=name_of("solver", SOLVERS),
                   metavar="NAME", help="the solver of the new plan")
    s.add_argument("--time-limit", type=seconds, metavar="SECONDS",
                   help="seconds for the new solve (default: none)")
    s.add_argument("--format", choices=FORMATS, default="table", help="output: %(choices)s")
    s.add_argument("--plan-out", metavar="FILE", help="also write the new plan there")
    s.add_argument("--strict", action="store_true",
                   help="treat the instances' plausibility warnings as errors (exit 2)")
    _force_argument(s)
    s.set_defaults(func=cmd_replan)


def _add_solvers(sub) -> None:
    """The ``solvers`` sub-command."""
    s = sub.add_parser("solvers", help="list the installed solvers, one line each")
    s.set_defaults(func=cmd_solvers)


def build_parser() -> argparse.ArgumentParser:
    """The ``chainpipe`` parser with every sub-command."""
    p = Parser(
        prog="chainpipe",
        description="Partition a training pipeline over the data centers of a MAN chain.",
        epilog="Exit status: 0 done (an instance solved as infeasible included), 2 bad input "
               "(one line per problem), 1 any other failure, 130 interrupted.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_validate(sub)
    _add_solve(sub)
    _add_evaluate(sub)
    _add_generate(sub)
    _add_split(sub)
    _add_agent(sub)
    _add_export(sub)
    _add_compare(sub)
    _add_plot(sub)
    _add_simulate(sub)
    _add_group(sub)
    _add_replan(sub)
    _add_solvers(sub)
    return p


def stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``chainpipe ... | head``).

    A broken pipe elsewhere (a solver's child process) is a failure; only this one is the
    reader's choice and ends the command quietly.
    """
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows) or no real stdout
        return True


def _one_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def main(argv: list[str] | None = None) -> int:
    """Run one ``chainpipe`` command; returns its exit status (see the module docstring)."""
    numba_start.own_process()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error, already printed
            return 0 if exc.code is None else int(exc.code)
        return args.func(args)
    except InstanceError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        if not stdout_closed():
            print(_one_line(f"chainpipe: {type(exc).__name__}: {exc}"), file=sys.stderr)
            return 1
        # the reader went away: stop quietly; point stdout at devnull so that the
        # interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, RuntimeError, ValueError, ImportError) as exc:
        print(_one_line(f"chainpipe: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 1
    except Exception as exc:
        print(_one_line(f"chainpipe: internal error: {type(exc).__name__}: {exc}"),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["build_parser", "format_evaluation", "format_result", "main"]
