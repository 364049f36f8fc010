"""Join a file published in parts (``SplitFile``) from its verified archives.

Layout under the cache directory::

    downloads/<part.filename>                    each part's archive (as ``download.py``)
    extracted/<split.key>/<split.name>           the joined file (+ its stamp)

Contracts:
- every archive is verified against its pin before use (``ensure_archive``);
- every part is copied out to a temp file and verified against its own pin before it is
  appended, so a wrong part is named (``HashMismatchError`` on that part), not only the
  joined file;
- the joined file is written to a temp name, checked for size and sha256, and only then
  renamed into place and stamped; a stamped joined file needs no archive at all.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import BinaryIO

from assets.archives import copy_member
from assets.download import ensure_archive
from assets.errors import ConversionError, HashMismatchError
from assets.manifest import Artifact, Member, SplitFile
from assets.verify import remove_with_stamp, verify_file, write_stamp

__all__ = ["check_split", "ensure_joined", "joined_path"]

log = logging.getLogger(__name__)


def joined_path(split: SplitFile, cache_dir: Path) -> Path:
    """Where the joined file lives."""
    return cache_dir / "extracted" / split.key / split.name


def check_split(split: SplitFile) -> None:
    """Raise ``ConversionError`` unless every part has exactly one member and the parts'
    sizes add up to the joined size (a manifest mistake, caught before any download)."""
    for part in split.parts:
        if len(part.members) != 1:
            raise ConversionError(f"{split.key}: part {part.key} must have exactly one member")
    total = sum(part.members[0].size for part in split.parts)
    if total != split.size:
        raise ConversionError(
            f"{split.key}: the parts add up to {total} bytes, the joined file is pinned at "
            f"{split.size}; fix assets/manifest.py"
        )


def ensure_joined(split: SplitFile, cache_dir: Path) -> Path:
    """Return the verified joined file; download, verify and join the parts if needed."""
    check_split(split)
    target = joined_path(split, cache_dir)
    if target.is_file():
        try:
            verify_file(target, split.sha256)
            return target
        except HashMismatchError as exc:  # deleted by verify_file: join it again
            log.warning("cached joined file failed verification, joining it again: %s", exc)
    archives = [ensure_archive(part, cache_dir) for part in split.parts]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as out:
            for part, archive in zip(split.parts, archives):
                _append_part(part, archive, out, tmp.parent)
        if tmp.stat().st_size != split.size:
            got = tmp.stat().st_size
            raise ConversionError(f"{split.key}: joined {got} bytes, expected {split.size}")
        verify_file(tmp, split.sha256, stamp=False)
        os.replace(tmp, target)
        write_stamp(target, split.sha256)
    finally:
        remove_with_stamp(tmp)
    return target


def _append_part(part: Artifact, archive: Path, out: BinaryIO, scratch: Path) -> None:
    """Copy the part's member out of ``archive``, verify it, append it to ``out``."""
    member: Member = part.members[0]
    piece = scratch / f".{member.name}.tmp-{os.getpid()}"
    try:
        copy_member(archive, member.path, piece)
        verify_file(piece, member.sha256, stamp=False)
        with piece.open("rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
    finally:
        piece.unlink(missing_ok=True)
