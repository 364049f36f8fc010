"""The CPU image, built from the Dockerfile with podman (scripts/container.sh) and run on
loopback: /health and /ready, a chat request through the container, SGLang's gateway from the
same image in front of two containers, then the two containers behind
nginx (deploy/nginx.conf) with requests spread across both, and a replica stopped with SIGTERM
(exit 0) taken out of rotation while the other keeps serving."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest

from tests.fronts import Nginx
from tests.server import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "container.sh"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
MODEL_IN_IMAGE = "/models/qwen3-tiny"
# a cold build (apt, debootstrap, the dependency layer) takes ~9 min here; warm, about 1
pytestmark = pytest.mark.timeout(2400)


def sh(*cmd: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    assert not check or proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def image():
    start = time.monotonic()
    sh("bash", str(SCRIPT), "build", timeout=3000)
    print(f"\nimage built in {time.monotonic() - start:.0f} s")
    return "localhost/structserve:cpu"


class Container:
    def __init__(self, name: str, model_dir: Path) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        sh(
            "bash",
            str(SCRIPT),
            "run",
            name,
            str(self.port),
            "-v",
            f"{model_dir}:{MODEL_IN_IMAGE}:ro",
            "-e",
            f"STRUCTSERVE_MODEL={MODEL_IN_IMAGE}",
            "-e",
            "STRUCTSERVE_DTYPE=float32",
            "-e",
            "STRUCTSERVE_REASONING__DEFAULT_THINKING=false",
            "-e",
            "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS=8192",
        )

    def wait_ready(self, timeout: float = 420) -> None:
        def alive() -> str | None:
            state = sh(*PODMAN, "inspect", "-f", "{{.State.Status}}", self.name, check=False).stdout.strip()
            return None if state == "running" else f"container {self.name} is {state}: {self.logs()}"

        try:
            wait_ready(self.url, alive, timeout)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {self.logs()}") from None

    def logs(self) -> str:
        return sh(*PODMAN, "logs", "--tail", "40", self.name, check=False).stderr[-4000:]

    def stop(self) -> int:
        sh(*PODMAN, "stop", "-t", "60", self.name, timeout=120)
        return int(sh(*PODMAN, "inspect", "-f", "{{.State.ExitCode}}", self.name).stdout.strip())

    def remove(self) -> None:
        sh(*PODMAN, "rm", "-f", self.name, check=False)


@pytest.fixture(scope="module")
def replicas(image, assets):
    made = [Container(f"structserve-test-{i}", assets.qwen3_tiny) for i in (1, 2)]
    try:
        for c in made:
            c.wait_ready()
        yield made
    finally:
        for c in made:
            c.remove()


@pytest.fixture(scope="module")
def balancer(replicas, tmp_path_factory):
    nginx = Nginx([c.url for c in replicas], tmp_path_factory.mktemp("nginx"))
    yield nginx.url
    nginx.stop()


def ask(base_url: str) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    return client.chat.completions.create(
        model="qwen3-tiny", max_tokens=4, temperature=0, messages=[{"role": "user", "content": "Hello"}]
    )


def test_one_container_serves(replicas):
    c = replicas[0]
    assert httpx.get(f"{c.url}/health", timeout=10).json() == {"status": "ok"}
    assert httpx.get(f"{c.url}/ready", timeout=10).json()["status"] == "ready"
    out = ask(c.url)
    assert out.choices[0].finish_reason in ("length", "stop") and out.usage.completion_tokens >= 1
    user = sh(*PODMAN, "exec", c.name, "id", "-u").stdout.strip()
    assert user != "0", "the container runs as a non-root user"


def test_the_image_loads_the_pd_transfer_engine(image):
    """deploy/compose-pd.yaml's replicas need Mooncake's transfer engine and its Debian libraries."""
    code = "from mooncake.engine import TransferEngine; TransferEngine(); print('mooncake ok')"
    limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096", "--no-healthcheck"]
    out = sh(*PODMAN, "run", "--rm", "--network", "none", *limits, "--entrypoint", "python", image, "-c", code)
    assert out.stdout.strip() == "mooncake ok"


def test_gateway_container_routes_to_the_replicas(replicas):
    """The podman recipe's gateway (scripts/container.sh gateway: smg from the same image)."""
    port = free_port()
    sh("bash", str(SCRIPT), "gateway", "structserve-test-gw", str(port), *(c.url for c in replicas))
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while '"healthy_workers":2' not in _get(f"{url}/readiness") and time.monotonic() < deadline:
            time.sleep(0.3)
        out = ask(url)
        assert out.choices[0].finish_reason in ("length", "stop") and out.usage.completion_tokens >= 1
    finally:
        sh(*PODMAN, "rm", "-f", "structserve-test-gw", check=False)


def _get(url: str) -> str:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return ""


def test_balancer_spreads_and_drops_a_stopped_replica(replicas, balancer):
    ports = Counter()
    for _ in range(12):
        resp = httpx.post(
            f"{balancer}/v1/chat/completions",
            timeout=120,
            json={"model": "qwen3-tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert resp.status_code == 200, resp.text
        ports[resp.headers["x-upstream"].rsplit(":", 1)[1]] += 1
    assert set(ports) == {str(c.port) for c in replicas}, ports  # both replicas served
    assert replicas[0].stop() == 0  # SIGTERM: drained, exit 0
    after = Counter()
    for _ in range(6):
        resp = httpx.post(
            f"{balancer}/v1/chat/completions",
            timeout=120,
            json={"model": "qwen3-tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
        )
        assert resp.status_code == 200, resp.text
        after[resp.headers["x-upstream"].rsplit(":", 1)[-1]] += 1
    assert set(after) == {str(replicas[1].port)}, after
