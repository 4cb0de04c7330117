"""The job's owner of a CDynP run across hosts (``chainpipe solve PUBLIC --agents``).

The owner holds the public document only. For each run of the solve (the probes
and the main run, as in :func:`chainpipe.solvers.cdynp.run`) it connects to
every DC's agent at the address the AGENTS file gives, over TLS with its own
certificate, checks that the certificate names that DC, asks each to take part
(downstream first, so that every agent knows the run before the first message,
DC 1's ``prefix``, can reach it) and then watches their events (:class:`.watch.Watch`) until every report is
in. The plan is assembled from what each agent reports of its own stages, and
its ``T`` from what they cost (:mod:`.assemble`).

An agent that cannot be reached (after :data:`.net.CONNECT_S` seconds of
retries), refuses, dies (its connection closes) or stays silent (past the time
limit plus :data:`.watch.GRACE_S`, or ``message_timeout`` seconds while it
should be working) ends the solve with one line naming the DC and its address.
"""

from __future__ import annotations

import math
import queue
import re
import secrets
import socket
import threading
from pathlib import Path

from ...deadline import Deadline
from ...io import atomic_write
from ...plan import Evaluation, Plan
from . import net, protocol, wire
from .assemble import evaluation_of, plan_of
from .audit import check_claims
from .public import read_public
from .runner import Run, collect
from .watch import MESSAGE_TIMEOUT_S, AgentFailure, Watch

_FILE = re.compile(r"[0-9]{3}-(prefix|summary|assemble)-[^/\\\\]+-to-[^/\\\\]+\.json")


class RemoteAgents:
    """The agents of a public instance, each on its own host (a :class:`.drive.Backend`).

    Parameters
    ----------
    public : dict
        The ``chainpipe-public/1`` document.
    agents : dict
        DC name -> ``HOST:PORT`` of its agent, one per DC of the chain.
    ctx : ssl.SSLContext
        The owner's TLS client context (:func:`.tls.context`).
    message_timeout : float
        Seconds an agent may stay silent while it should be working.
    """

    mode = "tls"

    def __init__(self, public: dict, agents: dict, ctx, message_timeout=MESSAGE_TIMEOUT_S):
        self.document = public
        self.public = read_public(public)
        self.digest = net.public_digest(public)
        self.agents = {name: agents[name] for name in self.public.datacenter_names}
        self.ctx = ctx
        self.message_timeout = float(message_timeout)
        self._evaluations: dict[Plan, Evaluation] = {}

    # ------------------------------------------------------------------ one run
    def one_run(self, options: dict, trace_dir, deadline: Deadline) -> Run:
        names = list(self.public.datacenter_names)
        run_id = secrets.token_hex(16)
        socks = self._connect_all(names, deadline)
        where = [f" at {self.agents[n]}" for n in names]
        readers: list[threading.Thread] = []
        try:
            header = {"net": net.NET, "kind": "run", "run": run_id,
                      "public_sha256": self.digest, "agents": self.agents,
                      "options": {k: v for k, v in options.items() if v is not None},
                      "time_limit_s": None if deadline.unlimited else deadline.remaining(),
                      "trace": trace_dir is not None}
            # downstream first: every DC knows the run before DC 1 sends the first message
            for k in reversed(range(len(socks))):
                self._start(names[k], where[k], socks[k], header)
            reports = self._watch(names, where, socks, deadline, readers)
        finally:
            _close_all(socks, readers)
        for k, report in enumerate(reports):
            _check_report(names[k], where[k], report)
        if trace_dir is not None:
            _write_trace(trace_dir, reports)
        return collect(reports)

    def _connect_all(self, names: list[str], deadline: Deadline) -> list:
        """A connection to every agent, made in parallel; the first failure, by chain order."""
        out: list = [None] * len(names)
        errors: list = [None] * len(names)

        def one(k: int) -> None:
            try:
                out[k] = net.connect(self.agents[names[k]], self.ctx, names[k],
                                     deadline=deadline)
            except (OSError, net.Refused) as exc:
                errors[k] = exc

        threads = [threading.Thread(target=one, args=(k,), daemon=True)
                   for k in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = next((k for k in range(len(names)) if errors[k] is not None), None)
        if bad is not None:
            for s in out:
                if s is not None:
                    net.close(s)
            raise AgentFailure(f"cannot reach the agent of DC {names[bad]!r} at "
                               f"{self.agents[names[bad]]}: {errors[bad]}", names[bad])
        return out

    def _start(self, name: str, where: str, sock, header: dict) -> None:
        try:
            net.send_json(sock, header)
            reply = net.recv_json(sock)
        except (wire.Closed, OSError, protocol.ProtocolError) as exc:
            raise AgentFailure(f"the agent of DC {name!r}{where} did not take the run "
                               f"({type(exc).__name__}: {str(exc)[:120]})", name) from None
        if reply != {"event": "accepted"}:
            reason = reply.get("refused") if isinstance(reply, dict) else None
            raise AgentFailure(f"the agent of DC {name!r}{where} refused the run: "
                               f"{str(reason)[:200]}", name)
        sock.settimeout(None)  # from now on the watch decides how long is too long

    def _watch(self, names, where, socks, deadline: Deadline, readers: list) -> list[dict]:
        events: queue.Queue = queue.Queue()

        def read(k: int, sock) -> None:
            while True:
                try:
                    events.put((k, net.recv_json(sock, net.EVENT_LIMIT)))
                except (wire.Closed, OSError, protocol.ProtocolError, ValueError):
                    events.put((k, None))
                    return

        for k, sock in enumerate(socks):
            readers.append(threading.Thread(target=read, args=(k, sock), daemon=True))
            readers[-1].start()

        def next_events(timeout: float) -> list:
            try:
                out = [events.get(timeout=timeout)]
            except queue.Empty:
                return []
            while True:
                try:
                    out.append(events.get_nowait())
                except queue.Empty:
                    return out

        watch = Watch(names, deadline, self.message_timeout, where)
        watch.started()
        return watch.run(next_events, lambda k: "its connection closed mid-run")

    # ------------------------------------------------------------------ the plan
    def assemble(self, res: Run, exact: bool) -> Plan | None:
        plan = plan_of(res.agents) if res.stages else None
        if plan is None:
            return None
        evaluation = evaluation_of(self.public, plan, res.agents)
        if evaluation.violations:
            raise AgentFailure(f"the agents' plan breaks a rule: {evaluation.violations[0]}",
                               None)
        check_claims(self.public, evaluation, res.agents, exact=exact)
        self._evaluations[plan] = evaluation
        return plan

    def evaluation(self, plan: Plan) -> Evaluation:
        """The evaluation of a plan :meth:`assemble` returned."""
        return self._evaluations[plan]

    def iteration_time(self, plan: Plan) -> float:
        return self.evaluation(plan).iteration_time_s

    def infeasibility_reason(self) -> str:
        return ("no plan satisfies the memory and device limits of the DCs (exhaustive "
                "CDynP; each DC's own reasons stay private)")


def _close_all(socks: list, readers: list[threading.Thread]) -> None:
    """Shut every connection down, let the threads reading them see the end, then close.

    Closing a TLS socket while another thread may still read it is unsafe: its file
    descriptor can be reused by the next connection, which the old reader would then
    read from (seen as bad record MACs on the next run's connections).
    """
    for sock in socks:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    for t in readers:
        t.join(timeout=5.0)
    for sock in socks:
        sock.close()


def _check_report(name: str, where: str, report) -> None:
    """A report from another host, checked before anything is taken from it."""
    def bad(what: str) -> AgentFailure:
        return AgentFailure(f"the agent of DC {name!r}{where} sent a bad report: {what}", name)

    if not isinstance(report, dict) or report.get("datacenter") != name:
        raise bad("it does not name its DC")
    if not isinstance(report.get("stages"), list):
        raise bad("stages: not a list")
    est = report.get("estimate")
    if est is not None and not (isinstance(est, (int, float)) and not isinstance(est, bool)
                                and math.isfinite(est) and est >= 0):
        raise bad("estimate: not a finite number >= 0")
    sent = report.get("sent")
    if not isinstance(sent, list) or len(sent) > 3:
        raise bad("sent: not a list of at most three messages")
    for m in sent:
        if not (isinstance(m, dict) and isinstance(m.get("file"), str)
                and _FILE.fullmatch(m["file"]) and m.get("from") == name
                and isinstance(m.get("bytes"), int) and m.get("kind") in ("prefix", "summary", "assemble")
                and (m.get("text") is None or (isinstance(m["text"], str)
                                               and len(m["text"]) == m["bytes"]))):
            raise bad("sent: a message record that is not one")


def _write_trace(trace_dir, reports: list[dict]) -> None:
    """Every message the agents sent, under the name and with the bytes it had."""
    Path(trace_dir).mkdir(parents=True, exist_ok=True)
    for report in reports:
        for m in report["sent"]:
            text = m.pop("text", None)
            if text is not None:
                data = text.encode("ascii", "replace")
                atomic_write(Path(trace_dir, m["file"]), lambda tmp, d=data: tmp.write_bytes(d))


def solve_remote(public: dict, agents: dict, ctx, *, time_limit=None, trace_dir=None,
                 message_timeout=MESSAGE_TIMEOUT_S, probe=None, **options):
    """Solve the public instance with the agents on their hosts; the :class:`Result`.

    Parameters
    ----------
    public : dict
        The ``chainpipe-public/1`` document the agents hold too.
    agents : dict
        DC name -> ``HOST:PORT`` (:func:`read_agents`).
    ctx : ssl.SSLContext
        The owner's TLS client context.
    time_limit : float, optional
        Seconds for the whole solve; with it, a silent agent is named at most
        :data:`.watch.GRACE_S` seconds after it.
    trace_dir : path, optional
        Where every DC-to-DC message is written, as the in-process run writes it.
    message_timeout : float
        Seconds an agent may stay silent while it should be working.
    probe : bool, optional
        As for :func:`chainpipe.solvers.cdynp.run`.
    **options
        ``epsilon``, ``quantum``, ``digits``, ``max_entries``, ``upper_bound``,
        ``prefix_bound``.

    Returns
    -------
    tuple of (Result, Evaluation or None)
        The result as :func:`chainpipe.solve` gives it for ``solver="cdynp"`` on the
        whole instance, and its plan's evaluation from the agents' reported costs.
    """
    from ...result import InstanceRef, OptionError, Outcome, number_option, result_of
    from ...support import refusal
    from .drive import agent_options, drive

    deadline = Deadline(time_limit)
    unknown = sorted(set(options) - {"epsilon", "quantum", "digits", "max_entries",
                                     "upper_bound"})
    if unknown:
        raise OptionError(f"cdynp across hosts: unknown option(s) {', '.join(unknown)}")
    message_timeout = number_option("cdynp", "message_timeout", message_timeout, strict=True)
    backend = RemoteAgents(public, agents, ctx, message_timeout)
    from ...support import features

    reason = refusal(backend.public.training, "cdynp")
    if reason is None and "pipelines" in features(backend.public.training):
        # the range runs (.pipelines) start sessions on sub-chains, which the agents'
        # servers (serve.py) do not offer yet
        reason = ("cdynp across hosts does not support contract version 3 yet: "
                  + features(backend.public.training)["pipelines"])
    if reason:
        return result_of(InstanceRef(backend.public.name), "cdynp", Outcome("error", message=reason),
                         None, deadline.elapsed()), None
    outcome = drive(backend, agent_options(**options), deadline=deadline, probe=probe,
                    trace_dir=trace_dir)
    ev = backend.evaluation(outcome.plan) if outcome.plan is not None else None
    return result_of(InstanceRef(backend.public.name), "cdynp", outcome, ev,
                     deadline.elapsed()), ev


def read_agents(doc, names, path="AGENTS") -> dict:
    """The AGENTS document: ``{"<dc name>": "host:port", ...}`` for exactly the chain's DCs.

    Raises
    ------
    InstanceError
        One line per problem, naming the file and the key.
    """
    from ...instance import InstanceError

    if not isinstance(doc, dict):
        raise InstanceError([f"{path}: must be an object mapping each DC name to HOST:PORT"])
    problems = []
    for name in names:
        if name not in doc:
            problems.append(f"{path}: {name}: missing (the address of DC {name!r}'s agent)")
    for name, addr in doc.items():
        if name not in names:
            problems.append(f"{path}: {name[:40]}: not a DC of the chain {list(names)}")
            continue
        try:
            net.parse_address(addr)
        except ValueError as exc:
            problems.append(f"{path}: {name}: {exc}")
    if problems:
        raise InstanceError(problems)
    return dict(doc)
