"""Seeded instance generator: presets of models, GPUs and metro networks.

``generate(preset, seed, **overrides)`` is deterministic: the same arguments
give the same instance, byte for byte once written. Each part of an instance
(model, each DC's devices, each link, ...) draws from its own
``random.Random`` stream named after the preset, the seed and the part, so an
override changes what it overrides and nothing else: adding a fourth DC keeps
the first three as they were.

Parallelism (contract version 2) is a switch: off, an instance is exactly the
version-1 instance the preset always drew (every version-2 field at its
default); on, the same draws gain the version-2 figures: node sizes and
per-GPU node bandwidths from the GPU catalogue, each layer's tensor-parallel
all-reduce bytes from the model shape, and the ``parallelism`` lists.

The contract version is a choice too (``version``): 2, the default of the Python
API, keeps the problem every caller written before version 3 meant (objective
``classic``, one pipeline); 3, the default of ``chainpipe generate``, states the
schedule's own period as the objective, the pipeline counts a plan may run
(:func:`default_pipelines` unless given) and the iterations between two
averagings across pipelines (:func:`versioned`), and its layers state their
``weight_grad_share``, derived from the model's shape
(:attr:`~chainpipe.instances.models.Figures.weight_grad_share`: the weight products'
forward FLOP over the backward's, read only by the zero-bubble what-ifs). Nothing
else differs: a version-3 instance has the devices and links of its version-2 twin,
and its layers with the share added.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

from ..instance import (
    MAX_COUNT,
    MAX_NAME,
    OBJECTIVES,
    SCHEDULES,
    Datacenter,
    DeviceGroup,
    Instance,
    Link,
    Model,
    Parallelism,
    Training,
)
from ..names import unknown_name
from .gpus import GPUS, gpu
from .models import FLOAT, GRANULARITIES, HALF, ModelShape, model_layers, model_shape
from .network import (
    INTRA_DC_GBIT,
    MAN_GBIT,
    NIC_GBIT,
    check_degrade,
    degraded,
    intra_dc_link,
    random_man_link,
)

#: mixed-precision Adam: 2 (fp16 weights) + 2 (grads) + 12 (fp32 master, momentum, variance)
BYTES_PER_PARAM = 16.0
#: the gradients all-reduced by data parallelism: 16-bit (bf16/fp16) gradients
GRADIENT_BYTES_PER_PARAM = 2.0
#: what ZeRO-1 shards: the fp32 master weights and Adam's two fp32 moments, 4 + 4 + 4
OPTIMIZER_BYTES_PER_PARAM = 12.0
#: bytes per parameter (all, gradient, what ZeRO-1 shards) by activation precision: mixed
#: precision as above; fp32 Adam: 4 (weights) + 4 (grads) + 8 (momentum, variance), the
#: moments sharded
TRAINING_BYTES = {HALF: (BYTES_PER_PARAM, GRADIENT_BYTES_PER_PARAM, OPTIMIZER_BYTES_PER_PARAM),
                  FLOAT: (16.0, 4.0, 8.0)}
#: ``parallelism="on"`` for a preset that is off by default: the issue's lists, with ZeRO-1
PARALLELISM_ON = Parallelism(data_parallel=(1, 2, 4, 8), tensor_parallel=(1, 2, 4, 8), zero=True)
#: the values of the ``parallelism`` switch
SWITCH = ("on", "off")
#: the contract versions :func:`generate` builds: 2 (objective ``classic``, one pipeline)
#: and 3 (:func:`versioned`)
VERSIONS = (2, 3)
#: the largest pipeline count :func:`default_pipelines` offers
MAX_DEFAULT_PIPELINES = 8


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
    parallelism: Parallelism = Parallelism()  # what "on" means and whether it is the default
    intra_gbit: tuple[float, ...] = INTRA_DC_GBIT  # the per-GPU NIC of a DC's network
    node_caps: tuple[int, ...] | None = None  # drawn cap on a group's node size (else 8)
    even_split: bool = False  # a DC of two types: half each (else a drawn split in nodes)

    @property
    def parallel_by_default(self) -> bool:
        return self.parallelism != Parallelism()


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
    Preset("hybrid-small", "parallelism on: 1-3 DCs of 2-8 GPUs (at most 8) in nodes of 1, 2 "
           "or 4, a 4-block slice of a GPT-3 or Llama-2 model (6 layers), d in {1,2,3}, "
           "t in {1,2}, ZeRO-1, M 4-8: small enough to enumerate",
           models=("gpt3-1.3b", "gpt3-6.7b", "llama2-7b", "llama2-13b"), datacenters=(1, 2, 3),
           gpus_per_dc=(2, 4, 8), microbatches=(4, 8), schedule="1f1b", gpu_types=ALL_GPUS,
           types_per_dc=(1, 1, 2), max_total_gpus=8, max_blocks=4,
           parallelism=Parallelism((1, 2, 3), (1, 2), True), intra_gbit=NIC_GBIT,
           node_caps=(1, 2, 4), even_split=True),
    Preset("hybrid", "parallelism on: 4 DCs x 16 GPUs (64) in nodes of 8, one or two types per "
           "DC of A100-40/80, H100, L40S, a GPT-3 6.7B/13B or Llama-2 7B/13B model, "
           "d and t in {1,2,4,8}, ZeRO-1, M = 64",
           models=("gpt3-6.7b", "gpt3-13b", "llama2-7b", "llama2-13b"), datacenters=(4,),
           gpus_per_dc=(16,), microbatches=(64,), schedule="1f1b",
           gpu_types=("A100-40GB", "A100-80GB", "H100-SXM", "L40S"), types_per_dc=(1, 1, 2),
           man_gbit=(100, 200, 400), parallelism=PARALLELISM_ON, intra_gbit=NIC_GBIT,
           even_split=True),
    Preset("hybrid-large", "parallelism on: 8 DCs x 32 GPUs (256), two types per DC, 16 each "
           "in nodes of 8, at least four types overall, GPT-3 175B (98 layers), "
           "d and t in {1,2,4,8}, ZeRO-1, M = 128",
           models=("gpt3-175b",), datacenters=(8,), gpus_per_dc=(32,), microbatches=(128,),
           schedule="1f1b", gpu_types=ALL_GPUS, types_per_dc=(2,), man_gbit=(40, 100, 200, 400),
           min_types_overall=4, parallelism=PARALLELISM_ON, intra_gbit=NIC_GBIT,
           even_split=True),
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


def _dc_counts(rng: random.Random, n: int, types: list[str], even: bool) -> list[int]:
    """How many of ``n`` GPUs each of ``types`` gets; whole 8-GPU nodes when the DC is big
    enough; ``even``: half each (when ``n`` is even)."""
    if len(types) == 1 or n < 2:
        return [n]
    if even and n % 2 == 0:
        return [n // 2, n // 2]
    unit = 8 if n >= 16 and n % 8 == 0 else 1
    first = rng.randint(1, n // unit - 1) * unit
    return [first, n - first]


def _group(spec: Preset, seed: int, dc: int, kind: str, count: int, nodes: bool
           ) -> DeviceGroup:
    """``count`` GPUs of type ``kind``; with ``nodes``, their node size and bandwidth."""
    if not nodes:
        return gpu(kind).group(count)
    cap = None
    if spec.node_caps is not None:
        cap = _rng(spec.name, seed, f"node/dc{dc}/{kind}").choice(spec.node_caps)
    return gpu(kind).group(count, nodes=True, largest_node=cap)


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


def _pool_datacenters(spec: Preset, seed: int, k: int, pool: int, nodes: bool
                      ) -> list[list[DeviceGroup]]:
    """Split one fixed pool: four types in near-equal blocks, cut into ``k`` contiguous chunks."""
    types = _rng(spec.name, seed, "pool").sample(spec.gpu_types, 4)
    sequence = [t for t, c in zip(types, _split(pool, len(types))) for _ in range(c)]
    out, start = [], 0
    for d, size in enumerate(_split(pool, k)):
        chunk = sequence[start:start + size]
        start += size
        out.append([_group(spec, seed, d, t, chunk.count(t), nodes) for t in types if t in chunk])
    return out


def generate(
    preset: str,
    seed: int = 0,
    *,
    model: str | ModelShape | None = None,
    microbatch_size: int | None = None,
    datacenters: int | None = None,
    gpus_per_dc: int | None = None,
    microbatches: int | None = None,
    schedule: str | None = None,
    degrade: float | None = None,
    blocks: int | None = None,
    parallelism: str | None = None,
    data_parallel: tuple[int, ...] | None = None,
    tensor_parallel: tuple[int, ...] | None = None,
    zero: bool | None = None,
    granularity: str | None = None,
    gpu_types: tuple[str, ...] | None = None,
    man_gbit: float | None = None,
    global_batch: int | None = None,
    version: int = 2,
    objective: str | None = None,
    pipelines: tuple[int, ...] | None = None,
    sync_period: int | None = None,
    seq_len: int | None = None,
) -> Instance:
    """An instance of ``preset`` drawn with ``seed``; any keyword overrides the preset.

    Parameters
    ----------
    preset : str
        A name of :data:`PRESETS`.
    seed : int, default 0
        The same preset, seed and overrides give the same instance.
    model : str or ModelShape, optional
        A name of :data:`~chainpipe.instances.MODELS`, or a shape (for instance one read
        by :func:`~chainpipe.instances.hf_config.read_model_config`); drawn from the
        preset's when omitted.
    microbatch_size : int, optional
        Sequences per microbatch, written as ``training.microbatch_size``: every layer's
        figures scale with it. Default: the least common multiple of the ``data_parallel``
        widths, so that every allowed width divides it (:func:`batch_sizes`).
    global_batch : int, optional
        Sequences per iteration: ``M = global_batch / microbatch_size`` (refused when the
        microbatch size does not divide it, or when ``microbatches`` says otherwise).
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
    parallelism : {"on", "off"}, optional
        The version-2 switch; the preset's default when omitted (off for the
        version-1 presets, on for the ``hybrid`` ones). Off gives exactly the
        version-1 instance; on adds node sizes and bandwidths, tensor-parallel
        all-reduce bytes and the preset's lists (:data:`PARALLELISM_ON` for a
        preset that is off by default).
    data_parallel, tensor_parallel : sequence of int, optional
        The widths and degrees stages may use (replace the lists "on" gives;
        they imply "on").
    zero : bool, optional
        ZeRO-1 on or off (implies "on" when true).
    granularity : {"block", "sublayer"}, optional
        Layers per block: one, or its attention and MLP halves.
    gpu_types : sequence of str, optional
        The GPU types drawn from (names of :data:`~chainpipe.instances.GPUS`).
    man_gbit : float, optional
        Every metro link at this rate in Gbit/s (distances are still drawn).
    seq_len : int, optional
        Tokens per sequence, replacing the model's (for a GPT model the learned position
        table grows with it): long sequences load the links with activations.
    version : {2, 3}, default 2
        The contract version of the problem: 2 is objective ``classic`` with one
        pipeline (what this function always returned; ``objective``, ``pipelines``
        and ``sync_period`` are then refused), 3 takes the three below and gives
        every layer its ``weight_grad_share`` derived from the model's shape
        (``chainpipe generate`` writes version 3).
    objective : {"period", "classic"}, optional
        Version 3: ``training.objective``, default ``"period"``.
    pipelines : sequence of int, optional
        Version 3: ``parallelism.pipelines``, the pipeline counts a plan may run, each
        at most the number of DCs and ``M``; default :func:`default_pipelines`.
    sync_period : int, optional
        Version 3: ``training.pipeline_sync_period``, ``H >= 1`` (default 1).

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
    _check_overrides(model, datacenters, gpus_per_dc, microbatches, schedule, degrade, blocks,
                     microbatch_size, seq_len)
    check_version(version, objective, pipelines, sync_period)
    spec = _respecified(spec, granularity, gpu_types, man_gbit)
    par = resolve_parallelism(spec, parallelism, data_parallel, tensor_parallel, zero)
    v2 = par != Parallelism()
    microbatch_size, microbatches = batch_sizes(par, microbatch_size, global_batch, microbatches)

    shape, blocks = _shape(spec, seed, model, seq_len, blocks)
    layers = model_layers(shape, blocks=blocks, granularity=spec.granularity,
                          tensor_parallel=v2, microbatch_size=microbatch_size,
                          weight_shares=version == 3)
    k = datacenters or _rng(preset, seed, "datacenters").choice(spec.datacenters)
    dcs = _datacenters(spec, seed, k, gpus_per_dc, v2)
    links = _metro_links(spec, seed, k, degrade)
    m = microbatches or _rng(preset, seed, "microbatches").choice(spec.microbatches)
    sched = schedule or spec.schedule
    total = sum(dc.device_count for dc in dcs)
    name = _instance_name(preset, seed, shape.name, k, total, m, sched, blocks, degrade)
    if seq_len is not None:
        name += f"-seq{seq_len}"
    if par != spec.parallelism:
        name += _parallelism_suffix(par)
    name += _version_suffix(objective, pipelines, sync_period)
    inst = Instance(
        name=name[:MAX_NAME],
        model=Model(shape.name if blocks is None else f"{shape.name}[{blocks} blocks]"[:MAX_NAME],
                    layers),
        training=model_training(shape, m, sched, par, microbatch_size),
        datacenters=dcs,
        links=links,
    )
    if version == 2:
        return inst
    return versioned(inst, objective=objective, pipelines=pipelines, sync_period=sync_period)


def _shape(spec: Preset, seed: int, model, seq_len: int | None, blocks: int | None
           ) -> tuple[ModelShape, int | None]:
    """The model's shape (given or drawn, with ``seq_len`` tokens per sequence) and the
    blocks kept (``None``: the whole model)."""
    if isinstance(model, ModelShape):
        shape = model
    else:
        shape = model_shape(model or _rng(spec.name, seed, "model").choice(spec.models))
    if seq_len is not None:
        shape = dataclasses.replace(shape, seq=seq_len)
    if blocks is None and spec.max_blocks is not None:
        blocks = min(spec.max_blocks, shape.blocks)
    return shape, (None if blocks == shape.blocks else blocks)


def default_pipelines(datacenters: int, microbatches: int) -> tuple[int, ...]:
    """The pipeline counts a version-3 instance offers by default: the powers of two up to
    the number of DCs and ``M`` (at most :data:`MAX_DEFAULT_PIPELINES`).

    One DC gives ``(1,)``, four ``(1, 2, 4)``, eight ``(1, 2, 4, 8)``: each pipeline
    needs a range of DCs of its own and at least one microbatch.

    Examples
    --------
    >>> default_pipelines(4, 64), default_pipelines(3, 64), default_pipelines(8, 2)
    ((1, 2, 4), (1, 2), (1, 2))
    """
    top = min(datacenters, microbatches, MAX_DEFAULT_PIPELINES)
    return tuple(2**i for i in range(top.bit_length()))


def check_version(version: int, objective: str | None = None,
                  pipelines: tuple[int, ...] | None = None, sync_period: int | None = None
                  ) -> None:
    """Raise for a version or a version-3 knob out of range, before anything is drawn.

    Raises
    ------
    ValueError
        An unknown version, a version-3 knob with ``version=2``, an unknown objective,
        a pipeline list that is not distinct integers ``>= 1``, or ``H < 1``.
    """
    if isinstance(version, bool) or version not in VERSIONS:
        raise ValueError(f"version must be one of {', '.join(map(str, VERSIONS))}, "
                         f"got {version!r}")
    given = [k for k, v in (("objective", objective), ("pipelines", pipelines),
                            ("sync_period", sync_period)) if v is not None]
    if version == 2 and given:
        raise ValueError(f"{given[0]}: needs version 3 (a version-2 instance has the classic "
                         f"objective and one pipeline)")
    if objective is not None and objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if pipelines is not None:
        if isinstance(pipelines, (str, bytes)) or not isinstance(pipelines, (list, tuple)) \
                or not pipelines:
            raise ValueError(f"pipelines must be a non-empty list of integers >= 1, "
                             f"got {pipelines!r}")
        for p in pipelines:
            _positive_int("pipelines", p)
        if len(set(pipelines)) != len(pipelines):
            raise ValueError(f"pipelines must not repeat a count, got {list(pipelines)}")
    if sync_period is not None:
        _positive_int("sync_period", sync_period)


def versioned(instance: Instance, *, objective: str | None = None,
              pipelines: tuple[int, ...] | None = None, sync_period: int | None = None
              ) -> Instance:
    """``instance`` as a contract-version-3 problem: its objective, pipelines and ``H``.

    Parameters
    ----------
    instance : Instance
        Any instance; its devices, links and layers are kept.
    objective : {"period", "classic"}, optional
        Default ``"period"``, the version-3 default.
    pipelines : sequence of int, optional
        Each at most the number of DCs and ``M`` (a larger count could never run);
        default :func:`default_pipelines`.
    sync_period : int, optional
        ``H``, default 1.

    Returns
    -------
    Instance

    Raises
    ------
    ValueError
        A knob out of range (:func:`check_version`), or a pipeline count above the
        number of DCs or ``M``.
    """
    check_version(3, objective, pipelines, sync_period)
    k, m = instance.num_datacenters, instance.microbatches
    if pipelines is None:
        pipelines = default_pipelines(k, m)
    for p in pipelines:
        if p > k or p > m:
            what = f"{k} datacenter(s)" if p > k else f"{m} microbatch(es)"
            raise ValueError(f"pipelines: {p} pipelines need {p} datacenters and {p} "
                             f"microbatches; the instance has {what}")
    training = instance.training
    par = dataclasses.replace(training.parallelism, pipelines=tuple(pipelines))
    return dataclasses.replace(instance, training=dataclasses.replace(
        training, objective=objective or "period", pipeline_sync_period=sync_period or 1,
        parallelism=par))


def model_training(shape: ModelShape, microbatches: int, schedule: str, parallelism: Parallelism,
                   microbatch_size: int | None = None) -> Training:
    """The ``training`` block of an instance of ``shape``: Adam's bytes per parameter for
    the shape's precision (:data:`TRAINING_BYTES`), ``M``, the schedule, the lists and the
    sequences per microbatch."""
    total, gradient, optimizer = TRAINING_BYTES[shape.element_bytes]
    return Training(microbatches=microbatches, schedule=schedule, bytes_per_param=total,
                    gradient_bytes_per_param=gradient, optimizer_bytes_per_param=optimizer,
                    parallelism=parallelism, microbatch_size=microbatch_size)


def batch_sizes(parallelism: Parallelism, microbatch_size: int | None = None,
                global_batch: int | None = None, microbatches: int | None = None
                ) -> tuple[int, int | None]:
    """``(B, M)``: sequences per microbatch and microbatches per iteration.

    ``B`` is ``microbatch_size``, by default the least common multiple of the
    ``data_parallel`` widths (every allowed width then divides it); ``M`` is
    ``global_batch / B`` when a global batch is given, else ``microbatches`` (``None``:
    the preset's or the cluster file's).

    Raises
    ------
    ValueError
        ``B`` does not divide the global batch, the global batch and ``microbatches``
        disagree, or the default ``B`` would pass 2**31 - 1 (give one).
    """
    if microbatch_size is None:
        microbatch_size = math.lcm(*parallelism.data_parallel)
        if microbatch_size > MAX_COUNT:
            raise ValueError(f"microbatch_size: the least common multiple of the data-parallel "
                             f"widths passes {MAX_COUNT}; give --microbatch-size")
    if global_batch is None:
        return microbatch_size, microbatches
    _positive_int("global_batch", global_batch)
    if global_batch % microbatch_size:
        raise ValueError(f"global_batch: {global_batch} sequences are not a whole number of "
                         f"microbatches of {microbatch_size} (microbatch_size)")
    m = global_batch // microbatch_size
    if microbatches is not None and microbatches != m:
        raise ValueError(f"global_batch: {global_batch} / {microbatch_size} = {m} microbatches, "
                         f"but microbatches is {microbatches}; give one of the two")
    if m > MAX_COUNT:
        raise ValueError(f"global_batch: {m} microbatches pass {MAX_COUNT}")
    return microbatch_size, m


def resolve_parallelism(spec: Preset, switch: str | None, data_parallel, tensor_parallel,
                        zero: bool | None) -> Parallelism:
    """The parallelism of an instance: the preset's, switched and overridden.

    Raises
    ------
    ValueError
        An unknown switch, a list given with ``"off"``, or a list the format refuses.
    """
    if switch is not None and switch not in SWITCH:
        raise ValueError(f"parallelism must be one of {', '.join(SWITCH)}, got {switch!r}")
    lists = {}
    for key, value in (("data_parallel", data_parallel), ("tensor_parallel", tensor_parallel)):
        if value is not None:
            lists[key] = tuple(value) if isinstance(value, (list, tuple)) else value
    if zero is not None:
        lists["zero"] = zero
    if switch == "off":
        if lists and lists != {"zero": False}:
            raise ValueError(f"parallelism 'off' contradicts {', '.join(lists)}")
        return Parallelism()
    on = (switch == "on" or spec.parallel_by_default
          or any(v is not False for v in lists.values()))
    if not on:
        return Parallelism()
    base = spec.parallelism if spec.parallel_by_default else PARALLELISM_ON
    return dataclasses.replace(base, **lists)  # the format's rules refuse bad lists


def _respecified(spec: Preset, granularity, gpu_types, man_gbit) -> Preset:
    """The preset with the overrides of what it draws from."""
    changes = {}
    if granularity is not None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, "
                             f"got {granularity!r}")
        changes["granularity"] = granularity
    if gpu_types is not None:
        if isinstance(gpu_types, str) or not gpu_types:
            raise ValueError(f"gpu_types must be a non-empty list of GPU names, got {gpu_types!r}")
        for t in gpu_types:
            gpu(t)  # raises with the known names
        changes["gpu_types"] = tuple(gpu_types)
        changes["min_types_overall"] = min(spec.min_types_overall, len(gpu_types))
    if man_gbit is not None:
        if isinstance(man_gbit, bool) or not isinstance(man_gbit, (int, float)) \
                or not 0 < man_gbit < float("inf"):
            raise ValueError(f"man_gbit must be a finite number > 0, got {man_gbit!r}")
        changes["man_gbit"] = (man_gbit,)
    return dataclasses.replace(spec, **changes) if changes else spec


def _preset(name: str) -> Preset:
    try:
        return PRESETS_SPEC[name]
    except (KeyError, TypeError):
        raise KeyError(unknown_name("preset", name, PRESETS)) from None


def _check_overrides(model, datacenters, gpus_per_dc, microbatches, schedule, degrade,
                     blocks, microbatch_size=None, seq_len=None) -> None:
    """Raise for an override out of range, before anything is drawn."""
    if model is not None and not isinstance(model, ModelShape):
        model_shape(model)  # raises with the known names
    for name, value in (("datacenters", datacenters), ("gpus_per_dc", gpus_per_dc),
                        ("microbatches", microbatches), ("blocks", blocks),
                        ("microbatch_size", microbatch_size), ("seq_len", seq_len)):
        if value is not None:
            _positive_int(name, value)
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if degrade is not None:
        check_degrade(degrade)


def _datacenters(spec: Preset, seed: int, k: int, gpus_per_dc: int | None, nodes: bool
                 ) -> tuple[Datacenter, ...]:
    """The ``k`` datacenters ``dc1..dck``: their device groups and intra-DC links."""
    if spec.pool_size is not None:
        pool = gpus_per_dc * k if gpus_per_dc else spec.pool_size
        if pool < k:
            raise ValueError(f"a pool of {pool} GPUs cannot fill {k} datacenters")
        groups = _pool_datacenters(spec, seed, k, pool, nodes)
        intra = [intra_dc_link(_rng(spec.name, seed, "intra"), spec.intra_gbit)] * k
    else:
        n = gpus_per_dc
        if n is None:
            n = _rng(spec.name, seed, "gpus_per_dc").choice(spec.gpus_per_dc)
            if spec.max_total_gpus is not None:
                n = max(1, min(n, spec.max_total_gpus // k))
        types = _draw_types(spec, seed, k)
        groups = []
        for d in range(k):
            counts = _dc_counts(_rng(spec.name, seed, f"counts/dc{d}"), n, types[d],
                                spec.even_split)
            groups.append([_group(spec, seed, d, t, c, nodes) for t, c in zip(types[d], counts)])
        intra = [intra_dc_link(_rng(spec.name, seed, f"intra/dc{d}"), spec.intra_gbit)
                 for d in range(k)]
    return tuple(Datacenter(f"dc{d + 1}", tuple(groups[d]), intra[d]) for d in range(k))


def _metro_links(spec: Preset, seed: int, k: int, degrade: float | None) -> tuple[Link, ...]:
    """The ``k - 1`` metro links of the chain, degraded by ``degrade`` when given."""
    links = [random_man_link(_rng(spec.name, seed, f"link{d}"), spec.man_gbit)
             for d in range(k - 1)]
    return tuple(links if degrade is None else (degraded(lk, degrade) for lk in links))


def _parallelism_suffix(par: Parallelism) -> str:
    """``-v1``, or ``-d<max d>t<max t>`` plus ``z`` with ZeRO: a parallelism not the preset's."""
    if par == Parallelism():
        return "-v1"
    return f"-d{max(par.data_parallel)}t{max(par.tensor_parallel)}{'z' if par.zero else ''}"


def _version_suffix(objective: str | None, pipelines, sync_period: int | None) -> str:
    """What a version-3 knob given explicitly adds to a name: ``-classic``, ``-p1-2``,
    ``-H4`` (the defaults add nothing)."""
    out = "-classic" if objective == "classic" else ""
    if pipelines is not None:
        out += "-p" + "-".join(map(str, pipelines))
    if sync_period is not None and sync_period != 1:
        out += f"-H{sync_period}"
    return out


def _instance_name(preset: str, seed: int, model: str, k: int, total: int, m: int, sched: str,
                   blocks: int | None, degrade: float | None) -> str:
    name = f"{preset}-s{seed}-{model}-{k}dc-{total}gpu-m{m}-{sched}"
    if blocks is not None:
        name += f"-{blocks}blk"
    if degrade is not None:
        name += f"-deg{degrade:g}"
    return name
