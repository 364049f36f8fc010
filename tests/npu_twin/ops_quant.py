"""``torch.ops.npu`` under the twin: the dispatcher namespace torch_npu registers its ops in.

torch_npu (op-plugin) registers every op in the ``npu`` library of torch's dispatcher, and its
``torch_npu.<op>`` Python functions are bindings of those same ops; SGLang 0.5.23's NPU linear
methods call them there (``hardware_backend/npu/quantization/linear_method_npu.py``:
``torch.ops.npu.npu_dynamic_quant(x)``, ``torch.ops.npu.npu_quant_matmul(...)``;
``hardware_backend/npu/utils.py``: ``torch.ops.npu.npu_format_cast``). ``install()`` puts in
place of torch's ``npu`` op namespace one whose names are the twin's strict emulations
(``ops.OPS``: each checks its documented contract, ``ContractViolation`` citing the page, then
computes), and whose other names raise ``NotEmulated`` when called, as ``torch_npu``'s do.

Each call is recorded in ``CALLS`` as (op, the calling function's qualified name), so a test can
state which of SGLang's functions called which op.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from tests.npu_twin.ops import OPS
from tests.npu_twin.twin import _Missing

CALLS: list[tuple[str, str]] = []  # (op, caller's module.qualname), in call order


def _recorded(name: str, op: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        CALLS.append((name, f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"))
        return op(*args, **kwargs)

    call.__name__ = name
    return call


class OpNamespace:
    """Stands for ``torch.ops.npu``: the emulated ops by name, every other name ``NotEmulated``."""

    def __init__(self, ops: dict[str, Any]) -> None:
        for name, op in ops.items():
            setattr(self, name, _recorded(name, op))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"torch.ops.npu.{name}")


def install() -> None:
    """``torch.ops.npu`` becomes the emulated namespace (idempotent); call after ``twin.install()``."""
    if not isinstance(torch.ops.__dict__.get("npu"), OpNamespace):
        setattr(torch.ops, "npu", OpNamespace(OPS))
