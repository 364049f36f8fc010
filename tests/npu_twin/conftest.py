"""The twin's tests run in processes of their own (``test_under_twin.py`` starts them): with
``TORCH_NPU_TWIN=1`` this conftest installs the torch_npu twin before any test module imports
sglang. Without it (``make test``'s process) it installs nothing: that process also runs the CPU
suites, which must not see an NPU."""

from __future__ import annotations

import os

from tests.npu_twin import twin

if os.environ.get(twin.ENV) == "1":
    twin.install()
