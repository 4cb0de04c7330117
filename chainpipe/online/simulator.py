"""The discrete-event simulation (simpy) of one policy on one scenario and seed.

Events: job arrivals (the stream of :func:`~.jobs.job_stream`), job finishes
(``iterations x T`` after the start), background steps (every
``background.change_s``), patience running out, and the scenario's link and
device events (``events``). After each arrival, finish, background step and event
the policy is asked to place the waiting jobs; a job still waiting when its
patience runs out is blocked. An event first asks the policy about every
running job whose reserved spans include the link, or which holds the GPUs
(:meth:`Policy.adapt`): the job goes on at the new ``T`` of its plan, or pauses
for a move and goes on at its new plan's; its finish moves accordingly. Equal times are
handled in the order simpy schedules them, which depends only on the scenario
and the seed: the same inputs give the same records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import simpy

from ..instance import InstanceError
from .jobs import JobRequest, horizon_s, horizon_text, job_stream
from .network import Network, edge
from .offers import Planner
from .policies import Policy
from .scenario import DeviceEvent, Scenario
from .state import Placement, ResourceState
from .traffic import BackgroundTraffic


@dataclass
class JobRecord:
    """What happened to one job request under one policy."""

    job: JobRequest
    status: str = "waiting"  # accepted | blocked
    start_s: float | None = None
    placement: Placement | None = None
    reason: str = ""
    #: when it finished (``start + iterations x T`` unless an event changed its pace)
    end_s: float | None = None
    #: its placement at the end (``placement`` unless an event changed it)
    final: Placement | None = None

    @property
    def wait_s(self) -> float:
        if self.start_s is None:
            return self.job.patience_s
        # the clock reaches an arrival as now + (arrival - now): it may round below it
        return max(0.0, self.start_s - self.job.arrival_s)

    def block(self, reason: str) -> None:
        """The job was not placed within its patience, for ``reason``."""
        self.status, self.reason = "blocked", reason


@dataclass
class Sample:
    """The network after a change (a background step, placements, a finish): time, share of
    GPUs held, mean span load, share of all wavelengths reserved by jobs."""

    time_s: float
    gpu_utilisation: float
    span_load: float
    reserved_share: float


@dataclass
class Run:
    """The outcome of one policy on one scenario and seed."""

    policy: str
    records: list[JobRecord]
    samples: list[Sample] = field(default_factory=list)
    end_s: float = 0.0
    extra: dict = field(default_factory=dict)
    peak_gpus: int = 0
    peak_reserved: dict = field(default_factory=dict)
    total_gpus: int = 0
    solver_calls: int = 0
    solve_cpu_s: float = 0.0


def simulate(scenario: Scenario, policy: Policy, seed: int, *, network: Network | None = None,
             jobs: list[JobRequest] | None = None, on_resolved=None) -> Run:
    """Run ``policy`` on ``scenario`` with ``seed`` until every job is resolved and finished.

    Parameters
    ----------
    scenario : Scenario
    policy : Policy
        A fresh policy (it keeps forecasts and reasons for this run).
    seed : int
        Seeds the job stream and the background traffic.
    network : Network, optional
        The scenario's network (built when not given).
    jobs : list of JobRequest, optional
        The stream (default :func:`job_stream`).
    on_resolved : callable, optional
        Called with no argument each time a job is accepted or blocked (progress).

    Returns
    -------
    Run

    Raises
    ------
    InstanceError
        The simulation would pass its horizon (:func:`~.jobs.horizon_s`): an arrival
        past it, a job placed to run past it (naming ``jobs.iterations``), or a job
        still waiting there (naming ``jobs.patience_s``).
    OverAllocation
        Never for a correct policy: devices or wavelengths over-allocated.
    RuntimeError
        If resources are still held once every job has finished.
    """
    network = network or policy.planner.network
    jobs = job_stream(scenario, seed) if jobs is None else jobs
    sim = _Simulation(scenario, policy, seed, network, jobs, on_resolved or (lambda: None))
    for process in (sim.arrivals(), sim.background(), sim.link_events()):
        sim.env.process(process)
    try:
        sim.env.run(until=sim.done)
    except PastHorizon as exc:
        raise InstanceError([str(exc)]) from None
    return _close(sim.run, policy, sim.state, sim.env.now, sim.solves_before,
                  sim.solve_cpu_before)


class _Simulation:
    """The state of one :func:`simulate` run and its simpy processes (module doc)."""

    def __init__(self, scenario: Scenario, policy: Policy, seed: int, network: Network,
                 jobs: list[JobRequest], resolved):
        self.scenario, self.policy, self.network, self.jobs = scenario, policy, network, jobs
        self.resolved = resolved
        self.env = simpy.Environment()
        self.state = ResourceState(network)
        self.traffic = BackgroundTraffic(network, scenario.background, seed)
        self.records = {j.id: JobRecord(j) for j in jobs}
        self.waiting: list[JobRequest] = []
        self.run = Run(policy.name, list(self.records.values()), total_gpus=network.total_gpus())
        self.solves_before = policy.planner.solves
        self.solve_cpu_before = policy.planner.solve_cpu_s
        self.running: dict[int, _Running] = {}
        self.done = self.env.event()
        self.total_wl = sum(network.wavelengths.values())

    def check_done(self) -> None:
        if (not self.done.triggered and not self.waiting and not self.running
                and all(r.status != "waiting" for r in self.records.values())):
            self.done.succeed()

    def sample(self) -> None:
        self.run.samples.append(_sample(self.env.now, self.network, self.state, self.total_wl))

    def schedule(self) -> None:
        """Ask the policy to place the waiting jobs; start each one placed."""
        if not self.waiting:
            return
        now = self.env.now
        placed = self.policy.place(list(self.waiting), self.state, now)
        for p in placed:
            _check_horizon(self.scenario, p, now)
            self.waiting.remove(p.job)
            _accept(self.run, self.records[p.job.id], p, self.state, now)
            job = self.running[p.job.id] = _Running(p, float(p.job.iterations), now)
            job.process = self.env.process(self.finish(job))
            self.resolved()
        if placed:
            self.sample()

    def finish(self, job: _Running):
        while True:
            try:
                yield self.env.timeout(job.remaining_s(self.env.now))
                break
            except simpy.Interrupt:  # an event changed its pace: wait again
                continue
        self.state.release(job.placement)
        del self.running[job.placement.job.id]
        record = self.records[job.placement.job.id]
        record.end_s, record.final = self.env.now, job.placement
        self.sample()
        self.schedule()
        self.check_done()

    def expire(self, job: JobRequest):
        yield self.env.timeout(job.patience_s)
        if job in self.waiting:
            self.waiting.remove(job)
            self.records[job.id].block(self.policy.reasons.get(
                job.id, "not placed within its patience"))
            self.resolved()
            self.check_done()

    def arrivals(self):
        for job in self.jobs:
            yield self.env.timeout(max(0.0, job.arrival_s - self.env.now))
            self.waiting.append(job)
            self.env.process(self.expire(job))
            self.schedule()
        self.check_done()

    def background(self):
        while True:
            _check_waiting(self.scenario, self.env.now, len(self.waiting))
            self.state.set_background(self.traffic.step())
            self.policy.observe(self.env.now, self.state)
            self.sample()
            self.schedule()
            yield self.env.timeout(self.scenario.background.change_s)

    def link_events(self):
        """Each scenario event in turn: the span changes, then every running job crossing it
        is adapted (:func:`_adapt`), then the waiting jobs are placed."""
        for ev in self.scenario.events:
            yield self.env.timeout(max(0.0, ev.at_s - self.env.now))
            if isinstance(ev, DeviceEvent):
                key = (ev.datacenter, ev.gpu)
                self.state.slow(*key, ev.speed)
                touched = [j for j in sorted(self.running)
                           if key in self.running[j].placement.devices]
            else:
                span = edge(*ev.between)
                self.state.impair(span, ev.bandwidth, ev.latency)
                touched = [j for j in sorted(self.running)
                           if span in self.running[j].placement.wavelengths]
            for jid in touched:
                _adapt(self.policy, self.state, self.running[jid], self.env.now)
            self.sample()
            self.schedule()


@dataclass
class _Running:
    """A running job: its placement now, the iterations left at ``since`` and when they
    resume (after a move's pause)."""

    placement: Placement
    left: float
    since: float
    process: object = None

    def left_at(self, now: float) -> float:
        """Iterations still to run at ``now`` (none progress before ``since``)."""
        done = max(0.0, now - self.since) / self.placement.iteration_time_s
        return max(0.0, self.left - done)

    def remaining_s(self, now: float) -> float:
        """Seconds from ``now`` to its finish."""
        return max(0.0, self.since - now) + self.left_at(now) * self.placement.iteration_time_s


def _adapt(policy: Policy, state: ResourceState, job: _Running, now: float) -> None:
    """Ask ``policy`` about a running job whose link changed; move it if told to, then wake
    its finish process to wait for the new finish."""
    left = job.left_at(now)
    if now < job.since:  # still moving: its pause goes on
        left = job.left
    old = job.placement
    new = policy.adapt(old, state, left, now)
    if not math.isfinite(new.iteration_time_s) or new.iteration_time_s <= 0:
        raise RuntimeError(f"{policy.name}: job {old.job.id} has no finite iteration time "
                           f"after a link event")
    pause = policy.adaptations[-1].move_s if policy.adaptations else 0.0
    if new.devices != old.devices or new.wavelengths != old.wavelengths:
        state.release(old)
        state.allocate(new)
    job.placement, job.left = new, left
    job.since = max(job.since, now) + pause if now < job.since else now + pause
    job.process.interrupt()


def _check_waiting(scenario: Scenario, now: float, waiting: int) -> None:
    """Past the horizon only a job still waiting keeps the background going: refuse it."""
    if now > horizon_s(scenario):
        raise PastHorizon(f"jobs.patience_s: {waiting} job(s) still waiting at {now:.3g} s, "
                          f"past {horizon_text(scenario)}")


def _sample(now: float, network: Network, state: ResourceState, total_wl: int) -> Sample:
    """The resources in use at ``now``: GPUs, span load and wavelengths reserved."""
    return Sample(now, state.busy_gpus() / network.total_gpus(),
                  sum(state.span_load(s) for s in network.spans) / max(1, len(network.spans)),
                  sum(state.reserved.values()) / max(1, total_wl))


def _accept(run: Run, rec: JobRecord, p: Placement, state: ResourceState, now: float) -> None:
    """Record a job placed at ``now``, and the peaks its placement reaches."""
    rec.status, rec.start_s, rec.placement = "accepted", now, p
    run.peak_gpus = max(run.peak_gpus, state.busy_gpus())
    for s in p.wavelengths:
        run.peak_reserved[s] = max(run.peak_reserved.get(s, 0), state.reserved[s])


def _close(run: Run, policy: Policy, state: ResourceState, end_s: float, solves_before: int,
           solve_cpu_before: float) -> Run:
    """Finish ``run``: its end, the policy's report and the solver calls it made."""
    run.end_s = end_s
    if not state.idle():
        raise RuntimeError(f"{policy.name}: resources still held after every job finished")
    run.extra = {**policy.report(), **policy.adaptation_report()}
    run.solver_calls = policy.planner.solves - solves_before
    run.solve_cpu_s = policy.planner.solve_cpu_s - solve_cpu_before
    return run


class PastHorizon(Exception):
    """Raised inside the simulation (simpy re-raises it from ``run``) when it would pass its
    horizon; :func:`simulate` turns it into the one-line :class:`InstanceError`."""


def _check_horizon(scenario: Scenario, p: Placement, now: float) -> None:
    """Raise :class:`PastHorizon` if placement ``p`` would run past the horizon."""
    end = now + p.duration_s
    if not (math.isfinite(end) and end <= horizon_s(scenario)):
        job = p.job
        raise PastHorizon(
            f"jobs.iterations: job {job.id} ({job.model}, {job.microbatches} microbatches) "
            f"placed at {now:.3g} s runs {job.iterations} iterations of "
            f"T = {p.iteration_time_s:.3g} s, until {end:.3g} s, past {horizon_text(scenario)}")


def make_policy(name: str, planner: Planner) -> Policy:
    """A fresh policy ``name`` on ``planner``."""
    from .policies import policy_classes

    return policy_classes()[name](planner)
