"""``structserve serve`` with one test-only hook, for tests that need the random tiny models to
behave like a trained one at chosen points (end their reasoning at a given step, end their
turn after a tool call): the random weights never do either by themselves.

Run as ``python -m tests.scripted_serve serve ...`` (``scripted_server`` in tests/conftest.py).
Selected engine requests get extra SGLang sampling params read from the JSON file named by
``$STRUCTSERVE_TEST_REASONING_SCRIPT`` (re-read per request; absent or ``{}`` = none):
- the reasoning phase of every request (engine rid ``…-think``, service/pipeline/generate.py);
- every engine request of an HTTP request whose ``X-Request-Id`` ends in ``-scripted``
  (service/api/gate.py puts it in ``service.logs.REQUEST_ID``), so other tests on the same
  server are unaffected.
Everything else is the real service and the real engine: the params only bias what the real
sampler picks, after the grammar mask (a biased token the grammar forbids stays forbidden),
e.g. ``{"logit_bias": {"<end id>": 100}, "min_new_tokens": k}`` (SGLang masks stop tokens until
k tokens exist, then the bias makes the end marker the pick: the model closes at step k), the
EOS id the same way, or ``{"regex": ...}`` for a given reasoning text. Never used in production.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SCRIPT_ENV = "STRUCTSERVE_TEST_REASONING_SCRIPT"
REASONING_RID_SUFFIX = "-think"
REQUEST_ID_SUFFIX = "-scripted"


def script() -> dict[str, Any]:
    path = os.environ.get(SCRIPT_ENV)
    if not path or not Path(path).is_file():
        return {}
    return json.loads(Path(path).read_text() or "{}")


def selected(rid: str | None) -> bool:
    from service.logs import REQUEST_ID

    request_id = REQUEST_ID.get()
    return (rid is not None and rid.endswith(REASONING_RID_SUFFIX)) or (
        request_id is not None and request_id.endswith(REQUEST_ID_SUFFIX)
    )


def install() -> None:
    from service.engine import SGLangEngine

    start = SGLangEngine.start.__func__  # type: ignore[attr-defined]

    def scripted_start(cls: type, options: Any) -> Any:
        engine = start(cls, options)
        generate = engine._engine.async_generate

        async def async_generate(*args: Any, rid: str | None = None, sampling_params: Any = None, **kw: Any) -> Any:
            if selected(rid):
                sampling_params = {**(sampling_params or {}), **script()}
            return await generate(*args, rid=rid, sampling_params=sampling_params, **kw)

        engine._engine.async_generate = async_generate
        return engine

    SGLangEngine.start = classmethod(scripted_start)  # type: ignore[method-assign]


if __name__ == "__main__":
    from service.cli import app

    install()
    app(prog_name="structserve")
