"""Bounded, cached grammar compilation in a killable worker process.

``GrammarCompiler`` compiles exactly what SGLang's xgrammar backend will compile (same
xgrammar calls and flags: ``any_whitespace=False`` because the service starts SGLang
with ``constrained_json_disable_any_whitespace=True``; ``strict_mode`` and
``max_whitespace_cnt`` left at their defaults, as SGLang does) in a persistent worker
subprocess (multiprocessing *spawn*), so a slow compile is killed once it has used the CPU
it would need for ``timeout_s`` on an idle machine (``grammars.compile.worker_clock``: a busy machine
is a 503, not the schema's fault) and a crashing one costs only the worker. This module imports no xgrammar at import
time; only the worker does (through ``grammars.compile.xgrammar_calls``).

Errors: ``SchemaTooComplexError`` on timeout, ``CompilerBusyError`` when the worker gets too
little CPU to finish, ``GrammarCompileError`` when xgrammar
rejects the text or the worker dies, ``UnsupportedKeywordError`` when xgrammar warns
that it drops a constraint, ``UnsatisfiableSchemaError`` when the compiled grammar
allows no first token (xgrammar compiles a ``$ref`` loop that consumes nothing, then
SGLang aborts the request on its first token); the last two are backstops behind
``grammars.json_schema.policy``. Deterministic failures are cached like successes; timeouts
and crashes are not.
"""

from __future__ import annotations

import multiprocessing
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grammars.bounded_cache import CACHE_BYTES, BoundedCache, text_bytes
from grammars.compile.worker_clock import cpu_seconds, wait_reply
from grammars.compile.xgrammar_calls import (
    Kind,
    VocabFacts,
    accepts_a_first_token,
    capture_warnings,
    compile_text,
    load_compiler,
)
from grammars.errors import (
    CompilerBusyError,
    GrammarCompileError,
    GrammarError,
    SchemaTooComplexError,
    UnsatisfiableSchemaError,
    Unsupported,
    UnsupportedKeywordError,
)

__all__ = ["CompileStats", "GrammarCompiler"]

_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ", re.M)
_WARNING_KEYWORDS = (
    ("multipleOf", "multipleOf"),
    ("oneOf", "oneOf"),
    ("allOf", "allOf"),
    ("Lookahead", "pattern"),
    ("Anchor", "pattern"),
    ("URI", "$ref"),
)


@dataclass(frozen=True)
class CompileStats:
    """``cache_hit``: served from the LRU cache; ``seconds``: compile wall time as seen
    by the caller (0.0 on a hit)."""

    cache_hit: bool
    seconds: float


def _worker_main(conn: Any, tokenizer_dir: str, vocab: VocabFacts | None, any_whitespace: bool) -> None:
    """Worker loop: build the compiler once, then answer ``(kind, text)`` requests with
    ``("ok", seconds)``, ``("warned", [warning, ...])``, ``("dead", "")`` (no first
    token allowed) or ``("error", message)``."""
    started = time.perf_counter()
    try:
        _, compiler = load_compiler(Path(tokenizer_dir), vocab)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", time.perf_counter() - started))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        kind, text = request
        began = time.perf_counter()
        try:
            compiled, warnings = capture_warnings(
                lambda: compile_text(compiler, kind, text, any_whitespace=any_whitespace)
            )
            dead = not accepts_a_first_token(compiled)
        except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError & co.
            conn.send(("error", str(exc).strip()))
            continue
        if dead:
            conn.send(("dead", ""))
            continue
        conn.send(("warned", warnings) if warnings else ("ok", time.perf_counter() - began))


class GrammarCompiler:
    """Compile grammars for one tokenizer with a time bound and an LRU cache.

    Thread-safe (callers use ``asyncio.to_thread``): compiles are serialized on one
    worker; cache hits never wait for a running compile. The worker starts lazily on
    the first compile, or explicitly with ``start()``; ``timeout_s`` (a public
    attribute) bounds each compile, not the worker start (``start_timeout_s``: a worker that
    has not started by then is ``CompilerBusyError``, the machine's fault, not the request's).
    """

    def __init__(
        self,
        tokenizer_dir: Path,
        vocab: VocabFacts | None = None,
        *,
        timeout_s: float = 10.0,
        cache_size: int = 512,
        cache_bytes: int = CACHE_BYTES,
        any_whitespace: bool = False,
        start_timeout_s: float = 300.0,
    ) -> None:
        self.tokenizer_dir = Path(tokenizer_dir)
        self.vocab = vocab
        self.timeout_s = timeout_s
        self.cache_size = cache_size
        self.any_whitespace = any_whitespace
        self.start_timeout_s = start_timeout_s
        self.start_seconds: float | None = None
        self._cache: BoundedCache[tuple[str, str], GrammarError | None] = BoundedCache(
            cache_size, cache_bytes, lambda key, error: text_bytes(*key, error and error.message)
        )
        self._worker_lock = threading.Lock()
        self._proc: Any = None
        self._conn: Any = None

    def compile_json_schema(self, canonical: str) -> CompileStats:
        """Compile a JSON schema (``CheckedSchema.canonical``)."""
        return self._compile("json_schema", canonical)

    def compile_structural_tag(self, tag_json: str) -> CompileStats:
        """Compile a structural tag (xgrammar format, or SGLang's legacy
        ``{"structures", "triggers"}`` format)."""
        return self._compile("structural_tag", tag_json)

    def compile_ebnf(self, ebnf: str) -> CompileStats:
        """Compile an EBNF grammar (xgrammar dialect)."""
        return self._compile("ebnf", ebnf)

    def compile_regex(self, regex: str) -> CompileStats:
        """Compile a regular expression (xgrammar's regex dialect, as SGLang dispatches it)."""
        return self._compile("regex", regex)

    @property
    def worker_pid(self) -> int | None:
        """The worker's pid while one is running (for metrics and tests), else None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.is_alive() else None

    def start(self) -> float:
        """Start the worker now if it is not running; returns its start seconds (0.0 when
        it was running). ``RuntimeError`` if the tokenizer cannot be loaded."""
        with self._worker_lock:
            return self._ensure_worker()

    def close(self) -> None:
        """Stop the worker (idempotent). A later compile starts a new one."""
        with self._worker_lock:
            if self._proc is not None and self._proc.is_alive():
                try:
                    self._conn.send(None)
                    self._proc.join(5)
                except OSError:
                    pass
            self._kill()

    def __enter__(self) -> GrammarCompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _compile(self, kind: Kind, text: str) -> CompileStats:
        key = (kind, text)
        if self._lookup(key):
            return CompileStats(cache_hit=True, seconds=0.0)
        with self._worker_lock:
            if self._lookup(key):  # compiled by another thread meanwhile
                return CompileStats(cache_hit=True, seconds=0.0)
            self._ensure_worker()
            began = time.perf_counter()
            reply = self._roundtrip(kind, text)
            seconds = time.perf_counter() - began
        error = self._error_from(kind, reply)
        self._store(key, error)
        if error is not None:
            raise error
        return CompileStats(cache_hit=False, seconds=seconds)

    def _lookup(self, key: tuple[str, str]) -> bool:
        """True on a cached success; re-raises (a copy of) a cached failure."""
        hit, error = self._cache.lookup(key)
        if not hit:
            return False
        if error is not None:
            raise error.with_param(error.param)
        return True

    def _store(self, key: tuple[str, str], error: GrammarError | None) -> None:
        self._cache.put(key, error)

    def _roundtrip(self, kind: Kind, text: str) -> tuple[Any, ...]:
        """Send one request; kill the worker on timeout or death (caller holds the lock)."""
        try:
            cpu_before = cpu_seconds(self._proc.pid)
            self._conn.send((kind, text))
            ready = wait_reply(self._conn, self._proc.pid, cpu_before, self.timeout_s)
            reply = self._conn.recv() if ready else None
        except CompilerBusyError:
            self._kill()
            raise
        except (EOFError, OSError):
            code = self._kill()
            raise GrammarCompileError(
                f"the grammar compiler crashed (exit code {code}) on this {kind}; simplify "
                "it (the compiler was restarted)"
            ) from None
        if reply is None:
            self._kill()
            raise SchemaTooComplexError(
                f"compiling this {kind} took longer than {self.timeout_s:g} s; simplify it "
                "(fewer/shorter nested alternatives, smaller bounded repetitions)"
            )
        return tuple(reply)

    @staticmethod
    def _error_from(kind: Kind, reply: tuple[Any, ...]) -> GrammarError | None:
        status, detail = reply
        if status == "ok":
            return None
        if status == "dead":
            return UnsatisfiableSchemaError(
                f"the grammar of this {kind} allows no first token, so no output can ever "
                "start to match it (e.g. a $ref loop that consumes no input); fix the schema"
            )
        if status == "error":
            detail = _LOG_PREFIX.sub("", detail).rstrip(".")
            return GrammarCompileError(
                f"xgrammar rejected the {kind}: {detail}. Fix it "
                "(e.g. a regex feature xgrammar lacks, or an "
                "unsatisfiable constraint)"
            )
        lost = [
            Unsupported(next((k for w, k in _WARNING_KEYWORDS if w in line), "unknown"), None, f"xgrammar: {line}")
            for line in detail
        ]
        if kind in ("ebnf", "regex"):
            return GrammarCompileError("xgrammar would not enforce this grammar exactly: " + "; ".join(detail))
        return UnsupportedKeywordError(lost)

    def _ensure_worker(self) -> float:
        """Start the worker unless alive; returns start seconds (caller holds the lock)."""
        if self._proc is not None and self._proc.is_alive():
            return 0.0
        self._kill()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        began = time.perf_counter()
        proc = ctx.Process(
            target=_worker_main,
            daemon=True,
            name="structserve-grammar",
            args=(child, str(self.tokenizer_dir), self.vocab, self.any_whitespace),
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if not parent.poll(self.start_timeout_s):
            self._kill()
            raise CompilerBusyError(
                f"the grammar compiler's worker did not start within {self.start_timeout_s:g} s: "
                "the server is overloaded; retry the request"
            )
        try:
            status, detail = parent.recv()
        except (EOFError, OSError):
            status, detail = "failed", f"worker exited with code {self._kill()}"
        if status != "ready":
            self._kill()
            raise RuntimeError(f"grammar worker cannot load {self.tokenizer_dir}: {detail}")
        self.start_seconds = time.perf_counter() - began
        return self.start_seconds

    def _kill(self) -> int | None:
        """Kill and reap the worker (if any); returns its exit code."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is None:
            return None
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        exitcode: int | None = proc.exitcode
        return exitcode
