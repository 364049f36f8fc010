"""Gap: SGLang ignores ``sampling_seed`` unless ``--enable-deterministic-inference``
is set, and that flag switches on batch-invariant GPU kernels that do not exist on
CPU (or Ascend). So OpenAI's ``seed`` would be silently dropped.

Fix: after ``SamplingBatchInfo.from_schedule_batch`` builds a batch's sampling
tensors, fill ``sampling_seed`` for every request: its own seed when the client sent
one, otherwise a random seed drawn once per request. SGLang's sampler then uses its
seeded Gumbel sampler (``multinomial_with_seed``: a hash of seed and position), so a
seeded request repeats exactly while unseeded ones stay random. Every batch gets the
tensor, which keeps ``merge_batch``/``filter_batch`` lengths consistent.
"""

from __future__ import annotations

import secrets
from typing import Any

TARGET = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch"
_RANDOM_SEED_ATTR = "_structserve_random_seed"


def request_seed(req: Any) -> int:
    """The seed SGLang should sample this request with."""
    seed = req.sampling_params.sampling_seed
    if seed is not None:
        return int(seed)
    random_seed = getattr(req, _RANDOM_SEED_ATTR, None)
    if random_seed is None:
        random_seed = secrets.randbits(62)
        setattr(req, _RANDOM_SEED_ATTR, random_seed)
    return random_seed


def fill_sampling_seed(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook on ``from_schedule_batch``."""
    import torch

    if result.sampling_seed is not None:
        return result
    batch = kwargs.get("batch") or next(a for a in args if hasattr(a, "reqs"))
    seeds = [request_seed(r) for r in batch.reqs]
    result.sampling_seed = torch.tensor(seeds, dtype=torch.int64, device=result.temperatures.device)
    return result


def register(hooks: Any, hook_type: Any) -> None:
    hooks.register(TARGET, fill_sampling_seed, hook_type.AFTER)
