"""The decode replica's KV budget (``scheduling.admission: budget`` on a PD decode replica):
decode admits a transfer only when the request's worst-case pages (prompt + max_tokens) fit
beside what every request it holds may still write. Offered three requests that may each write
900 tokens into a 2048-token pool, SGLang's own rule (512 tokens reserved per request) admits
all three and later retracts; under the budget decode runs at most two at once and never retracts.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.api.test_kv_c8_aborts import scrape
from tests.pd.topology import DECODE_POOL_TOKENS

pytestmark = pytest.mark.timeout(900)

MAX_TOKENS = 900
OFFERED = 3


def scheduler_stat(server, stat: str) -> float:
    return scrape(server).get(("structserve_scheduler", (("stat", stat),)), 0.0)


def test_decode_admits_transfers_within_its_pool_and_never_retracts(pd) -> None:
    client = openai.OpenAI(base_url=f"{pd.gateway.url}/v1", api_key="unused", max_retries=0, timeout=600)
    model = pd.decode.model_name
    retractions_before = scheduler_stat(pd.decode, "retractions")

    def ask(i: int):
        messages = [{"role": "user", "content": f"Write a long inventory report for warehouse {i}."}]
        return client.chat.completions.create(model=model, messages=messages, max_tokens=MAX_TOKENS, temperature=0)

    with ThreadPoolExecutor(OFFERED) as pool:
        replies = list(pool.map(ask, range(OFFERED)))

    worst = sum(r.usage.prompt_tokens + MAX_TOKENS for r in replies)
    written = [r.usage.completion_tokens for r in replies]
    print(f"\ncompletion tokens {written}; worst case {worst} tokens offered to a {DECODE_POOL_TOKENS}-token pool")
    assert worst > DECODE_POOL_TOKENS, "the offered load fits the pool: nothing to prove"
    assert sum(written) + sum(r.usage.prompt_tokens for r in replies) > DECODE_POOL_TOKENS, (
        f"the requests stopped early ({written}): the pool was never short"
    )
    assert scheduler_stat(pd.decode, "retractions") == retractions_before == 0
