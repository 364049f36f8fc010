"""The fronts of a multi-replica deployment, as processes on loopback (tests and bench/):
SGLang's model gateway (smg, from .venv-gateway, the flags of deploy/compose.yaml) and nginx
(deploy/nginx.conf, its two ``server`` lines rewritten)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import httpx

from tests.server import free_port

ROOT = Path(__file__).resolve().parents[1]
SMG = ROOT / ".venv-gateway" / "bin" / "smg"
# The replica-facing flags of deploy/compose.yaml: readiness from /ready every second (a
# draining or loading replica leaves the rotation), cache-aware routing.
GATEWAY_FLAGS = [
    "--policy",
    "cache_aware",
    "--health-check-endpoint",
    "/ready",
    "--health-check-interval-secs",
    "1",
    "--health-failure-threshold",
    "1",
    "--health-success-threshold",
    "1",
    "--worker-startup-check-interval",
    "1",
    "--disable-tokenizer-autoload",
]


class Front:
    url: str
    proc: subprocess.Popen

    def _wait(self, ready: str, log: Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready in httpx.get(self.url + self.probe, timeout=2).text:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        raise TimeoutError(f"{self.url} not ready: {log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Gateway(Front):
    """``smg launch`` in front of the replicas; ready when every worker is healthy."""

    probe = "/readiness"

    def __init__(self, workers: list[str], log: Path, extra: list[str] = ()) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers]
        cmd += [*GATEWAY_FLAGS, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), *extra]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self._wait(f'"healthy_workers":{len(workers)}', log)


class Nginx(Front):
    """nginx with deploy/nginx.conf (least_conn) in front of the replicas."""

    probe = "/health"

    def __init__(self, workers: list[str], directory: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        servers = "".join(
            f"        server {w.removeprefix('http://')} max_fails=1 fail_timeout=10s;\n" for w in workers
        )
        conf = (ROOT / "deploy" / "nginx.conf").read_text()
        conf = re.sub(r"(        server replica\d:8000[^\n]*\n)+", servers, conf)
        conf = conf.replace("listen 8080;", f"listen 127.0.0.1:{port};")
        path, log = directory / "nginx.conf", directory / "nginx.log"
        path.write_text(conf.replace("/tmp/structserve-nginx.pid", str(directory / "nginx.pid")))
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(["nginx", "-c", str(path), "-g", "daemon off;"], stdout=out, stderr=out)
        self._wait("ok", log)
