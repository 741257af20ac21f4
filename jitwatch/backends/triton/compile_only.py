"""Compile-only Triton driver: real compiles on machines without a GPU.

``triton.runtime.driver.set_active(CompileOnlyDriver())`` makes Triton believe a CUDA device of
the chosen compute capability (default sm_90, H100/H200) is present. ``kernel.warmup(...,
grid=...)`` and ``JITFunction.preload`` then run the whole pipeline (ttir → ttgir → llir → ptx →
cubin, with the ``ptxas`` bundled in the Triton wheel), every JIT hook and the compilation
listener fire, the in-memory and disk caches fill — and nothing is launched. A real launch
(``kernel[grid](...)``) raises :class:`CompileOnlyLaunchError`.

Checked with Triton 3.6 and 3.9 on x86-64 Linux CPU machines. Tensors passed to ``warmup`` may be
CPU tensors: Triton only reads their dtype and ``data_ptr()`` (for the 16-byte alignment class).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from jitwatch.errors import CompileOnlyLaunchError

DEFAULT_ARCH = 90


class CompileOnlyDriver(DriverBase):
    """A Triton driver that reports a CUDA target and refuses to launch.

    Args:
        arch: CUDA compute capability as an int (``90`` = sm_90, ``80`` = sm_80, ``100`` = sm_100).
        warp_size: 32 for every NVIDIA target.
    """

    def __init__(self, arch: int = DEFAULT_ARCH, warp_size: int = 32) -> None:
        self.target = GPUTarget("cuda", arch, warp_size)
        self._device = 0

    @classmethod
    def is_active(cls) -> bool:
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_benchmarker(self) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise CompileOnlyLaunchError("compile-only driver: autotune benchmarks need a GPU")

        return refuse

    def get_current_device(self) -> int:
        return self._device

    def set_current_device(self, device: int) -> None:
        self._device = device

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return divmod(int(self.target.arch), 10)

    def __getattr__(self, name: str) -> Any:
        # launcher construction, memory queries, …: anything that needs a real device.
        raise CompileOnlyLaunchError(f"compile-only driver has no {name!r}: nothing can launch")


_lock = threading.Lock()


def activate(arch: int = DEFAULT_ARCH) -> CompileOnlyDriver:
    """Make a :class:`CompileOnlyDriver` Triton's active driver and return it."""
    import triton

    drv = CompileOnlyDriver(arch)
    with _lock:
        triton.runtime.driver.set_active(drv)
    return drv


def deactivate() -> None:
    """Drop the compile-only driver; Triton builds its default driver on next use (GPU machines)."""
    import triton

    with _lock:
        triton.runtime.driver._active = None


@contextmanager
def compile_only(arch: int = DEFAULT_ARCH) -> Iterator[CompileOnlyDriver]:
    """Context manager: compile-only driver inside, the previous active driver restored after —
    exactly, ``None`` included: on a machine without a GPU Triton has no default driver and
    ``reset_active()`` would raise ("0 active drivers"); on a GPU machine ``None`` just means
    Triton has not built its driver yet. The one place jitwatch swaps Triton's driver."""
    import triton

    cfg = triton.runtime.driver
    previous = getattr(cfg, "_active", None)
    drv = activate(arch)
    try:
        yield drv
    finally:
        with _lock:
            # Not reset_active(): on a machine without a GPU Triton has no default driver and
            # building one raises ("0 active drivers"). Put back exactly what was there.
            cfg._active = previous


def gpu_available() -> bool:
    """True when torch sees a CUDA device (then kernels should launch for real)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False
