"""``tools.outputs``: an offline tool's ``--out`` never overwrites its input, and a result appears
whole or not at all (plain directories and files, no model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.outputs import OutputRefused, check_output, staged_dir, staged_files


@pytest.fixture
def model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    return model


@pytest.mark.parametrize(
    "out, says",
    [
        (lambda m: m, "is the model directory"),
        (lambda m: m / ".." / "model", "is the model directory"),
        (lambda m: m / "quantized", "is inside the model directory"),
        (lambda m: m / "model.safetensors", "is inside the model directory"),
        (lambda m: m.parent, "contains the model directory"),
    ],
)
def test_an_out_that_is_in_or_around_the_model_is_refused(model, out, says):
    for overwrite in (False, True):
        with pytest.raises(OutputRefused, match=says):
            check_output(out(model), model, overwrite=overwrite)


def test_symlinks_are_followed_both_ways(model, tmp_path):
    link_to_model, link_inside = tmp_path / "alias", tmp_path / "elsewhere"
    link_to_model.symlink_to(model)
    link_inside.symlink_to(model / "model.safetensors")
    with pytest.raises(OutputRefused, match="is the model directory"):
        check_output(link_to_model, model, overwrite=True)
    with pytest.raises(OutputRefused, match="inside the model directory"):
        check_output(link_inside, model, overwrite=True, kind="file")
    with pytest.raises(OutputRefused, match="is the model directory"):
        check_output(model, link_to_model, overwrite=True)  # --model given through the link


def test_an_out_over_another_input_is_refused(model, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    events = logs / "events.jsonl"
    events.write_text("{}\n")
    with pytest.raises(OutputRefused, match="would overwrite the --events file"):
        check_output(events, model, overwrite=True, inputs={"--events": events}, kind="file")
    with pytest.raises(OutputRefused, match="would overwrite the --events file"):  # replacing the dir holding it
        check_output(logs, model, overwrite=True, inputs={"--events": events})


def test_an_existing_result_needs_overwrite(model, tmp_path):
    out = tmp_path / "out"
    check_output(out, model, overwrite=False)  # new
    out.mkdir()
    check_output(out, model, overwrite=False)  # empty
    (out / "model-00001-of-00002.safetensors").write_bytes(b"stale")
    with pytest.raises(OutputRefused, match="directory is not empty; pass --overwrite"):
        check_output(out, model, overwrite=False)
    check_output(out, model, overwrite=True)
    with pytest.raises(OutputRefused, match="is a directory, not a file"):
        check_output(out, model, overwrite=True, kind="file")
    result = tmp_path / "scales.json"
    result.write_text("{}")
    with pytest.raises(OutputRefused, match="file exists; pass --overwrite"):
        check_output(result, model, overwrite=False, kind="file")
    with pytest.raises(OutputRefused, match="is a file, not a directory"):
        check_output(result, model, overwrite=True)


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


def test_a_staged_directory_appears_whole_and_replaces_the_old_one(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model-00002-of-00002.safetensors").write_bytes(b"stale shard")
    with staged_dir(out) as partial:
        assert partial.parent == tmp_path and not any(partial.iterdir())
        (partial / "model.safetensors").write_bytes(b"new")
        assert (out / "model-00002-of-00002.safetensors").exists()  # nothing moves before the end
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"] and siblings(out) == ["out"]


def test_a_failure_leaves_no_out_and_no_partial(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt), staged_dir(out) as partial:
        (partial / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt
    assert not out.exists() and siblings(out) == []
    out.mkdir()
    (out / "old.safetensors").write_bytes(b"old")
    with pytest.raises(RuntimeError), staged_dir(out) as partial:
        (partial / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("disk full")
    assert [p.name for p in out.iterdir()] == ["old.safetensors"] and siblings(out) == ["out"]


def test_staged_files_replace_each_file_at_the_end_or_not_at_all(tmp_path):
    json_out, png_out = tmp_path / "s.json", tmp_path / "s.png"
    json_out.write_text("old")
    with pytest.raises(RuntimeError), staged_files(json_out, png_out) as (j, p):
        assert p.suffix == ".png"  # a writer choosing its format by the suffix still can
        j.write_text("new")
        raise RuntimeError("plot failed")
    assert json_out.read_text() == "old" and siblings(json_out) == ["s.json"]
    with staged_files(json_out, png_out) as (j, p):
        j.write_text("new")
        p.write_bytes(b"png")
    assert json_out.read_text() == "new" and siblings(json_out) == ["s.json", "s.png"]


def test_the_partial_output_of_a_killed_run_is_removed_by_the_next(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f".out.partial-{int(dead.stdout)}-0000abcd"
    abandoned.mkdir()
    (abandoned / "model.safetensors").write_bytes(b"half")
    with staged_dir(tmp_path / "out") as partial:
        (partial / "config.json").write_text("{}")
    assert siblings(abandoned) == ["out"]
