"""The compiled C8 KV library is loaded only from a cache this user alone can write (directory and
file owned by this uid, no group/world write bit, no symbolic link); otherwise the torch reference
runs and the reason says why. Its cache key never stands in a generic string for the CPU: without
the CPU's feature flags no ``-march=native`` build is made or loaded."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from runtime_ext.ops import cpu_build as kv_cpu_build
from runtime_ext.ops import kv_cpu
from tests.unit.runtime_ext.kv_cpu_builds import took


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache holding this CPU's build and the portable one (built once for the module)."""
    root = tmp_path_factory.mktemp("kernels") / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(kv_cpu_build.CACHE_ENV, str(root))
        loaded = kv_cpu_build.library.__wrapped__()
        assert loaded.lib is not None, loaded.reason
        kv_cpu_build.load(kv_cpu_build.PORTABLE_FLAGS)
    return root


@pytest.fixture
def cache(built, tmp_path, monkeypatch):
    """A private copy of ``built`` as this test's kernel cache."""
    copy = tmp_path / "kernels"
    shutil.copytree(built, copy)
    copy.chmod(0o700)
    monkeypatch.setenv(kv_cpu_build.CACHE_ENV, str(copy))
    return copy


def _fresh() -> kv_cpu_build.Loaded:
    return kv_cpu_build.library.__wrapped__()


def test_a_private_cache_loads_its_library(cache):
    loaded = _fresh()
    assert loaded.lib is not None and loaded.reason == "compiled for this CPU"


def test_a_cache_others_can_write_is_not_loaded_from(cache, monkeypatch):
    cache.chmod(0o777)
    loaded = _fresh()
    assert loaded.lib is None
    assert loaded.reason == f"cache not trusted: {cache} is writable by group or others (mode 0o777)"
    monkeypatch.setattr(kv_cpu, "_library", lambda: loaded.lib)  # what the process would run: the reference
    q, scales = torch.zeros(4, 2, 8, dtype=torch.int8), torch.ones(4, 2, dtype=torch.float16)
    with took("reference"):
        kv_cpu.gather_dequantize_per_token(q, scales, torch.tensor([1, 2]), torch.bfloat16)


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_library_file_others_can_write_is_not_loaded(cache, mode):
    for library in cache.glob("*.so"):
        library.chmod(mode)
    loaded = _fresh()
    assert loaded.lib is None and "is writable by group or others" in loaded.reason and ".so" in loaded.reason


def test_a_cache_owned_by_another_user_is_not_loaded_from(cache, monkeypatch):
    owner = os.stat(cache).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    loaded = _fresh()
    assert loaded.lib is None
    assert loaded.reason == f"cache not trusted: {cache} is owned by uid {owner}, not by this process's uid {owner + 1}"


def test_a_library_behind_a_symbolic_link_is_not_loaded(cache, tmp_path):
    for library in cache.glob("*.so"):
        elsewhere = tmp_path / library.name
        library.rename(elsewhere)
        library.symlink_to(elsewhere)
    loaded = _fresh()
    assert loaded.lib is None and "is a symbolic link" in loaded.reason


def test_a_new_build_is_private_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv(kv_cpu_build.CACHE_ENV, str(tmp_path / "fresh"))
    old = os.umask(0o002)
    try:
        path = kv_cpu_build.compiled(kv_cpu_build.PORTABLE_FLAGS)
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o022 == 0 and os.stat(path.parent).st_mode & 0o077 == 0


def test_without_the_cpu_flags_no_native_build_is_made_or_loaded(cache, monkeypatch):
    """The cache holds this CPU's build, but a process that cannot read the flags cannot tell it
    from another CPU's: it takes the portable build, whose key needs no CPU flags."""
    monkeypatch.setattr(kv_cpu_build, "cpu_flags", lambda: None)
    with pytest.raises(kv_cpu_build.Unavailable, match="feature flags cannot be read"):
        kv_cpu_build.build_key("cc", kv_cpu_build.NATIVE_FLAGS)
    loaded = _fresh()
    assert loaded.lib is not None and loaded.reason.startswith("compiled portable (the native build: this CPU's")
    assert len(list(cache.glob("*.so"))) == 2  # nothing new built


def test_the_key_names_the_cpu_only_for_a_native_build(monkeypatch):
    keys = {}
    for flags in ("flags : avx2", "flags : avx2 avx512f"):
        monkeypatch.setattr(kv_cpu_build, "cpu_flags", lambda flags=flags: flags)
        keys[flags] = [
            kv_cpu_build.build_key("cc", f) for f in (kv_cpu_build.NATIVE_FLAGS, kv_cpu_build.PORTABLE_FLAGS)
        ]
    (native_a, portable_a), (native_b, portable_b) = keys.values()
    assert native_a != native_b and portable_a == portable_b


def test_the_sanitizer_hook_goes_into_the_flags_and_the_key(monkeypatch):
    plain = kv_cpu_build.build_key("cc", kv_cpu_build.PORTABLE_FLAGS + kv_cpu_build.sanitizer_flags())
    monkeypatch.setenv(kv_cpu_build.SANITIZE_ENV, "address")
    assert "-fsanitize=address" in kv_cpu_build.sanitizer_flags()
    assert kv_cpu_build.build_key("cc", kv_cpu_build.PORTABLE_FLAGS + kv_cpu_build.sanitizer_flags()) != plain
    monkeypatch.setenv(kv_cpu_build.SANITIZE_ENV, "address -o /tmp/x")
    with pytest.raises(kv_cpu_build.Unavailable, match="not a list of sanitizer names"):
        kv_cpu_build.sanitizer_flags()
