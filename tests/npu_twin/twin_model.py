"""SmolLM2 served through SGLang 0.5.23's own NPU code for ``engine.device: npu`` under the torch_npu
twin (started by ``test_under_twin.py``; docs/npu-twin.md): SGLang's loader, its NPU layers
(``npu_rms_norm``, ``npu_add_rms_norm``, ``npu_mrope``, ``npu_swiglu``), the ``ascend`` backend over the
NPU KV pool ``KVCacheConfigurator`` builds, ``LlamaForCausalLM.forward`` with its ``LogitsProcessor``
(``model_npu.py``). One model load; per KV mode, SGLang's pools and backend.

- Resolution: backend ``ascend``, pool ``NPUMHATokenToKVPool`` (for a C8 mode runtime_ext's subclass
  holding runtime_ext's method, int8 buffers and their scales).
- bf16: the greedy answer to the quality prompt equals HF transformers' float32 answer (what
  tests/engine/test_hf_parity.py holds the CPU engine to).
- C8-D: the greedy answer equals the unquantized (bf16) twin run's. C8-S: its agreement with it is
  printed and held to ``STATIC_AGREEMENT`` tokens (its scales come from a short calibration here:
  a token may flip late in the answer). C8-S + residual is refused on device npu, so not served here.
- Every torch_npu op a decode step calls is one of the twin's emulations (each checked against its
  documented contract on every call); the C8-D / C8-S decode step makes exactly the host syncs the
  bf16 step makes (the KV store and read add none).
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import Future
from functools import cache

import pytest
import torch

from tests.npu_twin import twin

twin.require()

from runtime_ext.plugin import _STATE  # noqa: E402
from tests.npu_twin.cpu_engine import CpuRun, cpu_engine, in_background  # noqa: E402
from tests.npu_twin.model_npu import Served, one_rank, perplexity  # noqa: E402
from tests.npu_twin.sglang_npu import engine_options, resolved, resolved_args  # noqa: E402

PROMPT = "The capital of France is"  # the quality prompt (a continuation; as in twin_modelslim.py)
ANSWER_TOKENS = 8
STATIC_AGREEMENT = 6  # leading tokens C8-S's answer shares with the bf16 answer at least
# C8-S + residual is refused on device npu (its bookkeeping syncs the host: twin_c8_attention.py)
MODES = ("bf16", "c8_dynamic", "c8_static")
SYNC_FREE = ("c8_dynamic", "c8_static")
# the C8 pool's read dequantizes its whole buffer per layer: a small pool keeps the run short
POOL_TOKENS = 512  # a request's rows start at page 1 (128): the held-out window fits behind them
WINDOW = 256  # held-out tokens (the start of Persuasion, as the CPU engine's C8 tests read)
PPL_MARGIN = 0.005  # the twin's C8 perplexity delta within the CPU engine's own delta + 0.5 %
BF16_PPL_TOLERANCE = 0.01  # the twin's bf16 perplexity vs the CPU engine's (other kernels, both bf16)
CALIBRATION_TOKENS = 128  # SmolLM2's static KV scales, calibrated here (tools/kv_calibrate.py)
DECODE_OPS = {  # what one decode step of the model calls, per KV mode (SGLang's NPU layers; ops/kv_npu.py)
    "bf16": {"npu_rms_norm", "npu_add_rms_norm", "split_qkv_rmsnorm_rope", "npu_swiglu", "_npu_reshape_and_cache",
             "_npu_paged_attention"},
    "c8_dynamic": {"npu_rms_norm", "npu_add_rms_norm", "split_qkv_rmsnorm_rope", "npu_swiglu", "npu_linear", "npu_dynamic_quant",
                   "_npu_paged_attention"},
    "c8_static": {"npu_rms_norm", "npu_add_rms_norm", "split_qkv_rmsnorm_rope", "npu_swiglu", "npu_quantize", "npu_anti_quant",
                  "_npu_paged_attention"},
}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def plugin_loaded(assets, tmp_path_factory):
    """runtime_ext's entry point as SGLang loads it; SmolLM2's static KV scales (calibrated here)."""
    from sglang.srt.plugins import load_plugins

    from assets import calibration_text
    from tools.kv_calibrate import calibrate

    load_plugins()
    assert os.getpid() in _STATE.registered_pids
    path = tmp_path_factory.mktemp("calib") / "kv.json"
    calibrate(assets.smollm2, calibration_text(), tokens=CALIBRATION_TOKENS).save(path)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STRUCTSERVE_KV_CALIBRATION", str(path))
        yield


@pytest.fixture(scope="module")
def model(assets):
    from tests.npu_twin.modelslim_npu import load_model

    args = resolved_args(engine_options(assets.smollm2, kv_cache="bf16", page_size=128, max_total_tokens=POOL_TOKENS))
    one_rank()
    return load_model(args, None)


@pytest.fixture(scope="module")
def prompt(assets):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(assets.smollm2 / "tokenizer.json")).encode(PROMPT, add_special_tokens=False).ids


@cache
def _served(mode: str, smollm2: str, model) -> tuple:
    args = resolved_args(engine_options(smollm2, kv_cache=mode, page_size=128, max_total_tokens=POOL_TOKENS))
    served = Served(args, model)
    return args, served, _STATE.kv_cache.built


@pytest.fixture(scope="module")
def window(assets) -> list[int]:
    from assets import eval_text
    from tools.quant.offline import token_ids

    return token_ids(assets.smollm2, eval_text(), WINDOW)


@pytest.fixture(scope="module", autouse=True)
def cpu_runs_started(plugin_loaded, assets, prompt, window) -> Future[dict[str, CpuRun]]:
    """The CPU engine per KV mode (one run after the other, beside the twin's own work), started
    before the twin loads its model: the quality prompt's answer and the window's prompt logprobs,
    with the C8-S scales the twin uses (``plugin_loaded``)."""
    return in_background(
        lambda: {m: cpu_engine(assets.smollm2, [prompt, window], ANSWER_TOKENS, kv_cache=m) for m in MODES}
    )


@pytest.fixture(scope="module")
def cpu_runs(cpu_runs_started) -> dict[str, CpuRun]:
    return cpu_runs_started.result()


@pytest.fixture(scope="module")
def perplexities(serve, window, cpu_runs) -> dict[str, dict[str, float]]:
    """Held-out perplexity of the window per KV mode: the twin's (one extend through SGLang's NPU model
    path, every token read back from the NPU pool) and the CPU engine's (its prefill, likewise)."""
    twin_ppl = {mode: perplexity(serve(mode)[1].logits(window), window) for mode in MODES}
    cpu_ppl = {mode: run.perplexity(1) for mode, run in cpu_runs.items()}
    print(f"\nheld-out perplexity over {len(window)} tokens: twin {twin_ppl}, CPU engine {cpu_ppl}")
    return {"twin": twin_ppl, "cpu": cpu_ppl}


@pytest.fixture(scope="module")
def serve(assets, model, prompt):
    """mode -> (resolved ServerArgs, ``Served`` after its greedy answer, runtime_ext's built method, answer)."""
    answers: dict[str, tuple] = {}

    def run(mode: str) -> tuple:
        if mode not in answers:
            args, served, method = _served(mode, assets.smollm2, model)
            answers[mode] = (args, served, method, served.greedy(prompt, ANSWER_TOKENS))
        return answers[mode]

    return run


@pytest.mark.parametrize("mode", MODES)
def test_device_npu_resolves_to_ascend_and_the_npu_pool(serve, mode):
    from sglang.srt.hardware_backend.npu.attention.ascend_backend import AscendAttnBackend
    from sglang.srt.hardware_backend.npu.memory_pool_npu import NPUMHATokenToKVPool
    from sglang.srt.models.llama import LlamaForCausalLM

    args, served, method, _ = serve(mode)
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        assert resolved(args, name) == "ascend", name
    assert isinstance(served.model, LlamaForCausalLM) and isinstance(served.backend, AscendAttnBackend)
    pool = served.pool
    assert isinstance(pool, NPUMHATokenToKVPool)
    if mode == "bf16":
        assert (pool.store_dtype, pool.get_kv_cache_quant_method().name) == (torch.bfloat16, "unquantized")
    else:  # runtime_ext's method on SGLang's NPU pool: int8 with scales, the NPU ops table
        assert pool.get_kv_cache_quant_method() is method and method.name == mode and method.kind == "npu"
        assert pool.k_buffer[0].dtype == torch.int8 and pool.k_scale_buffer is not None


def test_bf16_answer_equals_transformers_float32(assets, serve, prompt):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(assets.smollm2), dtype=torch.float32).eval()
    with torch.no_grad():  # greedy, EOS just another token (as test_hf_parity's reference)
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=ANSWER_TOKENS, do_sample=False, eos_token_id=None)
    assert serve("bf16")[3] == out[0, len(prompt) :].tolist()


def test_c8_dynamic_answer_equals_the_unquantized_twin_run(serve):
    assert serve("c8_dynamic")[3] == serve("bf16")[3]


def test_c8_static_answer_agrees_with_the_unquantized_twin_run(serve):
    ours, bf16 = serve("c8_static")[3], serve("bf16")[3]
    agree = next((i for i, (a, b) in enumerate(zip(ours, bf16)) if a != b), len(bf16))
    print(f"\nc8_static: {agree}/{len(bf16)} leading tokens equal the bf16 answer")
    assert agree >= STATIC_AGREEMENT, (ours, bf16)


@pytest.mark.parametrize("mode", MODES)
def test_decode_steps_call_only_emulated_npu_ops(serve, mode):
    """The torch_npu ops each decode step called (recorded by the twin; each checked its contract)."""
    from tests.npu_twin.ops import OPS

    kernels = serve(mode)[1].kernels
    assert len(kernels) == ANSWER_TOKENS - 1
    for step in kernels:
        assert set(step) == DECODE_OPS[mode] and set(step) <= OPS.keys() | {"split_qkv_rmsnorm_rope"}
        assert Counter(step)["split_qkv_rmsnorm_rope"] == 30  # one rotary per layer: every layer ran its NPU path


@pytest.mark.parametrize("mode", SYNC_FREE)
def test_c8_decode_step_makes_no_host_sync_beyond_bf16(serve, mode):
    bf16, c8 = serve("bf16")[1].syncs, serve(mode)[1].syncs
    print(f"\nhost syncs per decode step: bf16 {Counter(bf16[0])}, {mode} {Counter(c8[0])}")
    assert c8 == bf16


def test_bf16_answer_and_perplexity_equal_the_cpu_engine(serve, cpu_runs, perplexities):
    assert serve("bf16")[3] == cpu_runs["bf16"].answers[0]
    twin_ppl, cpu_ppl = perplexities["twin"]["bf16"], perplexities["cpu"]["bf16"]
    assert abs(twin_ppl / cpu_ppl - 1) < BF16_PPL_TOLERANCE, perplexities


@pytest.mark.parametrize("mode", SYNC_FREE)
def test_c8_perplexity_delta_is_within_the_cpu_engines_own_plus_half_a_percent(perplexities, mode):
    """What C8 costs on SGLang's NPU path (twin: mode vs bf16) is at most what it costs on the CPU
    engine (the same modes, scales and window) + 0.5 %: the NPU store, scales and dequantized read lose
    nothing the CPU path keeps."""
    twin_delta = perplexities["twin"][mode] / perplexities["twin"]["bf16"] - 1
    cpu_delta = perplexities["cpu"][mode] / perplexities["cpu"]["bf16"] - 1
    print(f"\n{mode}: perplexity delta twin {twin_delta:+.4%}, CPU engine {cpu_delta:+.4%}")
    assert twin_delta <= max(cpu_delta, 0.0) + PPL_MARGIN, perplexities
