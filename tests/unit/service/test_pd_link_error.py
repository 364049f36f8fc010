"""A decode request whose prefill was lost (SGLang's failure text, from its heartbeat or from
runtime_ext.pd.link_down's probe) is a 502 pd_link_down, not a generic engine error."""

from __future__ import annotations

from service.engine import _abort_error
from service.errors import EngineError, PDLinkDownError
from service.types.plan import GenerationPlan, SamplingOptions

PLAN = GenerationPlan(input_ids=(1, 2), max_new_tokens=4, sampling=SamplingOptions())
SGLANG_TEXT = (
    "Decode transfer failed for request rank=0 decode_req.req.rid='chatcmpl-1-0' decode_req.req.bootstrap_room=7 "
    "with exception KVTransferError(bootstrap_room=7): Lost connection with prefill instance "
    "(bootstrap_addr: 127.0.0.1:8998)"
)


def test_a_lost_prefill_is_pd_link_down() -> None:
    error = _abort_error(SGLANG_TEXT, 500, PLAN)
    assert isinstance(error, PDLinkDownError)
    assert (error.status, error.code) == (502, "pd_link_down")
    assert "prefill replica" in error.message


def test_other_transfer_failures_stay_engine_errors() -> None:
    error = _abort_error("Decode transfer failed ... Aborted by AbortReq.", 500, PLAN)
    assert isinstance(error, EngineError) and not isinstance(error, PDLinkDownError)
