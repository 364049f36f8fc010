"""Cost: SGLang 0.5.23's ``Sampler._sync_token_ids_across_tp`` all-reduces every sampled batch
that carries a grammar (``if SYNC_TOKEN_IDS_ACROSS_TP or sampling_info.grammars``), so that TP
ranks which sampled different tokens do not desynchronise their grammars. It does so even when
the TP group has one rank, where the all-reduce (gloo on CPU) has nothing to agree on. Measured
on SmolLM2 at concurrency 8 (py-spy, ``bench/grammar_profile.py``): the largest single item of
the grammar path, a quarter of it (1.11 of 4.40 points of the scheduler loop).

Fix (AROUND hook): call SGLang's method only when the group has more than one rank. This is the
guard SGLang itself puts around its other TP all-reduce in the same class
(``Sampler`` sampling-mask statuses: ``if dist.get_world_size(self.tp_sync_group) > 1``). With
several ranks nothing changes. ``STRUCTSERVE_GRAMMAR_TOKEN_SYNC=always`` keeps SGLang's behaviour
(the bench's A/B).
"""

from __future__ import annotations

import os
from typing import Any

TARGET = "sglang.srt.layers.sampler.Sampler._sync_token_ids_across_tp"


def group_size(group: Any) -> int:
    """Ranks in ``group`` (1 when torch.distributed is not initialised: nothing to sync)."""
    import torch.distributed as dist

    return dist.get_world_size(group) if dist.is_initialized() else 1


def sync_only_across_ranks(original: Any, sampler: Any, token_ids: Any, sampling_info: Any) -> None:
    if group_size(sampler.tp_sync_group) > 1:
        original(sampler, token_ids, sampling_info)


def register(hooks: Any, hook_type: Any) -> None:
    if os.environ.get("STRUCTSERVE_GRAMMAR_TOKEN_SYNC", "rank") == "always":
        return
    hooks.register(TARGET, sync_only_across_ranks, hook_type.AROUND)
