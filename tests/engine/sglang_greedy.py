"""Run SGLang greedy decoding in a process of its own and print the output ids as JSON.

Used by test_hf_parity: ``Engine.shutdown()`` kills every child of the process that
created the engine, so the engine must not live in the pytest process (the session's
server fixtures are its children too).

    python tests/engine/sglang_greedy.py MODEL_DIR N_TOKENS '[[1, 2, 3], [4, 5]]' [KV_CACHE]

KV_CACHE: bf16 (default) or c8_dynamic. Also prints each output token's logprob.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    model_dir, n_tokens, prompts = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    kv_cache = sys.argv[4] if len(sys.argv) > 4 else "bf16"
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from service.engine import EngineOptions, prepare_process_env

    prepare_process_env("cpu")
    import sglang

    options = EngineOptions(model_path=model_dir, dtype="float32", max_total_tokens=4096, page_size=1,
                            kv_cache=kv_cache)
    engine = sglang.Engine(**options.engine_kwargs())
    try:
        params = {"temperature": 0, "max_new_tokens": n_tokens, "ignore_eos": True}
        outs = engine.generate(input_ids=prompts, sampling_params=params, return_logprob=True)
        print("OUTPUT_IDS " + json.dumps([o["output_ids"] for o in outs]), flush=True)
        logprobs = [[lp[0] for lp in o["meta_info"]["output_token_logprobs"]] for o in outs]
        print("LOGPROBS " + json.dumps(logprobs), flush=True)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
