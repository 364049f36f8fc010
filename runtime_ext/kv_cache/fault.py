"""What a request failed by the C8 store's refusal is told (pure: the service reads it too).

The scheduler finishes such a request with SGLang's abort (``poison.py``) carrying ``MESSAGE``;
the service recognizes ``PREFIX`` and answers with its typed 422 error.
"""

from __future__ import annotations

PREFIX = "kv_non_finite:"
STATUS = 422  # the same input fails the same way: not worth a retry
MESSAGE = (
    f"{PREFIX} this request's keys/values became non-finite (NaN or inf) or too large for the "
    "INT8 KV cache's float16 scales (|x| > ~8.3e6) while the model ran on its input; the request was "
    "stopped and its KV cache freed (other requests are unaffected). The same input will fail the same "
    "way: change the input, or serve with kv_cache: bf16"
)
