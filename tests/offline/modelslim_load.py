"""Load an exported checkpoint into SGLang's own LlamaForCausalLM on CPU and report what each parameter got.

    python tests/offline/modelslim_load.py MODEL_DIR modelslim|structserve_modelslim

Runs in a process of its own (it initializes torch.distributed and SGLang's runtime context). The
quantization config is made by SGLang's real loader path, ``model_loader.loader._get_quantization_config``
(``ModelConfig`` detects ``quant_model_description.json``; ``get_quant_config`` reads it and calls
``from_config``), with ``_is_npu`` set so that the NPU's packed-modules mapping is used exactly as on an
NPU: the only NPU stand-in. Then ``LlamaForCausalLM(hf_config, quant_config)`` runs every
``get_quant_method`` and ``create_weights``; every parameter is filled with a sentinel (NaN, int8 -128:
our quantizer never writes it) and ``model.load_weights`` feeds the safetensors through the real weight
loaders (qkv/gate_up stacking included). ``process_weights_after_loading`` runs only for our own method
(SGLang's is NPU ops). Prints one line ``REPORT <json>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
from pathlib import Path

import torch

FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def init_single_process_dist() -> None:
    """World size 1 over gloo plus model-parallel groups: sglang/test/layer_ut_utils.py
    ``init_single_process_dist`` and test_utils.py ``publish_build_topology`` (SGLang 0.5.23), inlined
    because sglang.test.test_utils imports the benchmark datasets (not installed here)."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="test", ranks=SpawnRanks(world_rank=0))
    get_parallel().override_permanently(world_group=parallel_state._WORLD)
    parallel_state.initialize_model_parallel(backend="gloo")


def quant_config(model_dir: Path, method: str):
    import sglang.srt.model_loader.loader as loader
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig

    if method == "structserve_modelslim":
        from runtime_ext.config import RuntimeExtConfig
        from runtime_ext.quant import checkpoint_method
        from runtime_ext.state import QuantStats

        checkpoint_method.register(QuantStats(), RuntimeExtConfig.from_env())
    model_config = ModelConfig(str(model_dir), quantization=method, dtype="auto")
    loader._is_npu = True  # the NPU's packed_modules_mapping (qkv_proj, gate_up_proj)
    return model_config, loader._get_quantization_config(model_config, LoadConfig())


def expected(name: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """What the checkpoint holds for SGLang parameter ``name`` (fused modules stack their shards)."""
    module, _, leaf = name.rpartition(".")
    head, _, last = module.rpartition(".")
    parts = [f"{head}.{p}.{leaf}" for p in FUSED[last]] if last in FUSED else [name]
    if any(p not in tensors for p in parts):
        return None
    return torch.cat([tensors[p] for p in parts]) if len(parts) > 1 else tensors[parts[0]]


def main() -> None:
    model_dir, method = Path(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from safetensors.torch import load_file
    from sglang.srt.layers.linear import LinearBase
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models.llama import LlamaForCausalLM

    init_single_process_dist()
    model_config, config = quant_config(model_dir, method)
    with set_default_torch_dtype(model_config.dtype):
        model = LlamaForCausalLM(model_config.hf_config, quant_config=config)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(-128 if p.dtype == torch.int8 else float("nan"))
    tensors = load_file(str(model_dir / "model.safetensors"))
    model.load_weights(iter(tensors.items()))
    report: dict = {"config": type(config).__name__, "methods": {}, "params": {}, "mismatch": [], "missing": []}
    report["dtype_differs"] = []
    for name, module in model.named_modules():
        if isinstance(module, LinearBase):
            scheme = getattr(module, "scheme", None)
            report["methods"][name] = [type(module.quant_method).__name__, type(scheme).__name__ if scheme else None]
    for name, param in model.named_parameters():
        want = expected(name, tensors)
        report["params"][name] = [str(param.dtype).removeprefix("torch."), list(param.shape)]
        if want is None:
            report["missing"].append(name)
        elif want.shape != param.shape or not torch.equal(want.to(param.dtype), param.data):
            report["mismatch"].append([name, str(want.dtype), list(want.shape)])
        elif want.dtype != param.dtype:
            report["dtype_differs"].append([name, str(want.dtype)])
    if method == "structserve_modelslim":
        for module in model.modules():
            if hasattr(module, "quant_method") and isinstance(module, LinearBase):
                module.quant_method.process_weights_after_loading(module)
        report["stats"] = dataclasses.asdict(type(config).quant_stats)
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
