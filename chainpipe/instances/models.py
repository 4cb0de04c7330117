"""Transformer shapes and the per-layer figures derived from them: the one builder.

The built-in shapes (:data:`MODELS`) and those read from a model's
``config.json`` (:mod:`chainpipe.instances.hf_config`) are both
:class:`ModelShape`; :func:`model_layers` makes either into an instance's layers.
Every figure is for one microbatch of ``b`` sequences of ``s`` tokens,
activations of ``p`` bytes (``element_bytes``: 2, or 4 in fp32); the formulas
and their sources are in ``docs/instances.md``.

- GPT-style blocks (GPT-2/3, Megatron-LM; GPT-NeoX without the position
  table): forward FLOP ``24 b s h^2 (1 + s / (6 h))`` with an FFN of ``4 h``
  (Narayanan et al., SC'21), parameters ``12 h^2 + 13 h`` (the ``12 h^2``
  matrices plus biases and two layer norms), stashed activations with
  selective recomputation ``34 s b h`` bytes at 16 bits (Korthikanti et al.
  2022), in general ``s b ((6 p + 1) h + 2 p h + 2 p f + h)`` (the 1-byte
  dropout masks do not grow with ``p``).
- Llama-style blocks (SwiGLU, grouped-query attention, RMSNorm, no biases but
  Qwen2's on Q, K, V): the exact matmul count, forward FLOP
  ``2 b s (2 h q + 2 h d_kv + 3 h f) + 4 b s^2 q`` with ``q`` the query width
  (``h`` unless ``head_dim`` says otherwise), ``d_kv`` the width of the
  key/value projections and ``f`` the FFN size (three FFN matrices),
  parameters ``2 h q + 2 h d_kv + 3 h f + 2 h``, and Korthikanti's
  selective-recomputation accounting applied to that block:
  ``p s b (4 h + 2 q + 2 d_kv + 3 f)`` bytes.
- Backward FLOP is twice forward; a boundary carries the hidden state,
  ``p b s h`` bytes.
- The weight-gradient share of the backward (``weight_grad_share``, the ``W`` of a
  zero-bubble schedule): a product by a weight matrix has a backward of two products of
  its forward's size, one for the input gradient (``B``) and one for the weight
  gradient (``W``); the attention products ``Q K^T`` and ``x V`` have no weight, and
  both their backward products are input gradients. So ``W`` is the weight products'
  forward FLOP and the share is ``W / bwd_flop``: ``3 h / (6 h + s)`` for a GPT block
  (``24 h^2`` of weight products per token against ``4 s h`` of attention),
  ``h / (2 h + s)`` for its attention half, ``1/2`` for an MLP and for the LM head,
  ``1`` for the embedding (its input is token ids: its whole backward is the gradient
  of its table). :attr:`Figures.weight_grad_share` gives it per piece.
- The embedding and the LM head are layers of their own.
- Tensor parallelism (Megatron, Shoeybi et al. 2019), in all-reduce payloads
  per microbatch, forward and backward together (:func:`tp_allreduce_bytes`):
  a block all-reduces its hidden state twice forward and twice backward,
  ``4 x 2 b s h``; the vocabulary-parallel embedding once (forward only),
  ``2 b s h``; the head once (the backward of its input), ``2 b s h``, plus the
  three fp32 per-token reductions of the vocabulary-parallel cross-entropy.

With ``granularity="sublayer"`` each block becomes two layers, attention and
MLP, whose figures add up exactly to the block's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..instance import Layer
from ..names import unknown_name

#: bytes of one 16-bit value
HALF = 2
#: bytes of one fp32 value (the logits are upcast for the cross-entropy)
FLOAT = 4
#: bytes of one token id (int32)
TOKEN = 4

GRANULARITIES = ("block", "sublayer")


#: block families: "gpt" (GPT-2/GPT-3: GELU MLP, biases, LayerNorm, learned positions),
#: "neox" (GPT-NeoX/Pythia: GPT blocks with rotary positions, no position table),
#: "llama" (Llama/Mistral/Qwen2: SwiGLU, grouped-query attention, RMSNorm, rotary positions)
FAMILIES = ("gpt", "neox", "llama")


@dataclass(frozen=True)
class ModelShape:
    """A transformer's dimensions and the workload it is trained with (``seq``, precision).

    The built-in :data:`MODELS` and the shapes read from a Hugging Face-style
    ``config.json`` (:mod:`chainpipe.instances.hf_config`) are both this class,
    and :func:`model_layers` turns either into an instance's layers.
    """

    name: str
    family: str  # one of FAMILIES
    blocks: int  # transformer layers
    hidden: int  # h = d_model
    heads: int
    vocab: int
    seq: int  # tokens per sequence of the training run
    kv_heads: int | None = None  # grouped-query attention; None = as many as heads
    ffn: int | None = None  # FFN inner size; None = 4 h
    source: str = ""
    head_dim: int | None = None  # width of one attention head; None = h / heads
    positions: int | None = None  # rows of a learned position table ("gpt"); None = seq
    qkv_bias: bool = False  # "llama": biases on the Q, K and V projections (Qwen2)
    tied_embeddings: bool = False  # the head reuses the embedding matrix (GPT-2)
    element_bytes: int = HALF  # bytes of one activation value: 2 (bf16, fp16) or 4 (fp32)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; known: {', '.join(FAMILIES)}")
        if self.family != "llama" and (self.kv_heads, self.head_dim, self.qkv_bias) != (
                None, None, False):
            raise ValueError("GPT-style blocks have plain multi-head attention of width h, "
                             "with biases everywhere")
        if self.element_bytes not in (HALF, FLOAT):
            raise ValueError(f"element_bytes must be 2 or 4, got {self.element_bytes!r}")

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.head_dim or self.hidden // self.heads

    @property
    def q_dim(self) -> int:
        """Width of the query projection (and of the attention output), ``heads x head``."""
        return self.head_size * self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection."""
        return self.head_size * (self.kv_heads or self.heads)

    @property
    def ffn_size(self) -> int:
        """The FFN inner size ``f`` (``4 h`` unless given)."""
        return self.ffn or 4 * self.hidden

    @property
    def position_rows(self) -> int:
        """Rows of the learned position table: ``positions`` (else ``seq``) for "gpt", else 0."""
        return (self.positions or self.seq) if self.family == "gpt" else 0


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # GPT-3, Brown et al. 2020, table 2.1 (n_ctx = 2048, BPE vocabulary 50257)
        ModelShape("gpt3-125m", "gpt", 12, 768, 12, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        ModelShape("gpt3-1.3b", "gpt", 24, 2048, 24, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        ModelShape("gpt3-2.7b", "gpt", 32, 2560, 32, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        ModelShape("gpt3-6.7b", "gpt", 32, 4096, 32, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        ModelShape("gpt3-13b", "gpt", 40, 5140, 40, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        ModelShape("gpt3-175b", "gpt", 96, 12288, 96, 50257, 2048, source="Brown et al. 2020, table 2.1"),
        # Llama 2, Touvron et al. 2023 (table 1 and the released configurations)
        ModelShape("llama2-7b", "llama", 32, 4096, 32, 32000, 4096, ffn=11008,
                   source="Touvron et al. 2023; released config.json"),
        ModelShape("llama2-13b", "llama", 40, 5120, 40, 32000, 4096, ffn=13824,
                   source="Touvron et al. 2023; released config.json"),
        ModelShape("llama2-70b", "llama", 80, 8192, 64, 32000, 4096, kv_heads=8, ffn=28672,
                   source="Touvron et al. 2023; released config.json"),
        # Megatron-LM weak-scaling configuration, Narayanan et al. SC'21, table 1
        # (vocabulary 51200, sequence 2048): 60 layers make 122 at sublayer granularity
        ModelShape("megatron-76b", "gpt", 60, 10240, 80, 51200, 2048,
                   source="Narayanan et al. SC'21, table 1"),
    )
}


def model_shape(name: str) -> ModelShape:
    """The published shape ``name``; a :class:`KeyError` says "did you mean" for a near miss."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(unknown_name("model", name, MODELS)) from None


# --------------------------------------------------------------------------- figures
@dataclass(frozen=True)
class Figures:
    """Forward FLOP, parameters and stashed activation bytes of one piece of a block.

    ``weight_grad_flop`` is the part of the backward (``2 x fwd_flop``) that computes
    the weight gradient: the forward FLOP of the products by a weight matrix (the
    embedding's: its whole backward).
    """

    fwd_flop: int
    params: int
    activation_bytes: int
    weight_grad_flop: int = 0

    @property
    def bwd_flop(self) -> int:
        """Backward FLOP: twice forward (input gradient plus weight gradient)."""
        return 2 * self.fwd_flop

    @property
    def weight_grad_share(self) -> float:
        """``weight_grad_flop / bwd_flop``, in ``[0, 1]`` (0 for a piece without FLOP)."""
        return self.weight_grad_flop / self.bwd_flop if self.fwd_flop else 0.0


def attention_figures(m: ModelShape, b: int) -> Figures:
    """The attention half of a block, including its (pre-)normalisation."""
    h, s, p = m.hidden, m.seq, m.element_bytes
    if m.family != "llama":
        # QKV 3h^2 and output projection h^2, with biases, plus one layer norm (2h)
        return Figures(
            fwd_flop=8 * b * s * h * h + 4 * b * s * s * h,
            params=4 * h * h + 4 * h + 2 * h,
            # Korthikanti et al., selective recomputation: QKV input, Q, K, V and the
            # projection's input (5 values of h), the dropout mask (1 byte), the norm's input:
            # 13 s b h at 16 bits
            activation_bytes=(6 * p + 1) * s * b * h,
            weight_grad_flop=8 * b * s * h * h,  # QKV and output projections
        )
    # Q and O: h x q; K and V: h x d_kv (GQA); RMSNorm weight h; biases on Q, K, V (Qwen2)
    q, kv = m.q_dim, m.kv_dim
    return Figures(
        fwd_flop=2 * b * s * (2 * h * q + 2 * h * kv) + 4 * b * s * s * q,  # + Q K^T, x V
        params=2 * h * q + 2 * h * kv + h + ((q + 2 * kv) if m.qkv_bias else 0),
        # inputs kept for backward: norm input, QKV input, Q, K, V, O input
        activation_bytes=p * s * b * (2 * h + 2 * q + 2 * kv),
        weight_grad_flop=2 * b * s * (2 * h * q + 2 * h * kv),  # Q, K, V and O projections
    )


def mlp_figures(m: ModelShape, b: int) -> Figures:
    """The MLP half of a block, including its (pre-)normalisation."""
    h, s, f, p = m.hidden, m.seq, m.ffn_size, m.element_bytes
    if m.family != "llama":
        return Figures(
            fwd_flop=2 * b * s * 2 * h * f,
            params=2 * h * f + f + h + 2 * h,
            # Korthikanti et al.: the MLP's input, the GELU's input and output (f wide), the
            # dropout mask (1 byte), the norm's input: 21 s b h at 16 bits with f = 4 h
            activation_bytes=s * b * (2 * p * h + 2 * p * f + h),
            weight_grad_flop=2 * b * s * 2 * h * f,  # every product has a weight
        )
    # SwiGLU: gate and up h x f, down f x h; RMSNorm weight h
    return Figures(
        fwd_flop=2 * b * s * 3 * h * f,
        params=3 * h * f + h,
        # norm input, gate/up input, gate output, up output, down input
        activation_bytes=p * s * b * (2 * h + 3 * f),
        weight_grad_flop=2 * b * s * 3 * h * f,  # every product has a weight
    )


def block_figures(m: ModelShape, b: int = 1) -> Figures:
    """A whole block: its attention and MLP halves added."""
    a, p = attention_figures(m, b), mlp_figures(m, b)
    return Figures(a.fwd_flop + p.fwd_flop, a.params + p.params,
                   a.activation_bytes + p.activation_bytes,
                   a.weight_grad_flop + p.weight_grad_flop)


def embedding_figures(m: ModelShape, b: int = 1) -> Figures:
    """Token embedding (and GPT's learned positions): a gather, no matmul.

    Counted as one add per output element; it stashes only the token ids. Its input is
    token ids, so its whole backward (the gradient of its table, scattered and summed)
    is weight gradient: share 1.
    """
    params = (m.vocab + m.position_rows) * m.hidden
    fwd = b * m.seq * m.hidden
    return Figures(fwd_flop=fwd, params=params, activation_bytes=TOKEN * b * m.seq,
                   weight_grad_flop=2 * fwd)


def head_figures(m: ModelShape, b: int = 1) -> Figures:
    """Final norm and LM head: logits ``2 b s h V`` forward; it keeps its own ``V h`` copy.

    With tied embeddings the copy is the embedding's (a pipeline keeps one on the
    last stage and all-reduces its gradient with the first, as Megatron does),
    so the layer holds it either way. Stashed: the head's input and the fp32
    logits of the cross-entropy.
    """
    h, s, v = m.hidden, m.seq, m.vocab
    norm = h if m.family == "llama" else 2 * h
    return Figures(
        fwd_flop=2 * b * s * h * v,
        params=v * h + norm,
        activation_bytes=m.element_bytes * s * b * h + FLOAT * s * b * v,
        weight_grad_flop=2 * b * s * h * v,  # the logits' product has a weight: share 1/2
    )


def parameter_count(m: ModelShape) -> int:
    """The model's distinct parameters, as published: the layers' sum, less the head's
    copy of a tied embedding."""
    total = (embedding_figures(m).params + m.blocks * block_figures(m).params
             + head_figures(m).params)
    return total - (m.vocab * m.hidden if m.tied_embeddings else 0)


#: all-reduces of the hidden state per piece, forward + backward (Megatron's f and g operators)
ALLREDUCES = {"embedding": 1, "block": 4, "attention": 2, "mlp": 2, "head": 1}
#: fp32 per-token all-reduces of the vocabulary-parallel cross-entropy: max, sum of exp, target
CROSS_ENTROPY_REDUCTIONS = 3


def tp_allreduce_bytes(m: ModelShape, piece: str, b: int = 1) -> int:
    """Bytes all-reduced among the tensor-parallel devices per microbatch, fwd + bwd.

    ``piece`` is ``"embedding"``, ``"block"``, ``"attention"``, ``"mlp"`` or
    ``"head"``. Each all-reduce carries the 16-bit hidden state ``2 b s h``
    (with sequence parallelism it becomes a reduce-scatter and an all-gather of
    the same total volume): a block has two forward (after attention, after the
    MLP) and two backward (before each), each half one of each; the
    vocabulary-parallel embedding one forward (its backward is the identity);
    the head one backward (the gradient of its replicated input), plus the
    cross-entropy's three fp32 reductions per token.
    """
    hidden = m.element_bytes * b * m.seq * m.hidden
    extra = CROSS_ENTROPY_REDUCTIONS * FLOAT * b * m.seq if piece == "head" else 0
    return ALLREDUCES[piece] * hidden + extra


def _layer(name: str, f: Figures, output_bytes: float, tp_bytes: float | None = None,
           weight_share: bool = False) -> Layer:
    return Layer(
        name=name,
        fwd_flop=float(f.fwd_flop),
        bwd_flop=float(f.bwd_flop),
        params=int(f.params),
        activation_bytes=float(f.activation_bytes),
        output_bytes=float(output_bytes),
        tp_allreduce_bytes=None if tp_bytes is None else float(tp_bytes),
        weight_grad_share=f.weight_grad_share if weight_share else None,
    )


def model_layers(
    m: ModelShape, *, microbatch_size: int = 1, blocks: int | None = None,
    granularity: str = "block", tensor_parallel: bool = False, weight_shares: bool = True,
) -> tuple[Layer, ...]:
    """The layers of ``m`` in execution order: embedding, blocks, head.

    Parameters
    ----------
    m : ModelShape
        The model's shape and workload.
    microbatch_size : int, default 1
        Sequences per microbatch ``b``: every figure scales with it (the shares do not).
    blocks : int, optional
        Keep only the first ``blocks`` transformer blocks (a slice of the model with
        its true per-layer figures, for small instances); default all.
    granularity : {"block", "sublayer"}, default "block"
        One layer per block, or two (attention, MLP).
    tensor_parallel : bool, default False
        Every layer carries its :func:`tp_allreduce_bytes`; without, the field keeps
        the format's default (a version-1 layer).
    weight_shares : bool, default True
        Every layer carries its ``weight_grad_share`` derived from the shape
        (:attr:`Figures.weight_grad_share`); without, the field is left out (the
        what-if schedules then take their default, 0.5): what a version-2 instance of
        the generator holds.

    Returns
    -------
    tuple of Layer
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; known: {', '.join(GRANULARITIES)}")
    n = m.blocks if blocks is None else blocks
    if not 1 <= n <= m.blocks:
        raise ValueError(f"blocks must be between 1 and {m.blocks} for {m.name}, got {n}")
    b = microbatch_size
    hidden_bytes = m.element_bytes * b * m.seq * m.hidden

    def layer(name: str, f: Figures, output_bytes: float, piece: str) -> Layer:
        tp = tp_allreduce_bytes(m, piece, b) if tensor_parallel else None
        return _layer(name, f, output_bytes, tp, weight_shares)

    layers = [layer("embedding", embedding_figures(m, b), hidden_bytes, "embedding")]
    for i in range(n):
        if granularity == "block":
            layers.append(layer(f"block{i}", block_figures(m, b), hidden_bytes, "block"))
        else:
            layers.append(layer(f"block{i}.attn", attention_figures(m, b), hidden_bytes,
                                "attention"))
            layers.append(layer(f"block{i}.mlp", mlp_figures(m, b), hidden_bytes, "mlp"))
    # the head's output is the loss (one fp32 per microbatch); it never crosses a boundary
    layers.append(layer("head", head_figures(m, b), FLOAT, "head"))
    return tuple(layers)
