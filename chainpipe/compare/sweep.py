"""A sweep: every (instance, solver, seed) run, streamed to ``results.jsonl``, resumable.

A run is identified by what determines its answer: the instance's content (the
SHA-256 of its canonical JSON, :func:`instance_digest`), the solver, its
options, the time limit, the seed and the thread count (:func:`run_key`). A
rerun of the same sweep reuses a recorded run only when all of these match, so
an instance edited on disk is solved again, never served a stale result; such
re-runs are listed on stderr, in ``summary.md`` and in ``sweep.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from tqdm import tqdm

from ..dask_cluster import DaskMissing, check_scheduler, require_dask
from ..instance import Instance, InstanceError
from ..io import instance_digest, instance_to_dict, read, write_json
from ..names import unknown_name
from ..paths import instance_files, refuse_overwrite
from ..strict_json import quote
from .executors import execute
from .report import terminal_summary, write_report
from .runner import base_record, stop_all

RESULTS_JSONL = "results.jsonl"
#: the most seeds per (instance, solver): ``--seeds``
MAX_SEEDS = 10_000
#: the most runs of one sweep (instances x solvers x seeds): every run's specification
#: is built before the first starts, and a record is kept of each
MAX_RUNS = 100_000
#: the most runs at once on one machine (``--jobs``): a thread and a process each
MAX_JOBS = 1_024
#: what the sweep did: its arguments, runs reused and re-run, inputs skipped
SWEEP_JSON = "sweep.json"


# --------------------------------------------------------------------------- interruption
class Interrupted(KeyboardInterrupt):
    """The sweep stopped on SIGINT (Ctrl-C) or SIGTERM; every run under way was killed.

    Attributes
    ----------
    signum : int
        The signal: ``signal.SIGINT`` or ``signal.SIGTERM``.
    results : Path
        The ``results.jsonl`` that keeps the runs finished so far.
    finished : int
        How many runs of this sweep that file holds.
    """

    def __init__(self, signum: int, results: Path, finished: int):
        super().__init__(signum)
        self.signum, self.results, self.finished = signum, results, finished

    @property
    def exit_status(self) -> int:
        """``128 + signum``: 130 after Ctrl-C, 143 after SIGTERM, as a shell reports them."""
        return 128 + int(self.signum)

    def line(self, resume: str = "rerun the same command to resume") -> str:
        """The one line a user reads: what stopped, what is kept, how to resume."""
        name = signal.Signals(self.signum).name
        return (f"chainpipe compare: interrupted by {name}; {self.finished} finished run(s) are "
                f"kept in {self.results}; {resume}")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that it unwinds like Ctrl-C."""


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """Turn SIGTERM into an exception (main thread only), so cleanup runs as on Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """Hold off a second Ctrl-C or SIGTERM while the first one's cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


# --------------------------------------------------------------------------- inputs
def load_instances(inputs: Iterable, *, skip_invalid: bool = False
                   ) -> tuple[list[tuple[str, Instance]], list[str], list[Path]]:
    """Read and validate every instance given, all of them before anything runs.

    Parameters
    ----------
    inputs : iterable of str, path or Instance
        Instance files, directories (their ``*.json`` files except ``manifest.json``,
        see :func:`chainpipe.paths.instance_files`) or :class:`Instance` objects.
    skip_invalid : bool, default False
        ``False``: any file that is not a valid instance stops everything.
        ``True``: such files are left out and returned as problems.

    Returns
    -------
    instances : list of (str, Instance)
        The resolved path (``<memory>/NAME`` for an object) and the instance.
    skipped : list of str
        One line per problem of every file left out, each starting with its path
        (empty unless ``skip_invalid``).
    files : list of Path
        Every file read, valid or not (the command's inputs).

    Raises
    ------
    InstanceError
        Every problem of every file (one line each) unless ``skip_invalid``; an
        argument that does not exist; no valid instance at all.
    """

    inputs = list(inputs)
    objects = [x for x in inputs if isinstance(x, Instance)]
    args = [x for x in inputs if not isinstance(x, Instance)]
    try:
        files = instance_files(args)
    except InstanceError as exc:
        raise InstanceError([f"INSTANCE_OR_DIR: {p}" for p in exc.problems]) from None
    out: list[tuple[str, Instance]] = []
    problems: list[str] = []
    for path in files:
        try:
            out.append((str(path.resolve()), read(path)))
        except InstanceError as exc:
            problems.extend(exc.problems)
        except RecursionError:  # a pathologically nested file
            problems.append(f"{path}: invalid JSON: nested too deeply")
    seen = set()
    for inst in objects:
        key = f"<memory>/{inst.name}"
        if key not in seen:
            seen.add(key)
            out.append((key, inst))
    if problems and not skip_invalid:
        raise InstanceError(problems)
    if not out:
        raise InstanceError(problems + ["INSTANCE_OR_DIR: no valid instance to run"])
    return out, problems, files


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
            problems.append(f"--solvers: {unknown_name('solver', n, SOLVERS)}")
        elif n not in available:
            problems.append(f"--solvers: solver {quote(n)} is not available in this installation "
                            f"(module {SOLVERS[n].target.split(':')[0]} not found)")
    if problems:
        raise InstanceError(problems)
    return [SOLVERS[n] for n in names]


def size_figures(instance: Instance) -> dict:
    """The size columns of a record: layers, devices, datacenters, device types, M."""
    return {
        "num_layers": instance.num_layers,
        "num_devices": instance.num_devices,
        "num_datacenters": instance.num_datacenters,
        "num_device_types": len({g.type for dc in instance.datacenters for g in dc.devices}),
        "microbatches": instance.microbatches,
    }


def _canonical(data) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def run_key(instance_sha256: str, solver: str, seed: int, time_limit: float, threads: int,
            options: dict) -> str:
    """The identity of a run: everything that determines its answer, hashed.

    Parameters
    ----------
    instance_sha256 : str
        :func:`instance_digest` of the instance.
    solver : str
        The solver's name.
    seed, threads : int
        As given to the solver.
    time_limit : float
        Seconds.
    options : dict
        The solver's options.

    Returns
    -------
    str
        ``"v2:"`` and a SHA-256; keys of older results files (without the
        instance's digest) never equal one, so their runs are not reused.
    """
    ident = {"instance_sha256": instance_sha256, "solver": solver, "seed": int(seed),
             "time_limit_s": float(time_limit), "threads": int(threads),
             "options": options or {}}
    return "v2:" + hashlib.sha256(_canonical(ident).encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- results file
def load_results(path: Path) -> dict[str, dict]:
    """Records already in ``results.jsonl`` by run key (the last one of a key wins).

    Parameters
    ----------
    path : Path
        The ``results.jsonl`` of a sweep; a missing file holds nothing.

    Returns
    -------
    dict
        ``{run_key: record}``. A line cut short by an interrupted sweep is dropped
        (and the file repaired so that appending continues on a fresh line).
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


def _slot(rec: dict) -> tuple:
    """A run's place in a sweep, whatever the instance holds (path, solver, seed, limit...)."""
    return (rec.get("instance_path"), rec.get("solver"), rec.get("seed", 0),
            float(rec.get("time_limit_s") or 0.0), rec.get("threads"))


def stale_runs(todo: list[dict], done: dict[str, dict]) -> list[dict]:
    """The runs of ``todo`` that replace a record of the same file, solver and settings.

    Returns
    -------
    list of dict
        ``{"instance_path", "instance", "solver", "seed", "reason"}`` for each, the
        reason being ``"instance changed"`` (the recorded digest differs) or
        ``"recorded without an instance digest"`` (an older results file).
    """
    recorded: dict[tuple, dict] = {}
    for rec in done.values():
        recorded[_slot(rec)] = rec
    out = []
    for spec in todo:
        slot = (spec["instance_path"], spec["solver"], spec["seed"], float(spec["time_limit"]),
                spec["threads"])
        old = recorded.get(slot)
        if old is None or old.get("options", spec["options"]) != spec["options"]:
            continue
        reason = ("instance changed" if old.get("instance_sha256")
                  else "recorded without an instance digest")
        out.append({"instance_path": spec["instance_path"], "instance": spec["instance_name"],
                    "solver": spec["solver"], "seed": spec["seed"], "reason": reason})
    return out


# --------------------------------------------------------------------------- the sweep
def plan_runs(instances, solvers, time_limit: float, seeds: int = 1, threads: int = 1,
              solver_options: dict | None = None) -> list[dict]:
    """The specification of every run of the sweep, instances outermost.

    Parameters
    ----------
    instances : list of (str, Instance)
        The first value :func:`load_instances` returns.
    solvers : str or list of str
        Solver names (see :func:`resolve_solvers`).
    time_limit : float
        Seconds per run.
    seeds, threads : int, default 1
        Seeds ``0 .. seeds - 1`` per (instance, solver); threads per run.
    solver_options : dict, optional
        ``{solver name: {option: value}}``.

    Returns
    -------
    list of dict
        One specification per run: the instance as JSON, its path, name, size and
        digest, the solver's name and ``module:function``, the settings and the
        :func:`run_key`.

    Raises
    ------
    InstanceError
        An unknown or unavailable solver name; more than :data:`MAX_RUNS` runs.
    """

    infos = resolve_solvers(solvers)
    _check_run_count(len(instances), len(infos), seeds)
    solver_options = solver_options or {}
    _check_solver_options(solver_options, infos)
    specs = []
    for path, inst in instances:
        data = instance_to_dict(inst)
        digest = instance_digest(inst)
        size = size_figures(inst)
        for info in infos:
            opts = dict(solver_options.get(info.name, {}))
            for seed in range(seeds):
                specs.append({
                    "instance": data, "instance_name": inst.name, "instance_path": path,
                    "instance_sha256": digest, "size": size, "solver": info.name,
                    "target": info.target, "exact": info.exact, "time_limit": float(time_limit),
                    "seed": seed, "threads": int(threads), "options": opts,
                    "run_key": run_key(digest, info.name, seed, float(time_limit), int(threads),
                                       opts),
                })
    return specs


def _check_solver_options(solver_options: dict, infos) -> None:
    """Refuse options of a solver the sweep does not run, or that it does not take: one
    line per problem, ``-O SOLVER.KEY: ...``."""
    from ..result import OptionError
    from ..solve import check_options

    names = [info.name for info in infos]
    problems = []
    for solver, opts in solver_options.items():
        if solver not in names:
            problems += [f"-O {solver}.{key}: {solver} is not among the sweep's solvers "
                         f"({', '.join(names)})" for key in opts]
            continue
        for key in opts:
            try:
                check_options(solver, {key: opts[key]})
            except OptionError as exc:
                problems.append(f"-O {solver}.{key}: {exc}")
    if problems:
        raise InstanceError(problems)


def _check_numbers(time_limit, seeds, threads, jobs) -> None:
    problems = []
    if (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
            or not math.isfinite(time_limit) or time_limit <= 0):
        problems.append(f"--time-limit: must be a finite number of seconds > 0, "
                        f"got {time_limit!r}")
    for name, value, most in (("--seeds", seeds, MAX_SEEDS), ("--threads", threads, None),
                              ("--jobs", jobs, MAX_JOBS)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name}: must be an integer >= 1, got {value!r}")
        elif most is not None and value > most:
            problems.append(f"{name}: must be an integer <= {most}, got {value}")
    if problems:
        raise InstanceError(problems)


def _check_run_count(instances: int, solvers: int, seeds: int) -> None:
    """Refuse a sweep of more than :data:`MAX_RUNS` runs before any is planned."""
    runs = instances * solvers * seeds
    if runs > MAX_RUNS:
        raise InstanceError([f"--seeds: {instances} instance(s) x {solvers} solver(s) x {seeds} "
                             f"seed(s) make {runs} runs; a sweep holds at most {MAX_RUNS}"])


def _notes_markdown(reran: list[dict], skipped: list[str]) -> str:
    out = []
    if reran:
        out += ["## Runs done again", "",
                "Recorded in `results.jsonl` for the same file, solver and settings, but not "
                "for this content of the instance, so they were run again:", ""]
        out += [f"- {r['instance_path']} / {r['solver']} (seed {r['seed']}): {r['reason']}"
                for r in reran] + [""]
    if skipped:
        out += ["## Inputs skipped", "",
                "Not valid instances (`--skip-invalid`), so not run:", ""]
        out += [f"- {line}" for line in skipped] + [""]
    return "\n".join(out)


def _tell(line: str) -> None:
    print(f"chainpipe compare: {line}", file=sys.stderr, flush=True)


def run_sweep(instances, solvers, time_limit: float, out_dir, seeds: int = 1, threads: int = 1,
              jobs: int = 1, scheduler=None, *, solver_options: dict | None = None,
              progress: bool | None = None, figures: bool = True,
              skip_invalid: bool = False) -> list[dict]:
    """Run every (instance, solver, seed) and write the comparison into ``out_dir``.

    Every argument is checked and every instance read and validated before
    anything is run or written. Runs already recorded in ``out_dir/results.jsonl``
    with the same instance content, solver, options, limit, seed and threads
    (:func:`run_key`) are reused; the others run, each in a process of its own.

    Parameters
    ----------
    instances : iterable of str, path or Instance
        Files, directories (their ``*.json`` files but ``manifest.json``) or
        :class:`Instance` objects.
    solvers : str or list of str
        Names (a list or ``"a,b,c"``; ``"all"`` for every available one).
    time_limit : float
        Seconds per run, finite and ``> 0``; a run still going after
        ``time_limit + kill_margin(time_limit)`` is killed
        (:func:`chainpipe.compare.runner.kill_margin`).
    out_dir : str or path
        Where ``results.jsonl``, ``results.csv``, ``summary.md``, ``metrics.json``,
        ``sweep.json`` and the figures go; it may not be or hold an input.
    seeds, threads, jobs : int, default 1
        Seeds per (instance, solver); threads per run; runs at once locally.
    scheduler : str or Dask cluster or client, optional
        A Dask scheduler address (``tcp://host:8786``), cluster or client; ``None``
        runs locally, ``jobs`` at a time.
    solver_options : dict, optional
        ``{solver name: {option: value}}``.
    progress : bool, optional
        A progress bar on stderr: ``None`` when stderr is a terminal, ``True``
        always, ``False`` never.
    figures : bool, default True
        Draw the figures.
    skip_invalid : bool, default False
        Run the valid instances and list the invalid files (stderr, ``summary.md``,
        ``sweep.json``) instead of refusing the whole sweep.

    Returns
    -------
    list of dict
        The records of this sweep's runs (reused ones included), in instance,
        solver, seed order.

    Raises
    ------
    InstanceError
        Bad arguments or input: one line per problem, nothing run or written.
    DaskMissing
        ``scheduler`` given without Dask installed.
    Interrupted
        On Ctrl-C or SIGTERM (SIGTERM handled only when called from the main
        thread): every run under way is killed first; finished runs stay in
        ``results.jsonl`` and a rerun resumes.
    """
    _check_numbers(time_limit, seeds, threads, jobs)
    instances = list(instances)
    if scheduler:
        require_dask()
        check_scheduler(scheduler)
    loaded, skipped, files = load_instances(instances, skip_invalid=skip_invalid)
    specs = plan_runs(loaded, solvers, time_limit, seeds, threads, solver_options)
    out = Path(out_dir)
    refuse_overwrite({}, files, directories={"--out": out})
    started = time.time()
    out.mkdir(parents=True, exist_ok=True)
    jsonl = out / RESULTS_JSONL
    # a failure of the harness itself (not started, crashed, lost) is tried again
    done = {k: r for k, r in load_results(jsonl).items() if not r.get("stats", {}).get("retry")}
    todo = list({s["run_key"]: s for s in specs if s["run_key"] not in done}.values())
    reran = stale_runs(todo, done)
    _tell_plan(skipped, reran, len(specs) - len(todo), len(todo), jsonl)
    batch = os.urandom(4).hex()
    for i, spec in enumerate(todo):
        spec["run_id"] = f"{batch}-{i}"
    manifest = {
        "inputs": [str(x) if not isinstance(x, Instance) else f"<memory>/{x.name}"
                   for x in instances],
        "solvers": sorted({s["solver"] for s in specs}), "time_limit_s": float(time_limit),
        "seeds": seeds, "threads": threads, "jobs": jobs,
        "scheduler": str(scheduler) if scheduler else None,
        "instances": [{"path": p, "name": inst.name, "sha256": instance_digest(inst)}
                      for p, inst in loaded],
        "runs": len(specs), "reused": len(specs) - len(todo), "run": len(todo),
        "rerun_instance_changed": reran, "skipped_inputs": skipped,
        "started": _iso(started),
    }
    with _sigterm_unwinds():
        try:
            finished = _stream(todo, jsonl, done, jobs=jobs, scheduler=scheduler,
                               progress=progress)
        except Interrupted as exc:
            with _no_interrupts():
                _write_manifest(out, manifest, "interrupted", exc.finished)
            exc.finished += len(specs) - len(todo)
            raise
    records = [{**done[s["run_key"]], **base_record(s)} for s in specs if s["run_key"] in done]
    figs = write_report(records, out, with_seed=seeds > 1, figures=figures,
                        notes=_notes_markdown(reran, skipped))
    # the figures of this sweep (an earlier sweep into the same --out may have left others)
    manifest["figures"] = sorted(figs.values())
    _write_manifest(out, manifest, "complete", finished)
    return records


def _tell_plan(skipped: list[str], reran: list[dict], reused: int, to_run: int,
               jsonl: Path) -> None:
    """Say on stderr what is skipped, reused and run again, before the runs start."""
    for line in skipped:
        _tell(f"skipped (not a valid instance): {line}")
    if reused:
        _tell(f"resuming: {reused} run(s) already in {jsonl}, {to_run} to run")
    for reason, why in (("instance changed", "their instance changed since they were recorded"),
                        ("recorded without an instance digest",
                         "an older version recorded them without the instance's digest")):
        names = sorted({Path(r["instance_path"]).name for r in reran if r["reason"] == reason})
        if names:
            count = sum(r["reason"] == reason for r in reran)
            _tell(f"running {count} recorded run(s) again because {why}: "
                  + ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                            else ""))


def _stream(todo: list[dict], jsonl: Path, done: dict[str, dict], *, jobs: int, scheduler,
            progress: bool | None) -> int:
    """Run ``todo``, appending each record to ``jsonl`` (and ``done``) as it finishes.

    Returns how many finished. On Ctrl-C or SIGTERM every run under way is killed
    and :class:`Interrupted` raised, its ``finished`` counting this call's runs.
    """
    finished = 0
    bar = tqdm(total=len(todo), unit="run", file=sys.stderr, dynamic_ncols=True,
               disable=None if progress is None else not progress, desc="compare")
    try:
        with closing(execute(todo, jobs=jobs, scheduler=scheduler)) as results:
            for rec in results:
                _append(jsonl, rec)
                done[rec["run_key"]] = rec
                finished += 1
                bar.set_postfix_str(f"{rec['instance']} {rec['solver']}: {rec['status']}",
                                    refresh=False)
                bar.update(1)
    except KeyboardInterrupt as exc:
        with _no_interrupts():
            stop_all()
        signum = exc.args[0] if isinstance(exc, _Terminated) else signal.SIGINT
        raise Interrupted(signum, jsonl, finished) from None
    finally:
        bar.close()
    return finished


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _write_manifest(out: Path, manifest: dict, status: str, finished: int) -> None:
    """``sweep.json``: what this sweep ran, reused and skipped, and how it ended."""
    write_json({**manifest, "status": status, "finished_runs": finished,
                "ended": _iso(time.time())}, out / SWEEP_JSON)


def _figures_of_this_sweep(out: Path) -> list[str]:
    """The figure files ``sweep.json`` says the last sweep into ``out`` wrote."""
    try:
        return list(json.loads((out / SWEEP_JSON).read_text(encoding="utf-8")).get("figures", []))
    except (OSError, ValueError):
        return []


def cli_compare(args) -> int:
    """``chainpipe compare``: run the sweep, print the summary table and where things are.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``compare`` sub-command (``inputs``, ``solvers``, ``time_limit``,
        ``out``, ``seeds``, ``threads``, ``jobs``, ``scheduler``, ``skip_invalid``,
        ``progress``).

    Returns
    -------
    int
        0 when the sweep is done; 1 when ``--scheduler`` is given without Dask
        (one line saying how to install it); 130 after Ctrl-C and 143 after
        SIGTERM (one line: finished runs are kept, rerunning resumes).

    Raises
    ------
    InstanceError
        Bad arguments or input (the command line exits 2, one line per problem).
    """
    try:
        records = run_sweep(args.inputs, args.solvers, args.time_limit, args.out,
                            seeds=args.seeds, threads=args.threads, jobs=args.jobs,
                            scheduler=args.scheduler,
                            solver_options=getattr(args, "solver_options", None),
                            skip_invalid=getattr(args, "skip_invalid", False),
                            progress=getattr(args, "progress", None))
    except DaskMissing as exc:
        print(f"chainpipe compare: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(exc.line(), file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt as exc:  # before the runs started or while the report was written
        signum = exc.args[0] if isinstance(exc, _Terminated) else signal.SIGINT
        print(f"chainpipe compare: interrupted by {signal.Signals(signum).name}; finished runs "
              f"are kept in {Path(args.out) / RESULTS_JSONL}; rerun the same command to resume",
              file=sys.stderr)
        return 128 + signum
    out = Path(args.out)
    print(terminal_summary(records))
    print()
    print(f"{len(records)} runs; results in {out / 'results.csv'} and {out / RESULTS_JSONL}; "
          f"summary table in {out / 'summary.md'}; what ran in {out / SWEEP_JSON}; figures: "
          + (", ".join(str(out / f) for f in _figures_of_this_sweep(out)) or "none"))
    return 0
