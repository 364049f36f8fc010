"""Prompt stage: messages (+ tools) -> prompt token ids through the model's chat template.

A template that renders tools gets them as they are. For one that does not (the
``generic`` format, e.g. SmolLM2) the tools, earlier calls and tool results are
written into the conversation here, in the exact syntax the grammar forces.
"""

from __future__ import annotations

from runtime_ext.formats import NamedChoice, ToolFormat, render_calls, render_tools_prompt
from service.errors import InvalidRequestError
from service.types.plan import PromptIds
from service.types.ports import ChatTemplate
from service.types.request import Message, ToolRequest, ValidatedRequest


def build_prompt(req: ValidatedRequest, template: ChatTemplate) -> PromptIds:
    """Render the conversation with a generation prompt appended, then the opened (thinking
    on) or empty (thinking off) reasoning block of the model's reasoning format."""
    r = req.reasoning
    suffix = r.setup.fmt.prompt_suffix(r.thinking) if r is not None and r.setup is not None else ""
    switch = r.setup.fmt.template_kwargs(r.thinking) if r is not None and r.setup is not None else ()
    kw = req.template_kwargs + switch  # a template that opens/closes the block itself reads its switch
    if req.tools is None:
        ids = template.render(req.messages, suffix=suffix, kwargs=kw)
    elif template.renders_tools:
        ids = template.render(req.messages, req.tools.tools, suffix=suffix, kwargs=kw)
    else:
        ids = template.render(inline_tools(req.messages, req.tools, req.tools.format), suffix=suffix, kwargs=kw)
    if not ids:
        raise InvalidRequestError("the rendered prompt is empty", param="messages")
    return PromptIds(tuple(ids))


def inline_tools(messages: tuple[Message, ...], tools: ToolRequest, fmt: ToolFormat) -> list[Message]:
    """The conversation with tools in the system prompt, calls as text, results as user turns."""
    hint = NamedChoice(tools.allowed[0]) if tools.mode == "named" else tools.mode
    functions = [{"name": t.name, "description": t.description or "", "parameters": t.parameters} for t in tools.tools]
    section = render_tools_prompt(functions, fmt, hint)
    out = list(messages)
    if out[0].role == "system":
        out[0] = Message("system", f"{out[0].content}\n\n{section}" if out[0].content else section)
    else:
        out.insert(0, Message("system", section))
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    return [_inline(m, fmt, names) for m in out]


def _inline(message: Message, fmt: ToolFormat, names: dict[str, str]) -> Message:
    if message.tool_calls:
        calls = render_calls(fmt, [(c.name, c.arguments) for c in message.tool_calls])
        text = f"{message.content}\n{calls}" if message.content else calls
        return Message("assistant", text, reasoning=message.reasoning)
    if message.role == "tool":
        name = names.get(message.tool_call_id or "", "the function")
        return Message("user", f"Result of {name} (call {message.tool_call_id}):\n{message.content}")
    return message


def completion_prompts(
    prompt: str | list[str] | list[int] | list[list[int]], template: ChatTemplate, vocab_size: int | None
) -> list[PromptIds]:
    """``/v1/completions``' ``prompt``: a text, token ids, or a list of either (one batch)."""
    items: list[str | list[int]]
    if isinstance(prompt, str) or (prompt and all(isinstance(t, int) for t in prompt)):
        items = [prompt]  # type: ignore[list-item]
    else:
        items = list(prompt)  # type: ignore[arg-type]
    if not items:
        raise InvalidRequestError("'prompt' is empty; give a text or token ids", param="prompt")
    return [
        _completion_prompt(item, template, vocab_size, f"prompt.{i}" if len(items) > 1 else "prompt")
        for i, item in enumerate(items)
    ]


def _completion_prompt(item: str | list[int], template: ChatTemplate, vocab_size: int | None, param: str) -> PromptIds:
    ids = template.encode(item) if isinstance(item, str) else list(item)
    if not ids:
        raise InvalidRequestError(f"'{param}' is empty; give a text or token ids", param=param)
    bad = next((t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)), None)
    if bad is not None:
        raise InvalidRequestError(
            f"'{param}' holds the token id {bad}, outside this model's vocabulary [0, {vocab_size})",
            param=param,
        )
    return PromptIds(tuple(ids))
