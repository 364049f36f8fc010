"""`structserve kv calibrate` on the real tiny Qwen3 and real text; loading checks the shape and the
rotation the scales were measured in."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from runtime_ext.kv_cache.calibration import CalibrationMismatchError, load_calibration


@pytest.fixture(scope="module")
def calibration_file(assets, tmp_path_factory):
    from tools.cli import app

    out = tmp_path_factory.mktemp("kv") / "qwen3-tiny.json"
    result = CliRunner().invoke(
        app,
        ["kv", "calibrate", "--model", str(assets.qwen3_tiny), "--out", str(out), "--tokens", "256", "--chunk", "128"],
    )
    assert result.exit_code == 0, result.output
    assert "outlier rate" in result.output
    return out


def test_scales_cover_the_calibration_text(calibration_file, assets):
    calib = load_calibration(calibration_file, layers=2, kv_heads=2, head_dim=16)
    assert calib.tokens == 256 and calib.model == "qwen3-tiny"
    assert len(calib.k_scale) == 2 and len(calib.k_scale[0]) == 2 and len(calib.k_scale[0][0]) == 16
    assert all(s > 0 for layer in calib.v_scale for head in layer for s in head)
    assert calib.tau == pytest.approx(3 * calib.eps_mean) and 0 < calib.eps_mean < calib.eps_p99
    assert 0 <= calib.outlier_rate < 0.1


@pytest.mark.parametrize(
    "shape, what", [((3, 2, 16), "layers=2"), ((2, 4, 16), "kv_heads=2"), ((2, 2, 64), "head_dim=16")]
)
def test_a_mismatched_file_is_a_clear_error(calibration_file, shape, what):
    with pytest.raises(CalibrationMismatchError, match=what):
        load_calibration(calibration_file, *shape)


def test_scales_are_measured_in_the_rotation_the_server_stores(calibration_file, assets, tmp_path):
    """The CLI default (auto: none for the static modes) measures the keys as they are; --rotation kv
    measures the Hadamard-rotated keys (other scales); a file for another rotation is refused naming both fixes."""
    from tools.cli import app

    out = tmp_path / "kv.json"
    args = ["kv", "calibrate", "--model", str(assets.qwen3_tiny), "--out", str(out), "--tokens", "256"]
    result = CliRunner().invoke(app, [*args, "--chunk", "128", "--rotation", "kv"])
    assert result.exit_code == 0, result.output
    plain, rotated = load_calibration(calibration_file, 2, 2, 16), load_calibration(out, 2, 2, 16, rotation="kv")
    assert plain.rotation == "none" and rotated.rotation == "kv"
    assert rotated.k_scale != plain.k_scale and rotated.v_scale != plain.v_scale
    assert rotated.k_scale[0][0][0] != pytest.approx(plain.k_scale[0][0][0], rel=1e-3)
    with pytest.raises(CalibrationMismatchError, match="--rotation none` or serve with kv_rotation: kv"):
        load_calibration(out, 2, 2, 16, rotation="none")


def test_not_a_calibration_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(CalibrationMismatchError, match="not a structserve-kv-c8"):
        load_calibration(bad, 2, 2, 16)
    with pytest.raises(CalibrationMismatchError, match="cannot read"):
        load_calibration(tmp_path / "missing.json", 2, 2, 16)


def test_the_service_refuses_to_start_c8_static_without_a_matching_file(calibration_file, assets, monkeypatch):
    from runtime_ext.config import ENV_NAMES, RuntimeExtConfig
    from service.settings import Settings
    from service.startup import ModelInfo, prepare_engine

    for name in ENV_NAMES:  # records the original values: restored after the test
        monkeypatch.setenv(name, "1")  # (the calibration's is also the settings variable for kv_calibration)
        monkeypatch.delenv(name)

    def _check_kv_cache(settings, model_dir):
        prepare_engine(settings, ModelInfo.read(model_dir))

    with pytest.raises(ValueError, match="needs kv_calibration"):
        _check_kv_cache(Settings(kv_cache="c8_static"), assets.qwen3_tiny)
    with pytest.raises(CalibrationMismatchError, match="layers=2"):  # made for the tiny Qwen3, not SmolLM2
        _check_kv_cache(Settings(kv_cache="c8_static", kv_calibration=calibration_file), assets.smollm2)
    with pytest.raises(CalibrationMismatchError, match="measured with kv_rotation=none"):
        _check_kv_cache(
            Settings(kv_cache="c8_static", kv_calibration=calibration_file, kv_rotation="k"), assets.qwen3_tiny
        )
    _check_kv_cache(Settings(kv_cache="c8_static", kv_calibration=calibration_file), assets.qwen3_tiny)
    assert RuntimeExtConfig.from_env().kv_calibration == calibration_file.resolve()  # what the scheduler reads
    assert RuntimeExtConfig.from_env().kv_rotation == "auto"  # resolved by each method: none for c8_static


def test_rotation_needs_a_power_of_two_head_dim(assets, tmp_path):
    """A model whose head dim has no Hadamard matrix (48) cannot start a rotated C8 cache; the error names the fix."""
    from service.settings import Settings
    from service.startup import ModelInfo, check_kv_cache

    info = ModelInfo.read(assets.qwen3_tiny)
    odd = type(info)(**{**info.__dict__, "kv_shape": (2, 2, 48)})
    with pytest.raises(ValueError, match="power-of-two head dim .* set kv_rotation: none"):
        check_kv_cache(Settings(kv_cache="c8_dynamic"), odd)  # auto: kv for c8_dynamic
    assert check_kv_cache(Settings(kv_cache="c8_dynamic", kv_rotation="none"), odd) is None
    assert check_kv_cache(Settings(kv_cache="bf16"), odd) is None
