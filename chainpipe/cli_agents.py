"""The commands of CDynP across hosts: ``split --certs``, ``agent serve`` and
``solve PUBLIC --agents`` (the owner). :mod:`chainpipe.cli` registers them."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

from .instance import InstanceError
from .io import load_json


def make_split_certs(outdir: Path, names: list[str]) -> list[Path]:
    """``split --certs``: a development CA and a certificate per party, in OUTDIR/certs."""
    from .solvers.cdynp.tls import OWNER, make_certs

    if OWNER in names:
        raise InstanceError([f"--certs: a DC is named {OWNER!r}, the owner's party name; "
                             f"rename it"])
    certs = Path(outdir, "certs")
    existing = [p for p in [certs / "ca.pem", *(certs / f"{n}.key" for n in [*names, OWNER])]
                if p.exists()]
    if existing:
        raise InstanceError([f"--certs: {existing[0]} exists; certificates are never "
                             f"overwritten (remove {certs} or choose another OUTDIR)"])
    return make_certs(certs, [*names, OWNER])


def _contexts(args, needed_by: str):
    from .solvers.cdynp.tls import context

    missing = [o for o, v in (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert),
                              ("--tls-key", args.tls_key)) if not v]
    if missing:
        raise InstanceError([f"{o}: required with {needed_by}" for o in missing])
    return (context("server", args.tls_ca, args.tls_cert, args.tls_key),
            context("client", args.tls_ca, args.tls_cert, args.tls_key))


def cmd_agent_serve(args) -> int:
    """``chainpipe agent serve PRIVATE --public PUBLIC --listen HOST:PORT --tls-...``."""
    from .solvers.cdynp.net import parse_address
    from .solvers.cdynp.public import read_view
    from .solvers.cdynp.serve import AgentServer
    from .solvers.cdynp.tls import party_of_file

    try:
        parse_address(args.listen, any_port=True)
    except ValueError as exc:
        raise InstanceError([f"--listen: {exc}"]) from None
    public, private = load_json(args.public), load_json(args.private)
    _, _, dc = read_view(public, private, args.public, args.private)  # exit 2 on a bad file
    server_ctx, client_ctx = _contexts(args, "agent serve")
    party = party_of_file(args.tls_cert)
    if party != dc.name:
        raise InstanceError([f"--tls-cert: {args.tls_cert}: the certificate names the party "
                             f"{party!r}, not {dc.name!r}, the DC of {args.private}"])

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} agent {dc.name}: {line}", file=sys.stderr,
              flush=True)

    idle = {} if args.idle_timeout is None else {"idle_timeout": args.idle_timeout}
    try:
        server = AgentServer(public, private, server_ctx, client_ctx, args.listen, log,
                             peer_timeout=args.peer_timeout, allow_trace=not args.no_trace,
                             share_prefix=not args.no_prefix_bound, **idle)
    except OSError as exc:
        raise OSError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"agent {dc.name}: listening on {server.address}", flush=True)
    server.serve(stop)
    log("stopped")
    return 0


def solve_across_hosts(args, options: dict) -> int:
    """``chainpipe solve PUBLIC --solver cdynp --agents AGENTS --tls-...``: the owner."""
    import json

    from .cli import format_evaluation, format_result
    from .io import write_json
    from .result import OptionError
    from .solvers.cdynp.public import read_public
    from .solvers.cdynp.remote import read_agents, solve_remote

    if args.solver != "cdynp":
        raise InstanceError(["--agents: only the cdynp solver runs across hosts"])
    public = load_json(args.instance)
    view = read_public(public, args.instance)
    agents = read_agents(load_json(args.agents), view.datacenter_names, args.agents)
    _, client_ctx = _contexts(args, "--agents")
    try:
        res, evaluation = solve_remote(public, agents, client_ctx, time_limit=args.time_limit,
                           trace_dir=args.trace, **options)
    except OptionError as exc:
        raise InstanceError([f"--option: {exc}"]) from None
    if args.plan_out and res.plan is not None:
        write_json(res.plan_document(), args.plan_out)  # names the instance, without a digest
    if args.format == "json":
        print(json.dumps(res.to_dict()))
    else:
        print(format_result(res))
    if res.status == "error":
        print(f"chainpipe: {res.message}", file=sys.stderr)
        return 1
    if args.format != "json" and res.plan is not None:
        print()
        print(format_evaluation(view, evaluation))
    return 0
