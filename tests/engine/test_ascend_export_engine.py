"""The service's path for an exported checkpoint, in the real SGLang engine on SmolLM2: the `sglang-npu`
export (bf16 per-channel scales, SGLang's own layout) passed as ``quantization=modelslim`` (what
service/startup.py passes) is served off-NPU by our ``structserve_modelslim`` (the override's choice,
``targets.serving_method``), with layer 3's qkv_proj kept in bf16."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
N_TOKENS = 8


def generate(model_dir: Path, ids: list[int]) -> tuple[list[int], dict, list]:
    script = Path(__file__).with_name("sglang_greedy.py")
    args = [str(model_dir), str(N_TOKENS), json.dumps([ids]), "bf16", "modelslim", "bfloat16"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "LOGPROBS ", "QUANT "))
    }
    assert proc.returncode == 0 and len(found) == 3, proc.stderr[-3000:]
    return found["OUTPUT_IDS"][0], found["QUANT"], found["LOGPROBS"][0]


def test_the_sglang_npu_export_serves_on_cpu_through_our_loader(assets, tmp_path):
    from runtime_ext.quant.policy import QuantPolicy
    from tools.quant.export import export

    out = tmp_path / "smollm2-w8a8-npu"
    keep = tuple(f"model.layers.3.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj"))
    export(assets.smollm2, out, QuantPolicy("w8a8_dynamic", keep=keep), target="sglang-npu")
    ids, stats, logprobs = generate(out, [1, 2, 3, 4, 5])
    assert len(ids) == N_TOKENS and all(lp is not None for lp in logprobs)
    assert stats["quantized"] == 119 and stats["kept"] == 1  # ours ran: SGLang's own would need NPU ops
    assert stats["int8_calls"] == 119 * N_TOKENS
