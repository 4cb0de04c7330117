"""Where runs execute: a local pool, or a Dask distributed cluster.

Both yield one record per run as the runs finish, in completion order. Each
run is :func:`chainpipe.compare.runner.run_spec`, which starts the solve in a
child process of whichever machine executes it, so time limits and kills work
the same everywhere. The local pool needs no server; the Dask executor talks
to a scheduler started with the stock ``dask scheduler`` / ``dask worker``
commands (start workers with ``--nthreads`` equal to the runs they should hold
at once, each run using ``--threads`` cores), or to any ``distributed.Client``
or cluster object passed in from Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ..dask_cluster import connect, require_dask
from .runner import allow_runs, failed_record, run_spec, stop_all


def run_local(specs: list[dict], jobs: int = 1) -> Iterator[dict]:
    """Run ``specs`` on this machine, ``jobs`` at a time."""
    if not specs:
        return
    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="chainpipe-run")
    try:
        pending = {pool.submit(run_spec, spec): spec for spec in specs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                spec = pending.pop(fut)
                exc = fut.exception()
                yield (failed_record(spec, "error", f"executor: {type(exc).__name__}: {exc}", 0.0)
                       if exc is not None else fut.result())
    except BaseException:
        stop_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_dask(specs: list[dict], scheduler) -> Iterator[dict]:
    """Run ``specs`` as tasks of a Dask distributed cluster."""
    if not specs:
        return
    require_dask()
    from distributed import as_completed

    client, own = connect(scheduler)
    try:
        futures = {}
        for spec in specs:
            fut = client.submit(run_spec, spec, pure=False,
                                key=f"chainpipe-{spec['solver']}-{spec['run_id']}")
            futures[fut] = spec
        for fut in as_completed(list(futures)):
            spec = futures[fut]
            try:
                yield fut.result()
            except Exception as exc:
                yield failed_record(spec, "error", f"dask: {type(exc).__name__}: {exc}", 0.0)
    except BaseException:
        stop_all()  # runs of an in-process cluster; remote ones end at their limit
        for fut in futures:
            fut.cancel()
        raise
    finally:
        if own:
            client.close()


def execute(specs: list[dict], jobs: int = 1, scheduler=None) -> Iterator[dict]:
    """Records of ``specs`` as they finish: on Dask if ``scheduler`` is given, else locally.

    Lifts the stop of an earlier interrupted sweep in this process
    (:func:`~chainpipe.compare.runner.allow_runs`).
    """
    allow_runs()
    if scheduler:
        return run_dask(specs, scheduler)
    return run_local(specs, jobs)
