"""The in-process SGLang engine: lifecycle, generate, stream, abort, KV usage.

This module, ``service.engine_args`` (the engine's arguments) and ``service.engine_signals``
(SIGTERM, and an engine process's death) are the service modules that import sglang. CPU
defaults are set here, not by the user: ``SGLANG_USE_CPU_ENGINE=1`` (without it SGLang's CPU
path dies on a vllm import), the ``torch_native`` attention backend and a bounded KV pool.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any, AsyncIterator

from fastapi import HTTPException

from runtime_ext.grammar_route import ENGINE_FAULT
from runtime_ext.kv_cache import fault as kv_fault
from runtime_ext.report import INTERNAL_STATE_KEY, SchedulerReport
from service.engine_args import EngineOptions, prepare_process_env
from service.engine_signals import DEATH, EngineDeath, signal_handler_class, unavailable
from service.errors import EngineError, InvalidRequestError, NumericalFaultError, PDLinkDownError, ServiceError
from service.token_text import TokenTexts
from service.types.plan import GenerationPlan
from service.types.results import EngineDelta, EngineOutput, TokenLogprob

# SGLang's failure texts for a broken prefill/decode link: decode lost the prefill (its heartbeat,
# or runtime_ext.pd.link_down), or the prefill could not send the KV to decode (a refused or reset
# transfer connection)
PD_LINK_LOST = ("Lost connection with prefill instance", "Prefill transfer failed")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVUsage:
    used_tokens: int
    capacity_tokens: int


class SGLangEngine:
    """Owns one ``sglang.Engine``. Construct with ``start`` (blocking: loads the model)."""

    def __init__(self, engine: Any, options: EngineOptions):
        self._engine = engine
        self.options = options
        self._token_texts: TokenTexts | None = None
        self.death = EngineDeath(engine.tokenizer_manager)  # an engine process died: every request fails

    @classmethod
    def start(cls, options: EngineOptions) -> "SGLangEngine":
        prepare_process_env(options.engine.device, options.engine)
        import sglang

        log.info("starting SGLang engine: %s", options)
        engine = sglang.Engine(**options.engine_kwargs())
        wrapper = cls(engine, options)
        engine.tokenizer_manager.signal_handler_class = signal_handler_class(wrapper.death)
        return wrapper

    @property
    def context_length(self) -> int:
        return int(self._engine.tokenizer_manager.model_config.context_len)

    @property
    def _tm(self) -> Any:
        return self._engine.tokenizer_manager

    @property
    def _texts(self) -> TokenTexts:
        if self._token_texts is None:
            self._token_texts = TokenTexts(self._tm.tokenizer)
        return self._token_texts

    def _logprobs(self, meta: dict[str, Any]) -> tuple[TokenLogprob, ...]:
        """The output tokens' logprobs in ``meta`` (streamed: this increment's, as SGLang slices
        them for incremental streaming output)."""
        sampled, top = meta.get("output_token_logprobs"), meta.get("output_top_logprobs")
        matched = (meta.get("finish_reason") or {}).get("matched")
        if sampled and isinstance(matched, int) and sampled[-1][1] == matched:
            # the stop token (EOS) ended the text but is not part of it: its logprob is not listed,
            # so the listed tokens join to the text
            sampled, top = sampled[:-1], top[:-1] if top else top
        return self._texts.logprobs(sampled, top) if sampled else ()

    def _prompt_logprobs(self, meta: dict[str, Any]) -> tuple[TokenLogprob, ...]:
        entries = meta.get("input_token_logprobs")
        return self._texts.logprobs(entries, meta.get("input_top_logprobs")) if entries else ()

    async def generate(self, plan: GenerationPlan, rid: str) -> EngineOutput:
        self.death.check()
        try:
            out = await self._engine.async_generate(
                input_ids=list(plan.input_ids),
                sampling_params=_sampling_params(plan),
                rid=rid,
                **_logprob_args(plan),
                **_bootstrap_args(plan),
            )
        except asyncio.CancelledError:
            await self.abort(rid)
            raise
        except ValueError as exc:  # SGLang: an abort with status 400
            raise _abort_error(str(exc), 400, plan) from exc
        except HTTPException as exc:  # SGLang: an abort with another status
            raise _abort_error(str(exc.detail), exc.status_code, plan) from exc
        meta = out["meta_info"]
        return EngineOutput(
            text=out["text"],
            finish_reason=_finish_reason(meta, plan),
            prompt_tokens=int(meta["prompt_tokens"]),
            completion_tokens=int(meta["completion_tokens"]),
            cached_tokens=int(meta.get("cached_tokens", 0)),
            logprobs=self._logprobs(meta),
            prompt_logprobs=self._prompt_logprobs(meta),
            matched_stop=(meta.get("finish_reason") or {}).get("matched"),
        )

    async def cache_prompt(self, plan: GenerationPlan, rid: str) -> int | None:
        """Prefill ``plan``'s prompt alone (max_new_tokens 0, as SGLang's own ``n`` path does) so
        the choices that follow reuse it from the prefix cache: computed once, held once.
        Returns the tokens that were cached before, or None when there is no prefix cache."""
        if self.options.prefix_cache == "off":
            return None
        self.death.check()
        try:
            out = await self._engine.async_generate(
                input_ids=list(plan.input_ids), sampling_params={"max_new_tokens": 0}, rid=rid
            )
        except asyncio.CancelledError:
            await self.abort(rid)
            raise
        except ValueError as exc:  # SGLang: an abort with status 400
            raise _abort_error(str(exc), 400, plan) from exc
        return int(out["meta_info"].get("cached_tokens", 0))

    async def stream(self, plan: GenerationPlan, rid: str) -> AsyncIterator[EngineDelta]:
        """Yield text increments; abort the engine request if the consumer goes away."""
        finished = False
        self.death.check()
        try:
            gen = await self._engine.async_generate(
                input_ids=list(plan.input_ids),
                sampling_params=_sampling_params(plan),
                rid=rid,
                stream=True,
                **_logprob_args(plan),
                **_bootstrap_args(plan),
            )
            async for out in gen:
                meta = out["meta_info"]
                reason = _finish_reason(meta, plan) if meta.get("finish_reason") else None
                finished = reason is not None
                yield EngineDelta(
                    text=out["text"],
                    completion_tokens=int(meta["completion_tokens"]),
                    prompt_tokens=int(meta["prompt_tokens"]),
                    cached_tokens=int(meta.get("cached_tokens", 0)),
                    finish_reason=reason,
                    token_ids=tuple(out.get("output_ids") or ()),
                    matched_stop=(meta.get("finish_reason") or {}).get("matched"),
                    logprobs=self._logprobs(meta),
                )
        except ValueError as exc:
            raise _abort_error(str(exc), 400, plan) from exc
        finally:
            if not finished:
                await self.abort(rid)

    async def abort(self, rid: str) -> None:
        if self.death.reason is None:  # nothing is left to abort in a dead engine
            self._tm.abort_request(rid=rid)

    async def kv_usage(self) -> KVUsage:
        """Tokens held by running requests (the radix cache's evictable pages excluded), summed
        over the data-parallel schedulers."""
        loads = await self._tm.get_loads(include=["core", "memory"])
        used = sum(int(load.num_used_tokens) for load in loads)
        capacity = sum(
            load.memory.token_capacity if load.memory else self.options.engine.max_total_tokens for load in loads
        )
        return KVUsage(used_tokens=used, capacity_tokens=int(capacity))

    async def plugin_reports(self) -> list[SchedulerReport]:
        """The runtime_ext plugin's report from inside each scheduler process (one per
        data-parallel rank, in rank order); empty if the plugin is not loaded."""
        states = await self._tm.get_internal_state()
        reports = [SchedulerReport.from_wire(s[INTERNAL_STATE_KEY]) for s in states if INTERNAL_STATE_KEY in s]
        return sorted(reports, key=lambda r: r.dp_rank)

    async def plugin_report(self) -> SchedulerReport | None:
        """One scheduler's report (rank 0: each rank has the same pool and the same plugin)."""
        reports = await self.plugin_reports()
        return reports[0] if reports else None

    def child_pids(self) -> list[int]:
        return list(self._engine.get_all_child_pids())

    def shutdown(self) -> None:
        self._engine.shutdown()


def _sampling_params(plan: GenerationPlan) -> dict[str, Any]:
    s = plan.sampling
    params: dict[str, Any] = {
        "max_new_tokens": plan.max_new_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "top_k": s.top_k,
        "min_p": s.min_p,
        "repetition_penalty": s.repetition_penalty,
    }
    if s.stop:
        params["stop"] = list(s.stop)
    if s.stop_token_ids:
        params["stop_token_ids"] = list(s.stop_token_ids)
    if s.seed is not None:
        params["sampling_seed"] = s.seed
    if not s.skip_special_tokens:  # the formats' markers are special tokens: the parsers need them
        params["skip_special_tokens"] = False
    if plan.constraint is not None:
        params[plan.constraint.kind] = plan.constraint.value
    return params


def _logprob_args(plan: GenerationPlan) -> dict[str, Any]:
    if plan.logprobs is None:
        return {}
    args: dict[str, Any] = {"return_logprob": True, "top_logprobs_num": plan.logprobs}
    if plan.prompt_logprobs:
        args["logprob_start_len"] = 0
    return args


def _bootstrap_args(plan: GenerationPlan) -> dict[str, Any]:
    """PD mode: the transfer this engine request is one side of (SGLang's bootstrap_* arguments)."""
    b = plan.bootstrap
    return {} if b is None else {"bootstrap_host": b.host, "bootstrap_port": b.port, "bootstrap_room": b.room}


def _finish_reason(meta: dict[str, Any], plan: GenerationPlan) -> str:
    reason = meta.get("finish_reason") or {}
    kind = reason.get("type")
    if kind in ("stop", "length"):
        return kind
    if kind == "abort":
        raise _abort_error(str(reason.get("message", "aborted")), reason.get("status_code"), plan)
    raise EngineError(f"the engine returned an unknown finish reason: {reason!r}")


_GRAMMAR_FAILURE = re.compile(r"grammar", re.IGNORECASE)
"""SGLang 0.5.23's grammar aborts: "Failed to compile json grammar: …", "Grammar
preprocessing timed out…" (status 400), "Grammar accept_token failed: …" (500). Their
text quotes xgrammar, token ids and the whole schema."""


def _abort_error(message: str, status: int | None, plan: GenerationPlan) -> ServiceError:
    """An engine abort as a typed error. A grammar failure is logged and answered without
    SGLang's text: 400 naming the constraint's field when the engine could not compile
    or prepare the grammar (status 400), else a generic 500 (a grammar the service
    checked ahead still failed while decoding, or neither grammar library could serve it for a
    server-side reason: ``ENGINE_FAULT``, the server's fault)."""
    if message.startswith(kv_fault.PREFIX):
        return NumericalFaultError(message.removeprefix(kv_fault.PREFIX).strip())
    if message.startswith(DEATH):
        return unavailable(message.removeprefix(DEATH))
    if any(marker in message for marker in PD_LINK_LOST):
        return PDLinkDownError(f"the link between this request's prefill and decode replicas failed: {message}")
    if not _GRAMMAR_FAILURE.search(message):
        if status == 400:
            return InvalidRequestError(f"the engine rejected the request: {message}")
        return EngineError(f"the engine aborted the request: {message}")
    log.error("engine-side grammar failure (status %s): %s", status, message)
    param = plan.constraint.param if plan.constraint is not None else None
    if status == 400 and param is not None and ENGINE_FAULT not in message:
        return InvalidRequestError(
            f"the grammar engine could not compile the constraint built from '{param}' (a "
            "compile error or timeout); simplify that schema",
            param=param,
            code="grammar_compile_failed",
        )
    return EngineError(
        "the grammar engine failed while enforcing the output constraint; "
        "the request was not completed (a server-side error, logged)",
        code="grammar_engine_error",
    )
