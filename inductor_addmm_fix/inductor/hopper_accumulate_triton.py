"""The Triton source of :mod:`.hopper_accumulate`'s kernels: ``C[M, N] += G[K, M].T @ X[K, N]``
in place, through TMA descriptors, C's tile added to the product in the epilogue, and the
same with two products (a merged pair of chunks, each read where it lies).  Imported only
when a kernel is first launched or built (it imports Triton)."""

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
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    """One tile of C per program."""
    off_m, off_n = tile_offsets(tl.program_id(0), M, N, BM, BN, GROUP)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = g_desc.load([k * BK, off_m])
        b = x_desc.load([k * BK, off_n])
        acc = tl.dot(a.T, b, acc)
    c = c_desc.load([off_m, off_n])
    c_desc.store([off_m, off_n], (acc + c.to(tl.float32)).to(c_desc.dtype))


@triton.jit
def accumulate_pair_kernel(g_desc, x_desc, g2_desc, x2_desc, c_desc, M, N, K, K2,
                           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    """``C += G.T @ X + G2.T @ X2``: two products, each operand read where it lies, summed
    in one accumulator, C's tile added once.  Its K loops repeat ``accumulate_kernel``'s,
    whose source stays as measured (docs/gpu-results.md)."""
    off_m, off_n = tile_offsets(tl.program_id(0), M, N, BM, BN, GROUP)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = g_desc.load([k * BK, off_m])
        b = x_desc.load([k * BK, off_n])
        acc = tl.dot(a.T, b, acc)
    for k in range(0, tl.cdiv(K2, BK)):
        a = g2_desc.load([k * BK, off_m])
        b = x2_desc.load([k * BK, off_n])
        acc = tl.dot(a.T, b, acc)
    c = c_desc.load([off_m, off_n])
    c_desc.store([off_m, off_n], (acc + c.to(tl.float32)).to(c_desc.dtype))
