"""Turn verified source files into plain Hugging Face checkpoints that SGLang can load.

torch and transformers are imported inside the functions only, so importing this
module (and ``assets``) stays cheap and torch-free.

Contracts (both builders):
- output is written to a temp dir and renamed to ``out_dir`` in one step; a failure
  leaves no partial ``out_dir`` (``ConversionError`` for anything unexpected);
- weights are bfloat16 safetensors, ``config.json`` carries no ``quantization_config``,
  ``generation_config.json`` exists, the chat template is in ``tokenizer_config.json``;
- the result is deterministic: the same inputs give byte-identical safetensors;
- the last file written is the ``structserve-asset.json`` marker (``is_complete``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assets.errors import ConversionError
from assets.layout import is_complete, staging_dir, write_marker
from assets.verify import sha256_file

if TYPE_CHECKING:
    import torch

__all__ = [
    "QWEN25_GENERATION_CONFIG",
    "TINY_QWEN3_CONFIG",
    "build_tiny_qwen3",
    "check_qwen25_tokenizer",
    "convert_qwen25_coder",
    "convert_smollm2",
    "is_complete",
]

TINY_QWEN3_CONFIG: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "pad_token_id": 151643,
    "max_position_embeddings": 4096,
}
"""Random-weight Qwen3 for protocol/parser/grammar tests (real tokenizer, ~20 MB)."""

_QWEN3_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def convert_smollm2(gguf_path: Path, out_dir: Path, *, source_sha256: str | None = None) -> Path:
    """Dequantize a llama-architecture GGUF (SmolLM2 Q4_1) into a bf16 HF checkpoint.

    Args:
        gguf_path: the verified ``.gguf`` file.
        out_dir: destination directory (replaced atomically).
        source_sha256: recorded in the marker; hashed from ``gguf_path`` when None.
    Returns ``out_dir``. Raises ``ConversionError`` on unexpected or missing tensors.
    """
    return _convert_gguf(gguf_path, out_dir, "smollm2", source_sha256)


def convert_qwen25_coder(gguf_path: Path, out_dir: Path, *, source_sha256: str | None = None) -> Path:
    """Dequantize the Qwen2.5-Coder-0.5B-Instruct GGUF (qwen2, Q4_K_M) into a bf16 HF
    checkpoint whose ``generation_config.json`` ends on both Qwen2.5 stop tokens
    (``QWEN25_GENERATION_CONFIG``, as Hugging Face publishes it) and whose tokenizer
    ends turns with ``<|im_end|>`` and keeps the tools chat template (checked)."""
    return _convert_gguf(
        gguf_path,
        out_dir,
        "qwen2.5-coder",
        source_sha256,
        generation=QWEN25_GENERATION_CONFIG,
        check_tokenizer=check_qwen25_tokenizer,
    )


def _convert_gguf(
    gguf_path: Path,
    out_dir: Path,
    asset: str,
    source_sha256: str | None,
    *,
    generation: dict[str, Any] | None = None,
    check_tokenizer: Callable[[Any], None] | None = None,
) -> Path:
    """GGUF → bf16 safetensors + tokenizer (+ ``generation`` as the generation config)."""
    from transformers import AutoTokenizer, GenerationConfig

    source_sha256 = source_sha256 or sha256_file(gguf_path)
    model = _bf16_model_from_gguf(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if not tokenizer.chat_template:
        raise ConversionError(f"{gguf_path}: the GGUF carries no chat template")
    if check_tokenizer is not None:
        check_tokenizer(tokenizer)
    tokenizer.model_max_length = model.config.max_position_embeddings  # GGUF leaves it unset
    with staging_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp, save_jinja_files=False)
        if generation is not None:
            GenerationConfig(**generation).save_pretrained(tmp)
        _check_checkpoint(tmp)
        write_marker(tmp, asset, source_sha256)
    return out_dir


QWEN25_GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": 151643,
    "pad_token_id": 151643,
    "eos_token_id": [151645, 151643],
}
"""Token ids of Hugging Face's Qwen2.5(-Coder)-Instruct ``generation_config.json``: a turn
ends on ``<|im_end|>`` (151645) or ``<|endoftext|>`` (151643). Its sampling defaults
(temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.1) are left out on purpose:
sampling is the client's choice, and servers that read model defaults would otherwise
differ from those that do not."""

QWEN25_SPECIAL_TOKENS: dict[str, int] = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
}


def check_qwen25_tokenizer(tokenizer: Any) -> None:
    """Raise ``ConversionError`` unless the tokenizer is Qwen2.5's: the special tokens
    have their ids, the eos token is ``<|im_end|>``, ``<tool_call>`` survives decoding
    with ``skip_special_tokens`` (the tool parsers need it) and the chat template
    renders tools with ``<tool_call>`` framing."""
    for text, want in QWEN25_SPECIAL_TOKENS.items():
        got = tokenizer.convert_tokens_to_ids(text)
        if got != want:
            raise ConversionError(f"tokenizer: {text} has id {got}, Qwen2.5 has {want}")
    if tokenizer.eos_token != "<|im_end|>":
        raise ConversionError(f"tokenizer: eos is {tokenizer.eos_token!r}, expected <|im_end|>")
    tags = [QWEN25_SPECIAL_TOKENS["<tool_call>"], QWEN25_SPECIAL_TOKENS["</tool_call>"]]
    if tokenizer.decode(tags, skip_special_tokens=True) != "<tool_call></tool_call>":
        raise ConversionError("tokenizer: <tool_call> is marked special and would be stripped")
    template = tokenizer.chat_template
    if not isinstance(template, str) or "tools" not in template or "<tool_call>" not in template:
        raise ConversionError("tokenizer: the chat template does not render tools")


def _bf16_model_from_gguf(gguf_path: Path) -> torch.nn.Module:
    """Build a fresh bf16 model from the GGUF's config and load its dequantized tensors.

    ``from_pretrained(gguf_file=...)`` would need ``accelerate`` and returns a model
    that refuses ``save_pretrained``; this uses the same converter directly instead.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    loaded = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model, torch_dtype=torch.bfloat16)
    _load_strict(model, loaded["tensors"], source=gguf_path)
    model.eval()
    return model


def _load_strict(model: torch.nn.Module, tensors: dict[str, Any], *, source: Path) -> None:
    """``load_state_dict`` that tolerates only tied ``lm_head`` weights being absent,
    then ties them. Raises ``ConversionError`` naming missing / unexpected keys."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    allowed_missing = {"lm_head.weight"} if tied else set()
    try:
        result = model.load_state_dict(tensors, strict=False)
    except RuntimeError as exc:  # shape mismatch
        raise ConversionError(f"{source}: tensors do not fit the model: {exc}") from exc
    missing = set(result.missing_keys) - allowed_missing
    if missing or result.unexpected_keys:
        raise ConversionError(
            f"{source}: missing tensors {sorted(missing)[:8]}, unexpected tensors {sorted(result.unexpected_keys)[:8]}"
        )
    if tied:
        model.tie_weights()
        head, embed = model.get_output_embeddings(), model.get_input_embeddings()
        if head.weight.data_ptr() != embed.weight.data_ptr():
            raise ConversionError(f"{source}: lm_head could not be tied to the embeddings")


def build_tiny_qwen3(tokenizer_dir: Path, out_dir: Path, seed: int = 0, *, source_sha256: str | None = None) -> Path:
    """Build the seeded random-weight tiny Qwen3 (``TINY_QWEN3_CONFIG``) with the real
    Qwen3 tokenizer files copied verbatim (official chat template included).

    Args:
        tokenizer_dir: directory holding ``tokenizer.json`` and ``tokenizer_config.json``.
        out_dir: destination directory (replaced atomically).
        seed: torch seed for the initialisation; same seed → byte-identical weights.
        source_sha256: recorded in the marker; defaults to the tokenizer.json digest.
    Returns ``out_dir``.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer_dir = Path(tokenizer_dir)
    for name in _QWEN3_TOKENIZER_FILES:
        if not (tokenizer_dir / name).is_file():
            raise ConversionError(f"{tokenizer_dir}: missing {name}; fetch the Qwen3 tokenizer")
    source_sha256 = source_sha256 or sha256_file(tokenizer_dir / "tokenizer.json")
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY_QWEN3_CONFIG)).to(torch.bfloat16).eval()
    with staging_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        for name in _QWEN3_TOKENIZER_FILES:
            shutil.copyfile(tokenizer_dir / name, tmp / name)
        _check_checkpoint(tmp)
        write_marker(tmp, "qwen3-tiny", source_sha256)
    return out_dir


def _check_checkpoint(ckpt: Path) -> None:
    """Post-conditions of a saved checkpoint dir: safetensors weights, a clean config,
    a generation config (written from the model config if transformers skipped it),
    and a chat template inside ``tokenizer_config.json``."""
    from transformers import AutoConfig, GenerationConfig

    if not any(ckpt.glob("*.safetensors")):
        raise ConversionError(f"{ckpt}: no safetensors weights were written")
    config = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
    if "quantization_config" in config:
        raise ConversionError(f"{ckpt}/config.json still has a quantization_config")
    if not (ckpt / "generation_config.json").is_file():
        GenerationConfig.from_model_config(AutoConfig.from_pretrained(ckpt)).save_pretrained(ckpt)
    tok_config = json.loads((ckpt / "tokenizer_config.json").read_text(encoding="utf-8"))
    if not tok_config.get("chat_template"):
        raise ConversionError(f"{ckpt}/tokenizer_config.json has no chat_template")
