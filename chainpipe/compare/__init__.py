"""The comparison harness behind ``chainpipe compare``.

``run_sweep(instances, solvers, time_limit, out_dir, ...)`` runs every
(instance, solver, seed) in a process of its own, locally or on a Dask
cluster, streams records to ``out_dir/results.jsonl`` (resuming where a sweep
stopped), and writes ``results.csv``, ``summary.md``, ``metrics.json`` and the
figures. Modules: :mod:`.runner` (one run, parent side), :mod:`.child` (one
run, in its process), :mod:`.executors` (local pool, Dask), :mod:`.metrics`
(gaps, shifted geometric mean, wins, profiles, primal integral),
:mod:`.report` (CSV, tables, figures), :mod:`.progress`, :mod:`.sweep`.

Exports are loaded lazily so that a run's child process, which imports
:mod:`chainpipe.compare.child`, starts without the harness around it.
"""

from __future__ import annotations

_EXPORTS = ("cli_compare", "collect_instances", "load_results", "plan_runs", "run_sweep")


def __getattr__(name: str):
    if name in _EXPORTS:
        from . import sweep

        return getattr(sweep, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_EXPORTS)
