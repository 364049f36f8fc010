"""SGLang's own objects for ``engine.device: npu``, built under the twin the way SGLang builds them.

- ``resolved_args``: ``ServerArgs`` from the service's ``EngineOptions.engine_kwargs()`` (what
  ``sglang.Engine`` receives), resolved by SGLang's pipeline (``resolve_once``: platform hooks
  included) and published as a scheduler's config (``runtime_context.publish``).
- ``build_pools``: the model runner's steps up to the KV pool (``ModelRunner.initialize`` /
  ``alloc_memory_pool``): ``ModelConfig``, ``configure_kv_cache_dtype``, ``resolve_layer_indices``,
  ``KVCacheConfigurator(...).configure(...)``. The model is not loaded (``model=None``: nothing
  these steps read from it for a plain decoder).
- ``attention_backend``: the backend SGLang's registry builds for the resolved name.

Stated, not built: the WORLD group of one rank (``world_group`` is only read for its CPU group,
which a one-rank launch never uses), the memory before model load (the stated device's 64 GiB).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import torch

from service.engine_args import EngineOptions
from service.settings import EngineSettings
from tests.npu_twin.twin import DEVICE, GIB

# A small Llama decoder (SmolLM2's family) with a power-of-two head dim (C8 rotation needs one).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_model(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(TINY_LLAMA))
    return directory


def engine_options(model_dir: Path, kv_cache: str = "bf16", **engine: Any) -> EngineOptions:
    settings = EngineSettings(device="npu", **{"max_total_tokens": 1024, "page_size": 16, **engine})
    return EngineOptions(model_path=model_dir, engine=settings, kv_cache=kv_cache, dtype="bfloat16")  # type: ignore[arg-type]


def resolved_args(options: EngineOptions) -> Any:
    """SGLang's ServerArgs for these options, resolved and published as this process's scheduler config."""
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(**options.engine_kwargs())
    args.resolve_once()
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    get_parallel().override_permanently(world_group=types.SimpleNamespace(cpu_group=None))
    return args


def resolved(args: Any, name: str) -> Any:
    from sglang.srt.arg_groups.overrides import resolution_result

    return resolution_result(args, name)


def build_pools(args: Any, *, kv_cache_dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """(``KVCacheConfigurator``, its ``configure`` result) as the model runner builds them.
    ``kv_cache_dtype`` replaces what ``configure_kv_cache_dtype`` answers (to build a state it refuses)."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.mem_cache import kv_cache_dtype as kv_dtype
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import SpecAuxHiddenStateConfig
    from sglang.srt.runtime_context import get_parallel, get_schedule
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    model_config = ModelConfig.from_server_args(args)
    name = args.kv_cache_dtype
    if kv_cache_dtype is None:
        name, kv_cache_dtype = kv_dtype.configure_kv_cache_dtype(
            server_args_kv_cache_dtype=args.kv_cache_dtype,
            model=None,
            model_dtype=model_config.dtype,
            is_draft_worker=False,
            is_dflash=False,
            speculative_draft_attention_backend=None,
        )
    configurator = KVCacheConfigurator(
        device=args.device,
        gpu_id=0,
        attn_dp_size=get_parallel().attn_dp_size,
        pp_size=1,
        pp_group=None,
        model=None,
        model_config=model_config,
        server_args=args,
        kv_cache_dtype=kv_cache_dtype,
        kv_cache_dtype_str=name or args.kv_cache_dtype,
        model_dtype=model_config.dtype,
        page_size=get_schedule().page_size,
        sliding_window_size=None,
        spec_algorithm=SpeculativeAlgorithm.NONE,
        is_draft_worker=False,
        post_capture_kv_active=False,
        spec_aux_config=SpecAuxHiddenStateConfig(),
        is_hybrid_swa=False,
        is_hybrid_swa_compress=False,
        use_mla_backend=False,
        layer_info=resolve_layer_indices(model=None, model_config=model_config, is_draft_worker=False),
        forward_stream=torch.get_device_module(args.device).Stream(),
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
    )
    return configurator, configurator.configure(pre_model_load_memory=DEVICE["total_memory"] / GIB)


def attention_backend(args: Any, configurator: Any, pools: Any) -> Any:
    """The attention backend SGLang's registry builds for the resolved name, over these pools."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.runtime_context import get_exec

    runner = types.SimpleNamespace(
        device=args.device,
        dtype=configurator.model_dtype,
        is_draft_worker=False,
        page_size=configurator.page_size,
        model_config=configurator.model_config,
        server_args=args,
        kv_cache_dtype=configurator.kv_cache_dtype,
        spec_algorithm=configurator.spec_algorithm,
        use_mla_backend=False,
        is_hybrid_swa=False,
        sliding_window_size=None,
        req_to_token_pool=pools.req_to_token_pool,
        token_to_kv_pool=pools.token_to_kv_pool,
        token_to_kv_pool_allocator=pools.token_to_kv_pool_allocator,
    )
    return ATTENTION_BACKENDS[get_exec().kernel.attention_backend](runner)
