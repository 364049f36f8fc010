"""``ModelInfo``: the model directory read once at startup (config.json facts, and every
safetensors tensor's name, shape and dtype from the file headers)."""

from __future__ import annotations

import json

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from grammars.compile import VocabFacts
from service.startup import ModelInfo


def test_reads_config_and_tensor_headers_like_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3",
                "num_hidden_layers": 3,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "hidden_size": 256,
                "vocab_size": 151936,
                "eos_token_id": [151645, 151643],
            }
        )
    )
    save_file(
        {"a.weight": torch.zeros(4, 3, dtype=torch.int8), "b.scale": torch.ones(4, 1)},
        str(tmp_path / "model-1.safetensors"),
        metadata={"format": "pt"},
    )
    save_file({"c.weight": torch.zeros(2, dtype=torch.bfloat16)}, str(tmp_path / "model-2.safetensors"))
    info = ModelInfo.read(tmp_path)
    assert (info.model_type, info.kv_shape) == ("qwen3", (3, 2, 32))
    assert info.vocab == VocabFacts(151936, (151645, 151643))  # what the grammar worker gets
    expected = {}
    for path in sorted(tmp_path.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            expected |= {name: (f.get_slice(name).get_shape(), f.get_slice(name).get_dtype()) for name in f.keys()}
    assert info.tensors == expected and len(expected) == 3
    assert info.quant_description is None


def test_a_bare_directory_has_no_facts(tmp_path):
    info = ModelInfo.read(tmp_path)
    assert (info.model_type, info.kv_shape, dict(info.tensors)) == (None, None, {})
    assert info.vocab == VocabFacts(None, None)


def test_vocab_facts_take_one_eos_id_or_a_list_as_sglang_does():
    assert VocabFacts.from_config({"eos_token_id": 2, "vocab_size": 49152}) == VocabFacts(49152, (2,))
    assert VocabFacts.from_config({"eos_token_id": None}) == VocabFacts(None, None)
