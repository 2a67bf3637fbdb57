"""Property-based tests: for random shapes (0 and 1 included), layouts (transposed,
sliced with a storage offset, strided, broadcast batch), dtypes, bias shapes and
beta/alpha, every out_dtype overload (.dtype and .dtype_out) compiled by Inductor
on the CPU matches a float64 reference, in out_dtype.

Budget: ``INDUCTOR_ADDMM_FIX_FUZZ_EXAMPLES`` examples per op (default 10; the slow
run adds a budget of 100), derandomized so that CI runs the same examples every time;
``INDUCTOR_ADDMM_FIX_FUZZ_SEED=<int>`` explores other ones.  Compiles are
``dynamic=True`` and kept across examples, keyed by what a graph specializes on
(dtypes, beta, alpha, out=), so that most new shapes reuse a compiled graph.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from cases import OPS, Op
from helpers import many_recompiles, without_graph_caches

EXAMPLES = int(os.environ.get("INDUCTOR_ADDMM_FIX_FUZZ_EXAMPLES", "10"))
SEED = os.environ.get("INDUCTOR_ADDMM_FIX_FUZZ_SEED")

SLOW_EXAMPLES = max(EXAMPLES, 100)


def fuzz(examples: int):
    return settings(
        max_examples=examples,
        derandomize=SEED is None,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    )


def seeded(test):
    return seed(int(SEED))(test) if SEED is not None else test


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
#: (input dtype, out_dtype) pairs that eager accepts
DTYPE_PAIRS = [(BF16, FP32), (FP16, FP32), (BF16, BF16), (FP16, FP16), (FP32, FP32)]
#: Allowed error, relative to |alpha| |A| |B| + |beta| |C| (no cancellation trouble):
#: fp32 accumulation of at most ~20 terms, then one rounding to out_dtype.
TOLERANCE = {FP32: 1e-5, BF16: 2e-2, FP16: 4e-3}


@dataclasses.dataclass(frozen=True)
class Layout:
    transpose: bool = False
    offset: int = 0  # storage offset: rows and columns skipped at the start
    step: int = 1  # every step-th row
    expand: bool = False  # batch dimension broadcast from 1 (stride 0)

    def materialize(self, shape, dtype, generator) -> torch.Tensor:
        *lead, r, c = shape
        rows, cols = (c, r) if self.transpose else (r, c)
        alloc_lead = [1] * len(lead) if self.expand else lead
        base = torch.randn(*alloc_lead, rows * self.step + self.offset, cols + self.offset, generator=generator)
        t = base.to(dtype)[..., self.offset : self.offset + rows * self.step : self.step, self.offset :]
        if self.transpose:
            t = t.transpose(-1, -2)
        return t.expand(*lead, r, c) if self.expand else t


@dataclasses.dataclass(frozen=True)
class Problem:
    m: int
    k: int
    n: int
    batch: int
    in_dtype: torch.dtype
    out_dtype: torch.dtype
    layouts: tuple  # (a, b, bias)
    bias_shape: tuple | None
    bias_dtype: torch.dtype | None
    beta: float
    alpha: float
    use_out: bool
    data_seed: int

    def operands(self, op: Op):
        g = torch.Generator().manual_seed(self.data_seed)
        a_shape, b_shape, _ = op.operand_shapes(self.m, self.k, self.n, batch=self.batch)
        a = self.layouts[0].materialize(a_shape, self.in_dtype, g)
        b = self.layouts[1].materialize(b_shape, self.in_dtype, g)
        if not op.has_bias:
            return (a, b)
        bias_layout = self.layouts[2] if len(self.bias_shape) >= 2 else Layout()
        if len(self.bias_shape) < 2:
            bias = torch.randn(self.bias_shape, generator=g).to(self.bias_dtype)
        else:
            bias = bias_layout.materialize(self.bias_shape, self.bias_dtype, g)
        return (bias, a, b)


def bias_shapes(op: Op, m, n, batch):
    if not op.batched:
        return [(m, n), (n,), (1, n), (m, 1), (1, 1)]
    return [(batch, m, n), (m, n), (n,), (1, m, n), (batch, 1, n), (batch, m, 1), (1, 1, 1)]


@st.composite
def problems(draw, op: Op) -> Problem:
    size = st.integers(min_value=0, max_value=17)
    m, k, n = draw(size), draw(size), draw(size)
    batch = draw(st.integers(min_value=0, max_value=3)) if op.batched else 1
    in_dtype, out_dtype = draw(st.sampled_from(DTYPE_PAIRS))
    layout = st.builds(
        Layout,
        transpose=st.booleans(),
        offset=st.sampled_from([0, 1, 3]),
        step=st.sampled_from([1, 2]),
        expand=st.booleans() if op.batched else st.just(False),
    )
    layouts = (draw(layout), draw(layout), draw(layout))
    bias_shape = bias_dtype = None
    beta = alpha = 1
    if op.has_bias:
        bias_shape = draw(st.sampled_from(bias_shapes(op, m, n, batch)))
        bias_dtype = draw(st.sampled_from([in_dtype, out_dtype]))
        beta = draw(st.sampled_from([1, 0, -0.5]))
        alpha = draw(st.sampled_from([1, 2.5]))
    use_out = draw(st.booleans())
    data_seed = draw(st.integers(min_value=0, max_value=2**31 - 1))
    return Problem(m, k, n, batch, in_dtype, out_dtype, layouts, bias_shape, bias_dtype, beta, alpha, use_out, data_seed)


# ---------------------------------------------------------------- compiling
_compiled: dict = {}


@pytest.fixture(autouse=True)
def fresh_compile_cache():
    _compiled.clear()
    # lower every graph with this code, not a cached artifact
    with many_recompiles(), without_graph_caches():
        yield
    _compiled.clear()


def compiled_fn(op: Op, p: Problem):
    key = (op.name, p.in_dtype, p.out_dtype, p.bias_dtype, p.beta, p.alpha, p.use_out)
    if key not in _compiled:
        out_dtype, beta, alpha = p.out_dtype, p.beta, p.alpha
        if p.use_out:

            def fn(*args):
                op.call(args[:-1], out_dtype, beta=beta, alpha=alpha, out=args[-1])
                return args[-1]

        else:

            def fn(*args):
                return op.call(args, out_dtype, beta=beta, alpha=alpha)

        _compiled[key] = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=True)
    return _compiled[key]


# ---------------------------------------------------------------- checking
def reference_and_scale(op: Op, operands, p: Problem):
    """float64 result, and |alpha| |A| |B| + |beta| |C|: the size of what was summed."""
    d = [t.double() for t in operands]
    if op.has_bias:
        c, a, b = d
    else:
        a, b = d
    product, magnitude = a @ b, abs(p.alpha) * (a.abs() @ b.abs())
    if not op.has_bias:
        return product, magnitude
    if p.beta == 0:
        return p.alpha * product, magnitude
    return p.alpha * product + p.beta * c, magnitude + abs(p.beta) * c.abs()


@pytest.mark.parametrize(
    "examples", [EXAMPLES, pytest.param(SLOW_EXAMPLES, marks=pytest.mark.slow)], ids=["budget", "large-budget"]
)
@pytest.mark.parametrize("op", OPS, ids=str)
def test_compiled_matches_float64_on_random_inputs(op, examples):
    @fuzz(examples)
    @seeded
    @given(p=problems(op))
    def check(p: Problem):
        operands = p.operands(op)
        ref, scale = reference_and_scale(op, operands, p)
        fn = compiled_fn(op, p)
        if p.use_out:
            buffer = torch.full(ref.shape, float("nan"), dtype=p.out_dtype)
            out = fn(*operands, buffer)
            assert out is buffer
        else:
            out = fn(*operands)
        assert out.dtype == p.out_dtype
        assert out.shape == ref.shape
        error = (out.double() - ref).abs()
        bound = TOLERANCE[p.out_dtype] * scale + 1e-30
        assert bool((error <= bound).all()), (
            f"max error {error.max().item():.3g} > bound (max {bound.max().item():.3g})"
            if error.numel()
            else "?"
        )

    check()
