"""Run ``structserve serve`` as a real subprocess on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx

STARTUP_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base_url: str, alive: Callable[[], str | None], timeout: float) -> None:
    """Poll ``base_url``/ready until 200; ``alive()`` returns why the server is gone (it raises
    RuntimeError with that) or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (gone := alive()) is not None:
            raise RuntimeError(gone)
        try:
            if httpx.get(f"{base_url}/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{base_url} not ready after {timeout:.0f}s")


class ServerProcess:
    def __init__(self, model_dir: Path, name: str, env: dict[str, str] | None = None, module: str = "service"):
        self.model_dir = Path(model_dir)
        self.module = module  # run as `python -m <module> serve` (tests.scripted_serve: a test hook)
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
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process and return at once (``wait_ready`` waits for it)."""
        if self.proc is not None:
            return
        cmd = [sys.executable, "-m", self.module, "serve", "--model", str(self.model_dir), "--port", str(self.port)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        def alive() -> str | None:
            code = self.proc.poll()
            return None if code is None else f"server exited with {code}; log:\n{self.log_tail()}"

        try:
            wait_ready(self.base_url, alive, STARTUP_TIMEOUT_S)
        except TimeoutError as exc:
            self.stop()
            raise RuntimeError(f"{exc}; log:\n{self.log_tail()}") from None

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


@dataclass
class ScriptedServer:
    """A server started through tests/scripted_serve.py and the script file it reads."""

    server: ServerProcess
    script: Path

    def write(self, params: dict) -> None:
        """Extra sampling params for the selected engine requests from now on."""
        self.script.write_text(json.dumps(params))
