"""Reaching a Dask distributed cluster: the one place that imports ``distributed``.

Two features hand work to a cluster given by its scheduler's address: ``compare
--scheduler`` (one task per run, :mod:`chainpipe.compare.executors`) and ``dp -O
scheduler=ADDRESS`` (one task per trial bound of a run, :mod:`chainpipe.solvers.dp_dask`).
Both check the address the same way before anything runs and connect the same way.
Dask is an optional extra: without it, a clear one-line error.
"""

from __future__ import annotations

from .instance import InstanceError
from .strict_json import quote

#: the one line a user gets when a scheduler is given without Dask installed
DASK_HINT = ("--scheduler needs Dask, an optional extra of chainpipe: "
             "pip install 'chainpipe[dask]'")


class DaskMissing(ImportError):
    """A scheduler was given but ``dask.distributed`` cannot be imported."""


def require_dask() -> None:
    """Raise :class:`DaskMissing` (with :data:`DASK_HINT`) unless Dask can be imported."""
    try:
        import distributed  # noqa: F401
    except ImportError:  # the [dask] extra is optional
        raise DaskMissing(DASK_HINT) from None


def check_scheduler(scheduler, what: str = "--scheduler") -> None:
    """Refuse a scheduler address Dask cannot read, before anything runs.

    A cluster or client object passes; a text must be ``[SCHEME://]HOST:PORT``
    (``tcp://host:8786``), as ``distributed`` reads addresses, with a port in
    1..65535 and no blank in the host.

    Parameters
    ----------
    scheduler : str or object
        The address, or a ``distributed`` cluster or client.
    what : str
        How the error line names the setting (``--scheduler``, ``-O scheduler``).

    Raises
    ------
    InstanceError
        One line, ``<what>: ...``.
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
        raise InstanceError([f"{what}: expected an address such as tcp://host:8786, "
                             f"got {quote(scheduler)} ({why})"]) from None
    if not 1 <= port <= 65535 or not host or any(ch.isspace() for ch in host):
        raise InstanceError([f"{what}: expected an address such as tcp://host:8786 "
                             f"(a host and a port in 1..65535), got {quote(scheduler)}"])


def scheme_only(exc: ValueError) -> bool:
    """Whether Dask's ``exc`` says only that its scheme has no host and port to show."""
    return str(exc).startswith("don't know how to extract host and port")


def connect(scheduler, timeout: str = "30s"):
    """A ``distributed.Client`` for an address, a cluster object or a client, and whether
    the caller owns it (and closes it when done).

    Parameters
    ----------
    scheduler : str or object
        The scheduler's address, a cluster (anything with ``scheduler_address``) or a
        ``distributed.Client``.
    timeout : str
        How long to try to reach the scheduler.
    """
    require_dask()
    from distributed import Client

    if isinstance(scheduler, Client):
        return scheduler, False
    address = getattr(scheduler, "scheduler_address", scheduler)
    return Client(address, timeout=timeout), True
