"""Token bytes over the real tokenizers (byte-level BPE): the logprobs' ``bytes`` join back to the text."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from service.token_text import TokenTexts


@pytest.mark.parametrize("model", ["qwen3_tiny", "smollm2"])
def test_every_token_of_a_text_joins_back_to_the_text(model, assets):
    tok = AutoTokenizer.from_pretrained(str(getattr(assets, model)))
    texts = TokenTexts(tok)
    text = "Café — naïve 東京 🙂 <|im_end|> done\n"
    ids = tok.encode(text, add_special_tokens=False)
    data = b"".join(bytes(texts.of(i)[1]) for i in ids)
    assert data.decode("utf-8") == text
    assert any(texts.of(i)[0].startswith("bytes:") for i in ids)  # 東京/🙂 split inside a character
