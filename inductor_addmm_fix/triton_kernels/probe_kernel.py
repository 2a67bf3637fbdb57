"""The user Triton kernel the ``triton_kernels`` probes compile, and what lets them compile
it on any machine: Triton's driver answering a GPU target without a GPU, Triton's own
warnings kept from failing a probe under ``python -W error``.  Shared by the features of
this folder (``triton_analysis``, ``triton_analysis_cache``), which import nothing of
each other."""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Any, Iterator

import torch

from ..patching.declare import Unavailable


def triton_available() -> bool:
    try:
        import triton.compiler.compiler  # noqa: F401
        import triton.runtime.jit  # noqa: F401
    except Exception:  # not installed, or a broken install: no user Triton kernels then
        return False
    return True


@functools.lru_cache(maxsize=None)
def probe_kernel() -> Any:
    """``scale(x_ptr, out_ptr, n, s, BLOCK)``: ``out = x * s`` with ``s.to(tl.float32)``,
    as Liger's kernel treats its float arguments."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, out_ptr, n, s, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < n)
        tl.store(out_ptr + i, x * s.to(tl.float32), mask=i < n)

    return scale


def probe_arguments() -> dict[str, Any]:
    return {"x_ptr": torch.zeros(8), "out_ptr": torch.zeros(8), "n": 8, "s": 2.5, "BLOCK": 8}


class _Target:
    """A Triton driver that only answers a target: the analysis compiles to Triton IR,
    which touches no GPU."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_target(self) -> Any:
        return self.target


@contextlib.contextmanager
def analysis_target() -> Iterator[None]:
    """Triton's active driver answers a GPU target without initializing a GPU (the
    probe runs at the first compile, perhaps before a fork), then is as it was."""
    import triton.backends
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    backends = getattr(triton.backends, "backends", {})
    if "nvidia" in backends:
        target = GPUTarget("cuda", 90, 32)
    elif "amd" in backends:
        target = GPUTarget("hip", "gfx942", 64)
    else:
        raise Unavailable("Triton has neither its NVIDIA nor its AMD backend")
    saved = dict(vars(driver))
    driver.set_active(_Target(target))
    try:
        yield
    finally:
        vars(driver).clear()
        vars(driver).update(saved)


@contextlib.contextmanager
def no_warnings_as_errors() -> Iterator[None]:
    """Warnings Triton prints while compiling the probe kernel (Triton 3.9: "FP fusion
    unset") say nothing about the probe; under ``python -W error`` they would fail it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
