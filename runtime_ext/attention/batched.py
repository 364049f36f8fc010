"""Decode attention for a whole batch in one call per layer (imports torch).

SGLang 0.5.23's ``torch_native`` decode (and runtime_ext's per-request reference path) loops over
the batch's requests in Python for every layer: at batch 32 on a 30-layer model that is 960
gathers and 960 attention calls per step. Here a decode step is one padded gather and one
attention call per layer:

- ``DecodeRows.of``: the batch's cache locations ``[B, L]`` (``L`` the longest request) read from
  ``req_to_token`` in one indexing op, once per forward (every layer reuses it), with a
  length mask. Padding positions point at location 0, SGLang's reserved padding slot, so a
  gather through them stays in bounds; the mask keeps them out of the softmax.
- ``attend``: one ``scaled_dot_product_attention`` over ``[B, Hkv, G, D]`` queries: the ``G``
  query heads that share a KV head (GQA, ``Hq = Hkv · G``, query head ``h`` reads KV head
  ``h // G`` as in SGLang and HF) act as ``G`` query rows of that KV head, so K/V are never
  repeated per query head. Decode has no causal mask: each request's one query sees all of
  its ``seq_len`` rows.

Float32 results equal the per-request path to rounding (tested ≤ 1e-5 on mixed lengths).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.functional import scaled_dot_product_attention


@dataclass(frozen=True)
class DecodeRows:
    """Where a decode batch's cached rows are: ``locs[B, L]``, ``valid[B, L]`` and ``lens[B]``."""

    locs: torch.Tensor
    valid: torch.Tensor
    lens: torch.Tensor

    @classmethod
    def of(cls, req_to_token: torch.Tensor, rows: torch.Tensor, seq_lens: list[int]) -> DecodeRows:
        """``rows[B]``: each request's row of ``req_to_token``; ``seq_lens``: its cached length
        (the token being decoded included)."""
        longest = max(seq_lens)
        device = req_to_token.device
        lens = torch.tensor(seq_lens, device=device)
        valid = torch.arange(longest, device=device).unsqueeze(0) < lens.unsqueeze(1)
        locs = req_to_token[rows.to(device=device, dtype=torch.long), :longest].masked_fill(~valid, 0)
        return cls(locs.long(), valid, lens)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.locs.shape[0]), int(self.locs.shape[1])


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float) -> torch.Tensor:
    """Decode attention: ``q[B, Hq, D]`` against ``k[B, L, Hkv, D]``, ``v[B, L, Hkv, Dv]`` where
    ``valid[B, L]`` -> ``[B, Hq, Dv]``."""
    b, hq, d = q.shape
    hkv = k.shape[2]
    groups = q.view(b, hkv, hq // hkv, d)
    keys, values = k.to(q.dtype).transpose(1, 2), v.to(q.dtype).transpose(1, 2)  # [B, Hkv, L, D]
    out = scaled_dot_product_attention(groups, keys, values, attn_mask=valid[:, None, None, :], scale=scale)
    return out.reshape(b, hq, v.shape[-1])
