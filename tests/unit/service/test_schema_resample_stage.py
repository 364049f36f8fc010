"""Validate and resample (service/pipeline/resample.py): a choice whose grammar is looser than
its schema is generated again, with the seed advanced, until its output validates or the budget
is spent. The engine is replaced by a table of outputs per seed (what a seeded engine returns);
the outputs are validated by the real validator (``validate_output``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from service.errors import SchemaResampleError
from service.pipeline.resample import attempt_plan, collect_validated
from service.pipeline.schema_validation import validate_output
from service.types.plan import DecodeConstraint, GenerationPlan, SamplingOptions
from service.types.results import ChoiceResult, EngineDelta, FinishedChoice

SCHEMA = {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 3, "uniqueItems": True}
LOOSE = DecodeConstraint("json_schema", "{}", validate_schema=SCHEMA, loosened=("uniqueItems at /",), param="p")
EXACT = DecodeConstraint("json_schema", "{}", validate_schema=SCHEMA, param="p")


def _plan(constraint: DecodeConstraint, seed: int | None = 10, temperature: float = 1.0) -> GenerationPlan:
    return GenerationPlan((1, 2), 16, SamplingOptions(temperature=temperature, seed=seed), constraint)


class Engine:
    """Outputs by seed (``None``: the unseeded output); records each call's seed and request id."""

    def __init__(self, outputs: dict[int | None, str], finish: str = "stop") -> None:
        self.outputs, self.finish = outputs, finish
        self.calls: list[tuple[int | None, str]] = []

    async def collect(self, plan: GenerationPlan, rid: str) -> FinishedChoice:
        seed = plan.sampling.seed
        self.calls.append((seed, rid))
        text = self.outputs[seed]
        result = ChoiceResult(text, None, self.finish, validate_output(text, plan.constraint, self.finish))
        return FinishedChoice(result, EngineDelta(text, 3, 2, 0, self.finish), 0)


def _run(engine: Engine, plan: GenerationPlan, n: int = 1, attempts: int = 2) -> FinishedChoice:
    return asyncio.run(collect_validated(engine.collect, plan, "rid", n, attempts))


def test_an_invalid_output_is_resampled_with_the_seed_advanced_until_valid() -> None:
    engine = Engine({10: "[1, 1]", 13: "[2, 2]", 16: "[1, 2]"})
    choice = _run(engine, _plan(LOOSE), n=3)  # one of 3 choices: retries step by n
    assert engine.calls == [(10, "rid"), (13, "rid-resample1"), (16, "rid-resample2")]
    assert choice.result.content == "[1, 2]" and choice.result.validation is not None
    assert choice.result.validation.valid and choice.schema_attempts == 3


def test_a_valid_first_output_is_kept_and_counted_once() -> None:
    engine = Engine({10: "[3]"})
    assert _run(engine, _plan(LOOSE)).schema_attempts == 1 and len(engine.calls) == 1


def test_a_client_loosening_returns_the_last_output_flagged_after_the_budget() -> None:
    engine = Engine({10: "[1, 1]", 11: "[2, 2]", 12: "[3, 3]"})
    choice = _run(engine, _plan(LOOSE), attempts=2)
    assert [seed for seed, _ in engine.calls] == [10, 11, 12]
    assert choice.result.content == "[3, 3]" and choice.result.validation is not None
    assert choice.result.validation.valid is False and choice.schema_attempts == 3


def test_a_service_loosening_is_a_422_after_the_budget_never_an_invalid_output() -> None:
    engine = Engine({10: "[1, 1]", 11: "[2, 2]"})
    self_loosened = DecodeConstraint(**{**LOOSE.__dict__, "must_validate": True})
    with pytest.raises(SchemaResampleError) as info:
        _run(engine, _plan(self_loosened), attempts=1)
    assert info.value.status == 422 and info.value.param == "p"
    assert "2 attempt(s)" in info.value.message and "uniqueItems at /" in info.value.message


@pytest.mark.parametrize(
    "setup",
    [
        lambda: (Engine({10: "[1, 1]"}), _plan(EXACT)),  # exact grammar: nothing to resample
        lambda: (Engine({10: "[1, 1]"}), _plan(LOOSE, temperature=0.0)),  # greedy repeats itself
        lambda: (Engine({10: "[1, 1"}, finish="length"), _plan(LOOSE)),  # cut by max_tokens
    ],
    ids=["exact", "greedy", "truncated"],
)
def test_no_retry_where_it_cannot_help(setup: Callable[[], tuple[Engine, GenerationPlan]]) -> None:
    engine, plan = setup()
    choice = _run(engine, plan)
    assert len(engine.calls) == 1
    assert choice.schema_attempts == (0 if plan.constraint is EXACT else 1)


def test_unseeded_retries_keep_the_plan_and_get_fresh_request_ids() -> None:
    engine = Engine({None: "[2, 2]"})
    choice = _run(engine, _plan(LOOSE, seed=None), attempts=2)
    assert engine.calls == [(None, "rid"), (None, "rid-resample1"), (None, "rid-resample2")]
    assert choice.schema_attempts == 3 and json.loads(choice.result.content or "") == [2, 2]


def test_attempt_seeds_never_reach_another_choice_of_the_request() -> None:
    n, base = 4, 100
    seeds = {attempt_plan(_plan(LOOSE, seed=base + i), k, n).sampling.seed for i in range(n) for k in range(3)}
    assert len(seeds) == n * 3
