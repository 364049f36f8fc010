"""deploy/*.yaml as shipped publishes nothing beyond the host: every published port of every
compose service listens on loopback unless the operator sets STRUCTSERVE_BIND, and no service
shares the host's network (where the container's own 0.0.0.0 would be every interface)."""

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


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_published_port_binds_loopback_by_default(path):
    found = 0
    for name, service in services(path, env={}).items():
        assert service.get("network_mode") != "host", f"{path.name}: {name} shares the host's network"
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


def test_the_port_parser_reads_every_form():
    ports = ["8080:8080", "127.0.0.1:8080:8080", "[::1]:9000:9000/tcp", "9000", {"target": 80, "published": 8080}]
    hosts = [host for host, _ in published({"ports": ports})]
    assert hosts == ["", "127.0.0.1", "::1", "", ""]
    assert [loopback(h) for h in hosts] == [False, True, True, False, False]
    assert interpolate("${A:-x} ${B-y} ${C} $$D $A", {"A": "a", "B": ""}) == "a   $D a"
    assert FILES, "no deploy/*.yaml found"
