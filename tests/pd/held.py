"""A request caught mid-transfer, for the link-down tests: the prefill replica is frozen (SIGSTOP:
its ports still accept, so decode keeps waiting for the KV) while a chat request goes through the
gateway, and decode reserves pages for it. The test then breaks the link (kills the prefill, or
drops its connections and resumes it) and reads how the client's request ended."""

from __future__ import annotations

import signal
import threading
import time

import openai
import psutil

from tests.api.test_kv_c8_aborts import scrape


def free_tokens(server) -> float:
    return scrape(server)[("structserve_kv_pool_census", (("part", "free"),))]


def decode_requests(server) -> float:
    """Chat requests the decode replica has answered, any status."""
    return sum(
        v
        for (name, labels), v in scrape(server).items()
        if name == "structserve_requests_total" and ("route", "/v1/chat/completions") in labels
    )


def pd_stat(server, stat: str) -> float:
    return scrape(server).get(("structserve_pd_link", (("stat", stat),)), 0.0)


class HeldRequest:
    def __init__(self, pd, question: str) -> None:
        self.pd = pd
        self.client = openai.OpenAI(base_url=f"{pd.gateway.url}/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": question}]
        self.ask = dict(model=pd.decode.model_name, messages=messages, max_tokens=8, temperature=0)
        prefill = psutil.Process(pd.prefill.proc.pid)
        self.family = [prefill, *prefill.children(recursive=True)]
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._request)

    def serves(self) -> bool:
        """One short request through the pair answers."""
        return bool(self.client.chat.completions.create(**self.ask).choices[0].message.content)

    def _request(self) -> None:
        try:
            self.client.chat.completions.create(**{**self.ask, "max_tokens": 200})
            self.outcome["error"] = None
        except (openai.APIStatusError, openai.APIConnectionError) as exc:
            self.outcome["error"] = exc
        self.outcome["at"] = time.monotonic()

    def signal(self, sig: int) -> None:
        for proc in self.family:
            proc.send_signal(sig)

    def hold(self, idle_free: float) -> None:
        """Freeze the prefill, send the request, return once decode holds pages for it."""
        self.signal(signal.SIGSTOP)
        self.thread.start()
        deadline = time.monotonic() + 30
        while free_tokens(self.pd.decode) >= idle_free and time.monotonic() < deadline:
            time.sleep(0.05)
        assert free_tokens(self.pd.decode) < idle_free, "decode never reserved pages for the request"

    def ended(self, since: float, what: str) -> tuple[object, float]:
        """(the client's error or None, seconds from ``since`` to the answer)."""
        self.thread.join(timeout=60)
        assert "at" in self.outcome, "the client got no answer"
        waited = self.outcome["at"] - since
        print(f"\nthe client's error came {waited:.2f} s after {what}: {self.outcome['error']}")
        return self.outcome["error"], waited

    def pages_back(self, idle_free: float, by: float) -> bool:
        """Whether decode's free pages are back to ``idle_free`` by the monotonic time ``by``."""
        while free_tokens(self.pd.decode) < idle_free and time.monotonic() < by:
            time.sleep(0.05)
        return free_tokens(self.pd.decode) == idle_free
