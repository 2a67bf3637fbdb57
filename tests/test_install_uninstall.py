"""install() is idempotent; uninstall() restores exactly what was there and the
stock failure comes back; status() says what was applied and why; the compile caches
keep artifacts made with and without the package apart."""

import pytest
import torch

import inductor_addmm_fix as fix
from cases import OPS_BY_NAME, eager_fn, make_operands
from helpers import differences, settled, tables_snapshot, without_graph_caches

# Stock failures we know, per torch release (the repro script uses the same list).
STOCK_FAILURES = (
    "tuned_addmm() takes 3 positional arguments but 4 were given",  # Inductor's lowering (2.13+)
    "unsupported operand type(s) for *: 'torch.dtype'",  # the core decomposition (2.8-2.12)
    "unsupported operand type(s) for *: 'FakeTensor' and 'torch.dtype'",
)


def compile_addmm():
    op = OPS_BY_NAME["addmm"]
    operands = make_operands(op, 8, 16, 12, torch.bfloat16, bias_dtype=torch.float32)
    compiled = torch.compile(eager_fn(op, out_dtype=torch.float32), backend="inductor", fullgraph=True)
    with without_graph_caches():  # lower it, even if cached
        return compiled(*operands)


def test_import_installs_every_feature():
    import torch._inductor.compile_fx  # noqa: F401  (the Inductor part waits for Inductor)

    status = fix.status()
    assert fix.is_installed() and status.installed
    assert settled(status), status.features
    applied = {p.name for p in status.patches if p.applied}
    assert "inductor.lowering.addmm.dtype" in applied
    assert "core.meta.baddbmm.dtype" in applied  # broken in every release up to 2.15


def test_uninstall_restores_every_slot_exactly():
    fix.uninstall()
    stock = tables_snapshot()
    fix.install()
    assert tables_snapshot() != stock
    fix.uninstall()
    after = tables_snapshot()
    assert after == stock, differences(stock, after)


def test_uninstall_brings_the_stock_failure_back():
    fix.uninstall()
    torch._dynamo.reset()
    with pytest.raises(Exception) as failure:
        compile_addmm()
    assert any(known in str(failure.value) for known in STOCK_FAILURES), str(failure.value)[:500]
    fix.install()
    torch._dynamo.reset()
    assert compile_addmm().dtype == torch.float32


def test_install_twice_is_harmless():
    before = tables_snapshot()
    first = fix.install()
    second = fix.install()
    assert tables_snapshot() == before
    assert first == second
    assert compile_addmm().dtype == torch.float32


def test_uninstall_removes_only_its_own_cache_key_tag():
    fix.uninstall()
    original = torch.compiler.config.cache_key_tag
    fix.install()
    assert "inductor_addmm_fix=" in torch.compiler.config.cache_key_tag
    torch.compiler.config.cache_key_tag += ";user-tag"
    try:
        fix.uninstall()
        assert torch.compiler.config.cache_key_tag == original + ";user-tag"
    finally:
        torch.compiler.config.cache_key_tag = original


def test_cache_keys_differ_with_and_without_the_fix():
    """An artifact compiled with the fix is never served to a process without it."""
    import inspect

    from torch._inductor.codecache import FxGraphHashDetails

    # The FX graph cache key (and the AOTAutograd one, a subclass) hashes the tag.
    assert "cache_key_tag" in inspect.getsource(FxGraphHashDetails.__init__)
    with_fix = torch.compiler.config.cache_key_tag
    fix.uninstall()
    without_fix = torch.compiler.config.cache_key_tag
    fix.install()
    assert with_fix != without_fix and "inductor_addmm_fix=" in with_fix
    assert torch.compiler.config.cache_key_tag == with_fix


def test_without_cache_key_tag_the_compile_caches_are_turned_off(monkeypatch):
    from inductor_addmm_fix.inductor import cache_key

    fix.uninstall()
    original = torch._inductor.config.fx_graph_cache
    monkeypatch.setattr(cache_key, "cache_key_tag_supported", lambda: False)
    fix.install()
    try:
        assert torch._inductor.config.fx_graph_cache is False
        assert "cache.off" in {p.name for p in fix.status().patches if p.applied}
    finally:
        fix.uninstall()
    assert torch._inductor.config.fx_graph_cache == original


def test_status_names_each_feature_and_patch_with_reason_and_retiring_upstream_change():
    status = fix.status()
    assert status.torch_version == torch.__version__
    for patch in status.patches:
        assert patch.reason and patch.obsolete_when
    text = str(status)
    assert "inductor.lowering.addmm.dtype" in text and "applied" in text
    assert all(name in text for name in fix.FEATURES)
    assert fix.status().as_dict()["installed"] is True


def test_after_uninstall_status_reports_nothing_installed():
    status = fix.uninstall()
    assert not status.installed and status.activation is None
    assert set(status.features.values()) == {"not installed"} and status.patches == ()
