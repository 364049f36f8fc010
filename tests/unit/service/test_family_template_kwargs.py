"""What the chat template is given per model family: gpt-oss's ``reasoning_effort`` from the
request's effort, DeepSeek-V3.1's ``thinking`` switch from thinking on/off (validate and
prompt stages, real templates rendered by jinja2 as the service does)."""

from __future__ import annotations

from typing import Any

import jinja2

from runtime_ext.formats import get_reasoning_format
from service.pipeline.prompt import build_prompt
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.request import ValidatedRequest
from service.types.serving import ModelFormats, ReasoningPolicy, ReasoningSetup, ServingLimits

POLICY = ReasoningPolicy(default_thinking=True, effort_budgets=(("low", 64), ("high", None)))
# the lines of the official templates that read these variables
GPT_OSS = '{{- "Reasoning: " + reasoning_effort + "\\n\\n" }}'  # openai-gpt-oss-120b.jinja
DEEPSEEK_V31 = "{%- if not thinking -%}{{'</think>'}}{%- else -%}{{'<think>'}}{%- endif -%}"  # V3.1 generation prompt


def validated(fmt: str, **kw: Any) -> ValidatedRequest:
    setup = ReasoningSetup.build(get_reasoning_format(fmt), lambda text: [len(text)])
    limits = ServingLimits("m", context_length=4096, max_n=1, default_max_tokens=None, reasoning=POLICY)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return validate_request(ChatCompletionRequest.model_validate(body), limits, ModelFormats(None, setup))


class Template:
    """A chat template of one line, rendered with the kwargs the prompt stage passes."""

    renders_tools = False

    def __init__(self, source: str) -> None:
        self.template = jinja2.Environment().from_string(source)
        self.rendered = ""

    def render(self, messages: Any, tools: Any = None, *, suffix: str, kwargs: Any) -> list[int]:
        self.rendered = self.template.render(**dict(kwargs)) + suffix
        return [1]


def rendered(source: str, req: ValidatedRequest) -> str:
    template = Template(source)
    build_prompt(req, template)  # type: ignore[arg-type]
    return template.rendered


def test_gpt_oss_template_reads_the_requests_effort() -> None:
    assert (
        rendered(GPT_OSS, validated("harmony", reasoning_effort="high"))
        == "Reasoning: high\n\n<|channel|>analysis<|message|>"
    )
    assert rendered(GPT_OSS, validated("harmony", reasoning_effort="minimal")).startswith("Reasoning: low")
    asked = validated("harmony", reasoning_effort="high", chat_template_kwargs={"reasoning_effort": "medium"})
    assert rendered(GPT_OSS, asked).startswith("Reasoning: medium")  # the client's own kwarg wins
    assert ("reasoning_effort", "high") not in validated("qwen3", reasoning_effort="high").template_kwargs


def test_deepseek_v31_template_opens_or_closes_the_block_from_the_switch() -> None:
    assert rendered(DEEPSEEK_V31, validated("deepseek_v31")) == "<think>"
    assert rendered(DEEPSEEK_V31, validated("deepseek_v31", enable_thinking=False)) == "</think>"
