"""The quant methods read the config ``plugin.register()`` hands them, not the environment: with the
environment empty, the ``RuntimeExtConfig`` given to ``register`` decides the policy."""

from __future__ import annotations

import pytest

from runtime_ext.config import ENV_NAMES, RuntimeExtConfig
from runtime_ext.quant import checkpoint_method, sglang_methods
from runtime_ext.quant.policy import QuantPolicy
from runtime_ext.state import QuantStats


@pytest.fixture
def registered(monkeypatch):
    """The config classes ``register`` would add to SGLang (captured, SGLang's registry left alone)."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    found: list[type] = []
    monkeypatch.setattr(checkpoint_method, "add_method", found.append)
    monkeypatch.setattr(sglang_methods, "add_method", found.append)
    return found


def test_modelslim_config_takes_stage_aware_from_the_registered_config(registered):
    runtime = RuntimeExtConfig(quant_policy=QuantPolicy("w8a8_dynamic", stage_aware=True))
    checkpoint_method.register(QuantStats(), runtime)
    (config,) = registered
    assert config({"group_size": 0}).stage_aware is True
    checkpoint_method.register(QuantStats(), RuntimeExtConfig())
    assert registered[1]({"group_size": 0}).stage_aware is False


def test_online_methods_take_the_policy_from_the_registered_config(registered):
    class Hooks:
        @staticmethod
        def register(*_args):
            return None

    runtime = RuntimeExtConfig(quant_policy=QuantPolicy("w8a16", group_size=64, keep=("lm_head",)))
    sglang_methods.register(Hooks, type("HookType", (), {"AROUND": "around"}), QuantStats(), runtime)
    by_name = {cls.get_name(): cls for cls in registered}
    policy = by_name["structserve_w4a16"]().policy
    assert (policy.scheme, policy.group_size, policy.keep) == ("w4a16", 64, ("lm_head",))
