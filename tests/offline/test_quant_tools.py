"""The offline quantization tools on the real SmolLM2 and real text: the sensitivity scan
(`structserve quant scan`) and SmoothQuant (`structserve quant calibrate`). Perplexity is
measured on held-out text (Persuasion) with the serving math (fake-quantized HF model)."""

from __future__ import annotations

import json

import pytest

from runtime_ext.quant.policy import QuantPolicy, linear_layer_names
from service.startup import ModelInfo
from tests.cli_cache import quant_cli
from tools.quant.offline import load_model, perplexity, quantize_model, token_ids

EVAL_TOKENS = 512


@pytest.fixture(scope="module")
def held_out(assets):
    from assets import eval_text

    return token_ids(assets.smollm2, eval_text(), EVAL_TOKENS)


def w8a8_ppl(model_dir, ids, keep=()):
    return perplexity(quantize_model(load_model(model_dir), QuantPolicy("w8a8_dynamic", keep=tuple(keep))), ids)


@pytest.fixture(scope="module")
def plain_w8a8(assets, held_out) -> float:
    """W8A8 of the unmodified SmolLM2 on the held-out text (both tests compare against it)."""
    return w8a8_ppl(assets.smollm2, held_out)


def test_scan_writes_a_fallback_list_that_lowers_perplexity(assets, held_out, plain_w8a8, tmp_path):
    out, base = tmp_path / "sensitive_layers.json", assets.smollm2
    written = [out, out.with_suffix(".md"), out.with_suffix(".png")]
    quant_cli(["scan", "--model", base, "--tokens", "64", "--out", out], [base], written)  # tests/cli_cache.py
    data = json.loads(out.read_text())
    linear = linear_layer_names(list(ModelInfo.read(assets.smollm2).tensors))
    assert set(data["scores"]) == linear and len(linear) == 210
    assert 0 < len(data["layers"]) < 60 and set(data["layers"]) <= linear
    assert out.with_suffix(".png").stat().st_size > 1000 and "| layer | KL |" in out.with_suffix(".md").read_text()
    plain, fallback = plain_w8a8, w8a8_ppl(assets.smollm2, held_out, data["layers"])
    print(
        f"\nW8A8 held-out perplexity: {plain:.3f} without fallback, {fallback:.3f} with "
        f"{len(data['layers'])} layers kept"
    )
    assert fallback < plain * 0.995


def test_smoothquant_keeps_the_model_and_helps_w8a8(assets, held_out, plain_w8a8, tmp_path):
    out, base = tmp_path / "smoothed", assets.smollm2
    quant_cli(["calibrate", "--model", base, "--tokens", "512", "--out", out], [base], [out])  # tests/cli_cache.py
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    base = perplexity(load_model(assets.smollm2), held_out)
    smoothed = perplexity(load_model(out), held_out)
    assert abs(smoothed / base - 1) < 0.005  # an exact transform, up to bf16 storage rounding
    plain, smooth_q = plain_w8a8, w8a8_ppl(out, held_out)
    print(f"\nW8A8 held-out perplexity: {plain:.3f} plain, {smooth_q:.3f} SmoothQuant (float {base:.3f})")
    assert smooth_q < plain
