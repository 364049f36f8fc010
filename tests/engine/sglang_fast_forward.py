"""Run JSON-schema-constrained greedy requests on SGLang (llguidance grammars, overlap schedule
off) in a process of its own, with grammar fast-forward on or off, and print what came out.

    python tests/engine/sglang_fast_forward.py MODEL_DIR on|off CASES_JSON [DTYPE]

CASES_JSON: a list of {"prompt": str, "schema": {...}, "max_new_tokens": int, "stream": bool}.
Prints ``OUTPUTS`` (per case: text, output ids, completion tokens, finish reason and, for a
streamed case, the concatenated stream) and ``FAST_FORWARD`` (the plugin's report: decode
forward passes, spans appended, forced tokens). Used by test_grammar_fast_forward and by
bench/structured_fast_forward.py.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any


def start_engine(
    model_dir: Path, fast_forward: bool, dtype: str, max_running: int = 32, sglang_args: dict | None = None
) -> Any:
    """An in-process engine as the service would run it with ``grammar.fast_forward`` (``sglang_args``:
    the ``engine.sglang_args`` setting)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from runtime_ext.config import RuntimeExtConfig
    from service.engine import EngineOptions, prepare_process_env
    from service.settings import EngineSettings
    from service.startup import fast_forward_engine

    settings = EngineSettings(
        max_total_tokens=8192,
        page_size=1,
        disable_overlap_schedule=True,
        max_running_requests=max_running,
        sglang_args=sglang_args or {},
    )
    settings = fast_forward_engine(fast_forward, settings)  # mixed chunk with fast-forward, as the service
    prepare_process_env("cpu", settings)  # the service's environment and start method (fork on cpu)
    replace(RuntimeExtConfig.from_env(), fast_forward=fast_forward).export()
    import sglang

    options = EngineOptions(model_path=model_dir, dtype=dtype, engine=settings)
    return sglang.Engine(**options.engine_kwargs(), grammar_backend="llguidance")


def params(case: dict[str, Any]) -> dict[str, Any]:
    return {"temperature": 0, "max_new_tokens": case["max_new_tokens"], "json_schema": json.dumps(case["schema"])}


def streamed(engine: Any, case: dict[str, Any]) -> dict[str, Any]:
    chunks = list(engine.generate(prompt=case["prompt"], sampling_params=params(case), stream=True))
    out = dict(chunks[-1])
    out["stream_text"] = "".join(c["text"] for c in chunks)  # each chunk is an increment
    out["output_ids"] = [token for c in chunks for token in c["output_ids"]]
    return out


def summary(out: dict[str, Any]) -> dict[str, Any]:
    meta = out["meta_info"]
    finish = meta.get("finish_reason") or {}
    return {
        "text": out.get("stream_text", out["text"]),
        "streamed": "stream_text" in out,
        "output_ids": out.get("output_ids"),
        "completion_tokens": meta["completion_tokens"],
        "finish": finish.get("type"),
    }


def fast_forward_report(engine: Any) -> dict[str, Any]:
    from runtime_ext.plugin import INTERNAL_STATE_KEY

    report: dict[str, Any] = engine.get_server_info()["internal_states"][0][INTERNAL_STATE_KEY]
    return {**report["fast_forward"], "extend_decode_rows": report["attention"]["extend_decode_rows"]}


def main() -> None:
    model_dir, mode, cases = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    dtype = sys.argv[4] if len(sys.argv) > 4 else "float32"
    engine = start_engine(model_dir, mode == "on", dtype)
    try:
        batch = [c for c in cases if not c.get("stream")]
        outs = engine.generate(prompt=[c["prompt"] for c in batch], sampling_params=[params(c) for c in batch])
        by_case = iter(outs)
        results = [summary(streamed(engine, c) if c.get("stream") else next(by_case)) for c in cases]
        print("OUTPUTS " + json.dumps(results), flush=True)
        print("FAST_FORWARD " + json.dumps(fast_forward_report(engine)), flush=True)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
