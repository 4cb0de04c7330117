"""The discrete-event simulation (simpy) of one policy on one scenario and seed.

Events: job arrivals (the stream of :func:`~.jobs.job_stream`), job finishes
(``iterations x T`` after the start), background steps (every
``background.change_s``), patience running out, and the scenario's link events
(``events``). After each arrival, finish, background step and link event the
policy is asked to place the waiting jobs; a job still waiting when its
patience runs out is blocked. A link event first asks the policy about every
running job whose reserved spans include the link (:meth:`Policy.adapt`): the
job goes on at the new ``T`` of its plan, or pauses for a move and goes on at
its new plan's; its finish moves accordingly. Equal times are
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
from .scenario import Scenario
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
    #: when it finished (``start + iterations x T`` unless a link event changed its pace)
    end_s: float | None = None
    #: its placement at the end (``placement`` unless a link event changed it)
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
    env = simpy.Environment()
    state = ResourceState(network)
    traffic = BackgroundTraffic(network, scenario.background, seed)
    records = {j.id: JobRecord(j) for j in jobs}
    waiting: list[JobRequest] = []
    run = Run(policy.name, list(records.values()), total_gpus=network.total_gpus())
    solves_before, solve_cpu_before = policy.planner.solves, policy.planner.solve_cpu_s
    running: dict[int, _Running] = {}
    done = env.event()
    total_wl = sum(network.wavelengths.values())

    resolved = on_resolved or (lambda: None)

    def check_done() -> None:
        if (not done.triggered and not waiting and not running
                and all(r.status != "waiting" for r in records.values())):
            done.succeed()

    def sample() -> None:
        run.samples.append(_sample(env.now, network, state, total_wl))

    def schedule() -> None:
        if not waiting:
            return
        placed = policy.place(list(waiting), state, env.now)
        for p in placed:
            _check_horizon(scenario, p, env.now)
            waiting.remove(p.job)
            _accept(run, records[p.job.id], p, state, env.now)
            job = running[p.job.id] = _Running(p, float(p.job.iterations), env.now)
            job.process = env.process(finish(job))
            resolved()
        if placed:
            sample()

    def finish(job: _Running):
        while True:
            try:
                yield env.timeout(job.remaining_s(env.now))
                break
            except simpy.Interrupt:  # a link event changed its pace: wait again
                continue
        state.release(job.placement)
        del running[job.placement.job.id]
        records[job.placement.job.id].end_s = env.now
        records[job.placement.job.id].final = job.placement
        sample()
        schedule()
        check_done()

    def expire(job: JobRequest):
        yield env.timeout(job.patience_s)
        if job in waiting:
            waiting.remove(job)
            records[job.id].block(policy.reasons.get(job.id, "not placed within its patience"))
            resolved()
            check_done()

    def arrivals():
        for job in jobs:
            yield env.timeout(max(0.0, job.arrival_s - env.now))
            waiting.append(job)
            env.process(expire(job))
            schedule()
        check_done()

    def background():
        while True:
            _check_waiting(scenario, env.now, len(waiting))
            state.set_background(traffic.step())
            policy.observe(env.now, state)
            sample()
            schedule()
            yield env.timeout(scenario.background.change_s)

    def link_events():
        for ev in scenario.events:
            yield env.timeout(max(0.0, ev.at_s - env.now))
            span = edge(*ev.between)
            state.impair(span, ev.bandwidth, ev.latency)
            for jid in sorted(running):
                if span in running[jid].placement.wavelengths:
                    _adapt(policy, state, running[jid], env.now)
            sample()
            schedule()

    env.process(arrivals())
    env.process(background())
    env.process(link_events())
    try:
        env.run(until=done)
    except PastHorizon as exc:
        raise InstanceError([str(exc)]) from None
    return _close(run, policy, state, env.now, solves_before, solve_cpu_before)


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
    run.extra = policy.report()
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
