"""A nested ``$id`` that only repeats its own location (``"#/definitions/a"`` at ``/definitions/a``,
as validate-pyproject's draft-07 schemas write) is removed exactly; any other stays refused."""

from __future__ import annotations

import copy
import json

import pytest

from grammars.errors import InvalidSchemaError, UnsupportedKeywordError
from grammars.json_schema import check_schema
from grammars.json_schema.rewrites.ids import drop_self_ids


def _schema(own_id: str) -> dict:
    return {
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/a"}},
        "definitions": {"a": {"$id": own_id, "type": "string", "pattern": "^[a-z]+$"}},
    }


def test_an_id_repeating_its_own_pointer_is_removed_and_named():
    schema = _schema("#/definitions/a")
    before = copy.deepcopy(schema)
    checked = check_schema(schema)
    assert schema == before  # never mutates the client's schema
    assert "$id at /definitions/a" in checked.rewritten
    assert "$id" not in json.dumps(json.loads(checked.canonical)["definitions"])
    assert json.loads(checked.canonical)["definitions"]["a"]["pattern"] == "^[a-z]+$"


@pytest.mark.parametrize(
    ("other", "error"),
    [
        ("#/definitions/b", InvalidSchemaError),  # 2020-12 refuses a fragment in $id
        ("#a", InvalidSchemaError),
        ("https://example.com/a", UnsupportedKeywordError),  # moves $ref resolution
    ],
)
def test_any_other_nested_id_is_left_for_the_policy(other, error):
    schema = _schema(other)
    assert drop_self_ids(schema) == (schema, ())
    with pytest.raises(error, match="id"):
        check_schema(schema)


def test_the_root_id_is_kept():
    schema = {"$id": "#", "type": "string"}
    assert drop_self_ids(schema) == (schema, ())
