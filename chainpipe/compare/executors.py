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

from ..instance import InstanceError
from ..strict_json import quote
from .runner import allow_runs, failed_record, run_spec, stop_all

#: the one line a user gets when ``--scheduler`` is given without Dask installed
DASK_HINT = ("--scheduler needs Dask, an optional extra of chainpipe: "
             "pip install 'chainpipe[dask]'")


class DaskMissing(ImportError):
    """``--scheduler`` was given but ``dask.distributed`` cannot be imported."""


def require_dask() -> None:
    """Raise :class:`DaskMissing` (with :data:`DASK_HINT`) unless Dask can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:  # the [dask] extra is optional
        raise DaskMissing(DASK_HINT) from None


def check_scheduler(scheduler) -> None:
    """Refuse a ``--scheduler`` address Dask cannot read, before anything runs.

    A cluster or client object passes; a text must be ``[SCHEME://]HOST:PORT``
    (``tcp://host:8786``), as ``distributed`` reads addresses, with a port in
    1..65535 and no blank in the host.

    Raises
    ------
    InstanceError
        One line, ``--scheduler: ...``.
    DaskMissing
        Dask is not installed.
    """
    if not isinstance(scheduler, str):
        return
    require_dask()
    from distributed.comm.addressing import get_address_host_port

    try:
        host, port = get_address_host_port(scheduler)
    except ValueError as exc:
        if scheme_only(exc):
            return  # a scheme without host and port (ucx, inproc): Dask checks it
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InstanceError([f"--scheduler: expected an address such as tcp://host:8786, "
                             f"got {quote(scheduler)} ({why})"]) from None
    if not 1 <= port <= 65535 or not host or any(ch.isspace() for ch in host):
        raise InstanceError([f"--scheduler: expected an address such as tcp://host:8786 "
                             f"(a host and a port in 1..65535), got {quote(scheduler)}"])


def scheme_only(exc: ValueError) -> bool:
    """Whether Dask's ``exc`` says only that its scheme has no host and port to show."""
    return str(exc).startswith("don't know how to extract host and port")


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


def _client(scheduler):
    """A ``distributed.Client`` for an address, a cluster object or a client."""
    require_dask()
    from distributed import Client

    if isinstance(scheduler, Client):
        return scheduler, False
    address = getattr(scheduler, "scheduler_address", scheduler)
    return Client(address, timeout="30s"), True


def run_dask(specs: list[dict], scheduler) -> Iterator[dict]:
    """Run ``specs`` as tasks of a Dask distributed cluster."""
    if not specs:
        return
    require_dask()
    from distributed import as_completed

    client, own = _client(scheduler)
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
