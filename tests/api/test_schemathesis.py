"""schemathesis (its CLI: its pytest plugin does not load under pytest 9) against our own
/openapi.json on 127.0.0.1, the real server on the tiny Qwen3: generated valid and invalid
requests for every operation (/tokenize and /detokenize included), 0 server errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_no_server_errors(qwen_server, tmp_path):
    cli = Path(sys.executable).with_name("schemathesis")
    proc = subprocess.run(
        [
            str(cli),
            "run",
            f"{qwen_server.base_url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "40",
            "--seed",
            "1",
            "--workers",
            "1",
            "--request-timeout",
            "120",
            "--report",
            "ndjson",
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    out = proc.stdout + proc.stderr
    print(out[-3000:])
    assert proc.returncode == 0, out[-6000:]
    assert "/v1/chat/completions" in out and "passed" in out.lower()
    report = "".join(p.read_text() for p in tmp_path.glob("*.ndjson"))  # every operation run, by path
    assert all(f'"{path}"' in report for path in ("/tokenize", "/detokenize", "/v1/tokenize", "/v1/detokenize"))
