"""deploy/*.yaml as shipped publishes nothing beyond the host: every published port of every
compose service listens on loopback unless the operator sets STRUCTSERVE_BIND. A service on the
host's network (compose-pd.yaml: Mooncake listens on ports it picks) publishes nothing through
compose, so there every address it listens on must itself be loopback by default (the image's
own STRUCTSERVE_HOST is 0.0.0.0, every interface), and the gateway's follow STRUCTSERVE_BIND."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILES = sorted(DEPLOY.glob("*.yaml")) + sorted(DEPLOY.glob("*.yml"))
_VAR = re.compile(r"\$\{(\w+)(?:(:?-)([^}]*))?\}|\$(\w+)")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` and ``$VAR`` (``$$`` is a ``$``)."""

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        if m.group(2) == ":-":
            return env.get(name) or m.group(3)
        if m.group(2) == "-":
            return env.get(name, m.group(3))
        return env.get(name, "")

    return "$".join(_VAR.sub(value, part) for part in text.split("$$"))


def published(service: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(host address, the port as written) for each port the service publishes; "" = every interface."""
    for port in service.get("ports") or []:
        if isinstance(port, dict):  # long syntax
            if port.get("published") is not None or port.get("mode") == "host":
                yield str(port.get("host_ip") or ""), str(port)
            else:
                yield "", str(port)  # a target alone: a random host port on every interface
            continue
        spec = str(port).rsplit("/", 1)[0]
        if spec.startswith("["):  # [::1]:8080:8080
            host, _, rest = spec[1:].partition("]")
            yield host, str(port)
        else:
            parts = spec.split(":")
            yield (parts[0] if len(parts) == 3 else ""), str(port)


def services(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    return yaml.safe_load(interpolate(path.read_text(), env)).get("services") or {}


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


IMAGE_HOST = "0.0.0.0"  # the Dockerfile's STRUCTSERVE_HOST


def host_binds(service: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(address, what) a host-network service listens on: smg's --host and --prometheus-host; a
    replica's STRUCTSERVE_HOST (the image's default when unset) and its PD host_ip."""
    if service.get("network_mode") != "host":
        return
    cmd = [str(a) for a in service.get("command") or []]
    if cmd[:1] == ["launch"]:  # smg
        for flag in ("--host", "--prometheus-host"):
            yield next((a.split("=", 1)[1] for a in cmd if a.startswith(flag + "=")), ""), flag
        return
    env = service.get("environment") or {}
    yield str(env.get("STRUCTSERVE_HOST", IMAGE_HOST)), "STRUCTSERVE_HOST"
    if "STRUCTSERVE_ENGINE__DISAGGREGATION__HOST_IP" in env:
        yield str(env["STRUCTSERVE_ENGINE__DISAGGREGATION__HOST_IP"]), "engine.disaggregation.host_ip"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_published_port_binds_loopback_by_default(path):
    found = 0
    for name, service in services(path, env={}).items():
        for host, what in host_binds(service):
            found += 1
            assert loopback(host), f"{path.name}: {name} shares the host's network and listens on {host!r} ({what})"
        for host, port in published(service):
            found += 1
            assert loopback(host), f"{path.name}: {name} publishes {port!r} on {host or 'every interface'}"
    assert found, f"{path.name} publishes no port: this test would check nothing"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_structserve_bind_opens_every_published_port(path):
    """The one documented knob reaches every port (an operator opting in gets what the docs say)."""
    for name, service in services(path, env={"STRUCTSERVE_BIND": "0.0.0.0"}).items():
        for host, port in published(service):
            assert host == "0.0.0.0", f"{path.name}: {name} publishes {port!r} without ${{STRUCTSERVE_BIND}}"
        for host, what in host_binds(service):  # on the host's network only the gateway is for clients
            if what.startswith("--"):
                assert host == "0.0.0.0", f"{path.name}: {name} {what} does not follow ${{STRUCTSERVE_BIND}}"


def test_the_port_parser_reads_every_form():
    ports = ["8080:8080", "127.0.0.1:8080:8080", "[::1]:9000:9000/tcp", "9000", {"target": 80, "published": 8080}]
    hosts = [host for host, _ in published({"ports": ports})]
    assert hosts == ["", "127.0.0.1", "::1", "", ""]
    assert [loopback(h) for h in hosts] == [False, True, True, False, False]
    assert interpolate("${A:-x} ${B-y} ${C} $$D $A", {"A": "a", "B": ""}) == "a   $D a"
    assert FILES, "no deploy/*.yaml found"
