"""sha256 verification with "verified" stamps, so big files are hashed once.

A verified file ``F`` gets a sidecar ``F.sha256-ok`` (JSON: sha256, size, mtime_ns).
The stamp vouches for ``F`` only while its pinned sha256 is the expected one and the
file's size and mtime are unchanged; otherwise the file is hashed again.

Contract: a file that fails verification is deleted (with its stamp) and
``HashMismatchError`` is raised; it is never left in place to be used.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tqdm.auto import tqdm

from assets.errors import HashMismatchError

__all__ = [
    "STAMP_SUFFIX",
    "is_stamped",
    "remove_with_stamp",
    "sha256_file",
    "stamp_path",
    "verify_file",
    "write_stamp",
]

STAMP_SUFFIX = ".sha256-ok"
_CHUNK = 1 << 20
_BAR_MIN_BYTES = 4 << 20  # no progress bar for small files


def sha256_file(path: Path, *, desc: str | None = None) -> str:
    """Return the sha256 hex digest of ``path``, streaming (with a byte progress bar
    for files of 4 MiB or more)."""
    digest = hashlib.sha256()
    size = path.stat().st_size
    with (
        path.open("rb") as handle,
        tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            desc=desc or f"sha256 {path.name}",
            disable=size < _BAR_MIN_BYTES,
            leave=False,
        ) as bar,
    ):
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def stamp_path(path: Path) -> Path:
    """The stamp file that vouches for ``path``."""
    return path.with_name(path.name + STAMP_SUFFIX)


def write_stamp(path: Path, sha256: str) -> None:
    """Record that ``path`` (as it is now on disk) has digest ``sha256``. Atomic."""
    st = path.stat()
    record = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    target = stamp_path(path)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def is_stamped(path: Path, sha256: str) -> bool:
    """True when ``path`` exists and its stamp vouches for ``sha256`` at the file's
    current size and mtime. Never hashes; a missing or unreadable stamp is False."""
    try:
        st = path.stat()
        record = json.loads(stamp_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(record, dict)
        and record.get("sha256") == sha256
        and record.get("size") == st.st_size
        and record.get("mtime_ns") == st.st_mtime_ns
    )


def remove_with_stamp(path: Path) -> None:
    """Delete ``path`` and its stamp; missing files are ignored."""
    for target in (path, stamp_path(path)):
        target.unlink(missing_ok=True)


def verify_file(path: Path, sha256: str, *, stamp: bool = True) -> None:
    """Ensure ``path`` has digest ``sha256``.

    A valid stamp short-cuts the check. Otherwise the file is hashed: on a match a
    stamp is written (when ``stamp``); on a mismatch the file and its stamp are deleted
    and ``HashMismatchError`` (naming the file, expected and actual digests) is raised.
    ``FileNotFoundError`` if ``path`` does not exist.
    """
    if is_stamped(path, sha256):
        return
    stamp_path(path).unlink(missing_ok=True)
    got = sha256_file(path)
    if got != sha256:
        remove_with_stamp(path)
        raise HashMismatchError(path, sha256, got)
    if stamp:
        write_stamp(path, sha256)
