"""Our ``sglang-npu`` W8A8_DYNAMIC export of SmolLM2, loaded by SGLang 0.5.23's own model loader for
``engine.device: npu`` and served through SGLang's own NPU ModelSlim linear method under the torch_npu
twin (started by ``test_under_twin.py``; docs/npu-twin.md).

- SGLang resolves every linear module of the export to ``ModelSlimLinearMethod`` → ``ModelSlimW8A8Int8``
  → ``NPUW8A8Int8DynamicLinearMethod``; its ``process_weights_after_loading`` and ``apply`` run, and
  the only torch_npu ops ``apply`` calls are ``torch.ops.npu.npu_dynamic_quant`` and
  ``torch.ops.npu.npu_quant_matmul``, each under its documented contract (``ops_quant.py``).
- On the activations of a real passage, each of its 120 linear modules equals runtime_ext's CPU method
  (``structserve_modelslim``, what the CPU engine serves the same export with) to bf16 rounding, and
  stays within W8A8's error of the float weights the export came from (a wrong scale layout in the
  export breaks this, not the first check: both methods read the same tensors).
- Through SGLang's NPU model path (``model_npu.Served``: its NPU layers, the ``ascend`` backend over
  the bf16 NPU KV pool), SGLang's method answers the quality prompt greedily like ours through the
  same path and like the CPU engine on the same export (``cpu_engine.py``); the held-out perplexities
  are within ``PPL_TOLERANCE`` (per-token INT8 activations turn last-bit differences into different
  roundings: the measurement's own floor is above the 0.5 % the linears alone would meet).
"""

from __future__ import annotations

import pytest
import torch

from tests.npu_twin import twin

twin.require()

from runtime_ext.quant.policy import QuantPolicy  # noqa: E402
from tests.npu_twin import ops_quant  # noqa: E402
from tests.npu_twin.cpu_engine import cpu_engine, in_background  # noqa: E402
from tests.npu_twin.model_npu import Served, perplexity  # noqa: E402
from tests.npu_twin.modelslim_npu import load_model, quantized_linears, state_one_rank_groups  # noqa: E402

ops_quant.install()

PROMPT = "The capital of France is"  # the quality prompt of the NPU engine test (a continuation)
ANSWER_TOKENS = 12
PASSAGE_TOKENS = 256
# held-out perplexity of SGLang's method vs ours (same path; measured 1.7 %) and vs the CPU engine (1.1 %):
# W8A8's own floor here: one element of one token's embedding moved by one bf16 ulp moves it 1.6 %
PPL_TOLERANCE = 0.03
W8A8_ERROR = 0.08  # relative L2 error of a W8A8 dynamic linear vs its float weights, on real activations
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


@pytest.fixture(scope="module")
def export_dir(assets, tmp_path_factory):
    from tools.quant.export import export

    out = tmp_path_factory.mktemp("smollm2-w8a8-sglang-npu")
    export(assets.smollm2, out, QuantPolicy("w8a8_dynamic"), target="sglang-npu")
    return out


@pytest.fixture(scope="module")
def models(export_dir):
    """The export loaded twice by SGLang's loader on device npu: SGLang's own ``modelslim`` method and ours."""
    from sglang.srt.plugins import load_plugins

    from service.engine_args import EngineOptions
    from service.settings import EngineSettings
    from tests.npu_twin.sglang_npu import resolved_args

    load_plugins()  # runtime_ext's entry point, as SGLang loads it
    engine = EngineSettings(device="npu", max_total_tokens=512, page_size=128)  # the ascend backend's page
    options = EngineOptions(model_path=export_dir, engine=engine, dtype="bfloat16", quantization="modelslim")
    args = resolved_args(options)
    state_one_rank_groups()
    upstream = load_model(args, "modelslim")
    ours = load_model(args, "structserve_modelslim")
    return {
        "upstream": upstream,
        "ours": ours,
        "served": {"upstream": Served(args, upstream), "ours": Served(args, ours)},
    }


@pytest.fixture(scope="module")
def token_ids(export_dir):
    from tokenizers import Tokenizer

    from assets import eval_text

    tok = Tokenizer.from_file(str(export_dir / "tokenizer.json"))
    passage = tok.encode(eval_text()[: PASSAGE_TOKENS * 16], add_special_tokens=False).ids[:PASSAGE_TOKENS]
    return tok, tok.encode(PROMPT, add_special_tokens=False).ids, passage


@pytest.fixture(scope="module")
def passage_run(models, token_ids):
    """SGLang's method through SGLang's NPU model path over the passage (one extend), each linear
    module's input and output recorded; then ours through the same path."""
    captured: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [
        module.register_forward_hook(lambda m, args, out, name=name: captured.__setitem__(name, (args[0], out[0])))
        for name, module in quantized_linears(models["upstream"]).items()
    ]
    ops_quant.CALLS.clear()
    upstream = models["served"]["upstream"].logits(token_ids[2])
    calls = list(ops_quant.CALLS)
    for hook in hooks:
        hook.remove()
    ours = models["served"]["ours"].logits(token_ids[2])
    return {"upstream": upstream, "ours": ours, "captured": captured, "calls": calls}


@pytest.fixture(scope="module", autouse=True)
def cpu_run_started(export_dir, token_ids):
    """The CPU engine on the same export, started before the twin loads it: the quality prompt's
    answer, the passage's prompt logprobs."""
    return in_background(
        lambda: cpu_engine(export_dir, [token_ids[1], token_ids[2]], ANSWER_TOKENS, scheme="modelslim")
    )


@pytest.fixture(scope="module")
def cpu_run(cpu_run_started):
    return cpu_run_started.result()


def test_sglang_resolves_and_prepares_its_own_npu_w8a8_dynamic_method(models):
    from sglang.srt.hardware_backend.npu.quantization.linear_method_npu import NPUW8A8Int8DynamicLinearMethod
    from sglang.srt.layers.quantization.modelslim.modelslim import ModelSlimLinearMethod
    from sglang.srt.layers.quantization.modelslim.schemes import ModelSlimW8A8Int8

    from runtime_ext.quant.checkpoint_method import CheckpointLinearMethod

    upstream, ours = quantized_linears(models["upstream"]), quantized_linears(models["ours"])
    assert len(upstream) == 120 and upstream.keys() == ours.keys()  # 30 layers x qkv, o, gate_up, down
    for name, layer in upstream.items():
        assert isinstance(layer.quant_method, ModelSlimLinearMethod), name
        assert isinstance(layer.scheme, ModelSlimW8A8Int8) and layer.scheme.is_dynamic, name
        assert isinstance(layer.scheme.kernel, NPUW8A8Int8DynamicLinearMethod), name
        n = layer.output_size  # one rank; after process_weights_after_loading: [K, N] int8, scale [N]
        assert layer.weight.dtype == torch.int8 and tuple(layer.weight.shape) == (layer.input_size, n), name
        assert tuple(layer.weight_scale.shape) == (n,) and layer.weight_scale.dtype == torch.bfloat16, name
        assert isinstance(ours[name].quant_method, CheckpointLinearMethod), name


def test_apply_calls_only_the_emulated_ops_from_sglang_npu_method(passage_run):
    caller = "sglang.srt.hardware_backend.npu.quantization.linear_method_npu.NPUW8A8Int8DynamicLinearMethod.apply"
    assert set(passage_run["calls"]) == {("npu_dynamic_quant", caller), ("npu_quant_matmul", caller)}
    assert len(passage_run["calls"]) == 2 * 120


def test_each_linear_equals_our_cpu_method_on_the_passage_activations(models, passage_run):
    ours = quantized_linears(models["ours"])
    assert len(passage_run["captured"]) == 120
    for name, (x, upstream_out) in passage_run["captured"].items():
        our_out, _ = ours[name](x)
        # the same int8 sums and scales; only the final rescale rounds differently (bf16: 2^-7 relative)
        torch.testing.assert_close(upstream_out.float(), our_out.float(), rtol=2**-7, atol=1e-6, msg=name)


def test_each_linear_is_within_w8a8_error_of_the_float_weights(assets, passage_run):
    from safetensors.torch import load_file

    floats = load_file(str(assets.smollm2 / "model.safetensors"))
    worst = {}
    for name, (x, upstream_out) in passage_run["captured"].items():
        prefix, _, proj = name.rpartition(".")
        weight = torch.cat([floats[f"{prefix}.{part}.weight"] for part in FUSED.get(proj, (proj,))])
        reference = x.float() @ weight.float().T
        worst[name] = float((upstream_out.float() - reference).norm() / reference.norm())
    name = max(worst, key=worst.__getitem__)
    print(f"\nworst relative error vs the float weights: {worst[name]:.4f} ({name})")
    assert worst[name] < W8A8_ERROR, (name, worst[name])


def test_greedy_answer_and_perplexity_match_our_method_on_the_npu_path(models, token_ids, passage_run):
    tok, prompt, passage = token_ids
    answers = {side: served.greedy(prompt, ANSWER_TOKENS) for side, served in models["served"].items()}
    ppl = {side: perplexity(passage_run[side], passage) for side in ("upstream", "ours")}
    print(f"\nanswer: {tok.decode(answers['upstream'])!r}; perplexity {ppl} over {len(passage)} tokens")
    assert answers["upstream"] == answers["ours"], {side: tok.decode(ids) for side, ids in answers.items()}
    assert abs(ppl["upstream"] / ppl["ours"] - 1) < PPL_TOLERANCE, ppl


def test_greedy_answer_and_perplexity_match_the_cpu_engine(models, token_ids, passage_run, cpu_run):
    tok, prompt, passage = token_ids
    answer = models["served"]["upstream"].greedy(prompt, ANSWER_TOKENS)
    ppl = {
        "sglang npu (twin)": perplexity(passage_run["upstream"], passage),
        "cpu engine": cpu_run.perplexity(1),
    }
    print(f"\nanswer: {tok.decode(answer)!r}; perplexity {ppl} over {len(passage)} tokens")
    assert answer == cpu_run.answers[0], (tok.decode(answer), tok.decode(cpu_run.answers[0]))
    twin_ppl, cpu_ppl = ppl.values()
    assert abs(twin_ppl / cpu_ppl - 1) < PPL_TOLERANCE, ppl
