"""The plugin runs in SGLang's launcher before argument parsing, so SGLang's own server
offers our tool-call parsers as --tool-call-parser choices."""

import os
import subprocess
import sys


def test_launch_server_lists_structserve_parsers():
    out = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for name in ("structserve_generic", "structserve_qwen", "structserve_mistral"):
        assert name in out.stdout
