"""A Messages request -> the ``ChatCompletionRequest`` the chat pipeline runs, plus the
``MessagesParamMap`` that turns the pipeline's error paths back into Messages paths.

``system`` becomes a leading system message. A user turn's ``tool_result`` blocks become
``tool`` messages (each must answer an earlier ``tool_use`` id; ``is_error`` prefixes the
result with ``Error: ``), its text blocks one user message after them. An assistant turn is
one chat message: ``thinking`` blocks -> ``reasoning_content``, text -> ``content``,
``tool_use`` -> ``tool_calls``. ``thinking`` absent or ``disabled`` turns thinking off, as
Anthropic's default is; ``enabled`` turns it on with ``budget_tokens`` as the exact budget.
"""

from __future__ import annotations

import json
from typing import Any

from service.errors import InvalidRequestError
from service.fronts.base import Origin, chat_request
from service.fronts.messages.param_map import MessagesParamMap
from service.protocol.anthropic import (
    CountTokensRequest,
    InputMessage,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ThinkingEnabled,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from service.protocol.openai import ChatCompletionRequest

ERROR_PREFIX = "Error: "  # a tool_result with is_error: true


def to_chat_request(req: MessagesRequest | CountTokensRequest) -> tuple[ChatCompletionRequest, MessagesParamMap]:
    """The chat request for ``req``; raises InvalidRequestError (``param``: a Messages path)."""
    talk = _Conversation()
    if req.system is not None:
        talk.append({"role": "system", "content": _text(req.system)}, Origin("system", "system"))
    if not req.messages:
        raise InvalidRequestError("'messages' must hold at least one message", param="messages")
    if req.messages[0].role != "user":
        raise InvalidRequestError("the first message must use the 'user' role", param="messages.0.role")
    for i, message in enumerate(req.messages):
        talk.add(message, f"messages.{i}")
    params = MessagesParamMap(tuple(talk.origins))
    payload: dict[str, Any] = {"model": req.model, "messages": talk.messages}
    payload |= _tools(req) | _thinking(req)
    if isinstance(req, MessagesRequest):
        if req.messages[-1].role == "assistant":
            raise InvalidRequestError(
                "a final assistant message (prefill) is not supported; end with a user message",
                param=f"messages.{len(req.messages) - 1}.role",
            )
        payload |= _sampling(req)
    return chat_request(payload, params), params


def _sampling(req: MessagesRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"max_completion_tokens": req.max_tokens}
    fields = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "stop": req.stop_sequences}
    out |= {k: v for k, v in fields.items() if v is not None}
    if req.metadata is not None and req.metadata.user_id is not None:
        out["user"] = req.metadata.user_id
    if req.stream:
        out |= {"stream": True, "stream_options": {"include_usage": True}}
    return out


def _thinking(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    t = req.thinking
    if not isinstance(t, ThinkingEnabled):
        return {"enable_thinking": False}
    if isinstance(req, MessagesRequest) and t.budget_tokens >= req.max_tokens:
        raise InvalidRequestError(
            f"'thinking.budget_tokens' ({t.budget_tokens}) must be less than 'max_tokens' ({req.max_tokens}): "
            "max_tokens counts the thinking and the answer",
            param="thinking.budget_tokens",
        )
    return {"enable_thinking": True, "max_reasoning_tokens": t.budget_tokens}


def _tools(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tool in req.tools or ():
        spec = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description is not None:
            spec["description"] = tool.description
        out.setdefault("tools", []).append({"type": "function", "function": spec})
    choice = req.tool_choice
    if choice is None or (not out and isinstance(choice, ToolChoiceNone)):
        return out
    if isinstance(choice, ToolChoiceTool):
        out["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    else:
        out["tool_choice"] = "required" if isinstance(choice, ToolChoiceAny) else choice.type
    if out.get("tools") and not isinstance(choice, ToolChoiceNone) and choice.disable_parallel_tool_use:
        out["parallel_tool_calls"] = False
    return out


def _text(content: str | list[TextBlock] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(block.text for block in content)


class _Conversation:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins: list[Origin] = []
        self._calls: set[str] = set()

    def append(self, message: dict[str, Any], origin: Origin) -> None:
        self.messages.append(message)
        self.origins.append(origin)

    def add(self, message: InputMessage, path: str) -> None:
        if isinstance(message.content, str):
            self.append({"role": message.role, "content": message.content}, Origin(path, f"{path}.content"))
        elif message.role == "user":
            self._user(message.content, path)
        else:
            self._assistant(message.content, path)

    def _user(self, blocks: list[Any], path: str) -> None:
        texts: list[dict[str, Any]] = []
        first_text: str | None = None
        for j, block in enumerate(blocks):
            where = f"{path}.content.{j}"
            if isinstance(block, ToolResultBlock):
                self._result(block, where)
            elif isinstance(block, TextBlock):
                texts.append({"type": "text", "text": block.text})
                first_text = first_text or where
            else:
                raise InvalidRequestError(
                    f"a '{block.type}' block is only valid in an assistant message", param=f"{where}.type"
                )
        if texts or not blocks:
            self.append({"role": "user", "content": texts}, Origin(path, first_text or f"{path}.content"))

    def _result(self, block: ToolResultBlock, where: str) -> None:
        if block.tool_use_id not in self._calls:
            raise InvalidRequestError(
                f"tool_result block's tool_use_id {block.tool_use_id!r} does not match the id of a tool_use "
                "block in an earlier assistant message",
                param=f"{where}.tool_use_id",
            )
        text = (ERROR_PREFIX if block.is_error else "") + _text(block.content)
        message = {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}
        self.append(message, Origin(where, f"{where}.content", call_id=f"{where}.tool_use_id"))

    def _assistant(self, blocks: list[Any], path: str) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": None}
        texts, thoughts, calls = [], [], []
        content_path = reasoning_path = None
        for j, block in enumerate(blocks):
            where = f"{path}.content.{j}"
            if isinstance(block, TextBlock):
                texts.append(block.text)
                content_path = content_path or where
            elif isinstance(block, ThinkingBlock):
                thoughts.append(block.thinking)
                reasoning_path = reasoning_path or where
            elif isinstance(block, ToolUseBlock):
                arguments = json.dumps(block.input, ensure_ascii=False)
                message.setdefault("tool_calls", []).append(
                    {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}
                )
                self._calls.add(block.id)
                calls.append(where)
            else:
                raise InvalidRequestError(
                    "a 'tool_result' block is only valid in a user message", param=f"{where}.type"
                )
        if texts:
            message["content"] = "".join(texts)
        if thoughts:
            message["reasoning_content"] = "".join(thoughts)
        self.append(message, Origin(path, content_path, reasoning_path, tuple(calls)))
