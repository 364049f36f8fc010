"""The suite's build cache (tests/cli_cache.py) reuses a command's outputs only when its arguments,
its inputs' contents and the code are the same; otherwise the command runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import cli_cache


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("STRUCTSERVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("STRUCTSERVE_TEST_CLI_CACHE", raising=False)


def command(calls: list, source: Path, out: Path):
    def run(args: list[str]) -> str:
        calls.append(args)
        out.mkdir(parents=True, exist_ok=True)
        (out / "w.txt").write_text(source.read_text().upper())
        return f"wrote {out.name}"

    return run


def test_same_inputs_reuse_and_changed_inputs_run(tmp_path: Path) -> None:
    src, calls = tmp_path / "in.txt", []
    src.write_text("abc")
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert cli_cache.cached_run(command(calls, src, first), ["go", str(src), str(first)], [src], [first]) == (
        "wrote a",
        False,
    )
    text, hit = cli_cache.cached_run(command(calls, src, second), ["go", str(src), str(second)], [src], [second])
    assert hit and text == "wrote a" and (second / "w.txt").read_text() == "ABC" and len(calls) == 1
    src.write_text("abd")  # same path, new content: runs
    _, hit = cli_cache.cached_run(command(calls, src, third), ["go", str(src), str(third)], [src], [third])
    assert not hit and (third / "w.txt").read_text() == "ABD" and len(calls) == 2


def test_other_arguments_or_changed_code_run(tmp_path: Path, monkeypatch) -> None:
    src, calls = tmp_path / "in.txt", []
    src.write_text("abc")
    outs = [tmp_path / f"o{i}" for i in range(4)]
    cli_cache.cached_run(command(calls, src, outs[0]), ["go", str(src), str(outs[0])], [src], [outs[0]])
    _, hit = cli_cache.cached_run(
        command(calls, src, outs[1]), ["go", "--fast", str(src), str(outs[1])], [src], [outs[1]]
    )
    assert not hit
    monkeypatch.setattr(cli_cache, "source_digest", lambda: "other code")
    _, hit = cli_cache.cached_run(command(calls, src, outs[2]), ["go", str(src), str(outs[2])], [src], [outs[2]])
    assert not hit
    monkeypatch.setenv("STRUCTSERVE_TEST_CLI_CACHE", "0")
    _, hit = cli_cache.cached_run(command(calls, src, outs[3]), ["go", str(src), str(outs[3])], [src], [outs[3]])
    assert not hit and len(calls) == 4


def test_the_source_digest_covers_the_code_the_cli_runs() -> None:
    files = {
        p.relative_to(cli_cache.ROOT).parts[0]
        for top in cli_cache.SOURCES
        for p in (cli_cache.ROOT / top).rglob("*.py")
    }
    assert {"tools", "runtime_ext", "grammars", "assets"} <= files
