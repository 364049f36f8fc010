"""Where an offline tool writes, and how: never over its own input, never half a result.

``check_output`` refuses, before any work, an ``--out`` that is, contains or lies inside the model
directory (paths resolved, symlinks followed), one that is or contains another input file, and an
existing non-empty ``--out`` unless the caller passes ``overwrite``. ``staged_dir`` and
``staged_files`` hand the tool a temporary directory / temporary files beside ``--out`` and rename
them into place only when the tool returns: an error (or Ctrl-C) removes them and leaves ``--out``
as it was. An existing directory is replaced as a whole, so no file of an earlier run survives in it.
A process killed outright cannot clean up; the next run removes the ``.NAME.partial-PID-*`` it left.
"""

from __future__ import annotations

import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping


class OutputRefused(ValueError):
    """An ``--out`` that would destroy an input or an earlier result (a usage error: exit code 2)."""


def check_output(
    out: Path, model_dir: Path, *, overwrite: bool, inputs: Mapping[str, Path | None] = {}, kind: str = "directory"
) -> None:
    """Refuse ``out`` (a ``kind``: directory or file) if writing it could destroy ``model_dir``, an
    input file (option name -> path), or, without ``overwrite``, an existing result."""
    target, model = out.resolve(), model_dir.resolve()
    if target == model:
        raise OutputRefused(
            f"--out {out} is the model directory: the tool would overwrite its own input; choose another --out"
        )
    if target.is_relative_to(model):
        raise OutputRefused(f"--out {out} is inside the model directory {model}; choose a path outside it")
    if model.is_relative_to(target):
        raise OutputRefused(f"--out {out} contains the model directory {model}; choose a path that does not")
    for option, path in inputs.items():
        if path is not None and path.resolve().is_relative_to(target):
            raise OutputRefused(f"--out {out} would overwrite the {option} file {path}; choose another --out")
    if kind == "directory" and target.exists() and not target.is_dir():
        raise OutputRefused(f"--out {out} is a file, not a directory; choose a directory")
    if kind == "file" and target.is_dir():
        raise OutputRefused(f"--out {out} is a directory, not a file; name a file")
    if not overwrite and _not_empty(target):
        what = "directory is not empty" if target.is_dir() else "file exists"
        raise OutputRefused(f"--out {out}: the {what}; pass --overwrite to replace it, or choose a new path")


def _not_empty(path: Path) -> bool:
    return any(path.iterdir()) if path.is_dir() else path.exists()


def _partial(out: Path) -> Path:
    """A fresh name beside ``out`` that keeps its suffix (matplotlib picks a format by it)."""
    _remove_abandoned(out)
    return out.parent / f".{out.stem}.partial-{os.getpid()}-{secrets.token_hex(4)}{out.suffix}"


def _remove_abandoned(out: Path) -> None:
    """Partial outputs of ``out`` left by a process that no longer runs (killed before it could clean up)."""
    for path in out.parent.glob(f".{out.stem}.partial-*{out.suffix}"):
        pid = path.name.removeprefix(f".{out.stem}.partial-").split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _remove(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """A new empty directory beside ``out``; renamed to ``out`` (replacing it whole) when the block ends."""
    target = out.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial(target)
    tmp.mkdir()
    try:
        yield tmp
        _replace(tmp, target)
    except BaseException:
        _remove(tmp)
        raise


@contextmanager
def staged_files(*outs: Path) -> Iterator[list[Path]]:
    """A temporary path beside each of ``outs``; each renamed over its ``out`` when the block ends
    (the ones the block did not write are skipped)."""
    targets = [out.resolve() for out in outs]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    tmps = [_partial(target) for target in targets]
    try:
        yield tmps
        for tmp, target in zip(tmps, targets):
            if tmp.exists():
                os.replace(tmp, target)
    finally:
        for tmp in tmps:
            _remove(tmp)


def _replace(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an existing ``target`` is moved aside first and removed after."""
    if not target.exists():
        os.rename(tmp, target)
        return
    old = _partial(target)
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    _remove(old)
