"""The Triton source of :mod:`.hopper_accumulate`'s kernel: ``C[M, N] += G[K, M].T @ X[K, N]``
in place, through TMA descriptors, C's tile added to the product in the epilogue.  Imported
only when a kernel is first launched or built (it imports Triton)."""

import triton
import triton.language as tl


@triton.jit
def tile_offsets(tile, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
    """(row, column) of tile number ``tile`` of C: GROUP tiles along M, then the next
    column, so that a group's programs share their operands' rows in L2."""
    num_pid_m = tl.cdiv(M, BM)
    in_group = GROUP * tl.cdiv(N, BN)
    first_m = (tile // in_group) * GROUP
    size_m = min(num_pid_m - first_m, GROUP)
    return (first_m + (tile % in_group) % size_m) * BM, ((tile % in_group) // size_m) * BN


@triton.jit
def accumulate_kernel(g_desc, x_desc, c_desc, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                      C_FIRST: tl.constexpr = False):
    """One tile of C per program.  C_FIRST: C's tile is loaded before the product and is
    the accumulator's first value (its load overlaps the operands'); else it is loaded
    after the product and added to it."""
    off_m, off_n = tile_offsets(tl.program_id(0), M, N, BM, BN, GROUP)
    if C_FIRST:
        acc = c_desc.load([off_m, off_n]).to(tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = g_desc.load([k * BK, off_m])
        b = x_desc.load([k * BK, off_n])
        acc = tl.dot(a.T, b, acc)
    if not C_FIRST:
        acc += c_desc.load([off_m, off_n]).to(tl.float32)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
