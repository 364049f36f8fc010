"""The FastAPI app factory. The engine loads in the background so /health answers at
once and /ready turns 200 when requests can be served."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI

from runtime_ext.formats import select_format, select_reasoning_format
from runtime_ext.report import SchedulerReport
from service.api.deps import ServiceState
from service.api.errors import install_error_handlers
from service.api.gate import Gate, RequestContext
from service.api.routes import chat, completions, health, messages, metrics, models, responses, tokenize
from service.engine import SGLangEngine
from service.engine_args import prepare_process_env
from service.grammar_check import GrammarService
from service.limits import Admission, KeyRing, TokenBucket, load_keys
from service.logs import restore_logging
from service.output_text import output_text, special_tokens_of
from service.pipeline.chat import ChatPipeline
from service.settings import Settings
from service.startup import ModelInfo, prepare_engine
from service.tokenizer import HFChatTemplate
from service.types.serving import ModelFormats, ReasoningPolicy, ReasoningSetup, ServingLimits

log = logging.getLogger(__name__)


async def _load(state: ServiceState, model_dir: Path, on_failure: Any, on_death: Any) -> None:
    try:
        info = await asyncio.to_thread(ModelInfo.read, model_dir)
        prepare_process_env(state.settings.engine.device)  # before the tokenizer's loader imports sglang
        template = await asyncio.to_thread(HFChatTemplate, model_dir, info.model_type)
        formats, policy = _formats(state.settings, template)
        engine = await asyncio.to_thread(SGLangEngine.start, prepare_engine(state.settings, info))
        restore_logging()
        state.engine = engine
        engine.death.listeners.append(lambda reason: _engine_died(state, reason, on_death))
        g = state.settings.grammar
        state.grammar = GrammarService(
            model_dir,
            info.vocab,
            timeout_s=g.compile_timeout_s,
            cache_size=g.cache_size,
            backend=g.backend,
            exact=g.json_schema_semantics == "exact",
        )
        state.context_length = engine.context_length
        report = await engine.plugin_report()
        limits = ServingLimits(
            served_model_name=state.served_model_name,
            context_length=engine.context_length,
            max_n=state.settings.request.max_n,
            default_max_tokens=state.settings.request.default_max_tokens,
            reasoning=policy,
            vocab_size=info.vocab.vocab_size or len(template.tokenizer),
            kv_pool=_kv_pool(report),
            disaggregation=state.settings.engine.disaggregation.mode,
        )
        state.pipeline = ChatPipeline(
            engine,
            template,
            limits,
            state.grammar,
            g.allow_schema_loosening,
            formats,
            g.resample_attempts,
            resample_unenforceable=g.unenforceable == "resample",
        )
        log.info("engine ready; runtime_ext in scheduler: %s", report)
    except Exception as exc:  # reported through /ready and the process exit code
        log.exception("engine failed to start")
        state.failure = f"{type(exc).__name__}: {exc}"
        on_failure()


def _engine_died(state: ServiceState, reason: str, on_death: Any) -> None:
    """An engine process died while serving: /ready and new requests 503, the server exits 1."""
    state.engine_death = reason
    on_death()


def _kv_pool(report: SchedulerReport | None) -> tuple[int, int] | None:
    """The pool the scheduler really allocated: (tokens, page size); None without the report."""
    pool = report.section("kv_pool") if report is not None else {}
    if not pool:
        return None
    return int(pool["tokens"]), int(pool["page_size"])


def _formats(settings: Settings, template: HFChatTemplate) -> tuple[ModelFormats, ReasoningPolicy | None]:
    """The model's tool-call and reasoning formats; raises (a startup error) when the
    config names an unknown one or its markers are not tokens of this tokenizer."""
    chat_template = template.tokenizer.chat_template
    tools = select_format(settings.tool_format, template.model_type, template.renders_tools, chat_template)
    r = settings.reasoning
    fmt = select_reasoning_format(r.format, template.model_type, r.start, r.end, chat_template)
    setup = ReasoningSetup.build(fmt, template.encode) if fmt is not None else None
    policy = ReasoningPolicy(r.default_thinking, tuple(r.effort_budgets.items())) if setup else None
    log.info(
        "tool-call format: %s (template renders tools: %s); reasoning format: %s",
        tools.name,
        template.renders_tools,
        fmt.name if fmt else "none",
    )
    special = special_tokens_of(template.tokenizer.added_tokens_decoder.values())
    return ModelFormats(tools, setup, output_text(special, tools, fmt)), policy


def create_app(settings: Settings, model_dir: Path, served_model_name: str) -> FastAPI:
    """Build the app; ``app.state.on_engine_failure`` and ``on_engine_death`` (set by the CLI) stop
    the server."""
    state = ServiceState(settings=settings, served_model_name=served_model_name, created=int(time.time()))
    state.extra[responses.STORE] = store = responses.open_store(settings.responses)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        on_failure = getattr(app.state, "on_engine_failure", lambda: None)
        on_death = getattr(app.state, "on_engine_death", on_failure)
        loader = asyncio.create_task(_load(state, model_dir, on_failure, on_death))
        try:
            yield
        finally:
            state.draining = True
            loader.cancel()
            await asyncio.gather(loader, return_exceptions=True)
            if state.grammar is not None:
                state.grammar.close()
            if state.engine is not None:
                state.engine.shutdown()
            await store.close()

    app = FastAPI(title="structserve", version="0.1.0", lifespan=lifespan)
    app.state.service = state
    install_error_handlers(app)
    for module in (chat, completions, responses, messages, tokenize, models, health, metrics):
        app.include_router(module.router)

    _add_gate(app, settings, state)
    return app


def _add_gate(app: FastAPI, settings: Settings, state: ServiceState) -> None:
    """Middleware: the request context outermost, then the gate (auth, size, rate, admission)."""
    lim = settings.limits
    keys = KeyRing(load_keys(settings.api_keys, settings.api_keys_file))
    state.admission = Admission(lim.max_running, lim.max_queued, lim.retry_after_s)
    bucket = TokenBucket(lim.rate_limit_per_minute, lim.rate_limit_burst) if lim.rate_limit_per_minute else None
    app.add_middleware(
        Gate,
        keys=keys,
        max_body=lim.max_body_bytes,
        admission=state.admission,
        bucket=bucket,
        not_ready=state.not_ready_reason,
    )
    app.add_middleware(RequestContext, counters=state.counters)
    log.info(
        "API keys: %s; limits: %s",
        f"{len(keys.keys)} configured" if keys.enabled else "off (open API)",
        lim.model_dump(),
    )
