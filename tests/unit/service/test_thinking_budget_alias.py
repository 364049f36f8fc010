"""``thinking_budget`` (SGLang's name) is the exact reasoning budget, like ``thinking_token_budget``;
sent together with another name of the same field it is refused (a 400), never silently dropped."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.protocol.openai import ChatCompletionRequest

BASE = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize("name", ["thinking_budget", "thinking_token_budget", "max_thinking_tokens"])
def test_each_name_sets_the_budget(name):
    assert ChatCompletionRequest.model_validate(BASE | {name: 7}).max_reasoning_tokens == 7


def test_two_names_at_once_are_refused():
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest.model_validate(BASE | {"thinking_budget": 3, "max_reasoning_tokens": 5})
    assert info.value.errors()[0]["type"] == "extra_forbidden"
