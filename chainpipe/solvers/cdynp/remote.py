"""The job's owner of a CDynP run across hosts (``chainpipe solve PUBLIC --agents``).

The owner holds the public document only. It connects to every DC's agent at the
address the AGENTS file gives, over TLS with its own certificate, checks that the
certificate names that DC, and keeps that connection for the runs of its solve (the
probes and the main run, as in :func:`chainpipe.solvers.cdynp.run`, and every range
run: :class:`Connections`). For each run it sends every agent the run's header at
once and awaits no answer (an agent's first event says that it took the run; DC 1's
``prefix`` waits at its neighbour for the owner's header if it arrives first), then
watches their events (:class:`.watch.Watch`), read in its own thread as they come
(:class:`_Events`), until every report is in. The plan is assembled from what each
agent reports of its own stages, and its ``T`` from what they cost (:mod:`.assemble`).

Under contract version 3 the owner runs what the in-process owner runs
(:func:`chainpipe.solvers.cdynp.solve_chain`, :func:`.pipelines.solve_several`): the
classic solve that bounds a period run, and with several pipelines one range run per
range, ``M_p`` and synchronisation limit, each on that range's agents only, its header
naming the chain (:class:`RemoteOwner`); the plans' costs come from the agents'
reports, combined as :func:`chainpipe.plan.evaluate` combines them.

A run's connections go back to the solve's :class:`Connections` only when every
agent's last event of that run was read (``done``); otherwise they are closed (each
agent then ends its part), and the next run connects anew. Every event names its run,
and one that names another ends the run. All connections are closed when the solve
ends, whatever ended it, unless they are a long-lived owner's, given to
:func:`solve_remote` for several solves (``connections=``): its solves then make no
TLS handshake after the first, and it closes them.

An agent that cannot be reached (after :data:`.net.CONNECT_S` seconds of
retries), refuses, dies (its connection closes) or stays silent (past the time
limit plus :data:`.watch.GRACE_S`, or ``message_timeout`` seconds while it
should be working) ends the solve with one line naming the DC and its address.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import secrets
import select
import threading
import time
from pathlib import Path

from ... import cost
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


class Connections:
    """The owner's connections to the agents for the life of one solve (or of several:
    a long-lived owner passes its own to :func:`solve_remote`).

    A run takes one connection per agent of its range (one kept from an earlier run
    when there is one, :class:`.net.Pool`; new ones are made in parallel, and at the
    first run to every agent of the chain, since the solve's later runs will ask them:
    their handshakes then overlap instead of each delaying a run) and gives them back
    (:meth:`give`) only when it ended cleanly; :meth:`close` closes every kept one.
    Without an error or a gap of more than :data:`.net.REUSE_S` seconds between two
    runs, a solve makes one TLS connection per agent, and solves that share one
    :class:`Connections` none after the first; three are kept per agent: the owner's
    runs, the floor runs it makes ahead meanwhile
    (:meth:`.pipelines.RangeRuns.start_floors_ahead`) and the search of several pipelines
    beside the one-pipeline solve's period run (:data:`.pipelines.BESIDE`) may each
    hold one at once.

    Parameters
    ----------
    agents : dict
        DC name -> ``HOST:PORT`` of its agent.
    ctx : ssl.SSLContext
        The owner's TLS client context.
    """

    def __init__(self, agents: dict, ctx):
        self.agents = dict(agents)
        self.pool = net.Pool(ctx, per_peer=3)
        self._first = True

    def begin(self) -> None:
        """A solve starts: its first run connects to every agent that has no kept
        connection, at once."""
        self._first = True

    @property
    def opened(self) -> int:
        """TLS connections made so far (each one handshake)."""
        return self.pool.opened

    @property
    def reused(self) -> int:
        """Times a run took a connection kept from an earlier run."""
        return self.pool.reused

    @property
    def resumed(self) -> int:
        """Connections made that resumed the TLS session of an earlier one to the same
        agent (:func:`.net.remember_session`: an earlier solve's, in this process)."""
        return self.pool.resumed

    def take(self, names: list[str], deadline: Deadline) -> tuple[list, list[bool]]:
        """A connection to every agent of ``names`` and, for each, whether it was kept;
        the first failure, by chain order, as an :class:`AgentFailure`."""
        out: list = [None] * len(names)
        kept = [False] * len(names)
        errors: list = [None] * len(names)

        def one(k: int, fresh: bool = False) -> None:
            try:
                out[k], kept[k] = self.pool.take(self.agents[names[k]], names[k],
                                                 deadline=deadline, fresh=fresh)
            except (OSError, net.Refused) as exc:
                errors[k] = exc

        for k in range(len(names)):  # kept ones at once, in this thread
            if self.pool.has_idle(self.agents[names[k]], names[k]):
                one(k)
        # new connections at once: every one but the first in a thread of its own, the
        # first in this thread meanwhile (a thread's start waits until it runs: on a
        # loaded host, a time slice)
        new = [k for k in range(len(names)) if out[k] is None and errors[k] is None]
        threads = [threading.Thread(target=one, args=(k, True), daemon=True)
                   for k in new[1:]]
        if self._first:  # the other agents too, kept for later runs (a failure is theirs)
            self._first = False
            threads += [threading.Thread(target=self._keep, args=(name, deadline),
                                         daemon=True)
                        for name in self.agents if name not in names
                        and not self.pool.has_idle(self.agents[name], name)]
        for t in threads:
            t.start()
        try:
            if new:
                one(new[0], True)
        finally:
            for t in threads:
                t.join()
        bad = next((k for k in range(len(names)) if errors[k] is not None), None)
        if bad is not None:
            for s in out:
                if s is not None:
                    net.close(s)
            raise self._unreachable(names[bad], errors[bad])
        return out, kept

    def _keep(self, name: str, deadline: Deadline) -> None:
        """Connect to ``name``'s agent ahead of the run that needs it (a failure is
        reported by that run, which tries again)."""
        try:
            sock, _kept = self.pool.take(self.agents[name], name, deadline=deadline,
                                         fresh=True)
        except (OSError, net.Refused):
            return
        self.pool.give(self.agents[name], name, sock)

    def renew(self, name: str, deadline: Deadline):
        """A new connection to ``name``'s agent (:class:`AgentFailure` if none)."""
        try:
            return self.pool.take(self.agents[name], name, deadline=deadline, fresh=True)[0]
        except (OSError, net.Refused) as exc:
            raise self._unreachable(name, exc) from None

    def _unreachable(self, name: str, exc: Exception) -> AgentFailure:
        return AgentFailure(f"cannot reach the agent of DC {name!r} at {self.agents[name]}: "
                            f"{exc}", name)

    def give(self, names: list[str], socks: list) -> None:
        """Keep a cleanly ended run's connections for the next run."""
        for name, sock in zip(names, socks):
            self.pool.give(self.agents[name], name, sock)

    def close(self) -> None:
        """Close every kept connection (each agent's thread for it then ends)."""
        self.pool.close()


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
    chain : tuple, optional
        ``(first, last, microbatches, objective)``: the runs are range runs of the DCs
        ``first..last`` planning one pipeline of ``microbatches`` (``objective`` ``None``:
        the instance's), sent to the agents in each run's header
        (:meth:`.public.PublicInstance.chain`); ``None``: the whole instance as it is.
    count_sync : bool, default True
        ``False`` for a range run under ``sync_cap`` (its points count no ``R``).
    reports : dict, optional
        Where the agents' reports of each assembled plan are kept, shared with the
        backends of the same chain under another objective (:meth:`with_objective`).
    connections : Connections, optional
        The solve's connections, which its runs share; ``None``: each run connects anew
        and closes its connections at its end.
    parsed : tuple, optional
        ``(PublicInstance, digest)`` of ``public`` (:func:`.public.read_public`,
        :func:`.net.public_digest`), read once for the backends of one solve; ``None``:
        read here.
    """

    mode = "tls"

    def __init__(self, public: dict, agents: dict, ctx, message_timeout=MESSAGE_TIMEOUT_S,
                 *, chain: tuple | None = None, count_sync: bool = True,
                 reports: dict | None = None, connections: Connections | None = None,
                 parsed: tuple | None = None):
        self.document = public
        whole, self.digest = parsed or (read_public(public), net.public_digest(public))
        self._whole = whole
        self.chain = chain
        self.public = whole if chain is None else whole.chain(*chain)
        self.all_agents = dict(agents)
        self.agents = {name: agents[name] for name in self.public.datacenter_names}
        self.ctx = ctx
        self.message_timeout = float(message_timeout)
        self.count_sync = count_sync
        self._reports = {} if reports is None else reports
        self.connections = connections

    def with_objective(self, objective: str) -> RemoteAgents:
        """The same agents on the same chain under ``objective`` (the classic solve that
        bounds a period run); plans assembled by either are evaluated by both."""
        first, last, m = (0, self.public.num_datacenters - 1, self.public.microbatches) \
            if self.chain is None else self.chain[:3]
        return RemoteAgents(self.document, self.all_agents, self.ctx, self.message_timeout,
                            chain=(first, last, m, objective), count_sync=self.count_sync,
                            reports=self._reports, connections=self.connections,
                            parsed=(self._whole, self.digest))

    def _header_chain(self) -> dict | None:
        if self.chain is None:
            return None
        first, last, m, objective = self.chain
        return {"first": first, "last": last, "microbatches": m,
                "objective": self.public.training.objective if objective is None
                else objective}

    # ------------------------------------------------------------------ one run
    def one_run(self, options: dict, trace_dir, deadline: Deadline) -> Run:
        names = list(self.public.datacenter_names)
        run_id = secrets.token_hex(16)
        conns = self.connections or Connections(self.agents, self.ctx)  # this run alone
        where = [f" at {self.agents[n]}" for n in names]
        socks: list = []
        clean = False
        try:
            socks, kept = conns.take(names, deadline)
            header = net.encode_json({
                "net": net.NET, "kind": "run", "run": run_id, "public_sha256": self.digest,
                "agents": self.agents,
                "options": {k: v for k, v in options.items() if v is not None},
                "time_limit_s": None if deadline.unlimited else deadline.remaining(),
                "trace": trace_dir is not None, "chain": self._header_chain()})
            events = _Events(conns, names, where, socks, kept, run_id)
            events.start(header, deadline)  # every agent at once: they chain the start
            watch = Watch(names, deadline, self.message_timeout, where)
            watch.started()
            reports = watch.run(events.next_events, lambda k: "its connection closed mid-run")
            clean = True
        finally:
            if clean:
                conns.give(names, socks)
            else:
                for sock in socks:
                    if sock is not None:
                        net.close(sock)
            if conns is not self.connections:
                conns.close()
        for k, report in enumerate(reports):
            _check_report(names[k], where[k], report)
        if trace_dir is not None:
            _write_trace(trace_dir, reports)
        return collect(reports)

    # ------------------------------------------------------------------ the plan
    def _key(self, plan: Plan) -> tuple:
        """A plan's key among the kept reports: the same stages of another range or
        microbatch count cost differently."""
        first, last, m = (None, None, None) if self.chain is None else self.chain[:3]
        return first, last, m, plan

    def assemble(self, res: Run, exact: bool) -> Plan | None:
        plan = plan_of(res.agents) if res.stages else None
        if plan is None:
            return None
        evaluation = evaluation_of(self.public, plan, res.agents)
        if evaluation.violations:
            raise AgentFailure(f"the agents' plan breaks a rule: {evaluation.violations[0]}",
                               None)
        check_claims(self.public, evaluation, res.agents, exact=exact,
                     count_sync=self.count_sync)
        self._reports[self._key(plan)] = res.agents
        return plan

    def evaluation(self, plan: Plan) -> Evaluation:
        """The evaluation, on this chain and under its objective, of a plan that
        :meth:`assemble` (of this backend or of its sibling under another objective)
        returned, from the costs its agents reported."""
        return evaluation_of(self.public, plan, self._reports[self._key(plan)])

    def iteration_time(self, plan: Plan) -> float:
        return self.evaluation(plan).iteration_time_s

    def infeasibility_reason(self) -> str:
        return ("no plan satisfies the memory and device limits of the DCs (exhaustive "
                "CDynP; each DC's own reasons stay private)")


class RemoteOwner:
    """The job's owner across hosts (:func:`.pipelines.solve_several`'s owner): range
    runs on the agents of a range (:meth:`chain`), plans evaluated from what the agents
    reported of their costs and the public links.

    Parameters
    ----------
    public, agents, ctx, message_timeout, connections
        As for :class:`RemoteAgents`: every range run's backend shares ``connections``.
    """

    mode = "tls"

    def __init__(self, public: dict, agents: dict, ctx, message_timeout=MESSAGE_TIMEOUT_S,
                 connections: Connections | None = None):
        self.document, self.agents, self.ctx = public, agents, ctx
        self.connections = connections
        self.message_timeout = message_timeout
        self.public = read_public(public)
        self._parsed = (self.public, net.public_digest(public))
        self._reports: dict = {}
        self._evaluations: dict[Plan, Evaluation] = {}

    def chain(self, first: int, last: int, microbatches: int,
              count_sync: bool = True) -> RemoteAgents:
        """The agents of DCs ``first..last`` planning one pipeline of ``microbatches``."""
        return RemoteAgents(self.document, self.agents, self.ctx, self.message_timeout,
                            chain=(first, last, microbatches, None), count_sync=count_sync,
                            reports=self._reports, connections=self.connections,
                            parsed=self._parsed)

    def evaluation(self, plan: Plan, pipelines=None) -> Evaluation:
        """The evaluation of ``plan`` from its pipelines' costs (``pipelines``, each from its
        range run, in plan order; ``None``: a plan evaluated before), as
        :func:`chainpipe.plan.evaluate` ends: ``T = max_p T_p + max R_s + R_X / H``, ``R_X``
        over the public chain links of the plan's span."""
        if pipelines is None:
            return self._evaluations[plan]
        from ...plan import assemble

        names = list(self.public.datacenter_names)
        pipes = [dataclasses.replace(
            pc, index=p, stages=tuple(dataclasses.replace(c, pipeline=p) for c in pc.stages),
            boundaries=tuple(dataclasses.replace(b, pipeline=p) for b in pc.boundaries))
            for p, pc in enumerate(pipelines)]
        cross_s, cross = 0.0, "none"
        if len(pipes) > 1:
            lo = names.index(pipes[0].stages[0].datacenter)
            hi = names.index(pipes[-1].stages[-1].datacenter)
            bandwidth, latency = cost.chain_path(self.public.links, lo, hi)
            tr = self.public.training
            total = float(sum(ly.params for ly in self.public.model.layers))
            cross_s = float(cost.cross_sync_time(total, tr.gradient_bytes_per_param,
                                                 bandwidth, latency))
            cross = (f"{len(pipes)} pipelines over {names[lo]}..{names[hi]} "
                     f"({bandwidth:.4g} B/s, {latency:.4g} s)")
        tr = self.public.training
        ev = assemble(pipes, (), cross_s, cross, tr.pipeline_sync_period, tr.objective)
        self._evaluations[plan] = ev
        return ev

    def infeasibility_reason(self) -> str:
        return ("no plan of an allowed pipeline count satisfies the memory and device limits "
                "of the DCs (exhaustive CDynP; each DC's own reasons stay private)")


class _Events:
    """One run's events, read from every agent's connection in the owner's thread.

    :meth:`start` sends the run's header to every agent at once (no answer is awaited:
    an agent's first event says that it took the run, a ``{"refused": ...}`` frame that
    it did not; DC 1's prefix may reach a neighbour before the owner's header does, and
    waits for it there, :data:`.net.EARLY_S`). :meth:`next_events` is the
    :class:`.watch.Watch`'s source: the events of the agents whose connections turn
    readable within a timeout, read without blocking (:class:`.wire.FrameReader`: a
    frame not whole yet waits for its next bytes, and an agent that sends no whole event
    is silent to the watch). A
    kept connection that its agent closed while it was idle (the header's write or the
    first read fails before the agent said anything of this run) is replaced by a new
    one carrying the same header, once.
    """

    def __init__(self, conns: Connections, names: list, where: list, socks: list,
                 kept: list, run_id: str):
        self.conns, self.names, self.where = conns, names, where
        self.socks, self.kept, self.run_id = socks, kept, run_id
        self.heard = [False] * len(names)  # a frame of this run read from the agent
        self.readers = [wire.FrameReader(sock, net.EVENT_LIMIT) for sock in socks]
        self.open = set(range(len(names)))  # connections whose last event is still due
        self.header = b""
        self.deadline: Deadline | None = None

    def start(self, header: bytes, deadline: Deadline) -> None:
        """Send ``header`` to every agent (:class:`AgentFailure` if one cannot take it)."""
        self.header, self.deadline = header, deadline
        for k in range(len(self.names)):
            try:
                self.socks[k].settimeout(net.HANDSHAKE_S)
                wire.send(self.socks[k], header)
            except (wire.Closed, OSError) as exc:
                self._again(k, exc)

    def _again(self, k: int, exc: Exception) -> None:
        """Agent ``k``'s kept connection failed before it said anything of the run: once
        more on a new one if the agent had closed it while idle, else the failure."""
        if not (self.kept[k] and not self.heard[k] and net.closed_idle(exc)):
            raise self._not_taken(k, exc) from None
        net.close(self.socks[k])
        self.socks[k] = self.conns.renew(self.names[k], self.deadline)
        self.readers[k] = wire.FrameReader(self.socks[k], net.EVENT_LIMIT)
        self.kept[k] = False
        try:
            self.socks[k].settimeout(net.HANDSHAKE_S)
            wire.send(self.socks[k], self.header)
        except (wire.Closed, OSError) as again:
            raise self._not_taken(k, again) from None

    def _not_taken(self, k: int, exc: Exception) -> AgentFailure:
        return AgentFailure(f"the agent of DC {self.names[k]!r}{self.where[k]} did not take "
                            f"the run ({type(exc).__name__}: {str(exc)[:120]})", self.names[k])

    def next_events(self, timeout: float) -> list:
        """The ``(k, event or None)`` pairs of the agents heard within ``timeout`` s
        (``None``: its connection ended)."""
        if not self.open:  # every connection ended: the watch decides, no busy loop
            time.sleep(timeout)
            return []
        by_fd = {self.socks[k].fileno(): k for k in self.open}
        readable, _, _ = select.select(list(by_fd), [], [], timeout)
        out: list = []
        for k in sorted(by_fd[fd] for fd in readable):
            out += self._read(k)
        return out

    def _read(self, k: int) -> list:
        """Agent ``k``'s events that have come whole (and ``None`` after them if its
        connection ended)."""
        try:
            frames, closed = self.readers[k].frames()
        except (OSError, protocol.ProtocolError) as exc:
            frames, closed = [], exc
        if closed and not frames and self.kept[k] and not self.heard[k] and (
                closed is True or net.closed_idle(closed)):
            self._again(k, closed if closed is not True else wire.Closed())
            return []
        out = []
        for frame in frames:
            try:
                event = json.loads(frame.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                event = None
            out.append((k, self._event(k, event)))
            if k not in self.open:
                return out
        if closed:
            self.open.discard(k)
            out.append((k, None))
        return out

    def _event(self, k: int, event):
        """What agent ``k``'s frame ``event`` says to the watch (its first may refuse the
        run: :class:`AgentFailure`)."""
        if not self.heard[k] and isinstance(event, dict) and set(event) == {"refused"}:
            raise AgentFailure(f"the agent of DC {self.names[k]!r}{self.where[k]} refused the "
                               f"run: {str(event['refused'])[:200]}", self.names[k])
        self.heard[k] = True
        if not (isinstance(event, dict) and event.get("run") == self.run_id):
            self.open.discard(k)
            return {"event": "failed", "kind": "protocol", "blame": self.names[k],
                    "error": "an event that does not name this run"}
        if event.get("event") in ("done", "failed"):
            self.open.discard(k)
        return event


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
    for key in ("period_floor_s", "curve_floor_s"):
        floor = report.get(key)
        if floor is not None and not (isinstance(floor, (int, float))
                                      and not isinstance(floor, bool)
                                      and math.isfinite(floor) and floor > 0):
            raise bad(f"{key}: not a finite number > 0")
    if "curve_fills" in report and not _fills_ok(report["curve_fills"]):
        raise bad("curve_fills: not a floor run's fills")
    if "frontier" in report and not _frontier_ok(report["frontier"]):
        raise bad("frontier: not a frontier run's lines")
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


def _fills_ok(got) -> bool:
    """A floor run's fills (:meth:`.agent.DCAgent._fills_report`): at most
    :data:`.protocol.CURVE_MOST` values, each a finite number ``>= 0`` or ``None``."""
    return isinstance(got, list) and 0 < len(got) <= protocol.CURVE_MOST and all(
        v is None or (protocol.finite_number(v) and v >= 0) for v in got)


def _frontier_ok(got) -> bool:
    """A frontier run's report (:meth:`.agent.DCAgent._frontier_report`): ``first <=
    last`` microbatch counts and at most two lines per count, each ``[fill, period,
    settled]`` with finite values ``>= 0``."""
    if not (isinstance(got, dict) and set(got) == {"first", "last", "lines"}):
        return False
    lo, hi, lines = got["first"], got["last"], got["lines"]
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi < 2**31
            and isinstance(lines, list) and len(lines) <= 2 * (hi - lo + 1)):
        return False
    return all(isinstance(ln, list) and len(ln) == 3 and isinstance(ln[2], bool)
               and all(protocol.finite_number(v) and v >= 0 for v in ln[:2])
               for ln in lines)


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
                 message_timeout=MESSAGE_TIMEOUT_S, probe=None,
                 connections: Connections | None = None, **options):
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
    connections : Connections, optional
        Connections to ``agents`` kept by a long-lived owner for its solves (made with
        the same ``agents`` and ``ctx``; the caller closes them): this solve takes the
        ones still open (idle at most :data:`.net.REUSE_S` seconds) and gives back those
        of every run that ended cleanly. ``None``: the solve makes its own and closes
        them all when it ends, whatever ended it.
    **options
        ``epsilon``, ``quantum``, ``digits``, ``max_entries``, ``upper_bound``,
        ``prefix_bound``.

    Returns
    -------
    tuple of (Result, Evaluation or None)
        The result as :func:`chainpipe.solve` gives it for ``solver="cdynp"`` on the
        whole instance (its ``stats["connections"]``: the TLS connections the owner
        opened in this solve, how many of them resumed a TLS session of an earlier solve
        in this process, and the times a run reused one), and its plan's evaluation
        from the agents' reported costs.

    Raises
    ------
    ValueError
        ``connections`` to other agents, or with another TLS context.
    """
    from ...gc_pace import fewer_collections
    from ...result import InstanceRef, OptionError, Outcome, number_option, result_of
    from ...support import features, refusal
    from . import solve_chain
    from .drive import agent_options
    from .pipelines import solve_several

    deadline = Deadline(time_limit)
    unknown = sorted(set(options) - {"epsilon", "quantum", "digits", "max_entries",
                                     "upper_bound"})
    if unknown:
        raise OptionError(f"cdynp across hosts: unknown option(s) {', '.join(unknown)}")
    message_timeout = number_option("cdynp", "message_timeout", message_timeout, strict=True)
    own = connections is None
    if own:
        connections = Connections(agents, ctx)
    elif connections.agents != dict(agents) or connections.pool.ctx is not ctx:
        raise ValueError("cdynp across hosts: connections= must be to the same agents, with "
                         "the same TLS context")
    connections.begin()
    opened, reused, resumed = connections.opened, connections.reused, connections.resumed
    owner = RemoteOwner(public, agents, ctx, message_timeout, connections)
    name = InstanceRef(owner.public.name)
    if reason := refusal(owner.public.training, "cdynp"):
        return result_of(name, "cdynp", Outcome("error", message=reason), None,
                         deadline.elapsed()), None
    opts = agent_options(**options)
    try:
        with fewer_collections():  # as a solve in one process (chainpipe.gc_pace)
            if "pipelines" in features(owner.public.training):
                # the owner's search over counts, ranges and splits of M: range runs on the
                # agents of each range (each run's header names its chain), as in process
                outcome = solve_several(owner, opts, deadline, trace_dir, probe)
                ev = owner.evaluation(outcome.plan) if outcome.plan is not None else None
            else:
                backend = RemoteAgents(public, agents, ctx, message_timeout,
                                       connections=connections, parsed=owner._parsed)
                outcome = solve_chain(backend, opts, deadline, trace_dir=trace_dir,
                                      probe=probe)
                ev = backend.evaluation(outcome.plan) if outcome.plan is not None else None
    finally:  # whatever ended the solve: no connection of its own stays open
        if own:
            connections.close()
    outcome.stats["connections"] = {"opened": connections.opened - opened,
                                    "reused": connections.reused - reused,
                                    "resumed": connections.resumed - resumed}
    return result_of(name, "cdynp", outcome, ev, deadline.elapsed()), ev


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
