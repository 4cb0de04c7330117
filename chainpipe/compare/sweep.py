"""A sweep: every (instance, solver, seed) run, streamed to ``results.jsonl``, resumable."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from ..instance import FORMAT, Instance, InstanceError
from .executors import execute
from .progress import Progress
from .report import terminal_summary, write_report

RESULTS_JSONL = "results.jsonl"


# --------------------------------------------------------------------------- inputs
def collect_instances(inputs: Iterable) -> list[tuple[str, Instance]]:
    """``(path, Instance)`` for every instance file given or found in a given directory.

    A directory contributes its ``*.json`` files whose ``format`` is an instance's
    (manifests and plan files beside them are skipped). Bad input raises
    :class:`InstanceError` naming the argument or the file.
    """
    from ..io import load_json, read

    out: list[tuple[str, Instance]] = []
    seen: set[str] = set()
    problems: list[str] = []

    def add(path: Path) -> None:
        key = str(path.resolve())
        if key in seen:
            return
        seen.add(key)
        try:
            out.append((key, read(path)))
        except InstanceError as exc:
            problems.extend(exc.problems)

    for item in inputs:
        if isinstance(item, Instance):
            key = f"<memory>/{item.name}"
            if key not in seen:
                seen.add(key)
                out.append((key, item))
            continue
        path = Path(item)
        if path.is_dir():
            found = 0
            for f in sorted(path.glob("*.json")):
                try:
                    data = load_json(f)
                except InstanceError:
                    data = None
                if isinstance(data, dict) and data.get("format") == FORMAT:
                    add(f)
                    found += 1
            if not found:
                problems.append(f"INSTANCE_OR_DIR: {item}: no instance files "
                                f"(format {FORMAT!r}) in this directory")
        elif path.exists():
            add(path)
        else:
            problems.append(f"INSTANCE_OR_DIR: {item}: no such file or directory")
    if problems:
        raise InstanceError(problems)
    if not out:
        raise InstanceError(["INSTANCE_OR_DIR: no instances given"])
    return out


def resolve_solvers(solvers) -> list:
    """:class:`~chainpipe.solve.SolverInfo` for each name (``"all"``: every available one)."""
    from ..solve import SOLVERS, available_solvers

    if isinstance(solvers, str):
        solvers = [s.strip() for s in solvers.split(",") if s.strip()]
    names = list(dict.fromkeys(solvers))
    if not names:
        raise InstanceError(["--solvers: give at least one solver name"])
    if names == ["all"]:
        return available_solvers()
    available = {info.name for info in available_solvers()}
    problems = []
    for n in names:
        if n not in SOLVERS:
            problems.append(f"--solvers: unknown solver {n!r}; known: {', '.join(SOLVERS)}")
        elif n not in available:
            problems.append(f"--solvers: solver {n!r} is not available in this installation "
                            f"(module {SOLVERS[n].target.split(':')[0]} not found)")
    if problems:
        raise InstanceError(problems)
    return [SOLVERS[n] for n in names]


def size_figures(instance: Instance) -> dict:
    return {
        "num_layers": instance.num_layers,
        "num_devices": instance.num_devices,
        "num_datacenters": instance.num_datacenters,
        "num_device_types": len({g.type for dc in instance.datacenters for g in dc.devices}),
        "microbatches": instance.microbatches,
    }


def run_key(path: str, solver: str, seed: int, time_limit: float, threads: int,
            options: dict) -> str:
    opts = json.dumps(options, sort_keys=True) if options else ""
    return f"{path}|{solver}|{seed}|{time_limit:g}|{threads}|{opts}"


# --------------------------------------------------------------------------- results file
def load_results(path: Path) -> dict[str, dict]:
    """Records already in ``results.jsonl`` by run key (the last one of a key wins).

    A line cut short by an interrupted sweep is dropped (and the file repaired
    so that appending continues on a fresh line).
    """
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)
        raw = raw[:cut]
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "run_key" in rec:
            done[rec["run_key"]] = rec
    return done


def _append(path: Path, rec: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# --------------------------------------------------------------------------- the sweep
def plan_runs(instances, solvers, time_limit: float, seeds: int = 1, threads: int = 1,
              solver_options: dict | None = None) -> list[dict]:
    """The specification of every run of the sweep, instances outermost."""
    from ..io import instance_to_dict

    insts = collect_instances(instances)
    infos = resolve_solvers(solvers)
    solver_options = solver_options or {}
    specs = []
    for path, inst in insts:
        data = instance_to_dict(inst)
        size = size_figures(inst)
        for info in infos:
            opts = dict(solver_options.get(info.name, {}))
            for seed in range(seeds):
                specs.append({
                    "instance": data, "instance_name": inst.name, "instance_path": path,
                    "size": size, "solver": info.name, "target": info.target,
                    "exact": info.exact, "time_limit": float(time_limit), "seed": seed,
                    "threads": int(threads), "options": opts,
                    "run_key": run_key(path, info.name, seed, float(time_limit), int(threads),
                                       opts),
                })
    return specs


def run_sweep(instances, solvers, time_limit: float, out_dir, seeds: int = 1, threads: int = 1,
              jobs: int = 1, scheduler=None, *, solver_options: dict | None = None,
              progress: bool = True, figures: bool = True) -> list[dict]:
    """Run every (instance, solver, seed) and write the comparison into ``out_dir``.

    ``instances``: files, directories or :class:`Instance` objects. ``solvers``:
    names (a list or ``"a,b,c"``; ``"all"`` for every available one).
    ``scheduler``: a Dask scheduler address (``tcp://host:8786``), cluster or
    client; ``None`` runs locally, ``jobs`` at a time. Runs already recorded in
    ``out_dir/results.jsonl`` with the same instance, solver, seed, limit,
    threads and options are not run again. Returns the records of this sweep's
    runs (resumed ones included), in instance, solver, seed order.
    """
    if not (time_limit and time_limit > 0):
        raise InstanceError([f"--time-limit: must be a number > 0, got {time_limit!r}"])
    for name, value in (("--seeds", seeds), ("--threads", threads), ("--jobs", jobs)):
        if not isinstance(value, int) or value < 1:
            raise InstanceError([f"{name}: must be an integer >= 1, got {value!r}"])
    specs = plan_runs(instances, solvers, time_limit, seeds, threads, solver_options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / RESULTS_JSONL
    done = load_results(jsonl)
    todo = [s for s in specs if s["run_key"] not in done]
    batch = uuid.uuid4().hex[:8]
    for i, spec in enumerate(todo):
        spec["run_id"] = f"{batch}-{i}"
    bar = Progress(len(todo), skipped=len(specs) - len(todo), enabled=progress)
    try:
        for rec in execute(todo, jobs=jobs, scheduler=scheduler):
            _append(jsonl, rec)
            done[rec["run_key"]] = rec
            bar.update(rec)
    finally:
        bar.close()
    records = [done[s["run_key"]] for s in specs if s["run_key"] in done]
    write_report(records, out, with_seed=seeds > 1, figures=figures)
    return records


def cli_compare(args) -> int:
    """``chainpipe compare``: run the sweep, print the summary table and where things are."""
    records = run_sweep(args.inputs, args.solvers, args.time_limit, args.out, seeds=args.seeds,
                        threads=args.threads, jobs=args.jobs, scheduler=args.scheduler)
    out = Path(args.out)
    print(terminal_summary(records))
    print()
    print(f"{len(records)} runs; results in {out / 'results.csv'} and {out / RESULTS_JSONL}; "
          f"summary table in {out / 'summary.md'}; figures: "
          + ", ".join(sorted(str(p) for p in out.glob("*.png"))))
    return 0
