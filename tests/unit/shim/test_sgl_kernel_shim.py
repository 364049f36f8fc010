"""The sgl_kernel CPU stand-in: same bits as SGLang's kernels, on hand-checked values."""

import pytest

torch = pytest.importorskip("torch")
sgl_kernel = pytest.importorskip("sgl_kernel")

M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & M32


def _mix(h, k):
    k = _rotl((k * 0xCC9E2D51) & M32, 15)
    k = (k * 0x1B873593) & M32
    h = _rotl(h ^ k, 13)
    return (h * 5 + 0xE6546B64) & M32


def murmur_ref(seed, pos, col):
    """Straight transcription of sglang.kernels.ops.sampling.murmur_hash (Python ints)."""
    h = _mix(0, seed & M32)
    h = _mix(h, (seed >> 32) & M32)
    h = _mix(h, pos & M32)
    h = _mix(h, col & M32)
    h ^= 16
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def test_is_the_shim_and_hides_amx_probe():
    if not getattr(sgl_kernel, "IS_STRUCTSERVE_SHIM", False):
        pytest.skip("a real sgl_kernel is installed")
    assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")
    with pytest.raises(NotImplementedError, match="fused_thing"):
        sgl_kernel.fused_thing(1)


def test_murmur_hash32_matches_reference():
    seeds = torch.tensor([0, 42, 2**40 + 7, 2**62 - 1], dtype=torch.int64).to(torch.uint64)
    positions = torch.tensor([0, 5, 123456, 2**31 - 1], dtype=torch.int64)
    cols = torch.tensor([0, 1, 151935, 77], dtype=torch.int64)
    got = torch.ops.sgl_kernel.murmur_hash32_cpu(seeds, positions, cols)
    assert got.dtype == torch.uint32 and got.shape == (4, 4)
    expect = [
        [murmur_ref(int(s), int(p), int(c)) for c in cols] for s, p in zip([0, 42, 2**40 + 7, 2**62 - 1], positions)
    ]
    assert got.to(torch.int64).tolist() == expect
    assert len({v for row in expect for v in row}) == 16  # the hash actually spreads


def test_copy_all_layer_kv_cache_moves_rows_in_every_buffer():
    bufs = [
        torch.arange(24, dtype=torch.float32).view(6, 4).clone(),
        torch.arange(12, dtype=torch.int8).view(6, 2).clone(),
    ]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.int64)
    strides = torch.tensor([b.stride(0) * b.element_size() for b in bufs], dtype=torch.int64)
    before = [b.clone() for b in bufs]
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([0, 5]), torch.tensor([2, 3]))
    for b, old in zip(bufs, before):
        assert torch.equal(b[0], old[2]) and torch.equal(b[5], old[3])
        assert torch.equal(b[1:5], old[1:5])


def test_init_cpu_threads_env():
    threads = torch.get_num_threads()
    try:
        msg = torch.ops.sgl_kernel.init_cpu_threads_env([0])
        assert "1 torch threads" in msg and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
