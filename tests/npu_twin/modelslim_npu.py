"""A ModelSlim checkpoint loaded by SGLang's own model loader for ``engine.device: npu`` under the twin,
and a forward through the loaded model.

- ``load_model``: ``ModelConfig.from_server_args`` (SGLang finds ``quant_model_description.json``;
  its quantization override picks the method), ``get_model`` (``DefaultModelLoader``: the model
  class built with the quant config, the safetensors read through each parameter's weight loader,
  every module's ``quant_method.process_weights_after_loading``). With ``quantization="modelslim"``
  each quantized linear gets SGLang's ``ModelSlimLinearMethod`` (scheme ``ModelSlimW8A8Int8``, kernel
  ``NPUW8A8Int8DynamicLinearMethod``); with ``"structserve_modelslim"`` runtime_ext's
  ``CheckpointLinearMethod``, whose kernels are the CPU ones (the tensors are on the CPU): the
  method the CPU engine serves the same export with.
- ``logits``: the model's own modules, in the order ``LlamaDecoderLayer.forward`` runs them: the
  linear layers through their ``forward`` (``quant_method.apply``: under the twin, SGLang's NPU
  method and the emulated ops), norms, rotary and activation through SGLang's ``forward_native``,
  and causal attention over the whole sequence with ``scaled_dot_product_attention`` in place of
  ``RadixAttention`` (no KV cache, no attention backend: docs/npu-twin.md says why).

Stated, not built: the pipeline and tensor-parallel groups of one rank (``ONE_RANK``), which a
model of one rank reads only for its rank (0) and size (1).
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch
import torch.nn.functional as F

ONE_RANK = types.SimpleNamespace(
    rank_in_group=0, world_size=1, is_first_rank=True, is_last_rank=True, cpu_group=None, device_group=None
)


def state_one_rank_groups() -> None:
    from sglang.srt.runtime_context import get_parallel

    get_parallel().override_permanently(pp_group=ONE_RANK, tp_group=ONE_RANK, attn_tp_group=ONE_RANK)


def load_model(args: Any, quantization: str) -> Any:
    """SGLang's model for ``args`` (resolved ``ServerArgs``) with ``quantization``, as the model runner loads it."""
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model

    args = copy.copy(args)
    args.quantization = quantization
    config = ModelConfig.from_server_args(args)
    load = LoadConfig(load_format=args.load_format)
    return get_model(model_config=config, load_config=load, device_config=DeviceConfig(device=args.device, gpu_id=0))


def quantized_linears(model: Any) -> dict[str, Any]:
    """Every linear module of the decoder layers (qkv_proj, o_proj, gate_up_proj, down_proj) by name."""
    from sglang.srt.layers.linear import LinearBase

    return {name: m for name, m in model.named_modules() if isinstance(m, LinearBase) and ".layers." in name}


def _attention(attn: Any, positions: torch.Tensor, x: torch.Tensor, past: list[torch.Tensor]) -> torch.Tensor:
    """One layer's attention over the new tokens ``x``; ``past`` holds its earlier K and V (extended here)."""
    qkv, _ = attn.qkv_proj(x)
    q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
    q, k = attn.rotary_emb.forward_native(positions, q, k)
    t, d = x.shape[0], attn.head_dim
    q, k, v = (y.view(t, -1, d).transpose(0, 1) for y in (q, k, v))
    if past:  # decode: one new token attends to every earlier one
        assert t == 1, "the forward decodes one token at a time after the prompt"
        k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
    past[:] = [k, v]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, scale=attn.scaling, enable_gqa=True)
    o, _ = attn.o_proj(out.transpose(0, 1).reshape(t, attn.q_size))
    return o


@torch.no_grad()
def logits(model: Any, ids: list[int], past: list[list[torch.Tensor]] | None = None) -> torch.Tensor:
    """Next-token logits (float32, ``[len(ids), vocab]``) of a causal forward over ``ids``, after the
    tokens whose K/V ``past`` holds (one ``[K, V]`` per layer, extended; ``None``: no earlier tokens)."""
    body = model.model
    past = past if past is not None else [[] for _ in body.layers]
    start = past[0][0].shape[1] if past[0] else 0
    positions = torch.arange(start, start + len(ids))
    h = body.embed_tokens(torch.tensor(ids))
    for layer, layer_past in zip(body.layers, past):
        h = h + _attention(layer.self_attn, positions, layer.input_layernorm.forward_native(h), layer_past)
        gate_up, _ = layer.mlp.gate_up_proj(layer.post_attention_layernorm.forward_native(h))
        down, _ = layer.mlp.down_proj(layer.mlp.act_fn.forward_native(gate_up))
        h = h + down
    return body.norm.forward_native(h).float() @ model.lm_head.weight.float().T


def greedy(model: Any, ids: list[int], tokens: int) -> list[int]:
    """``tokens`` greedy tokens after ``ids``: the prompt in one forward, then one token per forward."""
    past: list[list[torch.Tensor]] = [[] for _ in model.model.layers]
    out = [int(logits(model, ids, past)[-1].argmax())]
    while len(out) < tokens:
        out.append(int(logits(model, out[-1:], past)[-1].argmax()))
    return out


def perplexity(all_logits: torch.Tensor, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ``ids[1:]`` under ``all_logits`` (``logits(model, ids)``)."""
    lp = torch.log_softmax(all_logits[:-1], dim=-1)
    nll = -lp.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).mean()
    return float(nll.exp())
