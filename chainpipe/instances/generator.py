"""Seeded instance generator: presets of models, GPUs and metro networks.

``generate(preset, seed, **overrides)`` is deterministic: the same arguments
give the same instance, byte for byte once written. Each part of an instance
(model, each DC's devices, each link, ...) draws from its own
``random.Random`` stream named after the preset, the seed and the part, so an
override changes what it overrides and nothing else: adding a fourth DC keeps
the first three as they were.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..instance import SCHEDULES, Datacenter, DeviceGroup, Instance, Link, Model, Training
from ..names import unknown_name
from .gpus import GPUS, gpu
from .models import model_layers, model_shape
from .network import MAN_GBIT, check_degrade, degraded, intra_dc_link, random_man_link

#: mixed-precision Adam: 2 (fp16 weights) + 2 (grads) + 12 (fp32 master, momentum, variance)
BYTES_PER_PARAM = 16.0


@dataclass(frozen=True)
class Preset:
    """What a preset draws from: models, counts, GPU types and metro link rates."""

    name: str
    description: str
    models: tuple[str, ...]  # drawn from when no model is given
    datacenters: tuple[int, ...]
    gpus_per_dc: tuple[int, ...]
    microbatches: tuple[int, ...]
    schedule: str
    gpu_types: tuple[str, ...]
    types_per_dc: tuple[int, ...]  # how many device types a DC holds (drawn)
    man_gbit: tuple[float, ...] = MAN_GBIT
    max_total_gpus: int | None = None  # cap on the drawn GPUs per DC (not on an override)
    max_blocks: int | None = None  # a slice of the model's first blocks
    granularity: str = "block"
    min_types_overall: int = 1
    pool_size: int | None = None  # "pool": a fixed pool of GPUs split over the DCs


ALL_GPUS = tuple(GPUS)

_PRESETS = (
    Preset("tiny", "a few layers (GPT-3 125M, or a 12-block slice of another model), 2-3 DCs, "
           "2-3 GPUs each (at most 8): for tests and the small set",
           models=("gpt3-125m",), datacenters=(2, 3), gpus_per_dc=(2, 3), microbatches=(4, 8),
           schedule="1f1b", gpu_types=ALL_GPUS, types_per_dc=(1, 1, 2), max_total_gpus=8,
           max_blocks=12),
    Preset("metro", "2-4 DCs of 8 or 16 GPUs (16-64 in all), one or two GPU types per DC, "
           "a GPT-3 1.3B-13B or Llama-2 7B/13B model, M 16-64",
           models=("gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "llama2-7b", "llama2-13b"),
           datacenters=(2, 3, 4), gpus_per_dc=(8, 16), microbatches=(16, 32, 64),
           schedule="1f1b", gpu_types=ALL_GPUS, types_per_dc=(1, 1, 1, 2)),
    Preset("metro-large", "8 DCs x 32 GPUs (256), two GPU types per DC and at least five "
           "overall, Megatron 76B at attention/MLP granularity (122 layers), M = 128",
           models=("megatron-76b",), datacenters=(8,), gpus_per_dc=(32,), microbatches=(128,),
           schedule="1f1b", gpu_types=ALL_GPUS, types_per_dc=(2,), man_gbit=(40, 100, 200, 400),
           granularity="sublayer", min_types_overall=5),
    Preset("pool", "a fixed pool of 32 GPUs of four types split evenly over `datacenters` "
           "(default 4) DCs of a MAN chain: same GPUs, only split differently",
           models=("gpt3-6.7b", "gpt3-13b", "llama2-7b", "llama2-13b"), datacenters=(4,),
           gpus_per_dc=(8,), microbatches=(32,), schedule="1f1b",
           gpu_types=("H100-SXM", "A100-80GB", "A100-40GB", "L40S", "V100-32GB"),
           types_per_dc=(1,), man_gbit=(100,), pool_size=32),
)

PRESETS_SPEC: dict[str, Preset] = {p.name: p for p in _PRESETS}
#: preset name -> one-line description
PRESETS: dict[str, str] = {p.name: p.description for p in _PRESETS}


def _rng(preset: str, seed: int, part: str) -> random.Random:
    # a str seed is hashed with SHA-512 by random.Random: stable across runs and platforms
    return random.Random(f"chainpipe/{preset}/{seed}/{part}")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _split(n: int, parts: int) -> list[int]:
    """``n`` items in ``parts`` near-equal contiguous chunks, larger chunks first."""
    q, r = divmod(n, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _dc_groups(rng: random.Random, n: int, types: list[str]) -> list[DeviceGroup]:
    """``n`` GPUs over ``types``; counts in whole 8-GPU nodes when the DC is big enough."""
    if len(types) == 1 or n < 2:
        return [gpu(types[0]).group(n)]
    unit = 8 if n >= 16 and n % 8 == 0 else 1
    first = rng.randint(1, n // unit - 1) * unit
    return [gpu(types[0]).group(first), gpu(types[1]).group(n - first)]


def _draw_types(spec: Preset, seed: int, k: int) -> list[list[str]]:
    """Device types of each of ``k`` DCs; redrawn until enough distinct types appear."""
    want = min(spec.min_types_overall, len(spec.gpu_types))
    for attempt in range(1000):
        out = []
        for d in range(k):
            rng = _rng(spec.name, seed, f"types/dc{d}/{attempt}" if attempt else f"types/dc{d}")
            t = rng.choice(spec.types_per_dc)
            out.append(rng.sample(spec.gpu_types, min(t, len(spec.gpu_types))))
        if len({t for ts in out for t in ts}) >= min(want, sum(len(ts) for ts in out)):
            return out
    raise RuntimeError(f"cannot draw {want} distinct GPU types over {k} datacenters")


def _pool_datacenters(spec: Preset, seed: int, k: int, pool: int) -> list[list[DeviceGroup]]:
    """Split one fixed pool: four types in near-equal blocks, cut into ``k`` contiguous chunks."""
    types = _rng(spec.name, seed, "pool").sample(spec.gpu_types, 4)
    sequence = [t for t, c in zip(types, _split(pool, len(types))) for _ in range(c)]
    out, start = [], 0
    for size in _split(pool, k):
        chunk = sequence[start:start + size]
        start += size
        out.append([gpu(t).group(chunk.count(t)) for t in types if t in chunk])
    return out


def generate(
    preset: str,
    seed: int = 0,
    *,
    model: str | None = None,
    datacenters: int | None = None,
    gpus_per_dc: int | None = None,
    microbatches: int | None = None,
    schedule: str | None = None,
    degrade: float | None = None,
    blocks: int | None = None,
) -> Instance:
    """An instance of ``preset`` drawn with ``seed``; any keyword overrides the preset.

    Parameters
    ----------
    preset : str
        A name of :data:`PRESETS`.
    seed : int, default 0
        The same preset, seed and overrides give the same instance.
    model : str, optional
        A name of :data:`~chainpipe.instances.MODELS`; drawn from the preset's when omitted.
    datacenters, gpus_per_dc, microbatches : int, optional
        Counts (``>= 1``) that replace the preset's draw. For ``pool``,
        ``gpus_per_dc`` sets the pool to ``gpus_per_dc x datacenters`` GPUs.
    schedule : {"1f1b", "gpipe"}, optional
        The pipeline schedule; the preset's when omitted.
    degrade : float, optional
        ``F`` in ``(0, 1]``: every inter-DC bandwidth times F, every inter-DC latency
        divided by F.
    blocks : int, optional
        Keep the first ``blocks`` transformer blocks of the model only (embedding and
        head stay).

    Returns
    -------
    Instance

    Raises
    ------
    KeyError
        An unknown preset or model name (with a suggestion when one is close).
    ValueError
        An override out of range.
    """
    spec = _preset(preset)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    _check_overrides(model, datacenters, gpus_per_dc, microbatches, schedule, degrade, blocks)

    shape = model_shape(model or _rng(preset, seed, "model").choice(spec.models))
    if blocks is None and spec.max_blocks is not None:
        blocks = min(spec.max_blocks, shape.blocks)
    if blocks == shape.blocks:
        blocks = None  # the whole model
    layers = model_layers(shape, blocks=blocks, granularity=spec.granularity)
    k = datacenters or _rng(preset, seed, "datacenters").choice(spec.datacenters)
    dcs = _datacenters(spec, seed, k, gpus_per_dc)
    links = _metro_links(spec, seed, k, degrade)
    m = microbatches or _rng(preset, seed, "microbatches").choice(spec.microbatches)
    sched = schedule or spec.schedule
    total = sum(dc.device_count for dc in dcs)
    return Instance(
        name=_instance_name(preset, seed, shape.name, k, total, m, sched, blocks, degrade),
        model=Model(shape.name if blocks is None else f"{shape.name}[{blocks} blocks]", layers),
        training=Training(microbatches=m, schedule=sched, bytes_per_param=BYTES_PER_PARAM),
        datacenters=dcs,
        links=links,
    )


def _preset(name: str) -> Preset:
    try:
        return PRESETS_SPEC[name]
    except (KeyError, TypeError):
        raise KeyError(unknown_name("preset", name, PRESETS)) from None


def _check_overrides(model, datacenters, gpus_per_dc, microbatches, schedule, degrade,
                     blocks) -> None:
    """Raise for an override out of range, before anything is drawn."""
    if model is not None:
        model_shape(model)  # raises with the known names
    for name, value in (("datacenters", datacenters), ("gpus_per_dc", gpus_per_dc),
                        ("microbatches", microbatches), ("blocks", blocks)):
        if value is not None:
            _positive_int(name, value)
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if degrade is not None:
        check_degrade(degrade)


def _datacenters(spec: Preset, seed: int, k: int, gpus_per_dc: int | None
                 ) -> tuple[Datacenter, ...]:
    """The ``k`` datacenters ``dc1..dck``: their device groups and intra-DC links."""
    if spec.pool_size is not None:
        pool = gpus_per_dc * k if gpus_per_dc else spec.pool_size
        if pool < k:
            raise ValueError(f"a pool of {pool} GPUs cannot fill {k} datacenters")
        groups = _pool_datacenters(spec, seed, k, pool)
        intra = [intra_dc_link(_rng(spec.name, seed, "intra"))] * k
    else:
        n = gpus_per_dc
        if n is None:
            n = _rng(spec.name, seed, "gpus_per_dc").choice(spec.gpus_per_dc)
            if spec.max_total_gpus is not None:
                n = max(1, min(n, spec.max_total_gpus // k))
        types = _draw_types(spec, seed, k)
        groups = [_dc_groups(_rng(spec.name, seed, f"counts/dc{d}"), n, types[d])
                  for d in range(k)]
        intra = [intra_dc_link(_rng(spec.name, seed, f"intra/dc{d}")) for d in range(k)]
    return tuple(Datacenter(f"dc{d + 1}", tuple(groups[d]), intra[d]) for d in range(k))


def _metro_links(spec: Preset, seed: int, k: int, degrade: float | None) -> tuple[Link, ...]:
    """The ``k - 1`` metro links of the chain, degraded by ``degrade`` when given."""
    links = [random_man_link(_rng(spec.name, seed, f"link{d}"), spec.man_gbit)
             for d in range(k - 1)]
    return tuple(links if degrade is None else (degraded(lk, degrade) for lk in links))


def _instance_name(preset: str, seed: int, model: str, k: int, total: int, m: int, sched: str,
                   blocks: int | None, degrade: float | None) -> str:
    name = f"{preset}-s{seed}-{model}-{k}dc-{total}gpu-m{m}-{sched}"
    if blocks is not None:
        name += f"-{blocks}blk"
    if degrade is not None:
        name += f"-deg{degrade:g}"
    return name
