"""deploy/compose-pd.yaml says what tests/pd runs live: its replicas' environments are valid
settings in the PD mode their name says, sharing one bootstrap port; decode admits under the
budget; the gateway runs smg in PD mode against exactly those ports, with tests/pd's retry limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from service.settings import load_settings
from tests.pd.topology import PD_GATEWAY_FLAGS

COMPOSE = Path(__file__).resolve().parents[3] / "deploy" / "compose-pd.yaml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def resolved(env: dict) -> dict[str, str]:
    """The environment as compose passes it when nothing is set on the host (``${X:-default}``)."""
    out = {}
    for key, value in env.items():
        value = str(value)
        if value.startswith("${") and ":-" in value:
            value = value[value.index(":-") + 2 : -1]
        out[key] = value
    return out


@pytest.mark.parametrize("name", ["prefill", "decode"])
def test_each_replica_is_valid_settings_in_its_mode(name: str, monkeypatch) -> None:
    env = resolved(services()[name]["environment"])
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSERVE_")})
    os.environ.update(env)
    settings = load_settings()
    assert settings.engine.disaggregation.mode == name
    assert settings.port == int(env["STRUCTSERVE_PORT"])
    assert settings.scheduling.admission == ("budget" if name == "decode" else "sglang")


def test_the_gateway_routes_pd_to_those_replicas() -> None:
    svc = services()
    ports = {name: resolved(svc[name]["environment"])["STRUCTSERVE_PORT"] for name in ("prefill", "decode")}
    bootstrap = {resolved(svc[n]["environment"])["STRUCTSERVE_ENGINE__DISAGGREGATION__BOOTSTRAP_PORT"] for n in ports}
    assert len(bootstrap) == 1, "prefill and decode must name the same bootstrap port"
    cmd = [str(a) for a in svc["gateway"]["command"]]
    assert "--pd-disaggregation" in cmd
    at = cmd.index("--prefill")
    assert cmd[at + 1 : at + 3] == [f"http://127.0.0.1:{ports['prefill']}", bootstrap.pop()]
    assert cmd[cmd.index("--decode") + 1] == f"http://127.0.0.1:{ports['decode']}"
    flags = dict(a.split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
    assert flags[PD_GATEWAY_FLAGS[0]] == PD_GATEWAY_FLAGS[1]
    assert flags["--health-check-endpoint"] == "/ready"
    assert svc["gateway"]["depends_on"] == {n: {"condition": "service_healthy"} for n in ports}
