"""SmolLM2 through the whole service: a real model gives a real answer, with the unquantized KV
cache and with the recommended INT8 one (C8-D with K and V Hadamard-rotated, the default
``kv_rotation``)."""

import httpx
import openai
import pytest

from tests.conftest import start_server
from tests.prompts import CAPITAL_MESSAGES


@pytest.fixture(scope="module")
def smol_c8_server(assets):
    server = start_server(assets.smollm2, "smol-c8", STRUCTSERVE_KV_CACHE="c8_dynamic")
    yield server
    assert server.stop() == 0


def capital_of_france(server) -> str:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    out = client.chat.completions.create(
        model=server.model_name,
        messages=CAPITAL_MESSAGES,
        temperature=0,
        max_tokens=24,
    )
    return out.choices[0].message.content


def test_capital_of_france_is_paris(smol_server):
    assert "Paris" in capital_of_france(smol_server)


def test_capital_of_france_is_paris_with_the_recommended_c8_cache(smol_c8_server):
    """Without the rotation (STRUCTSERVE_KV_ROTATION=none) this server answers "L'Étoile, la Marseillaise, …"."""
    assert "Paris" in capital_of_france(smol_c8_server)
    metrics = httpx.get(f"{smol_c8_server.base_url}/metrics", timeout=30).text  # the scheduler's pool says what ran
    assert 'structserve_kv_cache_method{method="c8_dynamic"} 1.0' in metrics
    assert 'structserve_kv_rotation{rotation="kv"} 1.0' in metrics
    assert 'structserve_kv_kernels{impl="native"} 1.0' in metrics  # the compiled one-pass read (ops/kv_cpu)
