"""The ``chainpipe`` command line (``shared/spec/cli.md``): parse, call the API, print.

Exit status: 0 the job is done (an instance solved as infeasible included),
2 bad input (one line per problem, naming its JSON path), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .instance import InstanceError


class CommandError(Exception):
    """A failure that is not bad input: exit 1 with this one-line reason."""


# --------------------------------------------------------------------------- commands
def cmd_validate(args) -> int:
    from .io import read

    problems = []
    for path in args.instances:
        try:
            inst = read(path)
        except InstanceError as exc:
            problems.extend(exc.problems)
        else:
            print(f"{path}: valid ({inst.num_layers} layers, {inst.num_datacenters} datacenters, "
                  f"{inst.num_devices} devices)")
    if problems:
        raise InstanceError(problems)
    return 0


def cmd_evaluate(args) -> int:
    from .io import read, read_plan
    from .plan import evaluate

    inst = read(args.instance)
    plan = read_plan(args.plan)
    ev = evaluate(inst, plan)
    if args.format == "json":
        from .numeric import jsonable

        print(json.dumps(jsonable(ev.to_dict()), indent=1))
    else:
        print(format_evaluation(inst, ev))
    return 0


def cmd_generate(args) -> int:
    from .instances import generate
    from .io import instance_to_dict, write

    overrides = {
        k: v
        for k, v in {
            "model": args.model,
            "datacenters": args.datacenters,
            "gpus_per_dc": args.gpus_per_dc,
            "microbatches": args.microbatches,
            "schedule": args.schedule,
            "degrade": args.degrade,
        }.items()
        if v is not None
    }
    try:
        inst = generate(args.preset, seed=args.seed, **overrides)
    except (KeyError, ValueError) as exc:
        raise InstanceError([f"--preset/options: {exc.args[0] if exc.args else exc}"]) from None
    if args.output:
        write(inst, args.output)
        print(f"wrote {args.output}: {inst.name} ({inst.num_layers} layers, "
              f"{inst.num_datacenters} datacenters, {inst.num_devices} devices)", file=sys.stderr)
    else:
        print(json.dumps(instance_to_dict(inst), indent=1))
    return 0


def _solver_options(pairs: list[str]) -> dict:
    opts = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise InstanceError([f"--option: expected KEY=VALUE, got {pair!r}"])
        key, value = pair.split("=", 1)
        try:
            opts[key] = json.loads(value)
        except ValueError:
            opts[key] = value
    return opts


def cmd_solve(args) -> int:
    from .io import read, write_plan
    from .plan import evaluate
    from .result import OptionError
    from .solve import SOLVERS, solve

    inst = read(args.instance)
    if args.solver not in SOLVERS:
        raise InstanceError([f"--solver: unknown solver {args.solver!r}; known: "
                             f"{', '.join(SOLVERS)}"])
    options = _solver_options(args.option)
    if args.trace:
        if args.solver != "cdynp":
            raise InstanceError(["--trace: only the cdynp solver exchanges messages"])
        options["trace_dir"] = args.trace
    try:
        res = solve(inst, solver=args.solver, time_limit=args.time_limit, seed=args.seed,
                    threads=args.threads, **options)
    except OptionError as exc:
        raise InstanceError([f"--option: {exc}"]) from None
    if args.plan_out and res.plan is not None:
        write_plan(res.plan, args.plan_out)
    if args.format == "json":
        print(json.dumps(res.to_dict()))
    else:
        print(format_result(res))
        if res.plan is not None:
            print()
            print(format_evaluation(inst, evaluate(inst, res.plan)))
    return 1 if res.status == "error" else 0


def cmd_solvers(args) -> int:
    from .solve import available_solvers

    for info in available_solvers():
        kind = "exact" if info.exact else "heuristic"
        print(f"{info.name:<14} {kind:<9} {info.summary}")
    return 0


def cmd_split(args) -> int:
    from .io import read
    from .solvers.cdynp import split_instance

    inst = read(args.instance)
    paths = split_instance(inst, args.outdir)
    for p in paths:
        print(p)
    return 0


def cmd_compare(args) -> int:
    from .compare import cli_compare

    return cli_compare(args)


def cmd_plot(args) -> int:
    from .gantt import cli_plot

    return cli_plot(args)


# --------------------------------------------------------------------------- formatting
def format_result(res) -> str:
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
    if res.message:
        lines.append(f"message         {res.message}")
    return "\n".join(lines)


def format_evaluation(inst, ev) -> str:
    rows = [("stage", "layers", "device", "compute s", "in flight", "memory GB", "limit GB")]
    for st in ev.stages:
        rows.append((str(st.index), f"[{st.start}, {st.end})", st.device,
                     f"{st.compute_time_s:.6g}", str(st.in_flight),
                     f"{st.memory_bytes / 1e9:.3f}", f"{st.memory_limit_bytes / 1e9:.3f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if ev.boundaries:
        brow = [("after", "bytes", "path", "bandwidth GB/s", "latency s", "occupancy s")]
        for b in ev.boundaries:
            brow.append((str(b.after_stage), f"{b.bytes:.4g}", "-".join(b.path),
                         f"{b.bandwidth_bytes_per_s / 1e9:.4g}", f"{b.latency_s:.4g}",
                         f"{b.occupancy_s:.6g}"))
        bw = [max(len(r[i]) for r in brow) for i in range(len(brow[0]))]
        out.append("")
        out.extend("  ".join(c.ljust(w) for c, w in zip(r, bw)).rstrip() for r in brow)
    out.append("")
    out.append(f"fill + drain    {ev.fill_drain_s:.6g} s")
    out.append(f"steady state    {ev.steady_s:.6g} s  (M - 1 = {inst.microbatches - 1} x "
               f"{ev.bottleneck_s:.6g} s, paced by {ev.bottleneck})")
    out.append(f"iteration time  {ev.iteration_time_s:.6g} s")
    if ev.violations:
        out.append("INFEASIBLE:")
        out.extend(f"  {v}" for v in ev.violations)
    return "\n".join(out)


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chainpipe",
        description="Partition a training pipeline over the data centers of a MAN chain.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("validate", help="check instance files (exit 0 if all valid)")
    s.add_argument("instances", nargs="+", metavar="INSTANCE")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("solve", help="solve an instance with one solver")
    s.add_argument("instance", metavar="INSTANCE")
    s.add_argument("--solver", default="dp", help="solver name (see `chainpipe solvers`)")
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.add_argument("--plan-out", metavar="FILE", help="write the plan as JSON")
    s.add_argument("--trace", metavar="DIR", help="cdynp: write every message exchanged")
    s.add_argument("--option", "-O", action="append", metavar="KEY=VALUE",
                   help="solver option, e.g. -O backend=cbc -O epsilon=0.01 (repeatable)")
    s.set_defaults(func=cmd_solve)

    s = sub.add_parser("evaluate", help="iteration time and breakdown of a plan")
    s.add_argument("instance", metavar="INSTANCE")
    s.add_argument("plan", metavar="PLAN")
    s.add_argument("--format", choices=("table", "json"), default="table")
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("generate", help="generate an instance from a preset")
    s.add_argument("--preset", required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("-o", "--output", metavar="FILE")
    s.add_argument("--model", help="model preset name, e.g. gpt3-13b, llama2-70b")
    s.add_argument("--datacenters", type=int, help="number of datacenters in the chain")
    s.add_argument("--gpus-per-dc", type=int, help="GPUs per datacenter")
    s.add_argument("--microbatches", type=int)
    s.add_argument("--schedule", choices=("1f1b", "gpipe"))
    s.add_argument("--degrade", type=float,
                   help="degraded network: inter-DC bandwidth times F, latency divided by F")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("split", help="split an instance into public.json and one private file per DC")
    s.add_argument("instance", metavar="INSTANCE")
    s.add_argument("outdir", metavar="OUTDIR")
    s.set_defaults(func=cmd_split)

    s = sub.add_parser("compare", help="run several solvers on instances and compare them")
    s.add_argument("inputs", nargs="+", metavar="INSTANCE_OR_DIR")
    s.add_argument("--solvers", required=True, help="comma-separated solver names")
    s.add_argument("--time-limit", type=float, default=60.0, metavar="S")
    s.add_argument("--out", required=True, metavar="DIR")
    s.add_argument("--seeds", type=int, default=1, metavar="N")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--jobs", type=int, default=1, help="runs at once on this machine")
    s.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
    s.set_defaults(func=cmd_compare)

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
    s.set_defaults(func=cmd_plot)

    s = sub.add_parser("solvers", help="list solver names")
    s.set_defaults(func=cmd_solvers)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InstanceError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # the reader went away (``chainpipe solvers | head``): stop quietly; point stdout
        # at devnull so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (CommandError, OSError, RuntimeError, ValueError, ImportError) as exc:
        print(f"chainpipe: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"chainpipe: internal error: {type(exc).__name__}: {exc}".splitlines()[0],
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["build_parser", "format_evaluation", "format_result", "main"]
