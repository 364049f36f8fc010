"""Run SGLang greedy decoding in a process of its own and print the output ids as JSON.

Used by test_hf_parity: ``Engine.shutdown()`` kills every child of the process that
created the engine, so the engine must not live in the pytest process (the session's
server fixtures are its children too).

    python tests/engine/sglang_greedy.py MODEL_DIR N_TOKENS '[[1, 2, 3], [4, 5]]' [KV_CACHE [QUANTIZATION [DTYPE]]]

KV_CACHE: bf16 (default) or one of the C8 modes. QUANTIZATION: none (default) or a linear
scheme (w8a8_dynamic, w8a16, w4a16; policy from RuntimeExtConfig.quant_policy), or modelslim for a
checkpoint with quant_model_description.json (passed as the service passes it: the plugin's override
picks who serves it). DTYPE: float32 (default). Also prints each output token's logprob and
the plugin's report of the KV pool as allocated (tokens, bytes, side-buffer statistics). With
``INPUT_LOGPROBS=1`` in the environment, also the logprob of every prompt token after the first
(teacher-forced: computed in the prefill, so attention read the cache for each of them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    model_dir, n_tokens, prompts = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    kv_cache = sys.argv[4] if len(sys.argv) > 4 else "bf16"
    scheme = sys.argv[5] if len(sys.argv) > 5 else "none"
    dtype = sys.argv[6] if len(sys.argv) > 6 else "float32"
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings

    settings = EngineSettings(max_total_tokens=4096, page_size=1)
    prepare_process_env("cpu", settings)  # the service's environment and start method (fork on cpu)
    import sglang

    options = EngineOptions(
        model_path=model_dir,
        dtype=dtype,
        engine=settings,
        kv_cache=kv_cache,
        quantization={"none": None, "modelslim": "modelslim"}.get(scheme, f"structserve_{scheme}"),
    )
    engine = sglang.Engine(**options.engine_kwargs())
    try:
        params = {"temperature": 0, "max_new_tokens": n_tokens, "ignore_eos": True}
        forced = os.environ.get("INPUT_LOGPROBS") == "1"
        outs = engine.generate(
            input_ids=prompts, sampling_params=params, return_logprob=True, logprob_start_len=0 if forced else None
        )
        if forced:
            print(
                "INPUT_LOGPROBS "
                + json.dumps([[lp[0] for lp in o["meta_info"]["input_token_logprobs"][1:]] for o in outs]),
                flush=True,
            )
        print("OUTPUT_IDS " + json.dumps([o["output_ids"] for o in outs]), flush=True)
        logprobs = [[lp[0] for lp in o["meta_info"]["output_token_logprobs"]] for o in outs]
        print("LOGPROBS " + json.dumps(logprobs), flush=True)
        from runtime_ext.plugin import INTERNAL_STATE_KEY

        report = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]
        print("POOL " + json.dumps({**report["kv_pool"], **report["kv_cache_stats"]}), flush=True)
        print("QUANT " + json.dumps(report["quant"]), flush=True)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
