"""The compiled seeded sampler (``runtime_ext/ops/sample_cpu``) draws what SGLang's own
``multinomial_with_seed`` draws: the same token for every row, over flat and peaked rows, rows with
``-inf`` entries, NaN, exact ties, seeds of both signs, positions past 2^32, vocabularies that are not
a multiple of its chunk, strided rows. The reference is SGLang's function as written (its eager
body: the engine runs it through torch.compile, which computes the same float64 steps). Through the
hook (``decode_hooks.seeded_sample``) a call the kernel does not take runs SGLang's."""

from __future__ import annotations

import pytest
import torch
from sglang.srt.layers import sampler

from runtime_ext import decode_hooks
from runtime_ext.ops import sample_cpu

UPSTREAM = sampler.multinomial_with_seed._torchdynamo_orig_callable  # the eager body of SGLang's function


def _rows(n: int, m: int, scale: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logprobs = torch.log_softmax(torch.randn(n, m, generator=gen) * scale, dim=-1)
    seeds = torch.randint(-(2**63), 2**63 - 1, (n,), generator=gen)
    positions = torch.randint(0, 2**40, (n,), generator=gen)
    return logprobs, seeds, positions


def _draw(logprobs, seeds, positions) -> torch.Tensor:
    before = sample_cpu.CALLS[0]
    got = sample_cpu.sample(logprobs, seeds, positions)
    assert got is not None and sample_cpu.CALLS[0] == before + 1
    assert got.shape == (logprobs.shape[0], 1) and got.dtype == torch.int64
    return got


def test_the_compiled_loop_is_loaded_here():
    assert sample_cpu.status() == "native", sample_cpu.reason()


@pytest.mark.parametrize("scale", [0.01, 0.5, 2.0, 8.0, 40.0])  # flat rows (nothing skipped) to peaked ones
@pytest.mark.parametrize(("n", "m"), [(1, 49152), (7, 4096), (16, 50000), (3, 100)])
def test_draws_equal_sglangs(scale, n, m):
    logprobs, seeds, positions = _rows(n, m, scale, seed=int(scale * 100) + n + m)
    assert torch.equal(_draw(logprobs, seeds, positions), UPSTREAM(logprobs, seeds, positions))


def test_many_draws_follow_the_distribution_as_sglangs_do():
    """The same 512 draws as SGLang's (one row, positions 0-511): the skip rule never drops a winner."""
    logprobs, seeds, _ = _rows(1, 32000, 3.0, seed=5)
    rows, seeds = logprobs.expand(512, -1).contiguous(), seeds.expand(512).contiguous()
    positions = torch.arange(512)
    got = _draw(rows, seeds, positions)
    assert torch.equal(got, UPSTREAM(rows, seeds, positions))
    assert got.unique().numel() > 20  # draws, not one argmax


def test_masked_entries_nan_and_ties():
    logprobs, seeds, positions = _rows(6, 9000, 2.0, seed=11)
    logprobs[0, 1::2] = float("-inf")  # a top-k / top-p mask
    logprobs[1, :] = float("-inf")
    logprobs[1, 4321] = 0.0  # one token left: drawn whatever the noise
    logprobs[2, 7000] = float("nan")  # a NaN wins, as torch.argmax says
    logprobs[3, 5000] = float("nan")
    logprobs[3, 100] = float("nan")  # the first NaN
    logprobs[4, :] = -5.0  # all tied: the noise decides, as SGLang's does
    logprobs[5, :] = float("-inf")  # nothing left: index 0, as torch.argmax gives
    got = _draw(logprobs, seeds, positions)
    assert torch.equal(got, UPSTREAM(logprobs, seeds, positions))
    assert got.view(-1)[1:4].tolist() == [4321, 7000, 100]


def test_strided_rows():
    logprobs, seeds, positions = _rows(4, 2 * 5000, 3.0, seed=3)
    view = logprobs[:, :5000]  # rows 10000 apart
    assert torch.equal(_draw(view, seeds, positions), UPSTREAM(view.contiguous(), seeds, positions))


@pytest.mark.parametrize("case", ["float64", "one_dim", "seeds_short", "column_strided"])
def test_calls_it_does_not_take_run_sglangs(case):
    logprobs, seeds, positions = _rows(2, 300, 1.0, seed=1)
    if case == "float64":
        logprobs = logprobs.double()
    elif case == "one_dim":
        logprobs = logprobs[0]
    elif case == "seeds_short":
        seeds = seeds[:1]
    else:
        logprobs = torch.log_softmax(torch.randn(2, 600), -1)[:, ::2]
    assert not sample_cpu.takes(logprobs, seeds, positions)
    calls: list[str] = []

    def original(*args):
        calls.append("sglang")
        return "sglang's"

    assert decode_hooks.seeded_sample(original, logprobs, seeds, positions) == "sglang's" and calls == ["sglang"]


def test_the_hook_returns_the_kernels_draw():
    logprobs, seeds, positions = _rows(3, 2000, 2.0, seed=9)
    got = decode_hooks.seeded_sample(lambda *a: pytest.fail("SGLang's ran"), logprobs, seeds, positions)
    assert torch.equal(got, UPSTREAM(logprobs, seeds, positions))


def test_the_reference_setting_turns_it_off(monkeypatch):
    from runtime_ext.ops.cpu_build import library

    monkeypatch.setenv("STRUCTSERVE_DECODE_KERNELS", "reference")
    library.cache_clear()
    try:
        assert sample_cpu.status() == "reference"
        logprobs, seeds, positions = _rows(1, 100, 1.0, seed=2)
        before = list(sample_cpu.CALLS)
        assert sample_cpu.sample(logprobs, seeds, positions) is None
        assert sample_cpu.CALLS == [before[0], before[1] + 1]
    finally:
        monkeypatch.delenv("STRUCTSERVE_DECODE_KERNELS")
        library.cache_clear()
