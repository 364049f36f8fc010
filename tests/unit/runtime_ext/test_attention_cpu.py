"""The compiled decode attention (``runtime_ext/ops/attention_cpu``) against the torch path it replaces
(``runtime_ext.attention.batched``: gather + SDPA) and against float64 attention, on a paged pool with
mixed lengths, repeated and unordered locations, GQA groups of 1-4 (the loops unrolled per group
size) and 6 (the general loop), head dims 16/64/128. Each comparison checks the compiled loop ran
(``CALLS``)."""

from __future__ import annotations

import pytest
import torch

from runtime_ext.attention.batched import DecodeRows, attend
from runtime_ext.ops import attention_cpu
from tests import cpu_flags

pytestmark = pytest.mark.skipif(not cpu_flags.has("avx512f"), reason="this CPU lacks AVX-512: the loop is not built")

ROWS = 400


def _case(seed: int, hq: int, hkv: int, d: int, lens: list[int]):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(ROWS, hkv, d, generator=gen).bfloat16()
    v = torch.randn(ROWS, hkv, d, generator=gen).bfloat16()
    qkv = torch.randn(len(lens), hq * d + 2 * hkv * d, generator=gen).bfloat16()
    q = qkv[:, : hq * d].reshape(len(lens), hq, d)  # a split view: requests hq·d + 2·hkv·d apart, as SGLang's
    req_to_token = torch.randint(1, ROWS, (len(lens), max(lens) + 3), generator=gen, dtype=torch.int32)
    req_to_token[0, :3] = torch.tensor([5, 5, 9])  # a location read twice
    rows = DecodeRows.of(req_to_token, torch.arange(len(lens)), lens)
    return q, k, v, rows


def _exact(q, k, v, rows: DecodeRows, scale: float) -> torch.Tensor:
    out = []
    g = q.shape[1] // k.shape[1]
    for b, n in enumerate(rows.lens.tolist()):
        locs = rows.locs[b, :n]
        kb = k[locs].double().repeat_interleave(g, dim=1)  # [n, Hq, D]
        vb = v[locs].double().repeat_interleave(g, dim=1)
        w = torch.softmax(torch.einsum("hd,nhd->hn", q[b].double(), kb) * scale, dim=-1)
        out.append(torch.einsum("hn,nhd->hd", w, vb))
    return torch.stack(out)


def test_the_compiled_loop_is_loaded_here():
    assert attention_cpu.status() == "native", attention_cpu.reason()


@pytest.mark.parametrize(
    ("hq", "hkv", "d"), [(9, 3, 64), (4, 4, 64), (4, 2, 64), (8, 2, 64), (8, 2, 128), (3, 1, 16), (12, 2, 64)]
)
@pytest.mark.parametrize("lens", [[1], [37, 5, 300, 16, 17]])
def test_outputs_match_float64_attention_and_the_torch_path(hq, hkv, d, lens):
    q, k, v, rows = _case(len(lens) + hq, hq, hkv, d, lens)
    scale = d**-0.5
    before = attention_cpu.CALLS[0]
    got = attention_cpu.decode(q, k, v, rows.locs, rows.lens, scale)
    assert got is not None and attention_cpu.CALLS[0] == before + 1
    exact = _exact(q, k, v, rows, scale)
    assert got.shape == exact.shape and got.dtype == torch.bfloat16
    assert (got.double() - exact).abs().max().item() <= 2**-8 * exact.abs().max().item() + 1e-6
    kk, vv = k[rows.locs], v[rows.locs]  # the torch path: gather + masked SDPA
    torch_path = attend(q.contiguous(), kk, vv, rows.valid, scale)
    assert (got.float() - torch_path.float()).abs().max().item() <= 2**-7 * exact.abs().max().item() + 1e-3


def test_a_location_outside_the_pool_raises_before_reading():
    q, k, v, rows = _case(1, 9, 3, 64, [10, 4])
    rows.locs[1, 2] = ROWS + 7
    with pytest.raises(IndexError, match=f"location {ROWS + 7} is outside"):
        attention_cpu.decode(q, k, v, rows.locs, rows.lens, 0.125)
    rows.locs[1, 2] = 3
    rows.locs[1, 5] = -1  # beyond this request's length: never read, not refused
    assert attention_cpu.decode(q, k, v, rows.locs, rows.lens, 0.125) is not None


@pytest.mark.parametrize("case", ["float32", "c8_int8", "head_dim_24", "group_of_17"])
def test_calls_it_does_not_take_return_none(case):
    hq, hkv, d = {"head_dim_24": (2, 1, 24), "group_of_17": (17, 1, 64)}.get(case, (4, 2, 64))
    q, k, v, rows = _case(2, hq, hkv, d, [8])
    if case == "float32":
        q, k, v = q.float(), k.float(), v.float()
    elif case == "c8_int8":
        k = k.to(torch.int8)
    before = list(attention_cpu.CALLS)
    assert attention_cpu.decode(q, k, v, rows.locs, rows.lens, 0.125) is None
    assert attention_cpu.CALLS == [before[0], before[1] + 1]
