"""The quantization recipe of docs/quantization.md end to end on SmolLM2, each step its real CLI command:
`structserve quant calibrate` (SmoothQuant) -> `quant scan` on the smoothed checkpoint -> `quant
export --sensitive-layers` of the scan's own file. The scan flags single shards of fused modules
(qkv, gate_up); its fallback list keeps those modules whole, so the export loads:

- `structserve serve` of the export answers a chat through the official openai client over HTTP;
- served in float32 with stage-aware W8A8, the export gives exactly the held-out perplexity,
  tokens and logprobs of online quantization of the smoothed checkpoint with the same list, and
  decode really read the float32 copy (the plugin's ``copy_calls``).

Small token counts keep the offline steps short (calibrate 256 tokens, scan 64 tokens): this
checks the recipe's mechanics, not the quality of its choices (bench/quant.py measures that with
1,024 / 512 tokens). With so little calibration the float32 W8A8 model answers the capital question
off-topic, so that run checks answers against online quantization, not for "Paris".
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from runtime_ext.config import RuntimeExtConfig
from runtime_ext.quant.policy import QuantPolicy, fused_module
from tests.cli_cache import quant_cli
from tests.engine.together import together
from tests.prompts import CAPITAL_MESSAGES
from tests.server import ServerProcess

pytestmark = pytest.mark.timeout(1200)  # the recipe fixture's calibrate + scan + export, then two engines

N_TOKENS = 12
HELD_OUT = 384  # tokens of Persuasion for the perplexity
QUESTION = CAPITAL_MESSAGES


@pytest.fixture(scope="module")
def recipe(assets, tmp_path_factory):
    """(smoothed dir, scan file, export dir): the recipe's commands with small token counts,
    through the suite's build cache (``tests/cli_cache.py``: run again when code or inputs change)."""
    work = tmp_path_factory.mktemp("recipe")
    smoothed, scan, export = work / "smoothed", work / "sens.json", work / "smol-w8a8"
    base = assets.smollm2
    quant_cli(["calibrate", "--model", base, "--tokens", "256", "--out", smoothed], [base], [smoothed])
    scanned = [scan, scan.with_suffix(".md"), scan.with_suffix(".png")]
    print("\n" + quant_cli(["scan", "--model", smoothed, "--tokens", "64", "--out", scan], [smoothed], scanned))
    export_args = [
        "export",
        "--model",
        smoothed,
        "--scheme",
        "w8a8_dynamic",
        "--sensitive-layers",
        scan,
        "--out",
        export,
    ]
    quant_cli(export_args, [smoothed, scan], [export])
    return smoothed, json.loads(scan.read_text()), export


def kept_modules(layers: list[str]) -> set[str]:
    return {fused_module(name)[0] for name in layers}


def test_the_real_scan_keeps_fused_modules_whole(recipe):
    _, scan, _ = recipe
    closed = {name: why for name, why in scan["reasons"].items() if why.startswith("fused with")}
    print(f"\n{len(scan['layers'])} layers kept in {len(kept_modules(scan['layers']))} modules; added by closure:")
    print("\n".join(f"  {name}: {why}" for name, why in closed.items()))
    assert closed, "the scan flagged no single shard of a fused module: this test needs one"
    for name in scan["layers"]:
        assert set(fused_module(name)[1]) <= set(scan["layers"]), name


def test_calibrate_stores_the_smoothed_checkpoint_in_the_models_dtype(assets, recipe):
    from service.startup import ModelInfo

    smoothed, _, export = recipe
    for model in (smoothed, export):  # SmolLM2 is bf16: export must quantize what bf16 serving loads
        assert json.loads((model / "config.json").read_text())["dtype"] == "bfloat16"
    dtypes = {dtype for _, dtype in ModelInfo.read(smoothed).tensors.values()}
    assert dtypes == {"BF16"}, dtypes


def test_serve_of_the_export_answers_through_the_openai_client(recipe):
    _, _, export = recipe
    server = ServerProcess(export, name="quant-recipe")
    server.start()
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
        out = client.chat.completions.create(model=server.model_name, messages=QUESTION, temperature=0, max_tokens=12)
        print(f"\nserved export: {out.choices[0].message.content!r}")
        assert "Paris" in out.choices[0].message.content
    finally:
        assert server.stop() == 0


def greedy(model_dir: Path, prompts: list[list[int]], quantization: str, keep: list[str]) -> dict:
    """tests/engine/sglang_greedy.py in float32 with stage-aware W8A8: output ids, output and prompt
    logprobs, the plugin's quant counters."""
    policy = QuantPolicy("w8a8_dynamic", stage_aware=True, keep=tuple(keep))
    env = {**os.environ, **RuntimeExtConfig(quant_policy=policy).to_env(), "INPUT_LOGPROBS": "1"}
    script = Path(__file__).with_name("sglang_greedy.py")
    args = [str(model_dir), str(N_TOKENS), json.dumps(prompts), "bf16", quantization, "float32"]
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600, env=env)
    found = {
        line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.startswith(("OUTPUT_IDS ", "LOGPROBS ", "INPUT_LOGPROBS ", "QUANT "))
    }
    assert proc.returncode == 0 and len(found) == 4, proc.stderr[-3000:]
    return found


def test_float32_stage_aware_export_equals_online_quantization(assets, recipe):
    from transformers import AutoTokenizer

    from assets import eval_text

    smoothed, scan, export = recipe
    tok = AutoTokenizer.from_pretrained(str(assets.smollm2))
    chat = tok.encode(
        tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    held_out = tok.encode(eval_text()[: HELD_OUT * 8], add_special_tokens=False)[:HELD_OUT]
    exported, online = together(
        lambda: greedy(export, [chat, held_out], "modelslim", []),
        lambda: greedy(smoothed, [chat, held_out], "w8a8_dynamic", scan["layers"]),
    )
    ppl = [math.exp(-sum(run["INPUT_LOGPROBS"][1]) / (HELD_OUT - 1)) for run in (exported, online)]
    print(f"\nheld-out perplexity ({HELD_OUT} tokens, float32): export {ppl[0]:.6f}, online {ppl[1]:.6f}")
    print(f"export: {tok.decode(exported['OUTPUT_IDS'][0])!r} {exported['QUANT']}")
    # Both runs hold the same int8 weights, float32 scales and kept (bf16-stored) weights and run the
    # same ops on the same batch, so they agree bit for bit here (observed). The tolerance allows only
    # float32 rounding (~1e-7 per op) should a kernel reorder a sum: 1e-6 relative on the perplexity,
    # 1e-5 absolute per logprob; one quantization step of a weight moves them by far more.
    assert ppl[0] == pytest.approx(ppl[1], rel=1e-6)
    assert exported["OUTPUT_IDS"] == online["OUTPUT_IDS"] and len(exported["OUTPUT_IDS"][0]) == N_TOKENS
    flat = [[lp for seq in run["LOGPROBS"] + run["INPUT_LOGPROBS"] for lp in seq] for run in (exported, online)]
    assert flat[0] == pytest.approx(flat[1], abs=1e-5)
    modules = 30 * 4 - len(kept_modules(scan["layers"]))
    for run in (exported, online):
        stats = run["QUANT"]
        assert stats["quantized"] == modules and stats["kept"] == 120 - modules
        assert stats["copy_calls"] >= modules * (N_TOKENS - 1)  # decode read the float32 copy
