"""Serve prompts one after another (so later ones can hit the prefix cache) in an engine of its
own process and print outputs, cached tokens per request and the prefix-cache report.

    python tests/engine/sglang_prefix_run.py MODEL_DIR N_TOKENS PROMPTS_JSON PREFIX_CACHE COMBINE [DTYPE]

PREFIX_CACHE: off | sglang | combined. Env POOL: KV pool tokens (default 8192),
RuntimeExtConfig.prefix_events (in the environment): event-stream file. Used by test_prefix_cache.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    model_dir, n_tokens, prompts = Path(sys.argv[1]), int(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text())
    mode, combine = sys.argv[4], sys.argv[5]
    dtype = sys.argv[6] if len(sys.argv) > 6 else "float32"
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from dataclasses import replace

    from runtime_ext.config import RuntimeExtConfig
    from runtime_ext.plugin import INTERNAL_STATE_KEY
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    replace(RuntimeExtConfig.from_env(), combine_blocks=int(combine)).export()

    settings = EngineSettings(max_total_tokens=int(os.environ.get("POOL", 8192)), page_size=16)
    prepare_process_env("cpu", settings)  # the service's environment and start method (fork on cpu)
    import sglang

    options = EngineOptions(model_path=model_dir, dtype=dtype, engine=settings, prefix_cache=mode)
    engine = sglang.Engine(**options.engine_kwargs())
    try:
        params = {"temperature": 0, "max_new_tokens": n_tokens, "ignore_eos": True}
        outs = [engine.generate(input_ids=[ids], sampling_params=params, return_logprob=True)[0] for ids in prompts]
        print("OUTPUT_IDS " + json.dumps([o["output_ids"] for o in outs]), flush=True)
        print("LOGPROBS " + json.dumps([[lp[0] for lp in o["meta_info"]["output_token_logprobs"]] for o in outs]))
        print("CACHED " + json.dumps([o["meta_info"].get("cached_tokens", 0) for o in outs]), flush=True)
        report = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]
        print("PREFIX " + json.dumps(report["prefix_cache"]), flush=True)
        print("CENSUS " + json.dumps(report["kv_census"]), flush=True)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
