"""Tier 2d (issue 7): as_strided of a slice of an unrealized buffer reads the
buffer's real storage, as in eager, instead of past the end of a copy."""

import pytest
import torch

from compile_helpers import compile_and_run


def as_strided_of_slice(base):
    s = base + 1  # not materialized yet when the slice is lowered
    return torch.as_strided(s[64:128], (128,), (1,), 0).clone()


def clone_preserve_strides_pattern(base, src):
    """What Inductor emits to clone a view argument of a user Triton kernel."""
    s = torch.slice_scatter(base, src, 0, 0, 64)
    buf = torch.as_strided(s[64:128], (128,), (1,), 0).clone()
    return torch.as_strided(buf, (64,), (1,), 64) * 1.0


def as_strided_of_select(base):
    s = base * 2
    return torch.as_strided(s[3], (2, 16), (16, 1), 0) + 0


CASES = {
    "slice": (as_strided_of_slice, lambda: (torch.randn(256),)),
    "clone_preserve_strides": (clone_preserve_strides_pattern, lambda: (torch.randn(256), torch.randn(64))),
    "select": (as_strided_of_select, lambda: (torch.randn(8, 16),)),
}


@pytest.mark.parametrize("name", CASES)
def test_as_strided_of_a_view_matches_eager(name):
    fn, make = CASES[name]
    args = make()
    compiled = compile_and_run(fn, *args)
    assert torch.equal(compiled.result, fn(*args))


def test_stock_inductor_gets_it_wrong():
    """The bug this patch exists for is still in this torch (else retire the patch):
    stock Inductor reads past the copy (2.8-2.14) or refuses to compile it (2.15)."""
    import inductor_addmm_fix as fix

    base = torch.randn(256)
    fix.uninstall()
    try:
        torch._dynamo.reset()
        try:
            stock = compile_and_run(as_strided_of_slice, base).result
        except Exception as error:  # 2.15: "as_strided([128], [1], 0) requires 128 elements but buf0 holds only 64"
            assert "requires 128 elements" in str(error), str(error)[:500]
            return
    finally:
        fix.install()
    assert not torch.equal(stock, as_strided_of_slice(base))
