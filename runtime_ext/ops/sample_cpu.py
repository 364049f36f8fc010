"""SGLang's seeded Gumbel-max sampler (``multinomial_with_seed``) on the CPU in one compiled call
(``sample_cpu.c``).

runtime_ext gives every sampled request a seed (``fixes/sampling_seed.py``: OpenAI's ``seed``, or one
drawn per request), so every non-greedy decode step samples through SGLang's ``multinomial_with_seed``:
on the CPU a murmur hash of each (row, vocabulary entry) in int64 torch ops and the Gumbel noise in
float64 tensors, about a quarter of a decode step of SmolLM2 at batch 32. ``sample`` computes the
same draw per element in registers (the arithmetic is SGLang's, step for step: ``sample_cpu.c``)
when ``takes`` holds (CPU tensors: float32 logprobs ``[n, m]`` with contiguous rows, int64 seeds
and positions ``[n]``), else returns None and SGLang's runs. ``CALLS`` counts the calls.
"""

from __future__ import annotations

import torch

from runtime_ext.ops.cpu_build import SAMPLE, Kernel

NATIVE, REFERENCE = 0, 1
KERNEL = Kernel(SAMPLE)
CALLS = KERNEL.calls
status, reason, report = KERNEL.status, KERNEL.reason, KERNEL.report
CHUNK = 4096  # sample_cpu.c's vocabulary entries per task


def takes(logprobs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> bool:
    if any(t.device.type != "cpu" for t in (logprobs, seeds, positions)):
        return False
    if logprobs.dtype != torch.float32 or logprobs.dim() != 2 or logprobs.stride(1) != 1:
        return False
    n, m = logprobs.shape
    if not 1 <= m <= 2**32 or n < 1 or logprobs.stride(0) < m:
        return False
    return all(t.dim() == 1 and t.shape[0] == n for t in (seeds, positions))


def sample(logprobs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor | None:
    """``multinomial_with_seed(logprobs, seeds, positions)``: the ``[n, 1]`` int64 draws, or None when
    the compiled loop does not take the call."""
    if not takes(logprobs, seeds, positions):
        return None
    lib = KERNEL.runnable()
    if lib is None:
        return None
    n, m = logprobs.shape
    seeds, positions = seeds.to(torch.int64).contiguous(), positions.to(torch.int64).contiguous()
    out = torch.empty((n, 1), dtype=torch.int64)
    tasks = n * -(-m // CHUNK)
    at, value = torch.empty(tasks, dtype=torch.int64), torch.empty(tasks, dtype=torch.float64)
    status_code = lib.seeded_gumbel_argmax(
        out.data_ptr(), logprobs.data_ptr(), logprobs.stride(0), seeds.data_ptr(), positions.data_ptr(),
        n, m, at.data_ptr(), value.data_ptr(),
    )  # fmt: skip
    if status_code != 0:
        raise RuntimeError(f"seeded_gumbel_argmax refused a call takes() accepted (status {status_code})")
    CALLS[NATIVE] += 1
    return out
