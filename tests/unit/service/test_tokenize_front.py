"""/tokenize and /detokenize conversions over the chat pipeline's real validate and prompt stages,
with a character tokenizer (id = code point, BOS = 1) standing in for the model's: what reaches the
template, which refusals name which field. The real tokenizer and the chat usage equality are
tests/api/test_tokenize.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from runtime_ext.formats import get_format
from service.errors import InvalidRequestError, ModelNotFoundError
from service.fronts.tokenize import chat_request, detokenize, tokenize
from service.main import create_app
from service.pipeline.chat import ChatPipeline
from service.protocol.tokenize import DetokenizeRequest, TokenizeRequest
from service.settings import load_settings
from service.types.serving import ModelFormats, ServingLimits

BOS = 1
LIMITS = ServingLimits(served_model_name="m", context_length=4096, max_n=4, default_max_tokens=None, vocab_size=300)
HI = [{"role": "user", "content": "hi"}]
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}


class CharTemplate:
    renders_tools = True

    def render(self, messages, tools=(), suffix="", kwargs=()):
        text = "".join(f"<{m.role}>{m.content}" for m in messages) + "".join(f"[{t.name}]" for t in tools)
        return self.encode(text + "<assistant>" + suffix)

    def encode(self, text, add_special_tokens=False):
        return ([BOS] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join("" if (i == BOS and skip_special_tokens) else "<s>" if i == BOS else chr(i) for i in ids)

    def token_strs(self, ids):
        return ["<s>" if i == BOS else chr(i) for i in ids]


PIPELINE = ChatPipeline(None, CharTemplate(), LIMITS, None, formats=ModelFormats(tools=get_format("qwen")))  # type: ignore[arg-type]


def tok(**body):
    return tokenize(TokenizeRequest.model_validate(body), PIPELINE)


def detok(**body):
    return detokenize(DetokenizeRequest.model_validate(body), CharTemplate(), LIMITS)


def text_of(ids):
    return "".join(chr(i) for i in ids)


def test_messages_are_the_chat_prompt_with_tools():
    out = tok(messages=HI, tools=[WEATHER])
    assert text_of(out.tokens) == "<user>hi[weather]<assistant>"
    assert out.count == len(out.tokens) and out.max_model_len == 4096 and out.token_strs is None
    same = PIPELINE.prompt_ids(chat_request(TokenizeRequest.model_validate({"messages": HI, "tools": [WEATHER]}), "m"))
    assert list(same) == out.tokens


def test_prompt_gets_special_tokens_unless_asked_not_to():
    assert tok(prompt="ab").tokens == [BOS, 97, 98]
    assert tok(prompt="ab", add_special_tokens=False).tokens == [97, 98]
    strs = tok(prompt="ab", return_token_strs=True).token_strs
    assert strs == ["<s>", "a", "b"]


def test_a_prompt_list_is_a_batch():
    out = tok(prompt=["a", "bc"], add_special_tokens=False, return_token_strs=True)
    assert out.tokens == [[97], [98, 99]] and out.count == [1, 2] and out.token_strs == [["a"], ["b", "c"]]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": "a", "messages": HI}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": "a", "tools": [WEATHER]}, "tools"),
        ({"prompt": "a", "enable_thinking": True}, "enable_thinking"),
        ({"prompt": "a", "add_generation_prompt": True}, "add_generation_prompt"),
        ({"messages": HI, "add_special_tokens": True}, "add_special_tokens"),
        ({"messages": HI, "add_generation_prompt": False}, "add_generation_prompt"),
        ({"messages": [{"role": "assistant", "content": "x"}, *HI], "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_refusals_name_the_field(body, param):
    with pytest.raises(InvalidRequestError) as err:
        tok(**body)
    assert err.value.param == param, err.value.message


def test_a_model_not_served_is_404_in_both():
    with pytest.raises(ModelNotFoundError):
        tok(model="other", prompt="a")
    with pytest.raises(ModelNotFoundError):
        tok(model="other", messages=HI)
    with pytest.raises(ModelNotFoundError):
        detok(model="other", tokens=[97])


def test_unknown_fields_and_coercion_are_refused():
    with pytest.raises(ValidationError, match="extra_forbidden|Extra inputs"):
        TokenizeRequest.model_validate({"prompt": "a", "chat_template": "x"})
    with pytest.raises(ValidationError):
        DetokenizeRequest.model_validate({"tokens": ["97"]})


def test_detokenize_one_list_or_a_batch_under_both_names():
    one = detok(tokens=[BOS, 104, 105])
    assert one.prompt == one.text == "<s>hi"
    assert detok(tokens=[BOS, 104], skip_special_tokens=True).text == "h"
    batch = detok(tokens=[[104], [105, 106]])
    assert batch.prompt == batch.text == ["h", "ij"]
    assert detok(tokens=[]).text == ""


@pytest.mark.parametrize(
    ("tokens", "param"), [([97, 300], "tokens.1"), ([-1], "tokens.0"), ([[97], [97, 999]], "tokens.1.1")]
)
def test_ids_outside_the_vocabulary_name_their_place(tokens, param):
    with pytest.raises(InvalidRequestError) as err:
        detok(tokens=tokens)
    assert err.value.param == param and "[0, 300)" in err.value.message


def test_the_gate_keys_the_unversioned_paths(monkeypatch):
    monkeypatch.setenv("STRUCTSERVE_API_KEYS", "key-a")
    c = TestClient(create_app(load_settings(), Path("/nonexistent-model"), "m"))  # no lifespan: not ready
    for path, body in (
        ("/tokenize", {"prompt": "a"}),
        ("/detokenize", {"tokens": [97]}),
        ("/v1/tokenize", {"prompt": "a"}),
    ):
        assert c.post(path, json=body).status_code == 401
        past_the_key = c.post(path, json=body, headers={"Authorization": "Bearer key-a"})
        assert past_the_key.status_code == 503, past_the_key.text  # the key passed: not loaded
