"""Inductor rewrites tiny matmuls (dot products, outer products) as pointwise
code; with the plugin those rewrites still produce out_dtype, computed in it."""

import pytest
import torch
from torch._dynamo.utils import counters

from cases import OPS_BY_NAME, eager_fn, make_operands, relative_error
from compile_helpers import compile_and_run

# Shapes Inductor's CPU decompositions rewrite: M = N = 1 (dot product).  baddbmm
# has no Inductor decomposition (torch excludes it); its small shapes are covered
# by the lowering tests.
CASES = [("mm", "decompose_mm"), ("addmm", "decompose_mm"), ("bmm", "decompose_bmm")]


@pytest.mark.parametrize("name,counter", CASES, ids=[c[0] for c in CASES])
def test_dot_product_rewrite_keeps_out_dtype(name, counter):
    op = OPS_BY_NAME[name]
    operands = make_operands(op, 1, 64, 1, torch.bfloat16, bias_dtype=torch.float32)
    counters["inductor"].clear()
    compiled = compile_and_run(eager_fn(op, out_dtype=torch.float32), *operands)
    assert counters["inductor"][counter] >= 1, "Inductor's small-shape rewrite did not run"
    assert compiled.result.dtype == torch.float32
    assert relative_error(compiled.result, op.reference(operands, torch.float32)) < 1e-6
    # the rewrite is pointwise code, not a GEMM call
    assert "extern_kernels.mm(" not in compiled.code and "extern_kernels.bmm(" not in compiled.code
