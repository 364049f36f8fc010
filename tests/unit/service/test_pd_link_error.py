"""A broken prefill/decode link is a 502 pd_link_down, not a generic engine error: a decode
request whose prefill was lost (SGLang's failure text, from its heartbeat or from
runtime_ext.pd.link_down's probe), and a prefill request whose KV write to decode was refused or
reset (the text SGLang's prefill aborts with, as seen in tests/pd/test_pd_dropped_link.py)."""

from __future__ import annotations

import pytest

from service.engine import _abort_error
from service.errors import EngineError, PDLinkDownError
from service.types.plan import GenerationPlan, SamplingOptions

PLAN = GenerationPlan(input_ids=(1, 2), max_new_tokens=4, sampling=SamplingOptions())
SGLANG_TEXT = (
    "Decode transfer failed for request rank=0 decode_req.req.rid='chatcmpl-1-0' decode_req.req.bootstrap_room=7 "
    "with exception KVTransferError(bootstrap_room=7): Lost connection with prefill instance "
    "(bootstrap_addr: 127.0.0.1:8998)"
)
PREFILL_TEXT = (
    "Prefill transfer failed for request rank=0 req.rid='chatcmpl-1-0' req.bootstrap_room=7 with exception "
    "KVTransferError(bootstrap_room=7): Failed to send kv chunk of 7 to 127.0.0.1:39457"
)


@pytest.mark.parametrize("text", [SGLANG_TEXT, PREFILL_TEXT], ids=["decode lost the prefill", "prefill send failed"])
def test_a_broken_link_is_pd_link_down(text: str) -> None:
    error = _abort_error(text, 500, PLAN)
    assert isinstance(error, PDLinkDownError)
    assert (error.status, error.code) == (502, "pd_link_down")
    assert "prefill and decode replicas failed" in error.message and text in error.message


def test_other_transfer_failures_stay_engine_errors() -> None:
    error = _abort_error("Decode transfer failed ... Aborted by AbortReq.", 500, PLAN)
    assert isinstance(error, EngineError) and not isinstance(error, PDLinkDownError)
