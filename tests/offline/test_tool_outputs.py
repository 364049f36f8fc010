"""The offline tools never destroy their input and never leave half a result (`structserve quant
export | calibrate | scan`, `structserve kv calibrate` on a copy of the real tiny Qwen3): an --out
that is, is inside or contains the model is refused with exit code 2 and the source unchanged; an
existing result needs --overwrite, which replaces it whole (no stale shard survives); an export
that fails while writing (a file-size limit: what a full disk does) leaves no --out."""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tools.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model(assets, tmp_path_factory) -> Path:
    """A copy: a test that failed to refuse must not overwrite the shared asset cache."""
    return Path(shutil.copytree(assets.qwen3_tiny, tmp_path_factory.mktemp("src") / "qwen3-tiny"))


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def export(model: Path, out: Path, *extra: str):
    args = ["quant", "export", "--model", str(model), "--scheme", "w8a8_dynamic", "--out", str(out), *extra]
    return CliRunner().invoke(app, args)


def refused(result, says: str) -> None:
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert says in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["quant", "export", "--scheme", "w8a8_dynamic"],
        ["quant", "calibrate", "--method", "gptq"],
        ["quant", "calibrate", "--method", "smoothquant"],
    ],
)
def test_out_equal_to_the_model_is_refused_and_the_model_is_unchanged(model, command):
    before = digest(model)
    for extra in ((), ("--overwrite",)):
        result = CliRunner().invoke(app, [*command, "--model", str(model), "--out", str(model), *extra])
        refused(result, "is the model directory: the tool would overwrite its own input; choose another --out")
    assert digest(model) == before


def test_out_inside_or_around_the_model_is_refused(model, tmp_path):
    before = digest(model)
    refused(export(model, model / "w8a8"), "is inside the model directory")
    refused(export(model, model.parent, "--overwrite"), "contains the model directory")
    alias = tmp_path / "alias"
    alias.symlink_to(model)
    refused(export(model, alias, "--overwrite"), "is the model directory")
    kv = ["kv", "calibrate", "--model", str(model), "--out", str(model / "kv.json")]
    refused(CliRunner().invoke(app, kv), "is inside the model directory")
    assert digest(model) == before


def test_an_out_over_another_input_is_refused(model, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"kind": "reload"}\n')
    scan = ["quant", "scan", "--model", str(model), "--events", str(events), "--out", str(events), "--overwrite"]
    refused(CliRunner().invoke(app, scan), "would overwrite the --events file")
    assert events.read_text() == '{"kind": "reload"}\n'


def test_an_existing_out_needs_overwrite_which_replaces_it_whole(model, tmp_path):
    out = tmp_path / "w8a8"
    out.mkdir()
    stale = out / "model-00002-of-00002.safetensors"
    stale.write_bytes(b"a shard of an earlier export")
    refused(export(model, out), "the directory is not empty; pass --overwrite to replace it")
    assert stale.read_bytes() == b"a shard of an earlier export"
    kv_file = tmp_path / "kv.json"
    kv_file.write_text("{}")
    kv = ["kv", "calibrate", "--model", str(model), "--out", str(kv_file)]
    refused(CliRunner().invoke(app, kv), "the file exists; pass --overwrite")
    result = export(model, out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert not stale.exists() and (out / "model.safetensors").is_file()
    assert {p.name for p in out.iterdir()} == {p.name for p in model.iterdir()} | {"quant_model_description.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.json", "w8a8"]  # no partial left beside it


def test_an_export_failing_while_it_writes_leaves_no_out(model, tmp_path):
    """The weights file outgrows RLIMIT_FSIZE part-way (EFBIG, as on a full disk): the run fails,
    --out does not exist and nothing is left beside it."""
    out = tmp_path / "w8a8"
    cmd = [sys.executable, "-m", "tools", "quant", "export", "--model", str(model), "--scheme", "w8a8_dynamic"]

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # the export writes ~10 MiB

    run = subprocess.run(
        [*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, preexec_fn=limit_file_size
    )
    assert run.returncode != 0 and ("File too large" in run.stderr or "EFBIG" in run.stderr), run.stderr[-2000:]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_scan_writes_its_three_files_at_once_and_needs_overwrite_to_replace_them(model, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("It is a truth universally acknowledged that a single man must be in want of a wife. " * 8)
    out = tmp_path / "scan" / "sensitive_layers.json"
    scan = ["quant", "scan", "--model", str(model), "--text", str(text), "--tokens", "32", "--out", str(out)]
    result = CliRunner().invoke(app, scan)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.parent.iterdir()) == [f"sensitive_layers.{s}" for s in ("json", "md", "png")]
    assert json.loads(out.read_text())["layers"] and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    before = digest(out.parent)
    refused(CliRunner().invoke(app, scan), "the file exists; pass --overwrite")
    assert digest(out.parent) == before
    result = CliRunner().invoke(app, [*scan, "--overwrite"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.parent.iterdir()) == [f"sensitive_layers.{s}" for s in ("json", "md", "png")]
