"""With dynamic=True one compiled graph serves several sizes, each one right."""

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

from cases import OPS, eager_fn, make_operands, relative_error
from inductor_addmm_fix.tier2_inductor_lowerings import COUNTER


@pytest.mark.parametrize("op", OPS, ids=str)
def test_dynamic_shapes_compile_once_and_stay_correct(op):
    fn = torch.compile(eager_fn(op, out_dtype=torch.float32), backend="inductor", fullgraph=True, dynamic=True)
    counters[COUNTER].clear()
    first = make_operands(op, 8, 16, 12, torch.bfloat16, bias_dtype=torch.float32)
    with torch._inductor.config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(fn, *first)
    assert counters[COUNTER][f"{op.name}.dtype:" + ("product_then_epilogue" if op.has_bias else "upcast_product")] == 1
    assert "s0" in "\n".join(codes) or "s1" in "\n".join(codes)  # symbolic sizes in the kernel
    with torch._dynamo.config.patch(error_on_recompile=True):
        for m, k, n in [(8, 16, 12), (5, 33, 7), (17, 9, 31)]:
            operands = make_operands(op, m, k, n, torch.bfloat16, bias_dtype=torch.float32)
            out = fn(*operands)
            ref = op.reference(operands, torch.float32)
            assert out.dtype == torch.float32
            assert out.shape == ref.shape
            assert relative_error(out, ref) < 1e-5
