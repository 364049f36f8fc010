"""A whole model through SGLang 0.5.23's own NPU code under the twin: SmolLM2 (``LlamaForCausalLM``)
loaded by SGLang's loader for ``engine.device: npu``, run by ``LlamaForCausalLM.forward`` (SGLang's
NPU layers: ``RMSNorm.forward_npu``, ``RotaryEmbedding.forward_npu``, ``SiluAndMul.forward_npu``,
``RadixAttention`` → the ``ascend`` backend over the NPU KV pool, ``LogitsProcessor``).

What ``ModelRunner`` would do, done here with SGLang's own pieces (``ModelRunner`` itself is not
built: its ``initialize`` opens a distributed group, captures graphs and sizes memory):

- the model: ``modelslim_npu.load_model`` (``get_model``, one load shared by every KV mode);
- per KV mode: ``sglang_npu.build_pools`` (``KVCacheConfigurator``) and ``attention_backend``
  (SGLang's registry), as ``ModelRunner.initialize`` builds them;
- per step: a ``ForwardBatch`` (the fields ``ForwardBatch.init_new`` sets for one request),
  ``attn_backend.init_forward_metadata``, then ``model.forward`` inside SGLang's
  ``forward_context`` (what ``ModelRunner.forward_extend`` / ``forward_decode`` run). The next token
  is the argmax of ``next_token_logits`` (greedy: what SGLang's sampler returns at temperature 0).

Each decode step's device->host syncs (``twin.count_host_syncs``) and the emulated ops it called are
kept per step (``Served.syncs``, ``Served.kernels``).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

from tests.npu_twin import twin
from tests.npu_twin.sglang_npu import attention_backend, build_pools

PAGE = 128  # SGLang's NPU default page size; the request's tokens start at page 1


def forward_batch(ids: list[int], start: int, decode: bool) -> Any:
    """One request (pool index 0) whose ``ids`` follow ``start`` cached tokens, at cache rows PAGE + i."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    n, seq = len(ids), start + len(ids)
    npu = "npu"
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE if decode else ForwardMode.EXTEND, batch_size=1,
        input_ids=torch.tensor(ids, device=npu), req_pool_indices=torch.tensor([0], device=npu),
        seq_lens=torch.tensor([seq], device=npu), seq_lens_cpu=torch.tensor([seq]), seq_lens_sum=seq,
        out_cache_loc=torch.arange(PAGE + start, PAGE + seq, device=npu),
        positions=torch.arange(start, seq, device=npu), global_num_token_non_padded_cpu=n,
        extend_seq_lens=None if decode else torch.tensor([n], dtype=torch.int32, device=npu),
        extend_seq_lens_cpu=None if decode else [n], extend_prefix_lens_cpu=None if decode else [start],
        extend_prefix_lens=None if decode else torch.tensor([start], device=npu),
        capture_hidden_mode=CaptureHiddenMode.NULL,
    )  # fmt: skip


class Served:
    """SGLang's NPU pools and ascend backend for one KV mode, around the shared model."""

    def __init__(self, args: Any, model: Any) -> None:
        self.configurator, self.pools = build_pools(args)
        self.backend = attention_backend(args, self.configurator, self.pools)
        self.pool = self.pools.token_to_kv_pool
        self.model = model
        self.syncs: list[list[str]] = []  # per decode step
        self.kernels: list[list[str]] = []  # per decode step, in call order

    @torch.no_grad()
    def step(self, ids: list[int], start: int, decode: bool) -> torch.Tensor:
        with self._forward(ids, start, decode) as (batch, seen):
            logits = self.model.forward(batch.input_ids, batch.positions, batch).next_token_logits
        if decode:
            self.syncs.append(list(seen))
            self.kernels.append(list(twin.SYNCS.kernels))
        return logits[-1].float()

    @torch.no_grad()
    def logits(self, ids: list[int]) -> torch.Tensor:
        """Next-token logits (float32, ``[len(ids), vocab]``) of one extend of ``ids`` over an empty cache:
        SGLang's ``LlamaModel.forward`` (each layer stores its K/V in the pool and its attention reads
        the sequence back from it), then ``lm_head`` over every position in float32 (``LogitsProcessor``
        computes the last position's, the only one the model's own forward returns)."""
        with self._forward(ids, 0, decode=False) as (batch, _):
            hidden = self.model.model(batch.input_ids, batch.positions, batch)
        return hidden.float() @ self.model.lm_head.weight.float().T

    @contextlib.contextmanager
    def _forward(self, ids: list[int], start: int, decode: bool) -> Iterator[tuple[Any, list[str]]]:
        """The batch of one step (its rows in ``req_to_token``, the backend's metadata) inside SGLang's
        ``forward_context``, and the host syncs the step makes (``twin.count_host_syncs``)."""
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        batch = forward_batch(ids, start, decode)
        rows = torch.arange(PAGE, PAGE + start + len(ids), dtype=torch.int32)
        self.pools.req_to_token_pool.req_to_token[0, : len(rows)] = rows
        with twin.count_host_syncs() as seen, forward_context(ForwardContext(self.backend), forward_batch=batch):
            self.backend.init_forward_metadata(batch)
            yield batch, seen

    def greedy(self, ids: list[int], tokens: int) -> list[int]:
        """``tokens`` greedy tokens after ``ids``: one extend, then one decode step per token."""
        out = [int(self.step(ids, 0, decode=False).argmax())]
        while len(out) < tokens:
            out.append(int(self.step(out[-1:], len(ids) + len(out) - 1, decode=True).argmax()))
        return out


def perplexity(all_logits: torch.Tensor, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ``ids[1:]`` under ``all_logits`` (``Served.logits(ids)``)."""
    lp = torch.log_softmax(all_logits[:-1], dim=-1)
    return float(torch.exp(-lp.gather(1, torch.tensor(ids[1:]).unsqueeze(1)).mean()))


def one_rank() -> types.SimpleNamespace:
    """The groups of one rank the model reads (``modelslim_npu.state_one_rank_groups``)."""
    from tests.npu_twin.modelslim_npu import ONE_RANK, state_one_rank_groups

    state_one_rank_groups()
    return ONE_RANK
