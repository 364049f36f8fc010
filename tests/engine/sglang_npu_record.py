"""``sglang_greedy.py`` as an NPU build: the ops dispatch table uses runtime_ext's NPU kernels and
their torch_npu is the strict, recording emulation (``tests/unit/runtime_ext/npu_recording.py``).

    STRUCTSERVE_NPU_RECORD=calls.jsonl python tests/engine/sglang_npu_record.py <sglang_greedy.py args>

The switch runs at import of this module, so the scheduler, where the ops run, has it under either
start method: forked (the service's choice on cpu, ``sglang_greedy.py``'s) it inherits it; spawned,
it re-runs this main module (as ``__mp_main__``). Without the variable this is exactly
``sglang_greedy.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.unit.runtime_ext.npu_recording import install_from_env  # noqa: E402

install_from_env()

if __name__ == "__main__":
    from tests.engine.sglang_greedy import main

    main()
