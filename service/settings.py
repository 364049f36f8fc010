"""Configuration: configs/default.yaml, an optional override file, env, then CLI flags.

Every key can be set from the environment with the prefix ``STRUCTSERVE_`` and ``__``
between nested keys (``STRUCTSERVE_ENGINE__PAGE_SIZE=16``). Invalid values fail at
start-up with the key named, never later at request time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from runtime_ext.config import DEFAULT_KV_ROTATION, Admission, KVRotation
from runtime_ext.kv_cache.support import unsupported_kv_cache, unsupported_kv_cache_with_pd

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"
CONFIG_ENV = "STRUCTSERVE_CONFIG"
PrefixBackend = Literal["sglang", "combined", "off"]  # SGLang's radix cache | runtime_ext's combined one | none


class DisaggregationSettings(BaseModel):
    """``engine.disaggregation``: this replica as one side of prefill/decode disaggregation
    (SGLang's own PD machinery; docs/scale-out.md). ``mode: null`` serves whole requests."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["prefill", "decode"] | None = None
    # mooncake_tcp: Mooncake's transfer engine over TCP (no RDMA; scripts/setup_pd.sh installs it)
    transfer_backend: Literal["mooncake_tcp", "mooncake"] = "mooncake_tcp"
    bootstrap_port: int = Field(8998, ge=1, le=65535)  # prefill: where decode asks for its KV
    host_ip: str | None = None  # the address KV travels to/from (SGLANG_HOST_IP); None: SGLang's pick


class EngineSettings(BaseModel):
    """The ``engine:`` section; ``service.engine.EngineOptions`` holds it as startup resolved it."""

    model_config = ConfigDict(extra="forbid")

    device: Literal["cpu", "npu"] = "cpu"
    max_total_tokens: int = Field(32768, ge=256)
    kv_cache_bytes: int | None = Field(None, ge=1 << 20)
    page_size: int = Field(16, ge=1, le=1024)
    context_length: int | None = Field(None, ge=16)
    chunked_prefill_size: int | None = Field(None, ge=16)  # prefill in chunks of this many tokens (None: SGLang's)
    max_running_requests: int = Field(64, ge=1)
    attention_backend: str = "torch_native"
    random_seed: int = 0
    log_level: str = "warning"
    sleep_on_idle: bool = True
    disable_overlap_schedule: bool = False
    # How the engine starts its scheduler and detokenizer processes: auto = fork on cpu (no import
    # of torch and sglang again: a start ~35 % shorter), spawn on npu (a device runtime is not
    # fork-safe); vLLM's VLLM_WORKER_MULTIPROC_METHOD makes the same choice.
    start_method: Literal["auto", "fork", "spawn"] = "auto"
    # Parallelism inside this replica (docs/scale-out.md): tensor-parallel ranks per model copy,
    # data-parallel schedulers (each with its own KV pool of max_total_tokens).
    tp_size: int = Field(1, ge=1)
    dp_size: int = Field(1, ge=1)
    devices: list[int] | None = None  # npu: the NPU ids this replica uses, tp_size * dp_size of them
    disaggregation: DisaggregationSettings = DisaggregationSettings()
    sglang_args: dict[str, Any] = Field(default_factory=dict)  # other ServerArgs fields, checked at startup

    @model_validator(mode="after")
    def _parallelism(self) -> "EngineSettings":
        ranks = self.tp_size * self.dp_size
        if self.tp_size > 1 and self.device == "cpu":
            raise ValueError(
                "engine.tp_size > 1 cannot run on device: cpu with sglang 0.5.23 (its tensor-parallel group "
                "opens a NCCL communicator on every platform but NPU/XPU); use engine.dp_size for more "
                "schedulers on CPU, tp_size on NPU (docs/scale-out.md)"
            )
        if self.devices is not None:
            if self.device != "npu":
                raise ValueError("engine.devices applies to device: npu only")
            if len(self.devices) != ranks or len(set(self.devices)) != ranks or min(self.devices) < 0:
                raise ValueError(
                    f"engine.devices must list {ranks} distinct NPU ids (tp_size * dp_size), got {self.devices}"
                )
        return self


class GrammarSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    compile_timeout_s: float = Field(10.0, gt=0)
    cache_size: int = Field(512, ge=1)
    allow_schema_loosening: bool = False
    # tool-call and response_format JSON grammars: llguidance when it takes them exactly
    # (compiled lazily, once, in SGLang's scheduler), else xgrammar; "xgrammar": always
    # xgrammar. Regex, EBNF and Lark patterns stay xgrammar (docs/benchmarks.md)
    backend: Literal["llguidance", "xgrammar"] = "llguidance"
    # a schema whose grammar is looser than the schema: a finished output failing validation is
    # generated again (seed advanced) up to this many more times (service/pipeline/resample.py)
    resample_attempts: int = Field(2, ge=0, le=8)
    # a response_format schema with keywords neither xgrammar nor llguidance enforces (uniqueItems,
    # not, if/then/else, a oneOf no one proves disjoint...): "resample" serves a non-streamed
    # request under the tightest grammar that omits them, validates each output and generates it
    # again (resample_attempts), else a 422, never an invalid output; "refuse": a 400
    unenforceable: Literal["resample", "refuse"] = "resample"
    # what a response_format schema means (grammars/KEYWORDS.md): "exact", JSON Schema's own
    # meaning (llguidance's JSON Schema compiler first: undeclared members allowed unless the schema
    # closes the object, a pattern matches anywhere); "strict": SGLang's xgrammar strict mode (no
    # undeclared member, a pattern matches the whole string: narrower than JSON Schema)
    json_schema_semantics: Literal["strict", "exact"] = "exact"
    # tokens an llguidance grammar forces are appended and computed in one extend step instead of
    # one decode step each (docs/structured-output.md); needs engine.disable_overlap_schedule
    fast_forward: bool = False


class ReasoningSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = "auto"
    start: str | None = None
    end: str | None = None
    default_thinking: bool = True
    effort_budgets: dict[str, int | None] = Field(
        default_factory=lambda: {"minimal": 64, "low": 256, "medium": 1024, "high": 4096, "xhigh": 8192, "max": None}
    )


class MonitorSettings(BaseModel):
    """``quant.monitor``: the online outlier monitor (``runtime_ext.quant.monitor``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    sigma: float = Field(4.0, gt=0)
    rate_threshold: float = Field(0.01, ge=0, lt=1)
    window_requests: int = Field(1000, ge=1)
    min_window_tokens: int = Field(256, ge=1)
    warmup_tokens: int = Field(256, ge=2)
    granularity: Literal["layer", "request"] = "layer"
    min_request_tokens: int = Field(32, ge=1)
    reload_interval_s: float = Field(30.0, gt=0)
    max_fallback_bytes: int = Field(0, ge=0)
    events_path: Path | None = None


class QuantSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group_size: int = 128
    stage_aware: bool = False
    ignore: list[str] = []
    sensitive_layers: Path | None = None
    monitor: MonitorSettings = MonitorSettings()


class PrefixCacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: PrefixBackend = "sglang"
    combine_blocks: int = Field(4, ge=1, le=64)
    events_path: Path | None = None  # combined backend: JSON-lines stored/removed/hit events

    @model_validator(mode="after")
    def _events_need_combined(self) -> "PrefixCacheSettings":
        if self.events_path is not None and self.backend != "combined":
            raise ValueError("prefix_cache.events_path needs prefix_cache.backend: combined")
        return self


class RequestSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_n: int = Field(8, ge=1, le=128)
    default_max_tokens: int | None = Field(None, ge=1)


class SchedulingSettings(BaseModel):
    """How the engine admits requests into its KV pool (``docs/admission.md``)."""

    model_config = ConfigDict(extra="forbid")

    admission: Admission = "sglang"
    # budget only: the share of max_tokens reserved (1 = the worst case: never retracts)
    reserve_ratio: float = Field(1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _ratio_needs_budget(self) -> "SchedulingSettings":
        if self.reserve_ratio != 1.0 and self.admission != "budget":
            raise ValueError("scheduling.reserve_ratio applies to scheduling.admission: budget only")
        return self


class LimitsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_body_bytes: int = Field(4 << 20, ge=1024)
    max_running: int = Field(64, ge=1)
    max_queued: int = Field(256, ge=0)
    retry_after_s: int = Field(1, ge=1)
    rate_limit_per_minute: float | None = Field(None, gt=0)
    rate_limit_burst: int = Field(20, ge=1)


class ResponsesSettings(BaseModel):
    """``responses:``: where ``store: true`` responses of ``POST /v1/responses`` are kept."""

    model_config = ConfigDict(extra="forbid")

    store: Literal["memory", "redis"] = "memory"  # this replica's memory | a Redis every replica shares
    redis_url: str | None = None  # redis only: redis://host:port/db (a password in it: prefer the env)
    ttl_s: int = Field(3600, ge=1)  # a stored response is gone this many seconds after it was stored
    max_entry_bytes: int = Field(4 << 20, ge=1024)  # larger entries are not stored (the response says store: false)
    max_total_bytes: int = Field(128 << 20, ge=1024)  # memory only: LRU eviction past it (redis: its maxmemory)
    redis_timeout_s: float = Field(2.0, gt=0)  # connect and per-command timeout; past it the call is a 503

    @model_validator(mode="after")
    def _redis_needs_url(self) -> "ResponsesSettings":
        if self.store == "redis" and not self.redis_url:
            raise ValueError("responses.store: redis needs responses.redis_url (redis://host:port/db)")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRUCTSERVE_", env_nested_delimiter="__", extra="forbid")

    model: Path | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    cache_dir: Path | None = None
    log_level: str = "info"
    log_format: Literal["json", "text"] = "json"
    api_keys: str | None = None  # comma-separated (env STRUCTSERVE_API_KEYS); secrets: prefer the env
    api_keys_file: Path | None = None
    drain_timeout_s: float = Field(30.0, ge=0)
    limits: LimitsSettings = LimitsSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    tool_format: str = "auto"
    kv_cache: Literal["bf16", "c8_dynamic", "c8_static", "c8_static_residual"] = "bf16"
    kv_calibration: Path | None = None
    kv_rotation: KVRotation = DEFAULT_KV_ROTATION  # C8 only: which of K/V are stored Hadamard-rotated
    quantization: Literal["none", "w8a8_dynamic", "w8a16", "w4a16"] = "none"
    quant: QuantSettings = QuantSettings()
    prefix_cache: PrefixCacheSettings = PrefixCacheSettings()
    engine: EngineSettings = EngineSettings()
    request: RequestSettings = RequestSettings()
    grammar: GrammarSettings = GrammarSettings()
    reasoning: ReasoningSettings = ReasoningSettings()
    responses: ResponsesSettings = ResponsesSettings()

    @field_validator("model")
    @classmethod
    def _model_is_dir(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"model directory {value} does not exist")
        return value

    @field_validator("api_keys_file")
    @classmethod
    def _keys_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"API key file {value} does not exist")
        return value

    @model_validator(mode="after")
    def _kv_cache_on_device(self) -> "Settings":
        """A KV cache mode the device's SGLang path (or a PD replica's transfer) cannot serve stops the server
        (runtime_ext.kv_cache.support)."""
        if (error := unsupported_kv_cache(self.kv_cache, self.engine.device)) is not None:
            raise ValueError(error)
        if (error := unsupported_kv_cache_with_pd(self.kv_cache, self.engine.disaggregation.mode)) is not None:
            raise ValueError(error)
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlSource(settings_cls))


class _YamlSource(PydanticBaseSettingsSource):
    """configs/default.yaml deep-merged with the file named by STRUCTSERVE_CONFIG."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ is overridden

    def __call__(self) -> dict[str, Any]:
        data = _read_yaml(DEFAULT_CONFIG)
        extra = os.environ.get(CONFIG_ENV)
        if extra:
            data = _deep_merge(data, _read_yaml(Path(extra)))
        return data


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping at the top level")
    return data


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(config: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings; ``config`` names an override YAML, ``overrides`` are CLI flags."""
    if config is not None:
        os.environ[CONFIG_ENV] = str(config)
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
