"""The torch_npu twin: lets SGLang's own NPU code paths run on this CPU, in a process of their own.

``install()`` must run before anything imports sglang (SGLang evaluates ``is_npu()`` at import of
its modules and keeps the answer). It puts in place:

1. **The ``npu`` device name**: torch's PrivateUse1 backend renamed to ``npu`` (what torch_npu
   does), so ``torch.device("npu")`` and ``torch.get_device_module("npu")`` exist.
2. **The ``torch.npu`` namespace** (``NPU``): device queries, streams and events as no-ops, memory
   queries answering for one stated device (``DEVICE``, an Atlas 800I A2 with 64 GiB, nothing
   allocated), seeds. Registered as torch's ``npu`` device module, and as ``torch_npu.npu``.
3. **A ``torch_npu`` package** whose ops are the strict emulations (``ops.OPS``): each checks its
   documented contract (dtypes, shapes, ranges; ``ContractViolation`` citing the hiascend /
   op-plugin page) and then computes the documented result. Any other ``torch_npu`` name (and
   any ``torch_npu.*``, ``sgl_kernel_npu.*``, ``torchair.*`` module) imports, but calling it raises
   ``NotEmulated`` naming it: an NPU path that needs an op the twin lacks fails loudly.
4. **The device remap** (``DeviceRemap``, a ``TorchFunctionMode``): every torch call asked for an
   ``npu`` device (``device=`` arguments, ``Tensor.to``) gets the CPU instead, so "npu" tensors
   live on the CPU while SGLang's ``device`` strings stay ``"npu"`` for its own resolution.
5. **The host-sync counter** (``HostSyncs``, in the same mode): tensors allocated for the ``npu``, and
   everything computed from them, are marked; ``count_host_syncs()`` records each device->host
   sync on a marked tensor (``SYNC_CALLS``, a boolean-mask index, ``.to`` the host). An emulated op
   runs as one kernel (``_kernel``): what it computes inside is not counted.

Limits (docs/npu-twin.md): tensors report ``device.type == "cpu"`` (code that branches on a
tensor's device takes its CPU branch); host and device memory are the same, so a host<->device
copy is the same tensor; the remap holds in the thread that installed it; streams, events and
graph capture do nothing; no collective runs (one rank).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

ENV = "TORCH_NPU_TWIN"  # "1" in a process that runs its tests under the twin (tests/npu_twin/conftest.py)
FAKE_ROOTS = ("torch_npu", "sgl_kernel_npu", "torchair")
GIB = 1 << 30
DEVICE = {"name": "Ascend910B3 (twin: Atlas 800I A2)", "total_memory": 64 * GIB}


class NotEmulated(NotImplementedError):
    """A torch_npu (or sgl_kernel_npu, torchair) callable the twin does not emulate was called."""


class _Missing:
    """Stands for a name the twin does not emulate: importable, raising when called."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        raise NotEmulated(f"{self._name} is not emulated by the torch_npu twin (tests/npu_twin)")

    def __getattr__(self, name: str) -> _Missing:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{self._name}.{name}")


def _module_getattr(prefix: str) -> Any:
    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{prefix}.{name}")

    return __getattr__


def _package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    module.__getattr__ = _module_getattr(name)  # type: ignore[method-assign]
    return module


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any submodule of the faked packages: an empty package whose names are ``_Missing``."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in FAKE_ROOTS and fullname not in sys.modules:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _package(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _NoOpStream:
    """``torch.npu.Stream`` / ``Event``: the twin runs everything in order on the CPU."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> _NoOpStream:
        return self

    def __exit__(self, *_exc: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *_a, **_k: None  # wait_stream, synchronize, record, record_stream, query...


def _npu_namespace() -> types.ModuleType:
    npu = _package("torch_npu.npu")
    props = types.SimpleNamespace(name=DEVICE["name"], total_memory=DEVICE["total_memory"], uuid="twin-0")
    state = {"device": 0}

    def set_device(device: Any) -> None:
        state["device"] = device if isinstance(device, int) else (torch.device(device).index or 0)

    names: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: state["device"],
        "set_device": set_device,
        "synchronize": lambda *_a: None,
        "Stream": _NoOpStream,
        "Event": _NoOpStream,
        "current_stream": lambda *_a: _NoOpStream(),
        "stream": lambda *_a: _NoOpStream(),
        "mem_get_info": lambda *_a: (DEVICE["total_memory"], DEVICE["total_memory"]),
        "get_device_properties": lambda *_a: props,
        "get_device_name": lambda *_a: DEVICE["name"],
        "empty_cache": lambda: None,
        "memory_allocated": lambda *_a: 0,
        "max_memory_allocated": lambda *_a: 0,
        "reset_peak_memory_stats": lambda *_a: None,
        "manual_seed": lambda _seed: None,
        "manual_seed_all": lambda _seed: None,
        "set_compile_mode": lambda **_k: None,
        "config": types.SimpleNamespace(allow_internal_format=False),
    }
    for name, value in names.items():
        setattr(npu, name, value)
    return npu


def _is_npu(device: Any) -> bool:
    if isinstance(device, torch.device):
        return device.type == "npu"
    return isinstance(device, str) and device.split(":")[0] == "npu"


# Tensor calls that make the host wait for the device when their tensor lives on an NPU.
SYNC_CALLS = frozenset(
    {"item", "tolist", "cpu", "numpy", "nonzero", "unique", "masked_select", "__bool__", "__int__", "__float__",
     "__index__"}
)  # fmt: skip


class HostSyncs:
    """Device->host syncs seen while counting: a sync call (``SYNC_CALLS``, a boolean-mask index, a
    ``.to`` the host) on a tensor that lives on the "npu" (allocated for it, or computed from one).
    Calls inside an emulated op (``_kernel``) are the device's own work and are not counted."""

    def __init__(self) -> None:
        self.counting = False
        self.inside_kernel = 0
        self.seen: list[str] = []
        self.kernels: list[str] = []  # the emulated ops called while counting, in order

    def counted(self, name: str) -> None:
        if self.counting and not self.inside_kernel:
            self.seen.append(name)


SYNCS = HostSyncs()
_TAG = "_twin_npu"


def on_npu(t: Any) -> bool:
    """Whether ``t`` lives on the twin's "npu" (allocated for it, or computed from such a tensor)."""
    return isinstance(t, torch.Tensor) and getattr(t, _TAG, False)


def _tag(out: Any) -> Any:
    for t in torch.utils._pytree.tree_leaves(out):
        if isinstance(t, torch.Tensor):
            setattr(t, _TAG, True)
    return out


def _sync_name(func: Any, args: Any, kwargs: dict) -> str | None:
    name = getattr(func, "__name__", "")
    if not args or not on_npu(args[0]):
        return None
    if name in SYNC_CALLS:
        return name
    if name == "__getitem__" and any(
        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in torch.utils._pytree.tree_leaves(args[1:])
    ):
        return "__getitem__[bool mask]"
    if func is torch.Tensor.to and any(isinstance(a, (str, torch.device)) and not _is_npu(a) for a in args[1:]):
        return "to(host)"
    return None


class DeviceRemap(TorchFunctionMode):
    """Every torch call asked for an ``npu`` device gets the CPU (``device=``, ``Tensor.to(device)``); its
    result is marked as living on the "npu", as is every result computed from such a tensor (``HostSyncs``)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        to_npu = _is_npu(kwargs.get("device"))
        if to_npu:
            kwargs["device"] = torch.device("cpu")
        if kwargs.get("pin_memory"):  # no accelerator to pin for: host memory is the device's
            kwargs["pin_memory"] = False
        if func is torch.Tensor.to:
            to_npu = to_npu or any(_is_npu(a) for a in args)
            args = tuple(torch.device("cpu") if _is_npu(a) else a for a in args)
        if not to_npu and (sync := _sync_name(func, args, kwargs)) is not None:
            SYNCS.counted(sync)
        out = func(*args, **kwargs)
        if to_npu and func is torch.Tensor.to and out is args[0] and not on_npu(out):
            out = out.view_as(out)  # one memory, but the "npu" copy is another tensor than the host one
        if to_npu or any(on_npu(t) for t in torch.utils._pytree.tree_leaves((args, kwargs))):
            _tag(out)
        return out


def _torchair() -> None:
    """``get_compiler_backend()`` builds torchair's backend on NPU; SGLang passes ``disable=True`` on NPU,
    so it is never called. Graph mode is not emulated: calling the backend raises."""
    import torchair  # noqa: F401  (the stub package, from _StubFinder)
    import torchair.configs.compiler_config as compiler_config

    class CompilerConfig:
        def __init__(self) -> None:
            self.mode = "max-autotune"
            self.debug = types.SimpleNamespace(run_eagerly=False)

    compiler_config.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    sys.modules["torchair"].get_npu_backend = lambda **_k: _Missing("torchair npu backend (graph mode)")  # type: ignore[attr-defined]


def _sgl_kernel_npu() -> None:
    """The sgl_kernel_npu kernels the twin emulates (``model_ops.KERNELS``), in place in their stub modules
    before SGLang imports them by name."""
    import importlib

    from tests.npu_twin.model_ops import KERNELS

    for module_name, ops in KERNELS.items():
        module = importlib.import_module(module_name)  # the stub package, from _StubFinder
        for name, op in ops.items():
            setattr(module, name, _kernel(op))


def _kernel(op: Any) -> Any:
    """An emulated op runs as one device kernel: what it computes inside is not a host sync."""

    def run(*args: Any, **kwargs: Any) -> Any:
        if SYNCS.counting and not SYNCS.inside_kernel:
            SYNCS.kernels.append(run.__name__)
        SYNCS.inside_kernel += 1
        try:
            return op(*args, **kwargs)
        finally:
            SYNCS.inside_kernel -= 1

    run.__name__ = run.__qualname__ = getattr(op, "__name__", "op")
    run.__wrapped__ = op  # type: ignore[attr-defined]
    return run


class count_host_syncs:
    """``with count_host_syncs() as seen:`` the device->host syncs made inside (``seen``: their names);
    the emulated ops called inside are in ``SYNCS.kernels``."""

    def __enter__(self) -> list[str]:
        SYNCS.seen, SYNCS.kernels, SYNCS.counting = [], [], True
        return SYNCS.seen

    def __exit__(self, *_exc: Any) -> None:
        SYNCS.counting = False


_INSTALLED: dict[str, Any] = {}


def install() -> None:
    """Install the twin in this process (idempotent); refuses once sglang is imported."""
    if _INSTALLED:
        return
    if any(name == "sglang" or name.startswith("sglang.") for name in sys.modules):
        raise RuntimeError(
            "the torch_npu twin must be installed before sglang is imported (is_npu() is read at import)"
        )
    if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
        raise RuntimeError("SGLANG_USE_CPU_ENGINE=1 selects SGLang's CPU platform: unset it for the torch_npu twin")
    from tests.npu_twin.ops import OPS

    torch.utils.rename_privateuse1_backend("npu")
    npu = _npu_namespace()
    torch._register_device_module("npu", npu)
    torch_npu = _package("torch_npu")
    torch_npu.npu = npu  # type: ignore[attr-defined]
    for name, op in OPS.items():
        setattr(torch_npu, name, _kernel(op))
    sys.modules.update({"torch_npu": torch_npu, "torch_npu.npu": npu})
    sys.meta_path.insert(0, _StubFinder())
    _sgl_kernel_npu()
    torch.Tensor.npu = lambda self, *_a, **_k: self.to("npu")  # type: ignore[attr-defined]  (one memory: a view)
    _torchair()
    remap = DeviceRemap()
    remap.__enter__()
    _INSTALLED.update(torch_npu=torch_npu, npu=npu, remap=remap)


def require() -> None:
    """For the twin's test modules: they run only in a process that installed the twin."""
    if not _INSTALLED:
        raise RuntimeError(
            f"this module runs under the torch_npu twin: run it through tests/npu_twin/test_under_twin.py "
            f"(or {ENV}=1 python -m pytest -o python_files='twin_*.py' <file>)"
        )
