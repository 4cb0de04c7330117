"""``chainpipe simulate``: run policies on a scenario and write the report (``docs/online.md``)."""

from __future__ import annotations

import sys
from pathlib import Path

from tqdm import tqdm

from ..instance import InstanceError
from ..names import unknown_name
from ..paths import foreign_entries, inside, refuse_overwrite
from .catalogue import ALL_POLICIES, POLICIES
from .jobs import job_stream
from .network import Network
from .offers import Planner
from .presets import PRESETS, preset
from .report import OUTPUT_FILES, metrics, write_outputs
from .scenario import Scenario, read_scenario
from .simulator import Run, make_policy, simulate


def run_policies(scenario: Scenario, policies, seed: int, progress: bool = False) -> list[Run]:
    """Simulate each policy on ``scenario`` with ``seed``: the same jobs and traffic for all.

    Parameters
    ----------
    scenario : Scenario
    policies : sequence of str
        Names from :data:`~chainpipe.online.policies.POLICIES`.
    seed : int
    progress : bool
        Show a progress bar on stderr (one step per job resolved).

    Returns
    -------
    list of Run
        In the order of ``policies``.
    """
    network = Network(scenario)
    planner = Planner(network, scenario.planning)
    jobs = job_stream(scenario, seed)
    runs = []
    with tqdm(total=len(jobs) * len(policies), unit="job", file=sys.stderr,
              disable=not progress, dynamic_ncols=True, leave=False) as bar:
        for name in policies:
            bar.set_description(name)
            runs.append(simulate(scenario, make_policy(name, planner), seed, network=network,
                                 jobs=jobs, on_resolved=lambda: bar.update(1)))
    return runs


def parse_policies(text: str | None) -> list[str]:
    """``--policies a,b,c`` as names; :class:`InstanceError` (exit 2) for an unknown one."""
    if text is None:
        return list(POLICIES)
    names = [p.strip() for p in text.split(",") if p.strip()]
    problems = [f"--policies: {unknown_name('policy', n, ALL_POLICIES)}"
                for n in names if n not in ALL_POLICIES]
    if not names:
        problems.append("--policies: give at least one policy name")
    if problems:
        raise InstanceError(problems)
    return list(dict.fromkeys(names))


def check_out(out: str, inputs: list[str]) -> None:
    """Refuse, before any work, an ``--out`` that cannot be replaced by a new set of files.

    It may not be a file, hold an input or the current directory, nor hold anything but
    the files of :data:`~chainpipe.online.report.OUTPUT_FILES` (the whole directory is
    replaced: :func:`~chainpipe.online.report.write_outputs`).
    """
    refuse_overwrite({}, inputs, {"--out": out})
    problems = []
    if inside(Path.cwd(), out):
        problems.append(f"--out: {out} holds the current directory; give another directory "
                        "(it is replaced whole)")
    if extra := foreign_entries(out, OUTPUT_FILES):
        shown = ", ".join(extra[:3]) + (f" and {len(extra) - 3} more" if len(extra) > 3 else "")
        problems.append(f"--out: {out} holds {shown}, which simulate does not write; give a "
                        "new directory or one simulate wrote (it is replaced whole)")
    if problems:
        raise InstanceError(problems)


def cli_simulate(args) -> int:
    """The ``simulate`` command: arguments from :func:`chainpipe.cli.build_parser`."""
    if args.preset == "list":
        width = max(len(n) for n in PRESETS)
        for name, (description, _) in PRESETS.items():
            print(f"{name:<{width}}  {description}")
        return 0
    if (args.scenario is None) == (args.preset is None):
        raise InstanceError(["simulate: give a SCENARIO file or --preset NAME (one of them)"])
    if args.out is None:
        raise InstanceError(["--out: the output directory is required"])
    policies = parse_policies(args.policies)
    check_out(args.out, [] if args.scenario is None else [args.scenario])
    if args.preset is not None:
        if args.preset not in PRESETS:
            raise InstanceError([f"--preset: {unknown_name('scenario preset', args.preset, PRESETS)}"])
        scenario = preset(args.preset)
    else:
        scenario = read_scenario(args.scenario)
    scenario = scenario.with_jobs(args.jobs)
    seed = scenario.seed if args.seed is None else args.seed
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    runs = run_policies(scenario, policies, seed, progress=progress and not args.quiet)
    write_outputs(runs, scenario, seed, Path(args.out))
    if not args.quiet:
        print(f"{'policy':<13} {'accepted':>8} {'blocked':>8} {'blocking':>9} {'mean T (s)':>11}")
        for run in runs:
            m = metrics(run)
            mean_t = f"{m.mean_T:.4g}" if m.mean_T is not None else "-"
            print(f"{m.policy:<13} {m.accepted:>8} {m.blocked:>8} {m.blocking_rate:>9.1%} "
                  f"{mean_t:>11}")
        print(f"wrote {args.out}/jobs.csv, summary.csv, summary.md, utilisation.csv, "
              "utilisation.png, iteration_time.png")
    return 0
