"""``C += A @ B`` in place on a Hopper GPU, for accumulators updated by few rows at a time.

Liger's FusedLinearCrossEntropy adds every chunk's weight gradient into one accumulator,
``addmm(C, g.t(), x, out=C)``: C is ``V x H`` (Llama-3: 128256 x 4096), the product has
``K`` = the chunk's rows (32-1024; twice that where ``accumulate_pairs`` merges two chunks).
cuBLAS runs ``beta = 1`` as the product followed by a pass over C, one after the other.
The kernel here adds C into each tile of the product in its epilogue (C's tile read by
TMA), with tiles small enough that three programs run on each multiprocessor, so one
tile's epilogue overlaps the others' products.  On an H200 (``benchmarks/accumulate_kernel.py``,
docs/gpu-results.md): 0.65-0.97x cuBLAS's time where :func:`supports` takes a step, e.g.
Gemma-2's bf16 C at K = 128 0.74x, Llama-3's fp32 C at K = 256 0.76-0.79x; where the product
dominates (K of 512 rows and more into bf16, 1024 into fp32) or C is small, cuBLAS is
as fast or faster and keeps the step.  Of the 26 tilings and grids measured (tile shapes,
warps, stages, and persistent grids: docs/gpu-results.md; ``--sweep`` times the
tilings), :data:`DEFAULT` was the fastest on 28 of the 40 steps and within 3% of the
fastest on 36.

:func:`supports` says which calls it takes: CUDA capability 9.0, bf16/fp16 operands with
an accumulator of their dtype or fp32, ``A`` the transpose of a row-major ``[K, M]``
tensor (Liger's ``g.t()``), ``B`` and ``C`` row-major, 16-byte aligned rows, and the
shapes where it measured faster than cuBLAS (:func:`max_k`).  The result is the fp32 sum
of C and the product, rounded once to C's dtype (cuBLAS: the same formula; the product's
summation order differs, so the bits may).  Deterministic: each element of C is written
by one program, once.  :func:`accumulate_pair` does the same for two products at once
(``C += A @ B + A2 @ B2``, a merged pair of chunks each read where it lies, C read and
written once), where :func:`supports_pair` finds each step one that :func:`supports`
would take.  This module changes nothing in torch (``accumulate_kernel.py``
routes Inductor's in-place accumulates here); the kernel's source,
:mod:`.hopper_accumulate_triton`, is imported at its first launch (it imports Triton).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import warnings
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class Config:
    """How the kernel tiles C."""

    block_m: int = 128  # rows of C per tile
    block_n: int = 128  # columns of C per tile
    block_k: int = 64  # rows of the product's K per step
    warps: int = 4
    stages: int = 2  # pipeline stages of the K loop
    group_m: int = 8  # tiles along M per group of the tile order (operands reused in L2)


#: Three programs per multiprocessor (64 KiB of shared memory each), one per tile.
DEFAULT = Config()

#: The fewest elements of C it takes: on smaller accumulators cuBLAS was as fast or faster.
MIN_ELEMENTS = 1 << 26


def max_k(c_dtype: torch.dtype, elements: int) -> int:
    """The most rows per step (K) it takes into a C of this dtype and size: beyond, the
    product outweighs C's traffic and cuBLAS was as fast or faster (an fp32 C from 1024
    rows; a bf16 C from 512 rows, and from 256 where C has fewer than 2**28 elements)."""
    if c_dtype == torch.float32:
        return 512
    return 256 if elements >= 1 << 28 else 128


OPERAND_DTYPES = (torch.bfloat16, torch.float16)
CAPABILITY = (9, 0)

_lock = threading.Lock()
runs = {"kernel": 0, "pair": 0}  # calls of each kernel it ran (read by tests and benchmarks)
#: Why the kernel is off in this process: its first build or launch raised (a Triton that
#: cannot build it, say); every later step goes to cuBLAS.
failure: str | None = None


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple:
    return torch.cuda.get_device_capability(index)


def on_hopper(device: torch.device) -> bool:
    """Whether ``device`` is a CUDA GPU of capability 9.0."""
    return device.type == "cuda" and torch.cuda.is_available() and _capability(device.index or 0) == CAPABILITY


def dtypes_supported(c_dtype: torch.dtype, a_dtype: torch.dtype, b_dtype: torch.dtype) -> bool:
    return a_dtype == b_dtype and a_dtype in OPERAND_DTYPES and c_dtype in (torch.float32, a_dtype)


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0


def sizes_supported(c_dtype: torch.dtype, m: int, n: int, k: int) -> bool:
    """Whether it takes a step of these sizes (C ``[m, n]``, ``k`` rows) into a C of this dtype."""
    return m * n >= MIN_ELEMENTS and 1 <= k <= max_k(c_dtype, m * n)


def _operands_taken(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the dtypes, shapes, layouts and alignment of ``c += a @ b`` are the kernel's
    (sizes and device aside)."""
    if c.dim() != 2 or a.dim() != 2 or b.dim() != 2:
        return False
    if not dtypes_supported(c.dtype, a.dtype, b.dtype) or not (c.device == a.device == b.device):
        return False
    (m, k), (k2, n) = a.shape, b.shape
    if k2 != k or tuple(c.shape) != (m, n):
        return False
    g = a.t()
    if not (g.is_contiguous() and b.is_contiguous() and c.is_contiguous()):
        return False
    return _aligned(g) and _aligned(b) and _aligned(c)


def supports(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: Any = 1, alpha: Any = 1) -> bool:
    """Whether :func:`accumulate` takes ``c += a @ b`` (``c = beta * c + alpha * a @ b``)."""
    if beta != 1 or alpha != 1 or not _operands_taken(c, a, b):
        return False
    (m, k), n = a.shape, b.shape[1]
    return sizes_supported(c.dtype, m, n, k) and on_hopper(c.device)


def pair_sizes_supported(c_dtype: torch.dtype, m: int, n: int, k: int, k2: int) -> bool:
    """Whether it takes a merged pair of steps of ``k`` and ``k2`` rows into one C: where
    it takes each step alone, so that one pass over C replaces two."""
    return sizes_supported(c_dtype, m, n, k) and sizes_supported(c_dtype, m, n, k2)


def supports_pair(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor) -> bool:
    """Whether :func:`accumulate_pair` takes ``c += a @ b + a2 @ b2``."""
    if not (_operands_taken(c, a, b) and _operands_taken(c, a2, b2)):
        return False
    (m, k), n, k2 = a.shape, b.shape[1], a2.shape[1]
    return pair_sizes_supported(c.dtype, m, n, k, k2) and on_hopper(c.device)


def kernel():
    """The Triton kernel (:mod:`.hopper_accumulate_triton`, imported on first use: importing
    Triton is not free)."""
    from .hopper_accumulate_triton import accumulate_kernel

    return accumulate_kernel


def pair_kernel():
    """The Triton kernel of a merged pair (:mod:`.hopper_accumulate_triton`)."""
    from .hopper_accumulate_triton import accumulate_pair_kernel

    return accumulate_pair_kernel


def descriptors(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, config: Config = DEFAULT) -> tuple:
    """TMA descriptors of ``a.t()`` (``[K, M]``), ``b`` (``[K, N]``) and ``c`` (``[M, N]``)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    (m, k), n = a.shape, b.shape[1]
    g = a.t()
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    return (
        TensorDescriptor(g, [k, m], [g.stride(0), 1], [bk, bm]),
        TensorDescriptor(b, [k, n], [b.stride(0), 1], [bk, bn]),
        TensorDescriptor(c, [m, n], [c.stride(0), 1], [bm, bn]),
    )


def grid(m: int, n: int, config: Config = DEFAULT) -> tuple:
    """One program per tile of C."""
    return (-(-m // config.block_m) * -(-n // config.block_n),)


def _options(config: Config) -> dict:
    return dict(BM=config.block_m, BN=config.block_n, BK=config.block_k, GROUP=config.group_m,
                num_warps=config.warps, num_stages=config.stages)


def _launch(c: torch.Tensor, launch: Any, args: tuple, config: Config, what: str) -> None:
    if c.is_cuda and c.device.index != torch.cuda.current_device():
        with torch.cuda.device(c.device):  # Triton launches on the current device
            launch(*args, **_options(config))
    else:
        launch(*args, **_options(config))
    with _lock:
        runs[what] += 1


def accumulate(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, config: Config = DEFAULT) -> torch.Tensor:
    """``c += a @ b`` in place; the caller checked :func:`supports`."""
    (m, k), n = a.shape, b.shape[1]
    _launch(c, kernel()[grid(m, n, config)], (*descriptors(c, a, b, config), m, n, k), config, "kernel")
    return c


def accumulate_pair(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor,
                    config: Config = DEFAULT) -> torch.Tensor:
    """``c += a @ b + a2 @ b2`` in place, in one pass over ``c``; the caller checked
    :func:`supports_pair`."""
    (m, k), n, k2 = a.shape, b.shape[1], a2.shape[1]
    g_desc, x_desc, c_desc = descriptors(c, a, b, config)
    g2_desc, x2_desc, _ = descriptors(c, a2, b2, config)
    args = (g_desc, x_desc, g2_desc, x2_desc, c_desc, m, n, k, k2)
    _launch(c, pair_kernel()[grid(m, n, config)], args, config, "pair")
    return c


def _guarded(run: Any, *tensors: torch.Tensor) -> bool:
    """``run(*tensors)``; False where the kernel failed to build or launch (nothing
    written: it raises before it runs), which turns it off for the process with one
    warning."""
    global failure
    try:
        run(*tensors)
    except Exception as error:
        with _lock:
            first, failure = failure is None, f"{type(error).__name__}: {str(error)[:500]}"
        if first:
            message = (f"inductor_addmm_fix: the Hopper accumulate kernel failed ({failure}); "
                       "this process runs its accumulates on cuBLAS")
            try:
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            except Exception:  # -W error: a training step never raises for it
                print(f"{message} [RuntimeWarning, not raised]", file=sys.stderr)
        return False
    return True


def accumulate_if_supported(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> bool:
    """``c += a @ b`` by the kernel where :func:`supports` takes it; False where it does
    not, or where the kernel failed to build or launch (``c`` untouched), which turns it
    off for the process with one warning."""
    if failure is not None or not supports(c, a, b):
        return False
    return _guarded(accumulate, c, a, b)


def accumulate_pair_if_supported(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a2: torch.Tensor,
                                 b2: torch.Tensor) -> bool:
    """``c += a @ b + a2 @ b2`` by the pair kernel where :func:`supports_pair` takes it;
    False otherwise (``c`` untouched), as :func:`accumulate_if_supported`."""
    if failure is not None or not supports_pair(c, a, b, a2, b2):
        return False
    return _guarded(accumulate_pair, c, a, b, a2, b2)


def triton_supported() -> str | None:
    """None if the installed Triton has what the kernel uses, else what it lacks."""
    try:
        import triton.language as tl
    except Exception as error:
        return f"Triton ({type(error).__name__}: {error})"
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except Exception as error:  # Triton before 3.3
        return f"a Triton with tensor descriptors ({type(error).__name__}: {error})"
    if not hasattr(tl, "tensor_descriptor") and not hasattr(tl, "tensor_descriptor_base"):
        return "triton.language tensor descriptors"
    return None
