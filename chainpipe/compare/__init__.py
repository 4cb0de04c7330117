"""The comparison harness behind ``chainpipe compare``.

``run_sweep(instances, solvers, time_limit, out_dir, ...)`` validates every
input first, runs every (instance, solver, seed) in a process of its own,
locally or on a Dask cluster, streams records to ``out_dir/results.jsonl``
(resuming where a sweep stopped, keyed on the instance's content, so an edited
instance is run again), and writes ``results.csv``, ``summary.md``,
``metrics.json``, ``sweep.json`` and the figures. Modules: :mod:`.sweep` (the
sweep, resume, interruption), :mod:`.runner` (one run, parent side),
:mod:`.child` (one run, in its process), :mod:`.executors` (local pool, Dask),
:mod:`.metrics` (gaps, shifted geometric mean, wins, profiles, primal
integral), :mod:`.report` (CSV, tables, figures).

Exports are loaded lazily so that a run's child process, which imports
:mod:`chainpipe.compare.child`, starts without the harness around it.
"""

from __future__ import annotations

_EXPORTS = ("Interrupted", "cli_compare", "instance_digest", "load_instances", "load_results",
            "plan_runs", "run_key", "run_sweep")


def __getattr__(name: str):
    if name in _EXPORTS:
        from . import sweep

        return getattr(sweep, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_EXPORTS)
