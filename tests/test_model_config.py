"""Models read from Hugging Face-style ``config.json`` files (tests/data/models/*: the
published configurations of real models, their dimensions as released).

Parameter counts are checked against the totals published for the released checkpoints
(the count of their weights); each family's figures are checked to go through the same
builder as the built-in shapes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chainpipe.cli import main
from chainpipe.instance import InstanceError
from chainpipe.instances import generate
from chainpipe.instances.hf_config import read_model_config
from chainpipe.instances.models import (
    MODELS,
    block_figures,
    model_layers,
    model_shape,
    parameter_count,
)
from chainpipe.io import read

DATA = Path(__file__).resolve().parent / "data" / "models"

#: published parameter totals of the released checkpoints
PUBLISHED = {
    "llama-2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf weights
    "llama-3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B weights
    "mistral-7b-v0.1": 7_241_732_096,  # mistralai/Mistral-7B-v0.1 weights
    "qwen2-7b": 7_615_616_512,  # Qwen/Qwen2-7B weights ("7.6B", Qwen2 report)
    "gpt2": 124_439_808,  # openai-community/gpt2 weights ("124M")
    "gpt2-xl": 1_557_611_200,  # openai-community/gpt2-xl weights ("1.5B")
    "gpt-neox-20b": 20_554_567_680,  # Black et al. 2022, GPT-NeoX-20B
    "pythia-1.4b": 1_414_647_808,  # Biderman et al. 2023, Pythia table 1
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_published_total(name):
    shape = read_model_config(DATA / name)
    assert shape.name == name
    assert abs(parameter_count(shape) - PUBLISHED[name]) <= 0.01 * PUBLISHED[name]


def test_every_committed_config_is_checked():
    assert {p.name for p in DATA.iterdir()} == set(PUBLISHED)


def test_layers_sum_to_the_parameters_plus_the_tied_head():
    gpt2 = read_model_config(DATA / "gpt2")
    layers = model_layers(gpt2)
    assert gpt2.tied_embeddings
    # the last stage keeps its own copy of a tied embedding: the layers hold it twice
    assert sum(ly.params for ly in layers) == parameter_count(gpt2) + gpt2.vocab * gpt2.hidden
    llama = read_model_config(DATA / "llama-3-8b")
    assert sum(ly.params for ly in model_layers(llama)) == parameter_count(llama)


def test_a_built_in_shape_and_its_config_give_the_same_layers():
    # Llama-2 7B is also a built-in shape: the file and the table go through one builder
    from_file = read_model_config(DATA / "llama-2-7b", name="llama2-7b")
    built_in = dataclasses.replace(model_shape("llama2-7b"), source=from_file.source)
    assert from_file == built_in
    assert model_layers(from_file, tensor_parallel=True) == \
        model_layers(model_shape("llama2-7b"), tensor_parallel=True)


def test_grouped_query_attention_and_biases_change_the_block():
    llama3 = read_model_config(DATA / "llama-3-8b")
    assert (llama3.q_dim, llama3.kv_dim) == (4096, 1024)
    mha = dataclasses.replace(llama3, kv_heads=None)
    assert block_figures(mha).params - block_figures(llama3).params == 2 * 4096 * (4096 - 1024)
    qwen = read_model_config(DATA / "qwen2-7b")
    assert qwen.qkv_bias
    no_bias = dataclasses.replace(qwen, qkv_bias=False)
    assert block_figures(qwen).params - block_figures(no_bias).params == 3584 + 2 * 512


def test_sequence_microbatch_and_precision_scale_the_figures():
    base = read_model_config(DATA / "gpt2", seq_len=512)
    fp32 = read_model_config(DATA / "gpt2", seq_len=512, precision="fp32")
    assert base.seq == 512 and base.positions == 1024  # the table keeps its 1024 rows
    one, two = model_layers(base)[1], model_layers(base, microbatch_size=2)[1]
    assert two.fwd_flop == 2 * one.fwd_flop and two.output_bytes == 2 * one.output_bytes
    wide = model_layers(fp32)[1]
    assert wide.output_bytes == 2 * one.output_bytes and wide.fwd_flop == one.fwd_flop
    # the 1-byte dropout masks do not double: 13 + 21 = 34 s b h at 16 bits, 25 + 41 at fp32
    assert one.activation_bytes == 34 * 512 * 768
    assert wide.activation_bytes == (25 + 41) * 512 * 768
    assert read_model_config(DATA / "llama-2-7b").seq == 4096  # default: the context length


def test_fp32_changes_the_training_bytes():
    shape = read_model_config(DATA / "gpt2", precision="fp32")
    inst = generate("tiny", 0, model=shape)
    tr = inst.training
    assert (tr.bytes_per_param, tr.gradient_bytes_per_param, tr.optimizer_bytes_per_param) \
        == (16.0, 4.0, 8.0)
    assert generate("tiny", 0, model=read_model_config(DATA / "gpt2")).training \
        .gradient_bytes_per_param == 2.0


def test_built_in_shapes_keep_their_figures():
    # the committed sets are rebuilt byte for byte by `python -m chainpipe.instances.sets
    # --check`; this pins one figure of each family here too
    gpt = block_figures(MODELS["gpt3-13b"])
    assert gpt.activation_bytes == 34 * 2048 * 5140
    assert gpt.params == 12 * 5140**2 + 13 * 5140
    llama = block_figures(MODELS["llama2-70b"])
    assert llama.params == 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192


def _config(tmp_path: Path, **fields) -> Path:
    data = json.loads((DATA / "llama-2-7b" / "config.json").read_text())
    data.update(fields)
    for k in [k for k, v in fields.items() if v is ...]:
        del data[k]
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("fields, needle", [
    ({"model_type": "mixtral", "num_local_experts": 8},
     "model_type: 'mixtral' is a mixture-of-experts model"),
    ({"num_local_experts": 8}, "num_local_experts: mixture-of-experts models are not supported"),
    ({"model_type": "bert"}, "model_type: 'bert' is not supported; supported: llama"),
    ({"model_type": ...}, "model_type: missing"),
    ({"hidden_size": ...}, "hidden_size: missing (model_type 'llama' needs it)"),
    ({"hidden_size": "4096"}, "hidden_size: must be an integer >= 1, got '4096'"),
    ({"num_hidden_layers": 0}, "num_hidden_layers: must be an integer >= 1, got 0"),
    ({"hidden_act": "gelu"}, "hidden_act: 'gelu' is not supported for model_type 'llama'"),
    ({"attention_bias": True}, "attention_bias: biases on every projection are not modelled"),
    ({"num_key_value_heads": 5}, "num_key_value_heads: must divide num_attention_heads = 32"),
    ({"hidden_size": 2**30, "num_attention_heads": 1, "num_key_value_heads": 1},
     "hidden_size: must be an integer <= 1048576 (2**20; "),
])
def test_unsupported_or_broken_configs_name_the_field(tmp_path, fields, needle):
    path = _config(tmp_path, **fields)
    with pytest.raises(InstanceError) as info:
        read_model_config(path)
    assert any(needle in line and line.startswith(f"{path / 'config.json'}: ")
               for line in info.value.problems), info.value.problems


def test_gpt2_sequence_beyond_its_position_table_is_refused():
    with pytest.raises(InstanceError, match="seq_len: 2048 exceeds the learned position table"):
        read_model_config(DATA / "gpt2", seq_len=2048)


def test_cli_generate_with_a_model_config(tmp_path, capsys):
    out = tmp_path / "inst.json"
    code = main(["generate", "--preset", "hybrid-small", "--seed", "1", "--model-config",
                 str(DATA / "qwen2-7b"), "--seq-len", "2048", "--microbatch-size", "2",
                 "-o", str(out)])
    assert code == 0
    inst = read(out)
    shape = read_model_config(DATA / "qwen2-7b", seq_len=2048)
    # the preset keeps its 4-block slice and its cluster; the layers are the config's
    assert inst.model.name == "qwen2-7b[4 blocks]"
    assert inst.model.layers == model_layers(shape, blocks=4, microbatch_size=2,
                                             tensor_parallel=True)
    assert inst.datacenters == generate("hybrid-small", 1).datacenters


@pytest.mark.parametrize("args, needle", [
    (["--model-config", "nowhere/config.json"], "nowhere/config.json: cannot read file"),
    (["--seq-len", "128"], "--seq-len: applies to --model-config only"),
    (["--model-config", str(DATA / "gpt2"), "--model", "gpt3-125m"],
     "--model: give --model or --model-config, not both"),
    (["--model-config", str(DATA / "gpt2"), "--seq-len", "4096"],
     "seq_len: 4096 exceeds the learned position table"),
])
def test_cli_generate_refuses_bad_model_input_in_one_line(capsys, args, needle):
    assert main(["generate", "--preset", "tiny", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
         "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings",
         "head_dim", "hidden_act", "tie_word_embeddings", "n_embd", "n_layer", "n_head",
         "n_inner", "n_positions", "num_local_experts", "attention_bias")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(_KEYS), st.one_of(
    st.integers(-2, 2**31 + 2), st.sampled_from([1, 2, 8, 64, 4096]), st.none(), st.booleans(),
    st.sampled_from(["llama", "gpt2", "gpt_neox", "qwen2", "mixtral", "silu", "gelu"]),
    st.text(max_size=5), st.floats())))
def test_fuzzed_configs_give_a_shape_or_file_named_problems(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(data))
    try:
        shape = read_model_config(path, seq_len=128)
    except InstanceError as exc:
        assert exc.problems and all(p.startswith(f"{path}: ") and "\n" not in p
                                    for p in exc.problems)
    else:
        assert model_layers(shape, blocks=1, microbatch_size=4)
