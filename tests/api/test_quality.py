"""SmolLM2 through the whole service: a real model gives a real answer."""

import openai


def test_capital_of_france_is_paris(smol_server):
    client = openai.OpenAI(base_url=f"{smol_server.base_url}/v1", api_key="unused", max_retries=0)
    out = client.chat.completions.create(
        model=smol_server.model_name,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=24,
    )
    assert "Paris" in out.choices[0].message.content
