"""Decode's bfloat16 linear layers on the CPU, one compiled call each (``linear_cpu.c``).

At decode batch 1-64 a linear layer reads all its weights for a few outputs, so its speed is the
rate the weights stream from memory. torch's bfloat16 ``F.linear`` reads SmolLM2's 30 layers at
9-11 GB/s on this 2-core machine; ``linear_cpu.c`` reads them at 17-20 GB/s for 1-4 rows
(AVX512-BF16 dot products) and, where the CPU has AMX, at about the same rate up to 16 rows and
1.5x torch's up to 32 (``linear_amx.h``, tiles; ``bench/decode_kernels.py``). It runs a call only
when every condition below holds, and counts what ran (``CALLS``, the plugin report,
``structserve_decode_kernel_calls`` in ``/metrics``):

- the compiled library is loaded (built by ``cpu_build`` with this CPU's AVX512-BF16: a build
  without it is refused there; not with ``decode_kernels: reference``, ``RuntimeExtConfig``);
- CPU tensors, input, weight (and bias) bfloat16, no autograd;
- the weight ``[N, K]`` contiguous, ``K`` a multiple of 32; the input's last dimension contiguous
  (rows may be strided, as SGLang's split views are) and its rows ≤ ``MAX_ROWS``, or ≤
  ``AMX_MAX_ROWS`` when the library runs AMX tiles (``amx()``: the CPU has them and Linux lets this
  process use them) and ``N`` is a multiple of 32;

otherwise it is torch's ``F.linear`` (``CALLS[REFERENCE]`` counts only calls it takes that ran torch's
for want of a library: a prefill's many rows are not counted). The arithmetic is float32 sums
of exact bf16 products rounded once (torch's differs by summation order; the test bounds it).

Two places call it (``runtime_ext.decode_hooks``): SGLang's ``UnquantizedLinearMethod.apply``
(every unquantized linear layer) and the logits processor's ``lm_head`` product. Quantized
methods, NPU tensors and larger batches (a prefill's) never reach it.
"""

from __future__ import annotations

from functools import cache

import torch

from runtime_ext.ops.cpu_build import LINEAR, Kernel

MAX_ROWS = 8  # the dot-product loop: 2x torch's at 1-4 rows, 1.1x at 8 (bench/decode_kernels.py)
AMX_MAX_ROWS = 64  # tiles from 5 rows (linear_amx.h); beyond 64, torch's matmul is as fast
NATIVE, REFERENCE = 0, 1
KERNEL = Kernel(LINEAR)
CALLS = KERNEL.calls  # calls the compiled loop ran; calls that wanted it and ran F.linear (no library)
status, reason = KERNEL.status, KERNEL.reason


@cache
def _max_rows(lib: object, out_features: int) -> int:
    return int(lib.linear_max_rows(out_features))  # type: ignore[attr-defined]


def max_rows(out_features: int) -> int:
    """The most input rows the compiled loop takes for a weight of ``out_features`` rows (the library
    says: ``AMX_MAX_ROWS`` on tiles for a multiple of 32, else ``MAX_ROWS``)."""
    lib = KERNEL.lib()
    return MAX_ROWS if lib is None else _max_rows(lib, out_features)


def amx() -> bool:
    """Whether the loaded library multiplies 5 to ``AMX_MAX_ROWS`` rows on AMX tiles."""
    return max_rows(32) == AMX_MAX_ROWS


def report() -> dict:
    """The plugin report's entry: ``KERNEL.report()`` and whether 5+ rows run on AMX tiles."""
    return {**KERNEL.report(), "amx": amx()}


def takes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the compiled loop takes ``F.linear(x, weight, bias)`` (see the module docstring)."""
    if x.device.type != "cpu" or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        return False
    if weight.dim() != 2 or not weight.is_contiguous() or weight.shape[1] % 32 or x.shape[-1] != weight.shape[1]:
        return False
    if x.dim() != 2 or x.shape[0] < 1 or x.stride(-1) != 1:
        return False
    if x.shape[0] > MAX_ROWS and x.shape[0] > max_rows(weight.shape[0]):
        return False
    if bias is not None and (bias.dtype != torch.bfloat16 or bias.dim() != 1 or not bias.is_contiguous()):
        return False
    if bias is not None and bias.shape[0] != weight.shape[0]:
        return False
    return not torch.is_grad_enabled() or not (x.requires_grad or weight.requires_grad)


def try_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` through the compiled loop, or None when it does not take the call
    (``takes``) or no library is loaded (counted as a reference call)."""
    if not takes(x, weight, bias):
        return None
    lib = KERNEL.runnable()
    if lib is None:
        return None
    out = torch.empty((x.shape[0], weight.shape[0]), dtype=torch.bfloat16)
    status_code = lib.linear_bf16(
        out.data_ptr(),
        x.data_ptr(),
        x.stride(0),
        weight.data_ptr(),
        bias.data_ptr() if bias is not None else None,
        x.shape[0],
        weight.shape[0],
        weight.shape[1],
    )
    if status_code != 0:  # takes() checked every condition the C side checks
        raise RuntimeError(f"linear_bf16 refused a call takes() accepted (status {status_code})")
    CALLS[NATIVE] += 1
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: the compiled loop when it takes the call, else torch's."""
    out = try_linear(x, weight, bias)
    return torch.nn.functional.linear(x, weight, bias) if out is None else out
