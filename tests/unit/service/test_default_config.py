"""configs/default.yaml documents every setting with the default of service/settings.py.

service/settings.py is the source of every default; the YAML is its commented copy, read first by
the settings loader. This test walks both: every key of the model is in the YAML and no other, at
every level, and each YAML value, validated as the field's type, equals the field's default."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter

from service.settings import DEFAULT_CONFIG, Settings


def differences(model: type[BaseModel], data: Any, path: str = "") -> list[str]:
    """Each place where ``data`` (the YAML) and ``model``'s defaults disagree, as a dotted path."""
    if not isinstance(data, dict):
        return [f"{path or '<top>'}: a mapping in the model, {data!r} in the YAML"]
    out = [f"{path}{k}: in the model, not in the YAML" for k in model.model_fields if k not in data]
    out += [f"{path}{k}: in the YAML, not a setting" for k in data if k not in model.model_fields]
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            out += differences(type(default), data[name], f"{path}{name}.")
            continue
        value = TypeAdapter(field.annotation).validate_python(data[name])
        if value != default:
            out.append(f"{path}{name}: {data[name]!r} in the YAML, {default!r} in service/settings.py")
    return out


def test_the_yaml_has_every_setting_with_its_default():
    assert differences(Settings, yaml.safe_load(DEFAULT_CONFIG.read_text())) == []


def test_a_changed_default_is_caught():
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["grammar"]["cache_size"] += 1
    del data["port"]
    data["limits"]["no_such_key"] = 1
    found = differences(Settings, data)
    assert len(found) == 3 and any(d.startswith("grammar.cache_size:") for d in found), found
