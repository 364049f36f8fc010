"""fixes/grammar_token_sync.py: SGLang's own ``Sampler._sync_token_ids_across_tp`` under the hook.
One rank: the all-reduce is skipped. Two ranks (gloo, forked processes): it still runs, and the
ranks end with the same tokens."""

from __future__ import annotations

import multiprocessing as mp
from types import SimpleNamespace

import torch
import torch.distributed as dist
from sglang.srt.layers.sampler import Sampler

from runtime_ext.fixes.grammar_token_sync import sync_only_across_ranks

ORIGINAL = Sampler._sync_token_ids_across_tp
GRAMMAR_BATCH = SimpleNamespace(grammars=[object()])  # what makes SGLang sync


def _rank(rank: int, path: str, out) -> None:
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    try:
        tokens = torch.tensor([10 + rank, 20 - rank])  # the ranks disagree
        sync_only_across_ranks(ORIGINAL, SimpleNamespace(tp_sync_group=dist.group.WORLD), tokens, GRAMMAR_BATCH)
        out.put((rank, tokens.tolist()))
    finally:
        dist.destroy_process_group()


def test_two_ranks_still_agree_on_the_grammar_tokens(tmp_path):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, str(tmp_path / "store"), out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert got == {0: [10, 19], 1: [10, 19]}  # SGLang's MIN all-reduce ran on both


def test_one_rank_skips_the_all_reduce(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: calls.append(a))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = SimpleNamespace(tp_sync_group=dist.group.WORLD)
        ORIGINAL(sampler, torch.tensor([3, 4]), GRAMMAR_BATCH)
        assert len(calls) == 1  # SGLang alone all-reduces a grammar batch even on one rank
        sync_only_across_ranks(ORIGINAL, sampler, torch.tensor([3, 4]), GRAMMAR_BATCH)
        assert len(calls) == 1  # the hook does not
    finally:
        dist.destroy_process_group()
