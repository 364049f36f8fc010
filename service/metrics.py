"""Prometheus metrics of the service (one registry; rendered by GET /metrics)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

REGISTRY = CollectorRegistry()
REQUESTS = Counter("structserve_requests", "HTTP requests by route and status", ["route", "status"], registry=REGISTRY)
LATENCY = Histogram(
    "structserve_request_seconds",
    "End-to-end request time by route (streams: until the last byte)",
    ["route"],
    registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128),
)
TTFT = Histogram(
    "structserve_time_to_first_token_seconds",
    "Streaming chat completions: time from the request to its first generated token",
    registry=REGISTRY,
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32),
)
TOKENS = Counter(
    "structserve_tokens",
    "Tokens served: prompt, cached (prompt tokens reused from the prefix cache, "
    "any backend), completion (reasoning included), reasoning",
    ["kind"],
    registry=REGISTRY,
)
ACTIVE = Gauge("structserve_requests_running", "Chat requests admitted and being served", registry=REGISTRY)
QUEUED = Gauge("structserve_requests_queued", "Chat requests waiting for admission", registry=REGISTRY)
KV_USED = Gauge("structserve_kv_used_tokens", "KV pool tokens held by running requests", registry=REGISTRY)
KV_CAPACITY = Gauge("structserve_kv_capacity_tokens", "KV pool size in tokens", registry=REGISTRY)
READY = Gauge("structserve_ready", "1 when the engine serves requests", registry=REGISTRY)
PLUGIN = Gauge(
    "structserve_runtime_ext_loaded",
    "1 when the runtime_ext plugin reports itself from inside SGLang's scheduler process (one per dp rank)",
    ["scheduler_pid", "dp_rank", "version"],
    registry=REGISTRY,
)
KV_METHOD = Gauge(
    "structserve_kv_cache_method",
    "1 for the KV quant method SGLang's pool holds (read from the scheduler's pool)",
    ["method"],
    registry=REGISTRY,
)
KV_SERVING = Gauge(
    "structserve_kv_serving",
    "1 for what serves K/V, read from the scheduler's live objects: pool class, what its buffers store, "
    "attention backend class",
    ["pool_class", "store_dtype", "attention_backend"],
    registry=REGISTRY,
)
KV_ROTATION = Gauge(
    "structserve_kv_rotation",
    "1 for what the C8 KV method stores Hadamard-rotated (none, k, kv; reported from the scheduler)",
    ["rotation"],
    registry=REGISTRY,
)
KV_KERNELS = Gauge(
    "structserve_kv_kernels",
    "1 for what reads the C8 KV rows: native (compiled one-pass read), reference (torch), a device, none",
    ["impl"],
    registry=REGISTRY,
)
KV_KERNELS_REASON = Gauge(
    "structserve_kv_kernels_reason",
    "1 for why structserve_kv_kernels is what it is on the CPU: the build loaded (compiled for this CPU, "
    "compiled portable) or why none is (configured, the compiler failed, the kernel cache is not trusted)",
    ["reason"],
    registry=REGISTRY,
)
KV_KERNEL_CALLS = Gauge(
    "structserve_kv_kernel_calls",
    "C8 KV store/read calls on the CPU by what ran them: native (the compiled library) or reference (torch: "
    "no library, or a call the library does not take, e.g. a float16 model or a tensor it cannot address)",
    ["impl"],
    registry=REGISTRY,
)
DECODE_KERNELS = Gauge(
    "structserve_decode_kernels",
    "1 for what runs decode's bf16 linear layers (1-64 rows), attention, RMSNorm/RoPE and seeded sampling on "
    "the CPU, per kernel: native (compiled) or reference (torch), with why (the build loaded, configured, "
    "no AVX512-BF16, ...)",
    ["kernel", "impl", "reason"],
    registry=REGISTRY,
)
DECODE_KERNEL_CALLS = Gauge(
    "structserve_decode_kernel_calls",
    "Decode's linear/attention/norm/sampling calls on the CPU by what ran them: native (compiled) or reference (torch: "
    "no library, or a call the kernel does not take, e.g. a float32 model or a C8 pool's attention)",
    ["kernel", "impl"],
    registry=REGISTRY,
)
ATTENTION = Gauge(
    "structserve_attention_decode_calls",
    "Decode attention calls (one per layer per step) by runtime_ext's path: batched (one call for the "
    "whole batch) or per_request (the reference loop); label impl: the backend torch_native builds",
    ["impl", "path"],
    registry=REGISTRY,
)
ENGINE_GRAMMARS = Gauge(
    "structserve_engine_grammar_compiles",
    "Grammars SGLang's grammar backend built in the scheduler (tokenizer-bound compiles, cache hits "
    "not counted), by library: xgrammar, or llguidance for the Lark grammars the service routes to it",
    ["library"],
    registry=REGISTRY,
)
KV_POOL_BYTES = Gauge(
    "structserve_kv_pool_bytes", "KV pool memory as allocated (values, scales, side buffers)", registry=REGISTRY
)
KV_RESIDUAL = Gauge(
    "structserve_kv_residual",
    "C8-S residual side buffer: outlier_rate (share of stored vectors above tau), slots_used, slots, dropped, "
    "slots_on_free_pages (held by freed pages: a leak, must be 0)",
    ["stat"],
    registry=REGISTRY,
)
KV_REFUSED = Gauge(
    "structserve_kv_refused",
    "C8 KV store refusals since start: tokens (K/V stored as zeros: NaN/inf, or a float16 scale overflow) and "
    "requests (failed alone with 422 non_finite_activations because they own such rows)",
    ["what"],
    registry=REGISTRY,
)
QUANT_LAYERS = Gauge(
    "structserve_quantized_linear_layers",
    "Linear modules of the served model by state (quantized, kept in high precision)",
    ["state"],
    registry=REGISTRY,
)
QUANT_MONITOR = Gauge(
    "structserve_quant_monitor",
    "Online outlier monitor (quant.monitor) since start: fallbacks (modules it switched), request_fallbacks "
    "(requests it moved to high precision), reloads and "
    "reload_errors of the sensitive-layers file, to_int8 (modules a reload moved back), standby (modules "
    "that can fall back), steps, windows_closed",
    ["stat"],
    registry=REGISTRY,
)
QUANT_MATMULS = Gauge(
    "structserve_quant_matmuls",
    "Quantized-module matmuls since start by path: int8 (W8A8 INT8 matmul), copy (stage-aware decode "
    "copy), standby (the monitor's high-precision copy), standby_rows (a flagged request's rows on that copy)",
    ["path"],
    registry=REGISTRY,
)
QUANT_LAYER_RATE = Gauge(
    "structserve_quant_layer_outlier_rate",
    "Share of this window's tokens whose input absmax exceeded mean + sigma·std, per quantized module",
    ["layer"],
    registry=REGISTRY,
)
QUANT_LAYER_FALLBACK = Gauge(
    "structserve_quant_layer_fallback",
    "1 while the module serves from its high-precision standby copy, 0 on its quantized path",
    ["layer"],
    registry=REGISTRY,
)
PREFIX_CACHE = Gauge(
    "structserve_prefix_cache",
    "runtime_ext's combined-block prefix cache since start: hit_tokens, miss_tokens, "
    "abandoned_pages (matched but in an incomplete unit), evicted_tokens, "
    "draft_dropped_pages (EAGLE: last page recomputed)",
    ["stat"],
    registry=REGISTRY,
)
KV_CENSUS = Gauge(
    "structserve_kv_pool_census",
    "KV pool token slots by holder (free, tree_evictable, tree_protected, held_by_requests) and "
    "consistency counts that must stay 0 (tree_pages_free: use-after-free, duplicate_free_pages)",
    ["part"],
    registry=REGISTRY,
)
SERVICE_QUEUE_SECONDS = Histogram(
    "structserve_request_queue_seconds",
    "Time a request waited in the service's queue (limits.max_running) before it was admitted",
    registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
ADMISSION_POLICY = Gauge(
    "structserve_admission_policy",
    "The engine's admission policy (scheduling.admission)",
    ["policy"],
    registry=REGISTRY,
)
SCHEDULER = Gauge(
    "structserve_scheduler",
    "The engine scheduler since start: retractions (events), retracted_requests, retracted_tokens "
    "(KV dropped by retraction), recomputed_tokens (prefilled again on re-admission), budget_holds "
    "(admissions the budget deferred), admitted, reused_tokens (prefix-cache tokens matched at "
    "admission); and now: waiting_requests",
    ["stat"],
    registry=REGISTRY,
)
KV_PAGES = Gauge(
    "structserve_kv_pages",
    "KV pages of the running requests: reserved (worst case: prompt + max_tokens), used (held now), "
    "outstanding (reserved - used); pool: the pool's size",
    ["state"],
    registry=REGISTRY,
)


PD_LINK = Gauge(
    "structserve_pd_link",
    "Prefill/decode disaggregation, decode side, since start: link_down_events (prefills proven down by "
    "refused connections), requests_failed_fast (ended by them), pages_reclaimed (freed without SGLang's "
    "deferred-release hold)",
    ["stat"],
    registry=REGISTRY,
)


class SchedulerQueueTime:
    """Collector: the scheduler's queue-time histogram (queue entry to first admission) as the
    plugin last reported it from the scheduler process."""

    def __init__(self) -> None:
        self.report: dict | None = None

    def collect(self) -> Any:
        if not self.report:
            return
        r = self.report
        family = HistogramMetricFamily(
            "structserve_scheduler_queue_seconds", "Time from the engine scheduler's queue to first admission"
        )
        buckets = [(str(b), c) for b, c in zip(r["queue_time_buckets"], r["queue_time_counts"])]
        family.add_metric([], buckets + [("+Inf", r["admitted"])], sum_value=r["queue_time_sum"])
        yield family


SCHEDULER_QUEUE = SchedulerQueueTime()
REGISTRY.register(SCHEDULER_QUEUE)


class GrammarFallbacks:
    """Collector: grammars routed to llguidance and served by xgrammar, by reason: ``build`` (the
    scheduler's llguidance backend could not be built), ``compile`` (the grammar did not compile
    in llguidance there), both as the plugin last reported them, and ``check`` (llguidance failed
    in the service's grammar check)."""

    REASONS = ("build", "compile", "check")

    def __init__(self) -> None:
        self.scheduler: dict[str, int] = {}
        self.service: dict[str, int] = dict.fromkeys(self.REASONS, 0)

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "structserve_grammar_fallbacks",
            "Grammars llguidance could not serve, served by xgrammar instead (reason: build, compile, check)",
            labels=["from", "to", "reason"],
        )
        for reason in self.REASONS:
            count = self.scheduler.get(reason, 0) + self.service.get(reason, 0)
            family.add_metric(["llguidance", "xgrammar", reason], count)
        yield family


GRAMMAR_FALLBACKS = GrammarFallbacks()
REGISTRY.register(GRAMMAR_FALLBACKS)
GRAMMAR_COMPILE_SECONDS = Histogram(
    "structserve_grammar_compile_seconds",
    "Grammar compile time (cache misses)",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
GRAMMAR_CACHE = Counter(
    "structserve_grammar_cache", "Grammar compile cache lookups", ["kind", "result"], registry=REGISTRY
)
SCHEMA_IGNORED_KEYWORDS = Counter(
    "structserve_schema_ignored_keywords",
    "Unknown schema keywords ignored as annotations, per occurrence (keyword: its name, or 'other' "
    "past the first 64 names or for a name that is not a plain identifier)",
    ["keyword"],
    registry=REGISTRY,
)
SCHEMA_RESAMPLES = Counter(
    "structserve_schema_resamples",
    "Choices generated again because their output failed the schema the grammar only loosely enforces "
    "(result: retry, or exhausted when the budget ran out)",
    ["result"],
    registry=REGISTRY,
)
SCHEMA_VALIDATION_FAILURES = Counter(
    "structserve_schema_validation_failures",
    "JSON outputs failing post-validation (reason: truncated by max_tokens, or invalid)",
    ["reason"],
    registry=REGISTRY,
)


def record_usage(usage: Any) -> None:
    """Token counters from a response's ``usage`` (service.protocol.openai.Usage)."""
    TOKENS.labels(kind="prompt").inc(usage.prompt_tokens)
    TOKENS.labels(kind="cached").inc((usage.prompt_tokens_details or {}).get("cached_tokens", 0))
    TOKENS.labels(kind="completion").inc(usage.completion_tokens)
    TOKENS.labels(kind="reasoning").inc((usage.completion_tokens_details or {}).get("reasoning_tokens", 0))
