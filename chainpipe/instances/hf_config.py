"""A model's shape read from its Hugging Face-style ``config.json``.

    from chainpipe.instances.hf_config import read_model_config
    shape = read_model_config("tests/data/llama-2-7b", seq_len=4096)
    layers = model_layers(shape, microbatch_size=2, tensor_parallel=True)

The file is read as JSON, not through ``transformers``' configuration
classes: the dozen fields a cost model needs are stable, documented keys of
the published files, while ``transformers`` is a large dependency whose
classes fill a missing field with a default model's value (and whose
``AutoConfig`` looks unknown types up on the hub or in remote code, which a
planner reading a local file must not do). Every field used is checked by
name; what the cost model cannot represent (mixture-of-experts,
encoder-decoder models, biases or activations other than the family's) is
refused with the field that says so, rather than planned wrongly.

Families (``model_type``):

- ``llama``, ``mistral``, ``qwen2``: SwiGLU MLP, grouped-query attention,
  RMSNorm, rotary positions (Qwen2 adds biases to the Q, K and V projections);
- ``gpt2``: GELU MLP, biases, LayerNorm, a learned position table, tied
  embeddings;
- ``gpt_neox`` (GPT-NeoX, Pythia): GPT blocks with rotary positions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..instance import InstanceError, integer_rule, name_rule
from ..io import load_json
from ..strict_json import quote
from .models import FLOAT, HALF, ModelShape, model_layers

#: ``model_type`` -> chainpipe block family
FAMILY_OF = {"llama": "llama", "mistral": "llama", "qwen2": "llama", "gpt2": "gpt",
             "gpt_neox": "neox"}
#: precision name -> bytes of one activation value
PRECISIONS = {"bf16": HALF, "fp16": HALF, "fp32": FLOAT}
#: keys whose positive value makes a configuration a mixture of experts
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
               "num_experts_per_tok")
#: model types known to be mixtures of experts (named as such in the error)
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx",
             "jamba", "olmoe", "phimoe", "granitemoe", "llama4", "gpt_oss", "switch_transformers")
#: the field names of each family: (blocks, hidden, heads, ffn, vocab, context length)
FIELDS = {
    "gpt2": ("n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions"),
    "default": ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                "vocab_size", "max_position_embeddings"),
}
#: the activation each family's MLP is built for (Llama-style: the SiLU of SwiGLU)
ACTIVATIONS = {"llama": ("silu", "swish"), "gpt": ("gelu", "gelu_new", "gelu_fast",
                                                   "gelu_pytorch_tanh", "quick_gelu"),
               "neox": ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh")}
#: the largest value of each dimension read, by its role (the family's field names in
#: :data:`FIELDS`), with the reason in an error line; every bound is far above any trained
#: dense model, so that a value beyond it is a typo or a hostile file, never a model
#: (:func:`~chainpipe.instances.models.model_layers` makes one layer per block: the
#: block bound is also what keeps the instance's size and memory bounded)
BOUNDS = {
    "blocks": (10_000, "10 times the deepest transformer trained, DeepNet's 1,000 blocks"),
    "hidden": (2**20, "2**20; the widest dense models use 18,432 to 25,600"),
    "heads": (2**16, "2**16; real models use at most a few hundred"),
    "ffn": (2**22, "2**22; real FFNs are at most 4 times a hidden size of 2**20"),
    "vocab": (2**24, "2**24; the largest vocabularies hold about 256,000 tokens"),
    "context": (2**27, "2**27 tokens; the longest contexts released hold 10,485,760"),
    "kv_heads": (2**16, "2**16, as heads"),
    "head_dim": (2**16, "2**16; real heads are 64 to 256 wide"),
}
#: the roles of a family's :data:`FIELDS`, in the same order
ROLES = ("blocks", "hidden", "heads", "ffn", "vocab", "context")
RULES = {role: integer_rule(1, bound, why) for role, (bound, why) in BOUNDS.items()}


def config_path(path: str | os.PathLike) -> Path:
    """``path`` itself, or ``path/config.json`` when ``path`` is a directory."""
    p = Path(path)
    return p / "config.json" if p.is_dir() else p


def read_model_config(path: str | os.PathLike, *, seq_len: int | None = None,
                      precision: str = "bf16", name: str | None = None) -> ModelShape:
    """The shape of the model described by a Hugging Face-style ``config.json``.

    Parameters
    ----------
    path : path
        The ``config.json`` file, or a directory holding one.
    seq_len : int, optional
        Tokens per training sequence; default the model's context length
        (``max_position_embeddings``, ``n_positions`` for GPT-2).
    precision : {"bf16", "fp16", "fp32"}, default "bf16"
        The training precision: 2 or 4 bytes per activation value.
    name : str, optional
        The model's name in the instance; default the name of the directory
        holding the file (``Llama-2-7b-hf/config.json`` -> ``Llama-2-7b-hf``).

    Returns
    -------
    ModelShape

    Raises
    ------
    InstanceError
        One line per problem, ``FILE: FIELD: what is wrong``: unreadable file,
        invalid JSON, a missing or ill-typed field, a dimension beyond its
        :data:`BOUNDS` (``num_hidden_layers`` at most 10,000, ...), an unsupported
        model type or feature (mixture-of-experts among them).
    """
    file = config_path(path)
    data = load_json(file)
    if not isinstance(data, dict):
        raise InstanceError([f"{file}: must be a JSON object (a model's config.json)"])
    problems: list[str] = []

    def bad(key: str, msg: str) -> None:
        problems.append(f"{file}: {key}: {msg}")

    if precision not in PRECISIONS:
        raise InstanceError([f"precision: must be one of {', '.join(PRECISIONS)}, "
                             f"got {quote(str(precision))}"])
    if name is None:
        name = (file.parent.resolve().name if file.name == "config.json" else file.stem) or "model"
    if msg := name_rule(name):
        raise InstanceError([f"{file}: model name: {msg} (give one with --model-name)"])
    kind = data.get("model_type")
    family = _family(kind, bad)
    for key in EXPERT_KEYS:
        if isinstance(data.get(key), int) and not isinstance(data[key], bool) and data[key] > 0:
            bad(key, f"mixture-of-experts models are not supported yet, got {data[key]}")
    if family is None or problems:
        raise InstanceError(problems)

    keys = FIELDS.get(kind, FIELDS["default"])
    values: dict[str, Any] = {}
    for key, role in zip(keys, ROLES):
        value = data.get(key)
        optional = key == "n_inner"  # GPT-2: null means 4 h
        if value is None and optional:
            values[key] = None
        elif key not in data:
            bad(key, f"missing (model_type {quote(kind)} needs it)")
        elif msg := RULES[role](value):
            bad(key, msg)
        else:
            values[key] = value
    kv_heads = _optional_count(data, "num_key_value_heads", "kv_heads", bad) \
        if family == "llama" else None
    head_dim = _optional_count(data, "head_dim", "head_dim", bad) if family == "llama" else None
    _check_features(data, kind, family, bad)
    if problems:
        raise InstanceError(problems)

    blocks, hidden, heads, ffn, vocab, context = (values[k] for k in keys)
    if head_dim is None and hidden % heads:
        bad(keys[2], f"must divide {keys[1]} = {hidden} (or give head_dim), got {heads}")
    if kv_heads is not None and heads % kv_heads:
        bad("num_key_value_heads", f"must divide {keys[2]} = {heads}, got {kv_heads}")
    if seq_len is None:
        seq_len = context
    elif msg := RULES["context"](seq_len):
        problems.append(f"seq_len: {msg}")
    elif family == "gpt" and seq_len > context:
        problems.append(f"seq_len: {seq_len} exceeds the learned position table of "
                        f"{file}: {keys[5]} = {context}")
    if problems:
        raise InstanceError(problems)
    tied = data.get("tie_word_embeddings", family == "gpt")
    try:
        shape = ModelShape(
            name=name, family=family, blocks=blocks, hidden=hidden, heads=heads, vocab=vocab,
            seq=seq_len, kv_heads=kv_heads if kv_heads != heads else None, ffn=ffn,
            source=f"{file}", head_dim=head_dim if head_dim != hidden // heads else None,
            positions=context if family == "gpt" else None, qkv_bias=kind == "qwen2",
            tied_embeddings=bool(tied), element_bytes=PRECISIONS[precision])
    except ValueError as exc:
        raise InstanceError([f"{file}: {exc}"]) from None
    try:  # an embedding, a block and a head: each within the format's ranges
        model_layers(shape, blocks=1)
    except InstanceError as exc:
        raise InstanceError([f"{file}: the dimensions give a layer the format refuses: {p}"
                             for p in exc.problems]) from None
    return shape


def _family(kind: Any, bad) -> str | None:
    """The block family of ``model_type``, or ``None`` with the problem noted."""
    if kind is None:
        bad("model_type", "missing: a model's config.json names its type (llama, gpt2, ...)")
    elif not isinstance(kind, str):
        bad("model_type", f"must be a string, got {quote(str(kind))}")
    elif kind in MOE_TYPES or "moe" in kind:
        bad("model_type", f"{quote(kind)} is a mixture-of-experts model; not supported yet "
                          f"(dense decoders only: {', '.join(FAMILY_OF)})")
    elif kind not in FAMILY_OF:
        bad("model_type", f"{quote(kind)} is not supported; supported: {', '.join(FAMILY_OF)} "
                          f"(dense decoder-only transformers)")
    else:
        return FAMILY_OF[kind]
    return None


def _optional_count(data: dict, key: str, role: str, bad) -> int | None:
    """``data[key]`` if given and within the bound of ``role``; ``None`` (noted) if not."""
    value = data.get(key)
    if value is None:
        return None
    if msg := RULES[role](value):
        bad(key, msg)
        return None
    return value


def _check_features(data: dict, kind: str, family: str, bad) -> None:
    """Note every field whose value the family's cost formulas do not represent."""
    act_key = "activation_function" if kind == "gpt2" else "hidden_act"
    act = data.get(act_key)
    if act is not None and act not in ACTIVATIONS[family]:
        bad(act_key, f"{quote(str(act))} is not supported for model_type {quote(kind)} "
                     f"(expected {', '.join(ACTIVATIONS[family])})")
    if family == "llama":
        for key in ("attention_bias", "mlp_bias"):
            if data.get(key) not in (None, False):
                bad(key, f"biases on every projection are not modelled, got {data[key]!r}")
    if kind == "gpt_neox" and data.get("attention_bias") is False:
        bad("attention_bias", "GPT-NeoX blocks are modelled with biases, got false")
    tied = data.get("tie_word_embeddings")
    if tied is not None and not isinstance(tied, bool):
        bad("tie_word_embeddings", f"must be true or false, got {quote(str(tied))}")
    if data.get("is_encoder_decoder"):
        bad("is_encoder_decoder", "encoder-decoder models are not supported")
