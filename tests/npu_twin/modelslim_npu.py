"""A ModelSlim checkpoint loaded by SGLang's own model loader for ``engine.device: npu`` under the twin
(``load_model``): ``ModelConfig.from_server_args`` (SGLang finds ``quant_model_description.json``; its
quantization override picks the method), ``get_model`` (``DefaultModelLoader``: the model class built
with the quant config, the safetensors read through each parameter's weight loader, every module's
``quant_method.process_weights_after_loading``). With ``quantization="modelslim"`` each quantized
linear gets SGLang's ``ModelSlimLinearMethod`` (scheme ``ModelSlimW8A8Int8``, kernel
``NPUW8A8Int8DynamicLinearMethod``); with ``"structserve_modelslim"`` runtime_ext's
``CheckpointLinearMethod``, whose kernels are the CPU ones (the tensors are on the CPU): the method
the CPU engine serves the same export with. ``model_npu.Served`` runs a loaded model.

Stated, not built: the pipeline and tensor-parallel groups of one rank (``ONE_RANK``), which a
model of one rank reads only for its rank (0) and size (1).
"""

from __future__ import annotations

import copy
import types
from typing import Any

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
