"""Scenarios of the online simulation: the JSON format, its validation and the presets.

A scenario (``format: "chainpipe-scenario/1"``, described in ``docs/online.md``)
holds a metro network (datacenters with GPU groups from the catalogue, fibre
links with a length and a number of wavelengths), its background traffic, the
stream of job requests (seeded Poisson arrivals, or a trace) and what planners
may use (candidate chains, widths and degrees); the built-in scenarios are in
:mod:`.presets`. :func:`scenario_from_dict`
refuses a bad file with one line per problem, each naming its JSON path, as
:class:`~chainpipe.instance.InstanceError` (exit 2 on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..instance import (
    MAX_COUNT,
    SCHEDULES,
    InstanceError,
    choice_rule,
    integer_rule,
    json_kind,
    name_rule,
    number_rule,
    power_of_two_rule,
)
from ..instances.gpus import GPUS
from ..instances.models import MODELS
from ..io import Problems, _at, load_json
from ..names import unknown_name

FORMAT = "chainpipe-scenario/1"

COUNT = integer_rule(1, MAX_COUNT, "2**31 - 1")
NONNEG_INT = integer_rule(0, MAX_COUNT, "2**31 - 1")
POSITIVE = number_rule(0.0, strict=True)
NONNEG = number_rule(0.0, strict=False)

# Bounds of a simulation (docs/online.md, "Bounds"): each keeps the work and the memory of
# ``simulate`` bounded, and each is far beyond a real study.
#: the most job requests of a stream (``jobs.count``, a trace, ``simulate --jobs``): every
#: request is drawn up front and keeps a record in every policy's run
MAX_JOBS = 100_000
#: the most background steps of a simulation: its simulated horizon is
#: ``MAX_STEPS x background.change_s`` (2.85 years at the default 900 s)
MAX_STEPS = 100_000
#: the longest fibre span, km: the Earth's circumference (metro spans are 10 to 100 km)
MAX_KM = 40_000.0
#: the most wavelengths of a span, or reserved by a job on one (DWDM fibres carry at most a
#: few hundred channels); ``cba`` and ``gmc-mdp`` try each count below a job's allowance
MAX_WAVELENGTHS = 1_024
#: the most microbatches of a job's iteration
MAX_MICROBATCHES = 65_536
#: the most iterations of a job (a large pretraining run takes about a million)
MAX_ITERATIONS = 10_000_000
JOB_COUNT = integer_rule(1, MAX_JOBS, "the bound of a job stream")
#: ``events[].latency``: a detour lengthens the propagation delay, at most 1000 times
MAX_LATENCY_FACTOR = 1000.0
WAVELENGTHS = integer_rule(1, MAX_WAVELENGTHS, "a fibre carries at most a few hundred")
MICROBATCHES = integer_rule(1, MAX_MICROBATCHES, "2**16")
ITERATIONS = integer_rule(1, MAX_ITERATIONS, "10 times a large pretraining run")


def at_most(rule, maximum: float, why: str):
    """``rule``, and at most ``maximum`` (``why`` said in the error line)."""
    def check(v: Any) -> str | None:
        if msg := rule(v):
            return msg
        return None if v <= maximum else f"must be at most {maximum:g} ({why}), got {v!r}"

    return check


KM = at_most(POSITIVE, MAX_KM, "the Earth's circumference")


#: ``events[].bandwidth``: a share of the link's nominal rate per wavelength
BANDWIDTH_FACTOR = at_most(POSITIVE, 1.0, "a share of the nominal rate")
#: ``events[].latency``: a multiple of the link's nominal delay
LATENCY_FACTOR = at_most(number_rule(1.0, strict=False), MAX_LATENCY_FACTOR,
                         "a detour of at most 1000 times the fibre")


def fraction_rule(v: Any) -> str | None:
    """A number in ``[0, 1]``."""
    msg = NONNEG(v)
    if msg is None and v > 1:
        return f"must be a number in [0, 1], got {v!r}"
    return msg


# --------------------------------------------------------------------------- records
@dataclass(frozen=True)
class GpuSpec:
    """``count`` GPUs of the catalogue type ``type`` in one datacenter."""

    type: str
    count: int


@dataclass(frozen=True)
class DatacenterSpec:
    """A datacenter: its GPU groups and the per-GPU NIC of its own network (Gbit/s)."""

    name: str
    gpus: tuple[GpuSpec, ...]
    nic_gbit: float


@dataclass(frozen=True)
class LinkSpec:
    """A fibre link between two datacenters: length and DWDM wavelengths."""

    a: str
    b: str
    km: float
    wavelengths: int


@dataclass(frozen=True)
class Background:
    """Background traffic on every link, as a fraction of its wavelengths.

    Every ``change_s`` seconds each link's target load moves as a seeded AR(1)
    process around ``load`` with standard deviation ``swing`` (correlation
    ``correlation`` from one step to the next), clipped to ``[0, 1]``. With a
    ``trace``, step ``i`` sets the loads its entries name instead (``(a, b)``
    sorted, load): a span keeps its last load (0 at first), and after the last
    step every load stays.
    """

    load: float = 0.3
    swing: float = 0.15
    change_s: float = 900.0
    correlation: float = 0.8
    trace: tuple[tuple[tuple[tuple[str, str], float], ...], ...] | None = None


@dataclass(frozen=True)
class LinkEvent:
    """A change of one fibre link under the jobs (``events``): from ``at_s`` on, the span
    ``between`` carries each wavelength at ``bandwidth`` times its rate (a lower-order
    modulation, an impairment) and with ``latency`` times its propagation delay (a detour);
    both relative to the nominal link, so ``1, 1`` restores it."""

    at_s: float
    between: tuple[str, str]
    bandwidth: float = 1.0
    latency: float = 1.0


@dataclass(frozen=True)
class DeviceEvent:
    """A change of one DC's GPUs of one type under the jobs (``events``): from ``at_s`` on,
    they sustain ``speed`` times their catalogue rate (throttling, a co-tenant, a failed
    fan); relative to the catalogue, so 1 restores them."""

    at_s: float
    datacenter: str
    gpu: str
    speed: float = 1.0


@dataclass(frozen=True)
class TraceJob:
    """One job request of a trace."""

    arrival_s: float
    model: str
    microbatches: int
    iterations: int
    gpus: int


@dataclass(frozen=True)
class JobSpec:
    """The job stream: Poisson arrivals drawing from these lists, or a trace."""

    count: int = 100
    arrivals_per_hour: float = 6.0
    models: tuple[str, ...] = ("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama2-7b")
    microbatches: tuple[int, ...] = (16, 32)
    iterations: tuple[int, int] = (2000, 10000)
    gpus: tuple[int, ...] = (8, 16, 24)
    patience_s: float = 1800.0
    max_wavelengths: int = 4
    trace: tuple[TraceJob, ...] | None = None


@dataclass(frozen=True)
class Planning:
    """What policies may use: candidate chains, the parallelism lists, the schedule.

    ``comm_slack`` is the communication bound of ``cba`` and ``gmc-mdp``: the
    fewest wavelengths whose plan stays within ``1 + comm_slack`` of the plan
    with the job's full wavelength allowance.
    """

    k_paths: int = 3
    max_chain: int = 3
    data_parallel: tuple[int, ...] = (1, 2, 4)
    tensor_parallel: tuple[int, ...] = (1, 2, 4)
    zero: bool = True
    schedule: str = "1f1b"
    comm_slack: float = 0.05


@dataclass(frozen=True)
class Scenario:
    """A whole scenario; :func:`scenario_from_dict` builds one from JSON."""

    name: str
    description: str
    wavelength_gbit: float
    datacenters: tuple[DatacenterSpec, ...]
    links: tuple[LinkSpec, ...]
    background: Background
    jobs: JobSpec
    planning: Planning
    seed: int = 0
    events: tuple[LinkEvent | DeviceEvent, ...] = ()

    def with_jobs(self, count: int | None) -> Scenario:
        """The scenario with ``count`` job requests (``None``: unchanged); a trace is cut.

        Raises
        ------
        InstanceError
            ``count`` beyond :data:`MAX_JOBS` (``--jobs: ...``).
        """
        if count is None:
            return self
        if msg := JOB_COUNT(count):
            raise InstanceError([f"--jobs: {msg}"])
        jobs = self.jobs
        trace = None if jobs.trace is None else jobs.trace[:count]
        new = JobSpec(**{**jobs.__dict__, "count": count, "trace": trace})
        return Scenario(**{**self.__dict__, "jobs": new})

    def with_rate(self, arrivals_per_hour: float) -> Scenario:
        """The scenario with another Poisson arrival rate."""
        new = JobSpec(**{**self.jobs.__dict__, "arrivals_per_hour": arrivals_per_hour})
        return Scenario(**{**self.__dict__, "jobs": new})


# --------------------------------------------------------------------------- parsing
_TOP = ("format", "name", "network")
_TOP_OPTIONAL = ("description", "seed", "background", "jobs", "planning", "events")


def _span(c: Problems, data: dict, path: str, spans) -> tuple | None:
    """The link ``data["between"]`` names (two datacenter names joined by one of
    ``spans``), sorted; ``None`` with the problem added to ``c``."""
    ends = data.get("between")
    if not (isinstance(ends, list) and len(ends) == 2
            and all(isinstance(x, str) for x in ends)):
        c.add(f"{path}.between", "must be an array of two datacenter names")
    elif frozenset(ends) not in spans:
        c.add(f"{path}.between", f"no link of network.links joins {ends[0]!r} and {ends[1]!r}")
    else:
        return tuple(sorted(ends))
    return None


def _field(c: Problems, data: dict, path: str, key: str, rule, default=None):
    """``data[key]`` if it passes ``rule`` (else noted, and ``default``); ``default`` if absent."""
    if key not in data:
        return default
    msg = rule(data[key])
    if msg:
        c.add(_at(path, key), msg)
        return default
    return data[key]


def _list(c: Problems, data: dict, path: str, key: str, item, default, known=None, kind=""):
    """A non-empty array of ``item``-valid entries (each in ``known`` when given)."""
    if key not in data:
        return default
    value = data[key]
    p = _at(path, key)
    if not isinstance(value, list) or not value:
        c.add(p, "must be a non-empty array")
        return default
    out = []
    for i, x in enumerate(value):
        if msg := item(x):
            c.add(f"{p}[{i}]", msg)
        elif known is not None and x not in known:
            c.add(f"{p}[{i}]", unknown_name(kind, x, known))
        else:
            out.append(x)
    return tuple(out) if len(out) == len(value) else default


def _string(v: Any) -> str | None:
    return None if isinstance(v, str) else f"must be a string, got {type(v).__name__}"


def _datacenters(c: Problems, net: dict) -> list[DatacenterSpec]:
    out = []
    for i, d in enumerate(c.items(net, "datacenters", "network", min_len=1)):
        p = f"network.datacenters[{i}]"
        d = c.obj_optional(d, p, ("name", "gpus"), ("nic_gbit",))
        if d is None:
            continue
        ok = c.name(d, p)
        nic = _field(c, d, p, "nic_gbit", POSITIVE, 200.0)
        groups = []
        for j, g in enumerate(c.items(d, "gpus", p, min_len=1)):
            q = f"{p}.gpus[{j}]"
            g = c.obj(g, q, ("type", "count"))
            if g is None:
                continue
            t = _field(c, g, q, "type", _string)
            if t is not None and t not in GPUS:
                c.add(f"{q}.type", unknown_name("GPU type", t, GPUS))
                t = None
            n = _field(c, g, q, "count", COUNT)
            if t is not None and n is not None:
                groups.append(GpuSpec(t, n))
        c.unique(d.get("gpus", []) if isinstance(d.get("gpus"), list) else [], "type",
                 f"{p}.gpus", "GPU type")
        if ok and groups:
            out.append(DatacenterSpec(d["name"], tuple(groups), float(nic)))
    dcs = net.get("datacenters")
    if isinstance(dcs, list):
        c.unique(dcs, "name", "network.datacenters", "datacenter")
    return out


def _links(c: Problems, net: dict, names: set[str]) -> list[LinkSpec]:
    out, seen = [], {}
    for i, d in enumerate(c.items(net, "links", "network")):
        p = f"network.links[{i}]"
        d = c.obj(d, p, ("between", "km", "wavelengths"))
        if d is None:
            continue
        ends = d.get("between")
        pair = None
        if not (isinstance(ends, list) and len(ends) == 2 and all(isinstance(e, str) for e in ends)):
            c.add(f"{p}.between", "must be an array of two datacenter names")
        elif ends[0] == ends[1]:
            c.add(f"{p}.between", f"joins {ends[0]!r} to itself")
        else:
            bad = [e for e in ends if e not in names]
            for e in bad:
                c.add(f"{p}.between", unknown_name("datacenter", e, sorted(names)))
            if not bad:
                pair = frozenset(ends)
                if pair in seen:
                    c.add(f"{p}.between", f"repeats the link of network.links[{seen[pair]}]")
                    pair = None
                else:
                    seen[pair] = i
        km = _field(c, d, p, "km", KM)
        wl = _field(c, d, p, "wavelengths", WAVELENGTHS)
        if pair is not None and km is not None and wl is not None:
            out.append(LinkSpec(ends[0], ends[1], float(km), wl))
    return out


def _connected(c: Problems, dcs: list[DatacenterSpec], links: list[LinkSpec]) -> None:
    """Note a network whose datacenters are not all joined (union-find)."""
    parent = {d.name: d.name for d in dcs}

    def root(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for ln in links:
        parent[root(ln.a)] = root(ln.b)
    groups: dict[str, list[str]] = {}
    for d in dcs:
        groups.setdefault(root(d.name), []).append(d.name)
    if len(groups) > 1:
        parts = "; ".join(", ".join(g) for g in groups.values())
        c.add("network.links", f"the network is not connected: {parts}")


def _background_trace(c: Problems, d: dict, spans: set) -> tuple | None:
    """``background.trace``: steps, each an array of ``{"between": [a, b], "load": x}``."""
    if "trace" not in d:
        return None
    if isinstance(d["trace"], list) and len(d["trace"]) > MAX_STEPS:
        c.add("background.trace", f"must hold at most {MAX_STEPS} steps (the bound of a "
                                  f"simulation), got {len(d['trace'])}")
        return None
    steps = []
    for i, step in enumerate(c.items(d, "trace", "background", min_len=1)):
        p = f"background.trace[{i}]"
        if not isinstance(step, list):
            c.add(p, f"must be an array of {{between, load}} objects, got {json_kind(step)}")
            continue
        entries = []
        for j, e in enumerate(step):
            q = f"{p}[{j}]"
            e = c.obj(e, q, ("between", "load"))
            if e is None:
                continue
            load = _field(c, e, q, "load", fraction_rule)
            span = _span(c, e, q, spans)
            if span is not None and load is not None:
                entries.append((span, float(load)))
        steps.append(tuple(entries))
    return tuple(steps)


def _background(c: Problems, top: dict, spans: set) -> Background:
    if "background" not in top:
        return Background()
    d = c.obj_optional(top["background"], "background", (),
                       ("load", "swing", "change_s", "correlation", "trace"))
    if d is None:
        return Background()
    base = Background()
    return Background(
        load=float(_field(c, d, "background", "load", fraction_rule, base.load)),
        swing=float(_field(c, d, "background", "swing", NONNEG, base.swing)),
        change_s=float(_field(c, d, "background", "change_s", POSITIVE, base.change_s)),
        correlation=float(_field(c, d, "background", "correlation", fraction_rule,
                                 base.correlation)),
        trace=_background_trace(c, d, spans),
    )


def _events(c: Problems, top: dict, spans: set, horizon: float,
            groups: set) -> tuple[LinkEvent | DeviceEvent, ...]:
    """``events``: link changes ``{"at_s", "between", "bandwidth", "latency"}`` and device
    changes ``{"at_s", "datacenter", "gpu", "speed"}``, sorted by time (equal times in file
    order)."""
    if "events" not in top:
        return ()
    if isinstance(top["events"], list) and len(top["events"]) > MAX_STEPS:
        c.add("events", f"must hold at most {MAX_STEPS} events (the bound of a simulation), "
                        f"got {len(top['events'])}")
        return ()
    out = []
    for i, e in enumerate(c.items(top, "events", "")):
        p = f"events[{i}]"
        if isinstance(e, dict) and "datacenter" in e:
            out += _device_event(c, e, p, horizon, groups)
            continue
        e = c.obj_optional(e, p, ("at_s", "between"), ("bandwidth", "latency"))
        if e is None:
            continue
        at = _field(c, e, p, "at_s", at_most(NONNEG, horizon, "the horizon of a simulation"))
        bandwidth = _field(c, e, p, "bandwidth", BANDWIDTH_FACTOR, 1.0)
        latency = _field(c, e, p, "latency", LATENCY_FACTOR, 1.0)
        span = _span(c, e, p, spans)
        if span is not None and at is not None:
            out.append(LinkEvent(float(at), span, float(bandwidth),
                                 float(latency)))
    return tuple(sorted(out, key=lambda ev: ev.at_s))


def _device_event(c: Problems, e: dict, p: str, horizon: float, groups: set) -> list:
    """One ``{"at_s", "datacenter", "gpu", "speed"}`` event (a list of it, or none)."""
    e = c.obj_optional(e, p, ("at_s", "datacenter", "gpu"), ("speed",))
    if e is None:
        return []
    at = _field(c, e, p, "at_s", at_most(NONNEG, horizon, "the horizon of a simulation"))
    speed = _field(c, e, p, "speed", BANDWIDTH_FACTOR, 1.0)
    dc, gpu_type = e.get("datacenter"), e.get("gpu")
    if not (isinstance(dc, str) and isinstance(gpu_type, str)):
        c.add(p, "datacenter and gpu must be strings")
    elif (dc, gpu_type) not in groups:
        c.add(p, f"datacenter {dc!r} has no GPUs of type {gpu_type!r} in network.datacenters")
    elif at is not None:
        return [DeviceEvent(float(at), dc, gpu_type, float(speed))]
    return []


def _iterations(v: Any) -> str | None:
    if not (isinstance(v, list) and len(v) == 2):
        return "must be [min, max], two integers >= 1"
    for i, x in enumerate(v):
        if msg := ITERATIONS(x):
            return f"[{i}]: {msg}"
    return None if v[0] <= v[1] else f"must be [min, max] with min <= max, got {v!r}"


def _trace(c: Problems, d: dict) -> tuple[TraceJob, ...] | None:
    if "trace" not in d:
        return None
    if isinstance(d["trace"], list) and len(d["trace"]) > MAX_JOBS:
        c.add("jobs.trace", f"must hold at most {MAX_JOBS} job requests (the bound of a job "
                            f"stream), got {len(d['trace'])}")
        return None
    out = []
    for i, t in enumerate(c.items(d, "trace", "jobs", min_len=1)):
        p = f"jobs.trace[{i}]"
        t = c.obj(t, p, ("arrival_s", "model", "microbatches", "iterations", "gpus"))
        if t is None:
            continue
        model = _field(c, t, p, "model", _string)
        if model is not None and model not in MODELS:
            c.add(f"{p}.model", unknown_name("model", model, MODELS))
            model = None
        vals = [_field(c, t, p, "arrival_s", NONNEG), model,
                _field(c, t, p, "microbatches", MICROBATCHES),
                _field(c, t, p, "iterations", ITERATIONS),
                _field(c, t, p, "gpus", COUNT)]
        if all(v is not None for v in vals):
            out.append(TraceJob(float(vals[0]), *vals[1:]))
    for i in range(1, len(out)):
        if out[i].arrival_s < out[i - 1].arrival_s:
            c.add(f"jobs.trace[{i}].arrival_s", "arrivals must be in time order")
            break
    return tuple(out)


def _jobs(c: Problems, top: dict) -> JobSpec:
    base = JobSpec()
    if "jobs" not in top:
        return base
    keys = ("count", "arrivals_per_hour", "models", "microbatches", "iterations", "gpus",
            "patience_s", "max_wavelengths", "trace")
    d = c.obj_optional(top["jobs"], "jobs", (), keys)
    if d is None:
        return base
    p = "jobs"
    iters = _field(c, d, p, "iterations", _iterations, None)
    trace = _trace(c, d)
    count = _field(c, d, p, "count", JOB_COUNT, None)
    if count is None:
        count = len(trace) if trace else base.count
    return JobSpec(
        count=count,
        arrivals_per_hour=float(_field(c, d, p, "arrivals_per_hour", POSITIVE,
                                       base.arrivals_per_hour)),
        models=_list(c, d, p, "models", _string, base.models, MODELS, "model"),
        microbatches=_list(c, d, p, "microbatches", MICROBATCHES, base.microbatches),
        iterations=tuple(iters) if iters else base.iterations,
        gpus=_list(c, d, p, "gpus", COUNT, base.gpus),
        patience_s=float(_field(c, d, p, "patience_s", NONNEG, base.patience_s)),
        max_wavelengths=_field(c, d, p, "max_wavelengths", WAVELENGTHS,
                               base.max_wavelengths),
        trace=trace,
    )


def _planning(c: Problems, top: dict) -> Planning:
    base = Planning()
    if "planning" not in top:
        return base
    keys = ("k_paths", "max_chain", "data_parallel", "tensor_parallel", "zero", "schedule",
            "comm_slack")
    d = c.obj_optional(top["planning"], "planning", (), keys)
    if d is None:
        return base
    p = "planning"
    zero = _field(c, d, p, "zero", lambda v: None if isinstance(v, bool)
                  else "must be true or false", base.zero)
    return Planning(
        k_paths=_field(c, d, p, "k_paths", integer_rule(1, 64, "at most 64"), base.k_paths),
        max_chain=_field(c, d, p, "max_chain", integer_rule(1, 8, "at most 8"), base.max_chain),
        data_parallel=_list(c, d, p, "data_parallel", integer_rule(1, 64, "at most 64"),
                            base.data_parallel),
        tensor_parallel=_list(c, d, p, "tensor_parallel",
                              power_of_two_rule("a tensor-parallel degree"), base.tensor_parallel),
        zero=zero,
        schedule=_field(c, d, p, "schedule", choice_rule(SCHEDULES), base.schedule),
        comm_slack=float(_field(c, d, p, "comm_slack", NONNEG, base.comm_slack)),
    )


def scenario_from_dict(data: Any) -> Scenario:
    """Build and validate a :class:`Scenario` from its JSON object.

    Parameters
    ----------
    data : object
        The parsed JSON.

    Returns
    -------
    Scenario

    Raises
    ------
    InstanceError
        One line per problem, each naming its JSON path
        (``network.links[2].between: unknown datacenter 'dc9'; ...``).
    """
    if not isinstance(data, dict):
        raise InstanceError([f"(scenario): must be an object, got {json_kind(data)}"])
    c = Problems()
    top = c.obj_optional(data, "", _TOP, _TOP_OPTIONAL)
    if top is None:
        raise InstanceError(c.problems)
    fmt = top.get("format")
    if "format" in top and fmt != FORMAT:
        c.add("format", f"must be {FORMAT!r}, got {fmt!r}")
    named = c.name(top, "")
    description = _field(c, top, "", "description", _string, "")
    seed = _field(c, top, "", "seed", integer_rule(0, 2**31 - 1, "2**31 - 1"), 0)
    dcs, links, wl_gbit = [], [], 100.0
    net = c.obj_optional(top.get("network"), "network", ("datacenters",),
                         ("links", "wavelength_gbit")) if "network" in top else None
    if net is not None:
        wl_gbit = float(_field(c, net, "network", "wavelength_gbit", POSITIVE, 100.0))
        before = len(c.problems)
        dcs = _datacenters(c, net)
        raw = net.get("datacenters") if isinstance(net.get("datacenters"), list) else []
        named_dcs = {d["name"] for d in raw
                     if isinstance(d, dict) and "name" in d and name_rule(d["name"]) is None}
        links = _links(c, net, named_dcs)
        if len(c.problems) == before and dcs:  # every DC and link good: is it one network?
            _connected(c, dcs, links)
    background = _background(c, top, {frozenset((ln.a, ln.b)) for ln in links})
    jobs = _jobs(c, top)
    if jobs.patience_s > MAX_STEPS * background.change_s:
        c.add("jobs.patience_s", f"must be at most the horizon of a simulation, "
                                 f"{MAX_STEPS * background.change_s:.3g} s ({MAX_STEPS} "
                                 f"background steps of background.change_s), "
                                 f"got {jobs.patience_s:g}")
    planning = _planning(c, top)
    events = _events(c, top, {frozenset((ln.a, ln.b)) for ln in links},
                     MAX_STEPS * background.change_s,
                     {(d.name, g.type) for d in dcs for g in d.gpus})
    if c.problems:
        raise InstanceError(c.problems)
    assert named
    return Scenario(top["name"], description, wl_gbit, tuple(dcs), tuple(links), background,
                    jobs, planning, seed, events)


def read_scenario(path) -> Scenario:
    """Read and validate a scenario file; problems are prefixed by the file's path."""
    data = load_json(path)
    try:
        return scenario_from_dict(data)
    except InstanceError as exc:
        raise InstanceError([f"{path}: {p}" for p in exc.problems]) from None


__all__ = ["FORMAT", "MAX_JOBS", "MAX_STEPS", "Background", "DatacenterSpec", "GpuSpec", "JobSpec",
           "DeviceEvent", "LinkEvent", "LinkSpec",
           "Planning", "Scenario", "TraceJob", "read_scenario", "scenario_from_dict"]
