"""A build cache for the suite's slowest offline steps (``structserve quant calibrate | scan |
export`` on SmolLM2): a command's outputs are kept under the asset cache, keyed by everything
that decides them, and copied out when nothing changed — as ccache does for a compiler.

The key holds: the command's arguments (input and output paths replaced by the inputs' content
hashes and the outputs' positions), the source of every Python file under ``tools/``,
``runtime_ext/``, ``grammars/`` and ``assets/`` (any change there runs the command again), and the versions of
torch, transformers and safetensors. A fresh machine, or a changed calibration, runs the real
command; ``STRUCTSERVE_TEST_CLI_CACHE=0`` always does. Entries are written whole (a temporary
directory renamed into place), so a run cut off midway leaves no half entry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from assets import default_cache_dir

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("tools", "runtime_ext", "grammars", "assets")
VERSIONED = ("torch", "transformers", "safetensors")


def _hash_path(path: Path, digest: hashlib._Hash) -> None:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)


def source_digest() -> str:
    digest = hashlib.sha256()
    for top in SOURCES:
        for file in sorted((ROOT / top).rglob("*.py")):
            digest.update(str(file.relative_to(ROOT)).encode())
            digest.update(file.read_bytes())
    for name in VERSIONED:
        digest.update(f"{name}=={metadata.version(name)}".encode())
    return digest.hexdigest()


def key(args: list[str], inputs: list[Path], outputs: list[Path]) -> str:
    digest = hashlib.sha256(source_digest().encode())
    named = {str(p): f"<input {i}>" for i, p in enumerate(inputs)}
    named |= {str(p): f"<output {i}>" for i, p in enumerate(outputs)}
    digest.update("\0".join(named.get(a, a) for a in args).encode())
    for path in inputs:
        _hash_path(path, digest)
    return digest.hexdigest()[:32]


def cached_run(
    run: Callable[[list[str]], str], args: list[str], inputs: list[Path], outputs: list[Path]
) -> tuple[str, bool]:
    """``run(args)`` (which writes ``outputs`` and returns its printed text) unless an entry for the
    same key exists; then its outputs are copied to ``outputs``. Returns (text, from cache)."""
    args = [str(a) for a in args]
    if os.environ.get("STRUCTSERVE_TEST_CLI_CACHE", "1") == "0":
        return run(args), False
    entry = default_cache_dir() / "test-cli-cache" / key(args, inputs, outputs)
    if (entry / "done").is_file():
        for i, out in enumerate(outputs):
            copy(entry / f"out{i}", out)
        return (entry / "text").read_text(), True
    text = run(args)
    staging = entry.with_name(entry.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for i, out in enumerate(outputs):
        copy(out, staging / f"out{i}")
    (staging / "text").write_text(text)
    (staging / "done").write_text("")
    shutil.rmtree(entry, ignore_errors=True)
    staging.rename(entry)
    return text, False


def copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def quant_cli(args: list, inputs: list[Path], outputs: list[Path]) -> str:
    """``structserve quant ARGS`` through the cache (the CLI in process, as the tests call it)."""
    from typer.testing import CliRunner

    from tools.cli import app

    def run(argv: list[str]) -> str:
        result = CliRunner().invoke(app, ["quant", *argv])
        assert result.exit_code == 0, result.output
        return result.output

    text, hit = cached_run(run, [str(a) for a in args], inputs, outputs)
    print(f"[cli cache] quant {args[0]}: {'reused (same code and inputs)' if hit else 'ran'}")
    return text
