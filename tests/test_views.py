"""as_strided of a slice of an unrealized buffer reads the buffer's real storage, as
in eager, instead of past the end of a copy (docs/upstream/as-strided-of-a-slice.md)."""

import pytest
import torch

from helpers import compile_and_run


def as_strided_of_slice(base):
    s = base + 1  # not materialized yet when the slice is lowered
    return torch.as_strided(s[64:128], (128,), (1,), 0).clone()


def clone_preserve_strides_pattern(base, src):
    """What Inductor emits to clone a view argument of a user Triton kernel."""
    s = torch.slice_scatter(base, src, 0, 0, 64)
    buf = torch.as_strided(s[64:128], (128,), (1,), 0).clone()
    return torch.as_strided(buf, (64,), (1,), 64) * 1.0


def chunk_through_clone(base, src):
    """The same clone at an offset that depends on a size (symbolic under dynamic=True)."""
    n = src.shape[0]
    s = torch.slice_scatter(base, src, 0, 0, n)
    view = s[n : 2 * n]
    buf = torch.as_strided(view, (2 * n,), (1,), 0).clone()  # from storage start: offset n + n
    out = torch.as_strided(buf, (n,), (1,), n)
    return torch.slice_scatter(s, out * 3, 0, n, 2 * n)


def as_strided_of_select(base):
    s = base * 2
    return torch.as_strided(s[3], (2, 16), (16, 1), 0) + 0


CASES = {
    "slice": (as_strided_of_slice, lambda: (torch.randn(256),)),
    "clone_preserve_strides": (clone_preserve_strides_pattern, lambda: (torch.randn(256), torch.randn(64))),
    "clone_at_size_dependent_offset": (chunk_through_clone, lambda: (torch.randn(256), torch.randn(64))),
    "select": (as_strided_of_select, lambda: (torch.randn(8, 16),)),
}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", CASES)
def test_as_strided_of_a_view_matches_eager(name, dynamic):
    fn, make = CASES[name]
    args = make()
    compiled = compile_and_run(fn, *args, dynamic=dynamic)
    assert torch.equal(compiled.result, fn(*args))


def _graph_with_slice_feeding_as_strided(reapply_offset_symbolically: bool):
    graph = torch.fx.Graph()
    base = graph.placeholder("base")
    view = graph.call_function(torch.ops.aten.slice.Tensor, (base, 0, 64, 128))
    graph.call_function(torch.ops.aten.as_strided.default, (view, [128], [1], 0))
    if reapply_offset_symbolically:
        graph.call_function(torch.ops.aten.sym_storage_offset.default, (view,))
    return view


@pytest.mark.parametrize("reapplied", [False, True], ids=["fixed-offset", "offset-reapplied-by-sym_storage_offset"])
def test_only_views_with_a_fixed_offset_are_realized(reapplied):
    """A view whose offset the graph re-applies through sym_storage_offset (the
    clone_preserve_strides of a user Triton kernel argument under dynamic shapes)
    is left to stock Inductor: realized, Liger FLCE with dynamic=True gave a wrong
    loss (its GPU test is test_flce_compile_modes[dynamic])."""
    import types

    from torch._inductor.virtualized import V

    from inductor_addmm_fix.inductor import views

    view = _graph_with_slice_feeding_as_strided(reapplied)
    with V.set_graph_handler(types.SimpleNamespace(current_node=view)):
        assert views._feeds_as_strided_with_a_fixed_offset() is (not reapplied)


def test_the_probe_finds_stock_inductor_reading_past_a_copy_and_the_patch_fixes_it():
    """The probe that decides the patch lowers the minimal reproduction: broken (or a
    compile error, torch 2.15) without the patch, within its storage with it."""
    import inductor_addmm_fix as fix
    from inductor_addmm_fix.inductor import views

    assert views.as_strided_of_a_slice_reads_past_its_storage() is False
    fix.install(features="-views")
    try:
        assert views.as_strided_of_a_slice_reads_past_its_storage() is True
    finally:
        fix.install()
