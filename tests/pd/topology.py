"""A prefill/decode topology as processes on loopback: a structserve prefill replica and a decode
replica (engine.disaggregation, Mooncake over TCP, one CPU core each) behind SGLang's gateway in
PD mode (``smg --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL``)."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.fronts import GATEWAY_FLAGS, SMG, Front
from tests.server import ServerProcess, free_port

# the tiny Qwen3 as qwen_server runs it (the aggregated reference): float32, thinking off
# One retry: with one prefill replica, retrying a pair whose prefill died only retries into it
# (smg's default is 5 retries, spread over ~0.7 s of backoff).
PD_GATEWAY_FLAGS = ["--retry-max-retries", "1"]
BASE_ENV = {"STRUCTSERVE_DTYPE": "float32", "STRUCTSERVE_REASONING__DEFAULT_THINKING": "false"}
# Decode admits transfers under the budget, in a pool small enough for test_pd_decode_budget to
# offer more than it holds (three requests that may each write 900 tokens).
DECODE_POOL_TOKENS = 2048
DECODE_ENV = {
    "STRUCTSERVE_SCHEDULING__ADMISSION": "budget",
    "STRUCTSERVE_ENGINE__MAX_TOTAL_TOKENS": str(DECODE_POOL_TOKENS),
}


def pd_env(mode: str, bootstrap_port: int, core: int) -> dict[str, str]:
    return {
        **BASE_ENV,
        "STRUCTSERVE_ENGINE__DISAGGREGATION__MODE": mode,
        "STRUCTSERVE_ENGINE__DISAGGREGATION__BOOTSTRAP_PORT": str(bootstrap_port),
        "STRUCTSERVE_ENGINE__DISAGGREGATION__HOST_IP": "127.0.0.1",
        "SGLANG_CPU_OMP_THREADS_BIND": str(core),  # one core per engine
    }


class PDGateway(Front):
    """``smg launch --pd-disaggregation`` in front of one prefill and one decode replica."""

    probe = "/readiness"

    def __init__(self, prefill: str, bootstrap_port: int, decode: str, log: Path, extra: list[str] = ()) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [str(SMG), "launch", "--host", "127.0.0.1", "--port", str(port), "--pd-disaggregation"]
        cmd += ["--prefill", prefill, str(bootstrap_port), "--decode", decode, *PD_GATEWAY_FLAGS]
        flags = [f for f in GATEWAY_FLAGS if f not in ("--policy", "cache_aware")]
        cmd += [*flags, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), *extra]
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        self._wait('"healthy_workers":2', log)


@dataclass
class PDTopology:
    prefill: ServerProcess
    decode: ServerProcess
    bootstrap_port: int
    gateway: PDGateway | None = None

    @classmethod
    def start(cls, model_dir: Path, log_dir: Path) -> "PDTopology":
        port = free_port()
        topo = cls(
            prefill=ServerProcess(model_dir, "pd-prefill", env=pd_env("prefill", port, 0)),
            decode=ServerProcess(model_dir, "pd-decode", env={**pd_env("decode", port, 1), **DECODE_ENV}),
            bootstrap_port=port,
        )
        try:
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda r: r.start(), (topo.prefill, topo.decode)))
            topo.gateway = PDGateway(topo.prefill.base_url, port, topo.decode.base_url, log_dir / "smg-pd.log")
        except BaseException:
            topo.stop()
            raise
        return topo

    def log_tails(self, n: int = 25) -> list[tuple[str, str]]:
        tails = [("prefill", self.prefill.log_tail(n)), ("decode", self.decode.log_tail(n))]
        if self.gateway is not None:
            tails.append(("gateway", "\n".join(self.gateway.log.read_text(errors="replace").splitlines()[-n:])))
        return tails

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
        for replica in (self.prefill, self.decode):
            if replica.proc is not None and replica.proc.poll() is None:
                replica.stop()
