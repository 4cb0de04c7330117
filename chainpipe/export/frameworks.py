"""A plan as Megatron-Core arguments and as a TorchTitan job configuration.

Both are written for plans :func:`~chainpipe.export.nearest.expressible_problem`
accepts: every stage with the same ``(d, t)``, cuts between whole blocks.

- Megatron-Core: a bash array of arguments (as Megatron-LM's example scripts
  hold them) with ``--pipeline-model-parallel-layout`` in the syntax of
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``: stages
  separated by ``|``, ``E`` the embedding, ``t`` a transformer layer, ``L`` the
  loss (final norm and output layer), ``x*n`` for ``n`` times ``x``. Megatron
  derives the data-parallel size from the world size,
  ``WORLD_SIZE / (TP x PP)``.
- TorchTitan: a TOML job configuration whose ``[parallelism]`` keys are those
  of TorchTitan's ``Parallelism`` settings (the TOML job file of v0.2; later
  versions take the same fields in a Python ``ParallelismConfig``), with the
  modules of each stage in ``module_fqns_per_model_part``
  (``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``, as TorchTitan's
  decoders name them).
"""

from __future__ import annotations

import json
import re

from ..instance import Instance
from ..plan import Evaluation, Plan
from .nearest import Unit, framework_units


def _stage_units(instance: Instance, plan: Plan) -> list[list[Unit]]:
    """Each stage's framework layers, in order (an expressible plan cuts between units)."""
    units = framework_units(instance)
    return [[u for u in units if st.start <= u.start < st.end] for st in plan.stages]


def _header(instance: Instance, plan: Plan, ev: Evaluation, what: str) -> list[str]:
    st = plan.stages[0]
    p, d, t = plan.num_stages, st.data_parallel, st.tensor_parallel
    lines = [
        f"# {what}, written by chainpipe export",
        f"# instance {instance.name}: model {instance.model.name}, M = {instance.microbatches} "
        f"microbatches, {instance.training.schedule}",
        f"# the plan's iteration time T = {ev.iteration_time_s:.6g} s (chainpipe's cost model)",
        f"# world size {p * d * t} = pipeline {p} x data-parallel {d} x tensor-parallel {t}; "
        f"global rank r runs on the device",
        "# `chainpipe export INSTANCE PLAN --to ranks` names (tensor-parallel rank fastest, "
        "then data-parallel, then stage)",
    ]
    return lines


def megatron_layout(instance: Instance, plan: Plan) -> str:
    """``--pipeline-model-parallel-layout`` of ``plan``: ``E``, ``t*n`` and ``L`` per stage,
    stages joined by ``|``. Megatron-Core asks for ``E`` first and ``L`` last: they are
    added to the first and last stage when the instance has no such layer."""
    stages = _stage_units(instance, plan)
    kinds = [[u.kind for u in units] for units in stages]
    if not kinds[0] or kinds[0][0] != "E":
        kinds[0].insert(0, "E")
    if kinds[-1][-1] != "L":
        kinds[-1].append("L")
    out = []
    for ks in kinds:
        text, i = "", 0
        while i < len(ks):
            j = i
            while j < len(ks) and ks[j] == ks[i]:
                j += 1
            text += ks[i] if j - i == 1 else f"{ks[i]}*{j - i}"
            i = j
        out.append(text)
    return "|".join(out)


def batch_lines(instance: Instance, d: int, size: int) -> list[str]:
    """The comment lines that say how the planned batch maps to the framework's."""
    m = instance.microbatches
    return [
        f"# batch: M = {m} microbatches of {size} sequence(s) = {m * size} sequences per "
        f"iteration; each of the {d}",
        f"# data-parallel replica(s) takes {size // d} sequence(s) of every microbatch "
        f"(microbatch_size / d = {size} / {d}).",
    ]


def megatron_arguments(instance: Instance, plan: Plan, ev: Evaluation, size: int) -> str:
    """A bash snippet defining ``MODEL_PARALLEL_ARGS`` for ``pretrain_gpt.py``.

    ``size`` is the sequences per microbatch: ``--micro-batch-size`` is ``size / d``
    (per replica) and ``--global-batch-size`` is ``M * size``, so Megatron's
    ``global / (micro x DP)`` is the planned ``M``.
    """
    st = plan.stages[0]
    p, d, t = plan.num_stages, st.data_parallel, st.tensor_parallel
    decoder = sum(u.kind == "t" for units in _stage_units(instance, plan) for u in units)
    lines = _header(instance, plan, ev, "Megatron-Core arguments")
    lines += [
        f"# Megatron-Core takes the data-parallel size from the world size: launch {p * d * t} "
        f"ranks (WORLD_SIZE / (TP x PP) = {d}).",
        *batch_lines(instance, d, size),
        f"# Megatron runs --global-batch-size / (--micro-batch-size x DP) = "
        f"{instance.microbatches} microbatches per iteration, as planned.",
    ]
    if instance.training.schedule == "gpipe":
        lines.append("# the plan was costed for GPipe; Megatron-Core runs 1F1B (the same time, "
                     "less activation memory).")
    lines += ["# use: source this file; torchrun ... pretrain_gpt.py ... "
              '"${MODEL_PARALLEL_ARGS[@]}"', "MODEL_PARALLEL_ARGS=("]
    args = [
        f"--tensor-model-parallel-size {t}",
        f"--pipeline-model-parallel-size {p}",
        f"--num-layers {decoder}",
        f"--pipeline-model-parallel-layout '{megatron_layout(instance, plan)}'",
    ]
    if t > 1:
        args.append("--sequence-parallel")  # the cost model divides activations by t
    if instance.training.parallelism.zero:
        args.append("--use-distributed-optimizer")  # ZeRO-1: optimizer state over the replicas
    args += [f"--micro-batch-size {size // d}",
             f"--global-batch-size {instance.microbatches * size}"]
    lines += [f"    {a}" for a in args] + [")"]
    return "\n".join(lines) + "\n"


#: model names of the families whose modules TorchTitan's Llama-style decoders name
#: ``tok_embeddings``, ``layers.<i>``, ``norm``, ``output`` (Llama, Mistral, Qwen2)
LLAMA_STYLE = re.compile(r"llama|mistral|qwen", re.IGNORECASE)
#: the module naming schemes ``--module-names`` may force
MODULE_NAMES = ("llama",)


def module_names_problem(instance: Instance, module_names: str | None = None) -> str | None:
    """Why the TorchTitan module names would not fit the instance's model, or ``None``.

    The names written are those of TorchTitan's Llama-style decoders; a model whose name
    says it is of another family (GPT-3, GPT-NeoX, Pythia, ...) or does not say is refused
    unless ``module_names="llama"`` forces them.
    """
    if module_names == "llama" or LLAMA_STYLE.search(instance.model.name):
        return None
    return (f"torchtitan's module names (tok_embeddings, layers.<i>, norm, output) are those "
            f"of its Llama-style decoders (Llama, Mistral, Qwen2 models), and model "
            f"{instance.model.name!r} is not recognised as one: give --module-names llama to "
            f"write them anyway")


def torchtitan_modules(instance: Instance, plan: Plan) -> list[list[str]]:
    """``module_fqns_per_model_part``: each stage's modules in TorchTitan's names."""
    out, block = [], 0
    for units in _stage_units(instance, plan):
        names = []
        for u in units:
            if u.kind == "E":
                names.append("tok_embeddings")
            elif u.kind == "L":
                names += ["norm", "output"]
            else:
                names.append(f"layers.{block}")
                block += 1
        out.append(names)
    if "tok_embeddings" not in out[0]:
        out[0].insert(0, "tok_embeddings")
    if out[-1][-1] != "output":
        out[-1] += ["norm", "output"]
    return out


def torchtitan_config(instance: Instance, plan: Plan, ev: Evaluation, size: int) -> str:
    """A TorchTitan job configuration (TOML): ``[parallelism]`` and the batch of ``[training]``.

    ``size`` is the sequences per microbatch: per data-parallel rank,
    ``pipeline_parallel_microbatch_size`` is ``size / d`` and ``local_batch_size`` is
    ``M * size / d``; ``global_batch_size`` is ``M * size``.
    """
    st = plan.stages[0]
    p, d, t = plan.num_stages, st.data_parallel, st.tensor_parallel
    m = instance.microbatches
    lines = _header(instance, plan, ev, "TorchTitan job configuration")
    lines += [
        "# TorchTitan v0.2 reads this file (--job.config_file); later versions take the same "
        "[parallelism] fields",
        "# in the ParallelismConfig of a Trainer.Config. Merge it into your model's job "
        "configuration.",
        f"# data parallelism is FSDP over the {d} replica(s) (TorchTitan runs DDP only without "
        "pipeline or tensor",
        "# parallelism): it shards weights and gradients too, so it needs no more memory "
        "than planned.",
        "",
        "[parallelism]",
        f"pipeline_parallel_degree = {p}",
        f"tensor_parallel_degree = {t}",
        f"enable_sequence_parallel = {'true' if t > 1 else 'false'}",
        "data_parallel_replicate_degree = 1",
        f"data_parallel_shard_degree = {d}",
        "context_parallel_degree = 1",
        f"pipeline_parallel_schedule = \"{'GPipe' if instance.training.schedule == 'gpipe' else '1F1B'}\"",
        f"pipeline_parallel_microbatch_size = {size // d}",
        "module_fqns_per_model_part = [",
    ]
    lines += [f"    {json.dumps(names)}," for names in torchtitan_modules(instance, plan)]
    lines += [
        "]",
        "",
        "[training]",
        *batch_lines(instance, d, size),
        f"# M = {m} microbatches: local_batch_size / pipeline_parallel_microbatch_size (per "
        "data-parallel rank)",
        f"local_batch_size = {m * size // d}",
        f"global_batch_size = {m * size}",
    ]
    return "\n".join(lines) + "\n"
