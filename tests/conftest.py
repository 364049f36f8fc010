"""Shared fixtures: asset paths and real structserve servers on 127.0.0.1."""

from __future__ import annotations

import pytest

from tests.server import ServerProcess

pytest_plugins = ["tests.suite_clock"]


@pytest.fixture(scope="session")
def assets():
    """The verified, converted assets (`make test` fetched them already)."""
    from assets import fetch

    return fetch()


def start_server(model_dir, name: str, **env: str):
    server = ServerProcess(model_dir, name=name, env=env)
    server.start()
    return server


class LaunchAhead:
    """Servers launched before their fixture asks for them, so that several engine starts overlap:
    a start here is mostly Python imports in three processes, which two cores run side by side.
    A folder's autouse fixture launches the servers its selected tests will use; each server
    fixture then takes its launched process (or launches one) and waits until it is ready."""

    def __init__(self) -> None:
        self.launched: dict[str, ServerProcess] = {}
        self.taken: set[str] = set()

    def launch(self, fixture: str, make) -> None:
        """Launch ``make()`` for ``fixture`` unless that fixture has its server already."""
        if fixture not in self.taken and fixture not in self.launched:
            self.launched[fixture] = make()
            self.launched[fixture].launch()

    def take(self, fixture: str, make) -> ServerProcess:
        self.taken.add(fixture)
        server = self.launched.pop(fixture, None) or make()
        server.start()  # launches it unless launched ahead; waits until ready
        return server

    @staticmethod
    def needed(request, folder: str, fixtures) -> list[str]:
        """The given fixtures that the session's selected tests under ``folder`` use."""
        used = {name for item in request.session.items if folder in item.nodeid for name in item.fixturenames}
        return [name for name in fixtures if name in used]


@pytest.fixture(scope="session")
def ahead():
    launches = LaunchAhead()
    yield launches
    for server in launches.launched.values():  # launched for tests that did not run (e.g. -x)
        server.stop()


def qwen(assets) -> ServerProcess:
    """The tiny random-weight Qwen3 (protocol tests), float32. Thinking is off unless a request
    turns it on: the random model never closes its reasoning block."""
    env = {"STRUCTSERVE_DTYPE": "float32", "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"}
    return ServerProcess(assets.qwen3_tiny, name="qwen", env=env)


@pytest.fixture(scope="session")
def qwen_server(assets, ahead):
    """structserve on ``qwen``'s configuration, for the whole session (tests/pd compares with it)."""
    server = ahead.take("qwen_server", lambda: qwen(assets))
    yield server
    code = server.stop()
    assert code == 0, f"SIGTERM must shut the server down gracefully (exit 0), got {code}"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server on loopback (tests/redis_server.py) configured as deploy/compose.yaml's:
    bounded by maxmemory, evicting the entries closest to expiry (volatile-ttl)."""
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"), "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
    yield server
    server.stop()
