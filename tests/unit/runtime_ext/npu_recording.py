"""Record the torch_npu calls runtime_ext makes, and replay them through the strict emulation.

Test-only switch for engine runs (``tests/engine/sglang_npu_record.py``): with ``STRUCTSERVE_NPU_RECORD``
set to a file path, ``install_from_env()`` (called at import of that script, so also in every process
SGLang spawns from it: spawn re-runs the main module) makes the process behave as an NPU build:

- the ops dispatch table answers "cpu" with each op's "npu" entry (``runtime_ext.ops.OPS``);
- ``kv_npu._npu`` / ``quant_npu._npu`` return a ``Recorder`` around ``npu_emulation`` (strict).

Each distinct call (op, the calling runtime_ext function, tensor dtypes/shapes, scalar and dtype
arguments) is appended to the file as one JSON line *before* the op runs, so a call that breaks a
contract is on record even though it then raises inside the engine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from tests.unit.runtime_ext import npu_emulation

ENV = "STRUCTSERVE_NPU_RECORD"
OPS = (
    "npu_dynamic_quant",
    "npu_quantize",
    "npu_anti_quant",
    "npu_quant_matmul",
    "npu_weight_quant_batchmatmul",
    "npu_convert_weight_to_int4pack",
    "npu_format_cast",
    "npu_linear",
)
_DTYPES = {str(d): d for d in (torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32,
                               torch.int64, torch.uint8, torch.qint8, torch.quint8, torch.quint4x2)}  # fmt: skip


def describe(value: Any) -> Any:
    """A JSON description of an argument: tensors by dtype and shape, dtypes by name."""
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot describe a {type(value).__name__} argument")


def rebuild(desc: Any) -> Any:
    """An argument matching a description: float tensors 0.5, integer tensors 0 (valid values)."""
    if isinstance(desc, dict) and "tensor" in desc:
        dtype = _DTYPES[desc["tensor"]]
        if dtype.is_floating_point:
            return torch.full(desc["shape"], 0.5, dtype=dtype)
        return torch.zeros(desc["shape"], dtype=dtype)
    if isinstance(desc, dict) and "dtype" in desc:
        return _DTYPES[desc["dtype"]]
    return desc


class Recorder:
    """Looks like the torch_npu module: each op appends its call's description to ``path``."""

    def __init__(self, path: Path, ops: Any = npu_emulation) -> None:
        self.path, self.ops, self.seen = Path(path), ops, set()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = getattr(self.ops, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_code
            module = Path(caller.co_filename).stem
            record = {
                "op": name,
                "caller": f"{module}.{caller.co_name}",
                "args": [describe(a) for a in args],
                "kwargs": {k: describe(v) for k, v in kwargs.items()},
            }
            line = json.dumps(record, sort_keys=True)
            if line not in self.seen:
                self.seen.add(line)
                with self.path.open("a") as f:
                    f.write(line + "\n")
            return op(*args, **kwargs)

        return call


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def replay(record: dict, ops: Any = npu_emulation) -> Any:
    """Run one recorded call again through the strict emulation (raises ContractViolation if it breaks a rule)."""
    args = [rebuild(a) for a in record["args"]]
    kwargs = {k: rebuild(v) for k, v in record["kwargs"].items()}
    return getattr(ops, record["op"])(*args, **kwargs)


def install(path: Path) -> None:
    """This process behaves as an NPU build whose torch_npu is the recording strict emulation."""
    from runtime_ext import ops
    from runtime_ext.ops import kv_npu, quant_npu

    recorder = Recorder(path)
    kv_npu._npu = quant_npu._npu = lambda: recorder  # type: ignore[method-assign]
    for table in ops.OPS.values():
        if "npu" in table:
            table["cpu"] = table["npu"]


def install_from_env() -> None:
    path = os.environ.get(ENV)
    if path:
        install(Path(path))
