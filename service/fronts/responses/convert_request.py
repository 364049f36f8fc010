"""A Responses request -> the ``ChatCompletionRequest`` the chat pipeline runs, plus the
``ResponsesParamMap`` that turns the pipeline's error paths back into Responses paths.

``instructions`` become a leading system message; the items of ``history`` (the stored
items of a ``previous_response_id`` chain) come next, then ``input``. An assistant turn is
one chat message: a reasoning item, the assistant message after it and the function calls
after those are merged (``reasoning_content``, ``content``, ``tool_calls``); a call output
becomes a ``tool`` message and must answer an earlier call's ``call_id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.errors import InvalidRequestError, UnsupportedParameterError
from service.fronts.base import Origin, chat_request
from service.fronts.responses.custom_tools import (
    custom_call,
    custom_ref,
    custom_tool,
)
from service.fronts.responses.param_map import HISTORY, ResponsesParamMap
from service.protocol.openai import ChatCompletionRequest
from service.protocol.responses import (
    AllowedToolsChoice,
    AssistantMessageItem,
    CustomTool,
    CustomToolCallItem,
    CustomToolCallOutputItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputItem,
    InputText,
    JsonObjectFormat,
    JsonSchemaFormat,
    MessageItem,
    NamedTool,
    OutputText,
    ReasoningItem,
    ResponsesRequest,
    TextFormat,
)

LOGPROBS = "message.output_text.logprobs"


def to_chat_request(
    req: ResponsesRequest, history: Sequence[InputItem] = ()
) -> tuple[ChatCompletionRequest, ResponsesParamMap]:
    """The chat request for ``req``; raises InvalidRequestError (``param``: a Responses path)."""
    talk = _Conversation()
    if req.instructions is not None:
        talk.append({"role": "system", "content": req.instructions}, Origin("instructions", "instructions"))
    for item in history:
        talk.add(item, HISTORY)
    if isinstance(req.input, str):
        talk.append({"role": "user", "content": req.input}, Origin("input", "input"))
    else:
        for i, item in enumerate(req.input):
            talk.add(item, f"input.{i}")
    talk.close()
    params = ResponsesParamMap(tuple(talk.origins))
    payload: dict[str, Any] = {"model": req.model, "messages": talk.messages}
    payload |= _sampling(req) | _output(req) | _reasoning(req) | _tools(req, talk.custom_paths)
    if req.stream:
        payload |= {"stream": True, "stream_options": {"include_usage": True}}
    return chat_request(payload, params), params


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _sampling(req: ResponsesRequest) -> dict[str, Any]:
    return _present(
        temperature=req.temperature,
        top_p=req.top_p,
        seed=req.seed,
        user=req.user,
        top_k=req.top_k,
        min_p=req.min_p,
        repetition_penalty=req.repetition_penalty,
        max_completion_tokens=req.max_output_tokens,
        bootstrap_host=req.bootstrap_host,
        bootstrap_port=req.bootstrap_port,
        bootstrap_room=req.bootstrap_room,
    )


def _output(req: ResponsesRequest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req.include and LOGPROBS in req.include:  # OpenAI: top_logprobs alone returns no logprobs
        out |= _present(logprobs=True, top_logprobs=req.top_logprobs)
    fmt = req.text.format if req.text is not None else TextFormat()
    if isinstance(fmt, JsonObjectFormat):
        out["response_format"] = {"type": "json_object"}
    elif isinstance(fmt, JsonSchemaFormat):
        spec = _present(name=fmt.name, schema=fmt.schema_, description=fmt.description, strict=fmt.strict)
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    return out


def _reasoning(req: ResponsesRequest) -> dict[str, Any]:
    r = req.reasoning
    if r is None:
        return {}
    if r.summary in ("concise", "detailed"):
        raise UnsupportedParameterError(
            f"'reasoning.summary' {r.summary!r} is not supported: this server returns the reasoning text "
            "itself (the reasoning item's content), no summary; send 'auto' or leave it out",
            param="reasoning.summary",
        )
    return _present(reasoning_effort=r.effort, max_reasoning_tokens=r.max_tokens)


def _tools(req: ResponsesRequest, custom_paths: list[str]) -> dict[str, Any]:
    """Flat Responses tools -> chat's nested ones. Without tools, ``tool_choice`` "auto" or
    "none" and ``parallel_tool_calls`` mean nothing and are left out (OpenAI accepts them);
    any other tool_choice still reaches the chat checks (a 400 naming it)."""
    out: dict[str, Any] = {}
    for i, tool in enumerate(req.tools or ()):
        if isinstance(tool, CustomTool):
            custom_paths.append(f"tools.{i}")
        out.setdefault("tools", []).append(custom_tool(tool) if isinstance(tool, CustomTool) else _function(tool))
    choice = req.tool_choice
    if choice is not None and (out or choice not in ("auto", "none")):
        out["tool_choice"] = _choice(choice, custom_paths)
    if out and req.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = req.parallel_tool_calls
    return out


def _function(tool: FunctionTool) -> dict[str, Any]:
    spec = _present(name=tool.name, description=tool.description, parameters=tool.parameters, strict=tool.strict)
    return {"type": "function", "function": spec}


def _choice(choice: str | NamedTool | AllowedToolsChoice, custom_paths: list[str]) -> Any:
    if isinstance(choice, str):
        return choice
    refs = [choice] if isinstance(choice, NamedTool) else choice.tools
    if any(ref.type == "custom" for ref in refs):
        custom_paths.append("tool_choice")
    chat = [custom_ref(ref.name) if ref.type == "custom" else _function_ref(ref.name) for ref in refs]
    if isinstance(choice, NamedTool):
        return chat[0]
    return {"type": "allowed_tools", "allowed_tools": {"mode": choice.mode, "tools": chat}}


def _function_ref(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _text(content: str | Sequence[InputText | OutputText]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": part.text} for part in content]  # annotations, logprobs: not prompt text


def _reasoning_text(item: ReasoningItem) -> str:
    """The reasoning_text parts; an item with none (e.g. from OpenAI) falls back to its summary."""
    if item.content:
        return "".join(part.text for part in item.content)
    return "\n\n".join(part.text for part in item.summary)


@dataclass
class _Turn:
    """An assistant turn being collected from consecutive items."""

    path: str
    message: dict[str, Any] = field(default_factory=lambda: {"role": "assistant", "content": None})
    content_path: str | None = None
    reasoning_path: str | None = None
    call_paths: list[str] = field(default_factory=list)


def _sub(path: str, name: str) -> str:
    return path if path == HISTORY else f"{path}.{name}"


class _Conversation:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.origins: list[Origin] = []
        self.custom_paths: list[str] = []
        self._turn: _Turn | None = None
        self._calls: dict[str, set[str]] = {"function": set(), "custom": set()}

    def append(self, message: dict[str, Any], origin: Origin) -> None:
        self.close()
        self.messages.append(message)
        self.origins.append(origin)

    def close(self) -> None:
        turn, self._turn = self._turn, None
        if turn is not None:
            origin = Origin(turn.path, turn.content_path, turn.reasoning_path, tuple(turn.call_paths))
            self.messages.append(turn.message)
            self.origins.append(origin)

    def add(self, item: InputItem, path: str) -> None:
        if isinstance(item, MessageItem):
            self.append({"role": item.role, "content": _text(item.content)}, Origin(path, _sub(path, "content")))
        elif isinstance(item, ReasoningItem):
            self.close()
            self._turn = _Turn(path, reasoning_path=_sub(path, "content"))
            self._turn.message["reasoning_content"] = _reasoning_text(item)
        elif isinstance(item, AssistantMessageItem):
            turn = self._turn
            if turn is None or turn.content_path is not None or turn.call_paths:
                self.close()
                turn = self._turn = _Turn(path)
            turn.message["content"], turn.content_path = _text(item.content), _sub(path, "content")
        elif isinstance(item, FunctionCallItem | CustomToolCallItem):
            self._call(item, path)
        elif isinstance(item, FunctionCallOutputItem | CustomToolCallOutputItem):
            self._result(item, path)
        else:
            raise InvalidRequestError(f"unknown input item {type(item).__name__}", param=path)

    def _call(self, item: FunctionCallItem | CustomToolCallItem, path: str) -> None:
        if self._turn is None:
            self._turn = _Turn(path)
        if isinstance(item, CustomToolCallItem):
            self.custom_paths.append(path)
            call = custom_call(item)
        else:
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
        self._calls["custom" if isinstance(item, CustomToolCallItem) else "function"].add(item.call_id)
        self._turn.message.setdefault("tool_calls", []).append(call)
        self._turn.call_paths.append(path)

    def _result(self, item: FunctionCallOutputItem | CustomToolCallOutputItem, path: str) -> None:
        kind = "custom_tool_call" if isinstance(item, CustomToolCallOutputItem) else "function_call"
        if isinstance(item, CustomToolCallOutputItem):
            self.custom_paths.append(path)
        if item.call_id not in self._calls["custom" if kind == "custom_tool_call" else "function"]:
            raise InvalidRequestError(
                f"{path}: {item.type} call_id {item.call_id!r} does not match the call_id of an earlier "
                f"{kind} item (in 'input' or the previous response)",
                param=_sub(path, "call_id"),
            )
        message = {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
        self.append(message, Origin(path, _sub(path, "output"), call_id=_sub(path, "call_id")))
