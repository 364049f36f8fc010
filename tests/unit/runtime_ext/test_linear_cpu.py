"""The compiled few-row bf16 linear (``runtime_ext/ops/linear_cpu``: the AVX512-BF16 dot-product loop,
and AMX tiles from 5 rows where the CPU has them) against torch's, and the calls it refuses. Its sums are float32 in another order than torch's, so outputs are compared with the float32
product of the same bf16 inputs: within one bf16 rounding (half an ulp, 2^-9 relative) plus float32
summation error, never more. Each comparison checks the compiled loop ran (``CALLS``): without a
library ``linear`` is ``F.linear`` and the comparison would hold trivially."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

from runtime_ext.ops import linear_cpu
from tests import cpu_flags

BF16_DOT = cpu_flags.has("avx512f", "avx512_bf16")
needs_bf16_dot = pytest.mark.skipif(not BF16_DOT, reason="this CPU lacks AVX512-BF16: the loop is not built for it")
AMX = BF16_DOT and cpu_flags.has("amx_tile", "amx_bf16")
needs_amx = pytest.mark.skipif(not AMX, reason="this CPU lacks AMX-BF16: 9+ rows run torch's")


@contextmanager
def ran(impl: str):
    before = list(linear_cpu.CALLS)
    yield
    native, reference = (a - b for a, b in zip(linear_cpu.CALLS, before))
    assert (native, reference) != (0, 0)
    assert (reference if impl == "native" else native) == 0, f"native ran {native}, reference {reference}"


def _exact(x, w, bias=None):
    return F.linear(x.double(), w.double(), None if bias is None else bias.double())


def test_the_compiled_loop_is_loaded_where_the_cpu_has_avx512_bf16():
    """With AVX512-BF16 (this machine's and CI's CPU) and a C compiler the loop is loaded: without a
    compiler this fails, not skips. A CPU without the instruction runs torch's and says why. With
    AMX-BF16 too (this machine's) the tiles take up to 64 rows (Linux 5.16+ grants them)."""
    if BF16_DOT:
        assert linear_cpu.status() == "native", linear_cpu.reason()
    else:
        assert linear_cpu.status() == "reference" and "AVX512-BF16" in linear_cpu.reason()
    assert linear_cpu.amx() == AMX == linear_cpu.report()["amx"]
    assert linear_cpu.max_rows(960) == (linear_cpu.AMX_MAX_ROWS if AMX else linear_cpu.MAX_ROWS)
    assert linear_cpu.max_rows(961) == linear_cpu.MAX_ROWS


def _check(got, x, w, bias):
    """Within one bf16 rounding (plus float32 summation) of the exact product, and of torch's output."""
    exact = _exact(x, w, bias)
    assert got.shape == exact.shape and got.dtype == torch.bfloat16
    scale = (x.double().abs() @ w.double().abs().T) + (bias.double().abs() if bias is not None else 0)
    assert bool(((got.double() - exact).abs() <= exact.abs() * 2**-8 + scale * 2**-20).all())
    torch_out = F.linear(x, w, bias)
    assert bool(((got.double() - torch_out.double()).abs() <= exact.abs() * 2**-7 + scale * 2**-20).all())


def _inputs(rows, n, k, with_bias):
    gen = torch.Generator().manual_seed(rows * 7 + n)
    x = torch.randn(rows, k, generator=gen).bfloat16()
    w = torch.randn(n, k, generator=gen).bfloat16()
    return x, w, torch.randn(n, generator=gen).bfloat16() if with_bias else None


@needs_bf16_dot
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize(("n", "k"), [(960, 576), (576, 1536), (5, 32), (4099, 64)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_outputs_are_the_bf16_rounding_of_the_exact_product(rows, n, k, with_bias):
    x, w, bias = _inputs(rows, n, k, with_bias)
    with ran("native"):
        got = linear_cpu.linear(x, w, bias)
    _check(got, x, w, bias)


@needs_bf16_dot
@pytest.mark.parametrize("rows", [5, 6, 7, 8])
@pytest.mark.parametrize(("n", "k"), [(960, 576), (5, 32), (4099, 64)])
def test_the_dot_product_loop_alone_takes_5_to_8_rows(rows, n, k):
    """``linear_bf16`` runs 5-8 rows on tiles where AMX is usable: the dot-product loop (what runs
    them on a CPU without AMX) is called directly here, so it is tested on this machine too."""
    x, w, bias = _inputs(rows, n, k, True)
    got = torch.empty(rows, n, dtype=torch.bfloat16)
    lib = linear_cpu.KERNEL.lib()
    args = (x.data_ptr(), x.stride(0), w.data_ptr(), bias.data_ptr(), rows, n, k)
    assert lib.linear_dot_bf16(got.data_ptr(), *args) == 0
    _check(got, x, w, bias)


@needs_amx
@pytest.mark.parametrize("rows", [5, 9, 16, 17, 31, 32, 33, 64])
@pytest.mark.parametrize(("n", "k"), [(960, 576), (576, 1536), (32, 32), (96, 64)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_tiles_outputs_are_the_bf16_rounding_of_the_exact_product(rows, n, k, with_bias):
    """Every tile arrangement: one or two B tiles (16 / 32 rows) and their partial fill, a second block
    of 32 rows (33, 64), one or many blocks of 32 output columns."""
    x, w, bias = _inputs(rows, n, k, with_bias)
    with ran("native"):
        got = linear_cpu.linear(x, w, bias)
    _check(got, x, w, bias)


@needs_bf16_dot
@pytest.mark.parametrize("rows", [3, 20])  # 20: tiles where AMX is usable
def test_strided_rows_nan_and_inf_follow_ieee(rows):
    x = torch.randn(rows, 2, 64).bfloat16()[:, 0]  # rows 128 apart, last dimension contiguous
    w = torch.randn(32, 64).bfloat16()
    w[1, 0] = float("nan")
    w[2, :] = 0
    w[2, 5] = float("inf")
    x[:, 5] = 1
    with ran("native"):
        got = linear_cpu.linear(x, w)
    assert bool(got[:, 1].isnan().all()) and bool((got[:, 2] == float("inf")).all())
    assert torch.allclose(got[:, 3:].float(), F.linear(x, w)[:, 3:].float(), rtol=2**-7, atol=1e-2)


@pytest.mark.parametrize(
    "case",
    ["float32", "nine_rows_n_not_32", "65_rows", "k_not_32", "weight_transposed", "last_dim_strided", "no_rows"],
)
def test_calls_it_does_not_take_run_torch(case):
    x, w, bias = torch.randn(2, 64).bfloat16(), torch.randn(16, 64).bfloat16(), None
    if case == "float32":
        x, w = x.float(), w.float()
    elif case == "nine_rows_n_not_32":  # tiles take multiples of 32 output columns only
        x = torch.randn(9, 64).bfloat16()
    elif case == "65_rows":
        x, w = torch.randn(65, 64).bfloat16(), torch.randn(32, 64).bfloat16()
    elif case == "k_not_32":
        x, w = x[:, :40].contiguous(), w[:, :40].contiguous()
    elif case == "weight_transposed":
        w = torch.randn(64, 16).bfloat16().T
    elif case == "last_dim_strided":
        x = torch.randn(2, 128).bfloat16()[:, ::2]
    else:
        x = torch.empty(0, 64).bfloat16()
    assert not linear_cpu.takes(x, w, bias)
    before = list(linear_cpu.CALLS)
    assert torch.equal(linear_cpu.linear(x, w, bias), F.linear(x, w, bias))
    assert linear_cpu.CALLS[0] == before[0]


def test_the_reference_setting_turns_it_off(monkeypatch):
    from runtime_ext.ops.cpu_build import library

    monkeypatch.setenv("STRUCTSERVE_DECODE_KERNELS", "reference")
    library.cache_clear()
    try:
        assert linear_cpu.status() == "reference"
        assert linear_cpu.reason() == "configured: decode_kernels is reference"
        x, w = torch.randn(1, 64).bfloat16(), torch.randn(8, 64).bfloat16()
        with ran("reference"):
            assert torch.equal(linear_cpu.linear(x, w), F.linear(x, w))
    finally:
        monkeypatch.delenv("STRUCTSERVE_DECODE_KERNELS")
        library.cache_clear()


def test_a_build_without_avx512_bf16_is_not_loaded():
    """The portable build (no -march) compiles the loop out: cpu_build refuses to load it, so a loaded
    library always runs the loop (the probe is asked once, at load, not per call)."""
    from runtime_ext.ops import cpu_build

    with pytest.raises(cpu_build.Unavailable, match="built without AVX512-BF16"):
        cpu_build.load(cpu_build.PORTABLE_FLAGS, cpu_build.LINEAR)
