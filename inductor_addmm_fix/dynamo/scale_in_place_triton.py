"""The Triton source of ``inductor_addmm_fix::scale_gradient_``'s CUDA kernel
(``dynamo/liger_head_op.py``): a contiguous gradient times a 0-dim factor, in place, and
nothing read or written where the factor is 1.0, tested on the device (no host sync).
Imported only when the kernel is first launched (it imports Triton)."""

import triton
import triton.language as tl

BLOCK = 4096
TILES_PER_PROGRAM = 16


@triton.jit
def scale_in_place_kernel(x_ptr, factor_ptr, n, BLOCK: tl.constexpr, TILES_PER_PROGRAM: tl.constexpr):
    """``x[i] = x[i] * factor`` over ``n`` elements, the product in float32 stored in x's
    dtype (as Liger's ``element_mul_kernel``); every program returns at once where factor
    is 1.0."""
    factor = tl.load(factor_ptr).to(tl.float32)
    if factor != 1.0:
        first = tl.program_id(0).to(tl.int64) * (TILES_PER_PROGRAM * BLOCK)
        for tile in range(TILES_PER_PROGRAM):
            offsets = first + tile * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            x = tl.load(x_ptr + offsets, mask=mask)
            tl.store(x_ptr + offsets, (x.to(tl.float32) * factor).to(x.dtype), mask=mask)


def launch(x, factor) -> None:
    n = x.numel()
    grid = (triton.cdiv(n, BLOCK * TILES_PER_PROGRAM),)
    scale_in_place_kernel[grid](x, factor, n, BLOCK=BLOCK, TILES_PER_PROGRAM=TILES_PER_PROGRAM, num_warps=8)
