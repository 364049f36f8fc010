"""The real SGLang engine on SmolLM2 as an NPU build: runtime_ext's NPU kernels in the dispatch table,
torch_npu replaced by the strict emulation (each op checks its documented contract) that records
every distinct call (``tests/engine/sglang_npu_record.py``). One engine run combines a C8 KV mode
with a linear quant scheme. The suite runs three (``RUNS``): every C8 mode and every scheme once,
both model dtypes, stage-aware W8A8 in float16. ``NPU_RUNS=all`` adds five more (``MORE_RUNS``:
each mode and scheme in the other dtype too).

Asserted per run: the held-out perplexity of a 256-token passage (teacher-forced through the C8 cache
and the NPU kernels) is within 10 % of the float32 fake-quantized HF model with the reference math
(``tools/quant/offline.py``), so the kernels compute what they should (a wrong scale layout or a
dropped group multiplies it); the record holds the ops each
part of the configuration must call, from the runtime_ext function that should call them (e.g.
c8_dynamic: ``npu_dynamic_quant`` from ``kv_npu.quantize_per_token``, the KV store, and ``npu_linear``
from ``kv_npu.rotate``, its default K/V rotation); activations
reach the ops in the model dtype; and replaying every recorded call through the strict emulation
raises nothing. The inventory is printed (docs/npu-contracts.md holds one run's).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.quant.policy import QuantPolicy
from tests.engine.together import together
from tests.unit.runtime_ext import npu_recording

pytestmark = pytest.mark.timeout(1200)  # one test or fixture runs several engines, two at a time

N_TOKENS = 12
PROMPT = "The capital of France is"  # a continuation: the chat question's first token is a knife edge
PASSAGE_TOKENS = 256  # held-out text for the perplexity check
PPL_TOLERANCE = 0.10  # bf16/fp16 activations and the C8 cache vs float32 without them
RUNS = {  # (model dtype, kv cache, scheme, stage-aware)
    "bf16 c8_static+w8a16": ("bfloat16", "c8_static", "w8a16", False),
    "fp16 c8_dynamic+w8a8 stage-aware": ("float16", "c8_dynamic", "w8a8_dynamic", True),
    "bf16 c8_static_residual+w4a16": ("bfloat16", "c8_static_residual", "w4a16", False),
}
MORE_RUNS = {  # NPU_RUNS=all: the rest of the session-7 matrix (about 40 s of engine time each)
    "bf16 c8_dynamic+w8a16": ("bfloat16", "c8_dynamic", "w8a16", False),
    "bf16 c8_static+w4a16": ("bfloat16", "c8_static", "w4a16", False),
    "bf16 c8_static_residual+w8a8_dynamic": ("bfloat16", "c8_static_residual", "w8a8_dynamic", False),
    "fp16 c8_static+w8a16": ("float16", "c8_static", "w8a16", False),
    "fp16 c8_static_residual+w4a16": ("float16", "c8_static_residual", "w4a16", False),
}
if os.environ.get("NPU_RUNS") == "all":
    RUNS = {**RUNS, **MORE_RUNS}
EXPECTED = {  # what each part must call: (op, calling runtime_ext function)
    "c8_dynamic": {("npu_dynamic_quant", "kv_npu.quantize_per_token")},
    "c8_static": {("npu_quantize", "kv_npu.quantize_static"), ("npu_anti_quant", "kv_npu.dequantize_static")},
    "w8a8_dynamic": {
        ("npu_format_cast", "quant_npu.prepare_w8a8"),
        ("npu_dynamic_quant", "quant_npu.w8a8_matmul"),
        ("npu_quant_matmul", "quant_npu.w8a8_matmul"),
    },
    "w8a16": {("npu_weight_quant_batchmatmul", "quant_npu.weight_only_matmul")},
    "w4a16": {
        ("npu_convert_weight_to_int4pack", "quant_npu.prepare_weight_only"),
        ("npu_weight_quant_batchmatmul", "quant_npu.weight_only_matmul"),
    },
}
EXPECTED["c8_static_residual"] = EXPECTED["c8_static"]
EXPECTED["c8_dynamic"] = EXPECTED["c8_dynamic"] | {("npu_linear", "kv_npu.rotate")}  # kv_rotation auto: kv
ACTIVATION = {  # op -> the argument that carries the activations (must be in the model dtype)
    "npu_dynamic_quant": 0,
    "npu_weight_quant_batchmatmul": 0,
}


def run(model_dir: Path, ids: list[int], config: tuple, calib: Path, record: Path) -> dict:
    dtype, kv_cache, scheme, stage_aware = config
    policy = QuantPolicy.from_json(
        json.dumps({"scheme": scheme, "group_size": 128, "stage_aware": stage_aware, "keep": []})
    )
    env = {
        **os.environ,
        **RuntimeExtConfig(kv_calibration=calib, quant_policy=policy).to_env(),
        npu_recording.ENV: str(record),
        "INPUT_LOGPROBS": "1",
    }
    script = Path(__file__).with_name("sglang_npu_record.py")
    argv = [str(model_dir), str(N_TOKENS), json.dumps(ids), kv_cache, scheme, dtype]
    proc = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=600, env=env)
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "INPUT_LOGPROBS ", "QUANT ", "POOL "))
    }
    assert proc.returncode == 0 and len(found) == 4, proc.stderr[-3000:]
    return found


@pytest.fixture(scope="module")
def recorded(assets, tmp_path_factory):
    """All runs once (about 30 s of engine time each): name -> (answer text, stats, records)."""
    from transformers import AutoTokenizer

    from assets import calibration_text, eval_text
    from tools.kv_calibrate import calibrate
    from tools.quant.offline import load_model, perplexity, quantize_model, token_ids

    tmp = tmp_path_factory.mktemp("npu")
    calib = tmp / "kv.json"
    calibrate(assets.smollm2, calibration_text(), tokens=512).save(calib)
    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    passage = token_ids(assets.smollm2, eval_text(), PASSAGE_TOKENS)
    ids = [tok.encode(PROMPT, add_special_tokens=False), passage]
    reference = {  # the float32 HF model, fake-quantized with the reference math
        scheme: perplexity(quantize_model(load_model(assets.smollm2), QuantPolicy(scheme)), passage)
        for scheme in sorted({config[2] for config in RUNS.values()})
    }
    only = os.environ.get("NPU_RUNS", "all")  # "all", or a comma-separated subset of RUNS (debugging)
    chosen = [name for name in RUNS if only == "all" or name in only.split(",")]
    records = {name: tmp / f"calls{i}.jsonl" for i, name in enumerate(chosen)}
    runs = together(*(lambda n=n: run(assets.smollm2, ids, RUNS[n], calib, records[n]) for n in chosen))
    out = {}
    for name, found in zip(chosen, runs):
        served = math.exp(-sum(found["INPUT_LOGPROBS"][1]) / len(found["INPUT_LOGPROBS"][1]))
        out[name] = (
            tok.decode(found["OUTPUT_IDS"][0]),
            found,
            npu_recording.load(records[name]),
            (served, reference[RUNS[name][2]]),
        )
        if os.environ.get("NPU_RECORD_KEEP"):  # a directory: keep the records (docs/npu-contracts.md)
            keep = Path(os.environ["NPU_RECORD_KEEP"], f"{name.replace(' ', '_')}.jsonl")
            keep.write_text(records[name].read_text())
    return out


def inventory(records: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        key = f"{r['op']} <- {r['caller']}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


@pytest.mark.parametrize("name", list(RUNS))
def test_the_engine_calls_each_op_within_its_documented_contract(recorded, name):
    dtype, kv_cache, scheme, stage_aware = RUNS[name]
    if name not in recorded:
        pytest.skip("not in NPU_RUNS")
    text, found, records, (served, reference) = recorded[name]
    print(f"\n{name}: {text!r} {found['QUANT']}\n  distinct calls (op <- caller: shapes): {inventory(records)}")
    print(f"  held-out perplexity: {served:.3f} served (NPU kernels, emulated), {reference:.3f} reference")
    assert abs(served / reference - 1) < PPL_TOLERANCE, (name, served, reference)
    seen = {(r["op"], r["caller"]) for r in records}
    missing = (EXPECTED[kv_cache] | EXPECTED[scheme]) - seen
    assert not missing, f"expected calls never made: {missing}"
    for r in records:
        if r["op"] in ACTIVATION:
            assert r["args"][ACTIVATION[r["op"]]]["tensor"] == f"torch.{dtype}", r
        npu_recording.replay(r)  # raises ContractViolation on a broken rule
    if stage_aware:  # prefill ran the INT8 op, decode the dequantized copy
        assert found["QUANT"]["int8_calls"] == 120 and found["QUANT"]["copy_calls"] == 120 * (N_TOKENS - 1)
    if kv_cache == "c8_static_residual":
        assert found["POOL"]["vectors_stored"] > 0
