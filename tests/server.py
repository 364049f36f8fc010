"""Run ``structserve serve`` as a real subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, model_dir: Path, name: str, env: dict[str, str] | None = None):
        self.model_dir = Path(model_dir)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("PYTEST_SERVER_LOG_DIR", "/tmp")) / f"structserve-{name}-{self.port}.log"
        self.env = {
            **os.environ,
            "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": "8192",
            "STRUCTSERVE_ENGINE__MAX_RUNNING_REQUESTS": "16",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None

    @property
    def model_name(self) -> str:
        return self.model_dir.name

    def start(self) -> None:
        cmd = [sys.executable, "-m", "service", "serve", "--model", str(self.model_dir), "--port", str(self.port)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"server not ready after {STARTUP_TIMEOUT_S}s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 60) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)
        finally:
            self._log.close()
