"""Unknown schema keywords through the service: the constraint carries them, the choice's
``schema_validation.ignored_keywords`` names them, ``/metrics`` counts them by name (bounded)."""

from __future__ import annotations

from runtime_ext.formats import get_format
from service import grammar_check
from service.grammar_check import count_ignored
from service.metrics import REGISTRY
from service.pipeline.choice import ChoiceOutput
from service.pipeline.constraints import build_constraint
from service.pipeline.validate import validate_request
from service.protocol.openai import ChatCompletionRequest
from service.types.serving import ModelFormats, ServingLimits

LIMITS = ServingLimits(served_model_name="m", context_length=100, max_n=4, default_max_tokens=None)
SCHEMA = {
    "type": "object",
    "tlo": "city",
    "properties": {"city": {"type": "string", "self": "/c"}},
    "required": ["city"],
    "additionalProperties": False,
}


def _validated(**kw):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return validate_request(ChatCompletionRequest.model_validate(body), LIMITS, ModelFormats(tools=get_format("qwen")))


def _count(keyword: str) -> float:
    return REGISTRY.get_sample_value("structserve_schema_ignored_keywords_total", {"keyword": keyword}) or 0.0


def test_the_answer_schema_is_served_and_its_unknown_keywords_reach_the_choice() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}}
    constraint = build_constraint(_validated(response_format=fmt), False)
    assert constraint is not None and constraint.ignored == ("tlo at /", "self at /properties/city")
    assert "tlo" not in constraint.value and constraint.validate_schema == SCHEMA
    out = ChoiceOutput(constraint, None)
    out.feed('{"city": "Paris"}')
    _, result = out.finish("stop")
    assert result.validation is not None and result.validation.valid
    assert result.validation.ignored_keywords == ["tlo at /", "self at /properties/city"]


def test_a_tool_s_unknown_keywords_are_named_with_the_tool() -> None:
    tool = {"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}
    constraint = build_constraint(_validated(tools=[tool], tool_choice="required"), False)
    assert constraint is not None and constraint.ignored == ("weather: tlo at /", "weather: self at /properties/city")


def test_the_metric_counts_by_name_and_bounds_its_labels(monkeypatch) -> None:
    monkeypatch.setattr(grammar_check, "_labels", set())
    before = _count("tlo"), _count("other")
    count_ignored(("tlo at /", "weather: tlo at /properties/a", "bad name! at /"))
    assert (_count("tlo"), _count("other")) == (before[0] + 2, before[1] + 1)
    monkeypatch.setattr(grammar_check, "_MAX_LABELS", 1)  # "tlo" took the one label
    count_ignored(("fresh at /",))
    assert _count("fresh") == 0 and _count("other") == before[1] + 2


def test_the_field_appears_only_when_keywords_were_ignored() -> None:
    from service.protocol.openai import SchemaValidation

    assert SchemaValidation(valid=True).model_dump() == {"valid": True, "error": None}
    named = SchemaValidation(valid=True, ignored_keywords=["tlo at /"]).model_dump()
    assert named == {"valid": True, "error": None, "ignored_keywords": ["tlo at /"]}
