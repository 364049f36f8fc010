"""A real redis-server (Debian's, ``make redis``) on a free loopback port, in a temp directory,
nothing persisted; for the shared response store's tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.server import free_port


class RedisServer:
    def __init__(self, directory: Path, *options: str) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run `make redis` (Debian's redis-server package)"
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log_path = directory / "redis.log"
        cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)]
        cmd += ["--save", "", "--appendonly", "no", "--logfile", str(self.log_path), *options]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait()

    def _wait(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"redis-server exited: {self.log()}"
            if self.command("PING") == "+PONG":
                return
            time.sleep(0.05)
        raise TimeoutError(f"redis-server on {self.port} not answering: {self.log()}")

    def command(self, *words: str) -> str | None:
        """One inline command (RESP), its first reply line; None when nothing listens."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
                conn.sendall((" ".join(words) + "\r\n").encode())
                return conn.recv(65536).decode(errors="replace").split("\r\n", 1)[0]
        except OSError:
            return None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
