"""Job requests of the online simulation: a seeded Poisson stream, or a trace.

Each request names a model of the catalogue (:mod:`chainpipe.instances.models`,
tensor-parallel figures on), its microbatches, its number of iterations and its
GPU budget; it may wait ``patience_s`` seconds for a placement before it is
blocked.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from ..instance import InstanceError, Model, Parallelism, Training
from ..instances.generator import (
    BYTES_PER_PARAM,
    GRADIENT_BYTES_PER_PARAM,
    OPTIMIZER_BYTES_PER_PARAM,
)
from ..instances.models import model_layers, model_shape
from .scenario import MAX_STEPS, Planning, Scenario


@dataclass(frozen=True)
class JobRequest:
    """One training job asking to be placed.

    Attributes
    ----------
    id : int
        Position in the stream, from 0.
    arrival_s : float
        When it arrives, in seconds of simulated time.
    model : str
        A catalogue model.
    microbatches : int
        ``M`` of each iteration.
    iterations : int
        Iterations to run; the job holds its resources ``iterations * T`` seconds.
    gpus : int
        Its GPU budget: a plan uses at most this many devices.
    patience_s : float
        How long it may wait for a placement before it is blocked.
    max_wavelengths : int
        The most wavelengths it reserves on one fibre span.
    """

    id: int
    arrival_s: float
    model: str
    microbatches: int
    iterations: int
    gpus: int
    patience_s: float
    max_wavelengths: int


def stream_rng(seed: int, part: str) -> random.Random:
    """The random stream of one part of a simulation (jobs, a span's background)."""
    return random.Random(f"chainpipe-online/{seed}/{part}")


def job_stream(scenario: Scenario, seed: int) -> list[JobRequest]:
    """The scenario's job requests for ``seed``: its trace, or ``jobs.count`` Poisson arrivals.

    Parameters
    ----------
    scenario : Scenario
        Its ``jobs`` block.
    seed : int
        The seed; the same seed gives the same stream, whatever the policy.

    Returns
    -------
    list of JobRequest
        In arrival order.

    Raises
    ------
    InstanceError
        An arrival past the simulation's horizon (:func:`horizon_s`), naming
        ``jobs.arrivals_per_hour`` or the trace's ``arrival_s``; the stream stops
        being drawn at the first such arrival.
    """
    spec = scenario.jobs
    end = horizon_s(scenario)
    if spec.trace is not None:
        trace = spec.trace[:spec.count]
        late = next((i for i, t in enumerate(trace) if t.arrival_s > end), None)
        if late is not None:
            raise InstanceError([f"jobs.trace[{late}].arrival_s: {trace[late].arrival_s:g} s is "
                                 f"past {horizon_text(scenario)}"])
        return [JobRequest(i, t.arrival_s, t.model, t.microbatches, t.iterations, t.gpus,
                           spec.patience_s, spec.max_wavelengths)
                for i, t in enumerate(trace)]
    rng = stream_rng(seed, "jobs")
    rate = spec.arrivals_per_hour / 3600.0
    t, out = 0.0, []
    for i in range(spec.count):
        t += rng.expovariate(rate)
        if t > end:
            raise InstanceError([f"jobs.arrivals_per_hour: {spec.arrivals_per_hour:g} an hour "
                                 f"puts arrival {i + 1} of {spec.count} at {t:.3g} s, past "
                                 f"{horizon_text(scenario)}"])
        out.append(JobRequest(
            i, round(t, 3), rng.choice(spec.models), rng.choice(spec.microbatches),
            rng.randint(*spec.iterations), rng.choice(spec.gpus), spec.patience_s,
            spec.max_wavelengths))
    return out


def horizon_s(scenario: Scenario) -> float:
    """The simulated time a simulation may reach: :data:`~.scenario.MAX_STEPS` background
    steps of ``background.change_s`` seconds."""
    return MAX_STEPS * scenario.background.change_s


def horizon_text(scenario: Scenario) -> str:
    """``the horizon of a simulation, ... s (...)``, as error lines say it."""
    return (f"the horizon of a simulation, {horizon_s(scenario):.3g} s ({MAX_STEPS} background "
            f"steps of background.change_s = {scenario.background.change_s:g} s)")


@functools.cache
def model_of(name: str) -> Model:
    """The catalogue model ``name`` as an instance's model (blocks, tensor-parallel figures)."""
    return Model(name, model_layers(model_shape(name), tensor_parallel=True))


@functools.cache
def training_of(planning: Planning, microbatches: int) -> Training:
    """The training block of a job's instances: mixed-precision Adam, the scenario's lists."""
    return Training(
        microbatches, planning.schedule, BYTES_PER_PARAM,
        gradient_bytes_per_param=GRADIENT_BYTES_PER_PARAM,
        optimizer_bytes_per_param=OPTIMIZER_BYTES_PER_PARAM,
        parallelism=Parallelism(planning.data_parallel, planning.tensor_parallel, planning.zero))
