"""GrammarCompiler: real xgrammar compiles in the worker with the tiny Qwen3 tokenizer
(151k vocab): cache, errors, warnings backstop, timeout kill + restart, crash restart, and a
worker starved of CPU (SIGSTOP) that is waited for, not blamed on the schema."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grammars.compile import CompileStats, GrammarCompiler
from grammars.errors import CompilerBusyError, GrammarCompileError, SchemaTooComplexError, UnsupportedKeywordError
from grammars.json_schema import check_schema

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "email", "age", "role", "address"],
    "additionalProperties": False,
}
SLOW = json.dumps({"type": "string", "maxLength": 20_000})  # many seconds on this vocab


@pytest.fixture(scope="module")
def qwen3_dir() -> Path:
    from assets import model_dir

    return model_dir("qwen3-tiny")


@pytest.fixture(scope="module")
def compiler(qwen3_dir: Path) -> Iterator[GrammarCompiler]:
    with GrammarCompiler(qwen3_dir, timeout_s=30.0, cache_size=4) as gc:
        assert gc.start() > 0.0 and gc.start() == 0.0  # explicit start, then already running
        yield gc


def test_compile_then_cache_hit(compiler: GrammarCompiler) -> None:
    canonical = check_schema(SCHEMA).canonical
    cold = compiler.compile_json_schema(canonical)
    assert cold.cache_hit is False and 0.0 < cold.seconds < 10.0
    began = time.perf_counter()
    hot = compiler.compile_json_schema(canonical)
    assert hot == CompileStats(cache_hit=True, seconds=0.0)
    assert time.perf_counter() - began < 0.005


def test_lru_evicts_the_oldest(compiler: GrammarCompiler) -> None:
    texts = [check_schema({"type": "integer", "maximum": i}).canonical for i in range(5)]
    assert [compiler.compile_json_schema(t).cache_hit for t in texts] == [False] * 5
    assert compiler.compile_json_schema(texts[4]).cache_hit is True
    assert compiler.compile_json_schema(texts[0]).cache_hit is False  # evicted (size 4)


def test_invalid_regex_is_a_compile_error(compiler: GrammarCompiler) -> None:
    canonical = check_schema({"type": "string", "pattern": "^(ab$"}).canonical  # policy: ok
    with pytest.raises(GrammarCompileError) as info:
        compiler.compile_json_schema(canonical)
    assert info.value.code == "grammar_compile_failed"
    assert info.value.message == (
        "xgrammar rejected the json_schema: Regex parsing error at position 6: The "
        "parenthesis is not closed. Fix it (e.g. a regex feature xgrammar lacks, or an "
        "unsatisfiable constraint)"
    )
    began = time.perf_counter()
    with pytest.raises(GrammarCompileError) as again:  # failures are cached too
        compiler.compile_json_schema(canonical)
    assert time.perf_counter() - began < 0.005 and again.value is not info.value


def test_xgrammar_warning_is_unsupported(compiler: GrammarCompiler) -> None:
    """The backstop: text the policy would refuse, compiled anyway, is still refused."""
    with pytest.raises(UnsupportedKeywordError) as info:
        compiler.compile_json_schema(json.dumps({"oneOf": [{"type": "integer"}, {"type": "number"}]}))
    [lost] = info.value.unsupported
    assert (lost.keyword, lost.pointer) == ("oneOf", None)
    assert "falling back to anyOf semantics" in lost.reason


def test_ebnf_and_structural_tag(compiler: GrammarCompiler) -> None:
    assert compiler.compile_ebnf('root ::= "yes" | "no"').cache_hit is False
    with pytest.raises(GrammarCompileError):
        compiler.compile_ebnf("root ::= (")
    legacy = {"structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}], "triggers": ["<f>"]}
    assert compiler.compile_structural_tag(json.dumps(legacy)).cache_hit is False
    tag = {"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}
    assert compiler.compile_structural_tag(json.dumps(tag)).cache_hit is False


def test_timeout_kills_and_restarts(compiler: GrammarCompiler) -> None:
    old_pid = compiler.worker_pid
    compiler.timeout_s = 1.0
    try:
        began = time.perf_counter()
        with pytest.raises(SchemaTooComplexError) as info:
            compiler.compile_json_schema(SLOW)
        assert time.perf_counter() - began >= 1.0  # it waited for the timeout (upper bound: pytest-timeout)
        assert info.value.message.startswith("compiling this json_schema took longer than 1 s")
        assert compiler.worker_pid is None  # killed; the timeout is not cached
    finally:
        compiler.timeout_s = 30.0
    stats = compiler.compile_json_schema(check_schema({"type": "boolean"}).canonical)
    assert stats.cache_hit is False and compiler.worker_pid not in (None, old_pid)


def _compile_while_stopped(compiler: GrammarCompiler, schema: dict, stopped_s: float) -> list[object]:
    """Compile ``schema`` while the worker is stopped (no CPU, as on an overloaded machine)
    for ``stopped_s`` of wall time; returns ``[stats or error]``."""
    compiler.start()
    pid = compiler.worker_pid
    assert pid is not None
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(compiler.compile_json_schema(check_schema(schema).canonical))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            outcome.append(exc)

    os.kill(pid, signal.SIGSTOP)
    thread = threading.Thread(target=run)
    try:
        thread.start()
        time.sleep(stopped_s)
    finally:
        if compiler.worker_pid == pid:
            os.kill(pid, signal.SIGCONT)
    thread.join(60)
    return outcome


def test_a_starved_worker_is_waited_for_not_timed_out(compiler: GrammarCompiler) -> None:
    compiler.timeout_s = 1.0
    try:  # 2.5 s of wall time without CPU: the wall clock would call that a timeout
        [stats] = _compile_while_stopped(compiler, {"type": "integer", "title": "starved"}, stopped_s=2.5)
    finally:
        compiler.timeout_s = 30.0
    assert isinstance(stats, CompileStats) and stats.cache_hit is False and stats.seconds >= 2.5


def test_a_worker_starved_past_the_wall_cap_is_busy_not_too_complex(compiler: GrammarCompiler) -> None:
    compiler.timeout_s = 0.5  # wall cap: 6 × 0.5 = 3 s
    try:
        [error] = _compile_while_stopped(compiler, {"type": "integer", "title": "busy"}, stopped_s=4.0)
    finally:
        compiler.timeout_s = 30.0
    assert isinstance(error, CompilerBusyError) and "overloaded" in error.message
    assert compiler.worker_pid is None  # killed: its late reply must not answer the next request
    stats = compiler.compile_json_schema(check_schema({"type": "integer", "title": "busy"}).canonical)
    assert stats.cache_hit is False  # the busy outcome was not cached


def test_crash_is_reported_and_restarts(compiler: GrammarCompiler) -> None:
    compiler.start()
    pid = compiler.worker_pid
    assert pid is not None
    errors: list[BaseException] = []

    def slow_compile() -> None:
        try:
            compiler.compile_json_schema(SLOW)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    worker = threading.Thread(target=slow_compile)
    worker.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGSEGV)
    worker.join(30)
    [error] = errors
    assert isinstance(error, GrammarCompileError)
    assert "crashed (exit code -11)" in error.message
    stats = compiler.compile_json_schema(check_schema({"type": "null"}).canonical)
    assert stats.cache_hit is False and compiler.worker_pid not in (None, pid)


def test_threads_share_one_compile(compiler: GrammarCompiler) -> None:
    canonical = check_schema(dict(SCHEMA, title="threads")).canonical
    results: list[CompileStats] = []
    threads = [
        threading.Thread(target=lambda: results.append(compiler.compile_json_schema(canonical))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r.cache_hit for r in results) == [False, True, True, True]


def test_bad_tokenizer_dir(tmp_path: Path) -> None:
    with GrammarCompiler(tmp_path, start_timeout_s=120) as gc, pytest.raises(RuntimeError) as info:
        gc.compile_ebnf('root ::= "x"')
    assert f"grammar worker cannot load {tmp_path}" in str(info.value)


def test_a_worker_that_cannot_start_in_time_is_busy_not_a_server_error(qwen3_dir: Path) -> None:
    """An overloaded machine (the worker not up within ``start_timeout_s``) is the 503 the
    service gives for a busy compiler (``CompilerBusyError``), never a 500."""
    with GrammarCompiler(qwen3_dir, start_timeout_s=0.001) as gc, pytest.raises(CompilerBusyError) as info:
        gc.compile_ebnf('root ::= "x"')
    assert "did not start within 0.001 s" in str(info.value) and gc.worker_pid is None
