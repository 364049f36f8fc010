"""The fault suite's server: one live structserve that every fault module injects into.

``fault_server`` runs the tiny Qwen3 (float32) with the C8-D KV cache, two API keys
(``KEY_A``/``KEY_B``: tenants), schema loosening on (so a user pattern reaches the
post-validation), thinking off. Its model is a copy of the tiny Qwen3 whose input embedding of
``POISON_TEXT``'s token is NaN (lm_head untied, so no other request's logits change): any
request that contains that text computes non-finite K/V in every layer, the fault of a
request's activations going NaN.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.server import ServerProcess

KEY_A, KEY_B = "fault-key-a", "fault-key-b"
POISON_TEXT = " umbrella"  # one token of the tiny Qwen3's tokenizer, never in the other tests' prompts


def poison_token_id(model_dir) -> int:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(model_dir)).encode(POISON_TEXT, add_special_tokens=False)
    assert len(ids) == 1, f"{POISON_TEXT!r} must be one token, got {ids}"
    return ids[0]


def poisoned_copy(model_dir, out):
    """``model_dir`` copied to ``out`` with lm_head untied and ``POISON_TEXT``'s embedding NaN."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, out)
    weights_path = next(out.glob("*.safetensors"))
    weights = load_file(str(weights_path))
    embed = weights["model.embed_tokens.weight"]
    weights.setdefault("lm_head.weight", embed.clone())
    embed[poison_token_id(model_dir)] = float("nan")
    save_file(weights, str(weights_path), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"tie_word_embeddings": False}, indent=2))
    return out


@pytest.fixture(scope="package")
def fault_server(assets, tmp_path_factory):
    model = poisoned_copy(assets.qwen3_tiny, tmp_path_factory.mktemp("poisoned") / assets.qwen3_tiny.name)
    server = ServerProcess(
        model,
        "qwen-faults",
        env={
            "STRUCTSERVE_DTYPE": "float32",
            "STRUCTSERVE_KV_CACHE": "c8_dynamic",
            "STRUCTSERVE_API_KEYS": f"{KEY_A},{KEY_B}",
            "STRUCTSERVE_GRAMMAR__ALLOW_SCHEMA_LOOSENING": "true",
            "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false",
        },
    )
    server.start()
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"
