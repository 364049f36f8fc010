"""Cache layout, atomic output directories and completion markers (pure stdlib).

Every produced asset directory (a converted model, the text corpus) is built in a
temp sibling and renamed into place, then carries ``structserve-asset.json``::

    {"asset": ..., "format_version": N, "source_sha256": ...}

Contract: a directory is *complete* iff its marker exists, parses, and matches the
expected format version (and source sha256 when given). Anything else is rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "FORMAT_VERSION",
    "MARKER_NAME",
    "is_complete",
    "models_dir",
    "read_marker",
    "staging_dir",
    "text_dir",
    "write_marker",
]

FORMAT_VERSION = 1
"""Bump when the conversion output changes, so caches built by older code are rebuilt."""

MARKER_NAME = "structserve-asset.json"


def models_dir(cache_dir: Path) -> Path:
    """``<cache>/models``: converted Hugging Face checkpoints."""
    return cache_dir / "models"


def text_dir(cache_dir: Path) -> Path:
    """``<cache>/text``: plain-text corpora."""
    return cache_dir / "text"


def write_marker(out_dir: Path, asset: str, source_sha256: str) -> None:
    """Write the completion marker into ``out_dir`` (call last, before the rename)."""
    record = {"asset": asset, "format_version": FORMAT_VERSION, "source_sha256": source_sha256}
    (out_dir / MARKER_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def read_marker(out_dir: Path) -> dict[str, object] | None:
    """The parsed marker of ``out_dir``, or None when missing or unreadable."""
    try:
        record = json.loads((out_dir / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_complete(out_dir: Path, source_sha256: str | None = None) -> bool:
    """True iff ``out_dir`` holds a finished asset of the current format version
    (built from ``source_sha256`` when that is given). Only reads the marker."""
    record = read_marker(out_dir)
    if record is None or record.get("format_version") != FORMAT_VERSION:
        return False
    return source_sha256 is None or record.get("source_sha256") == source_sha256


def _make_readable(root: Path) -> None:
    """Give the tree the usual 0755/0644 modes (temp files are created 0600/0700)."""
    root.chmod(0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


@contextmanager
def staging_dir(out_dir: Path) -> Iterator[Path]:
    """Yield an empty temp dir next to ``out_dir``; on normal exit it replaces ``out_dir``.

    On an exception the temp dir is removed and ``out_dir`` is left as it was. An
    existing ``out_dir`` is moved aside and deleted only after the new one is in place.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    old: Path | None = None
    try:
        yield tmp
        _make_readable(tmp)
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}-{tmp.name[-8:]}")
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
