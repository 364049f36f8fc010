"""A ``/v1/completions`` request -> what the chat pipeline runs: the validated request and one
``PreparedChat`` per prompt of the batch.

``validate_completion`` (no chat template, no tools or reasoning), then ``ChatPipeline.plans``
with the prompts as given (``completion_prompts``: text or token ids): the same constraints,
plan and grammar check as chat. Errors name the completions field itself (no field map: the
validation reads this request's own fields).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from service.pipeline.chat import ChatPipeline, PreparedChat
from service.pipeline.prompt import completion_prompts
from service.pipeline.validate import validate_completion
from service.protocol.completions import CompletionRequest
from service.types.plan import PromptIds


@dataclass(frozen=True)
class PreparedCompletion:
    rid: str
    created: int
    prompts: tuple[PreparedChat, ...]  # one per prompt of the batch
    echoes: tuple[str, ...]  # the prompt texts to echo ("" without echo)


async def convert_request(raw: CompletionRequest, pipeline: ChatPipeline) -> PreparedCompletion:
    request = validate_completion(raw, pipeline.limits)
    prompts: list[PromptIds] = []

    def given() -> list[PromptIds]:
        prompts.extend(completion_prompts(raw.prompt, pipeline.template, pipeline.limits.vocab_size))
        return prompts

    plans = await pipeline.plans(request, given)
    rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    texts = [raw.prompt] if isinstance(raw.prompt, str) else [None] * len(prompts)
    echoes = tuple(
        (t if isinstance(t, str) else pipeline.template.decode(p.token_ids)) if raw.echo else ""
        for t, p in zip(texts, prompts)
    )
    chats = tuple(PreparedChat(f"{rid}-{i}", created, request, plan) for i, plan in enumerate(plans))
    return PreparedCompletion(rid, created, chats, echoes)
