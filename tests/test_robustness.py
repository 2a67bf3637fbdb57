"""The package is robust: on a torch whose internals are missing or renamed, the
features that need them warn once each and leave their slots as they were, while the
others apply; install/uninstall from many threads are safe; a thousand cycles leave the
stock tables (slow)."""

import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (so that install() applies both stages at once)
import torch._inductor.decomposition as inductor_decomposition
import torch._inductor.lowering as L

import inductor_addmm_fix as fix
from helpers import differences, live_tables, of_feature, settled, tables_snapshot
from inductor_addmm_fix.patching import warn
from inductor_addmm_fix import features, installer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def stock(monkeypatch):
    """Torch as it is without the package: (the table objects, their snapshot).  The
    package's memory of warnings already given is emptied for the test."""
    fix.uninstall()
    monkeypatch.setattr(warn, "_warned", set())
    tables = live_tables()
    return tables, tables_snapshot(tables)


def _register_lowering_without_lowering_dict(monkeypatch):
    real = L.register_lowering

    def register_lowering(aten_fn, broadcast=False, type_promotion_kind=None, convert_input_to_bool=False):
        return real(aten_fn, broadcast, type_promotion_kind, convert_input_to_bool)

    monkeypatch.setattr(L, "register_lowering", register_lowering)


class _RefusingDict(dict):
    """A table that looks right but refuses the write of a .dtype overload."""

    def __setitem__(self, key, value):
        if "dtype" in str(key):
            raise RuntimeError(f"refusing to set {key}")
        super().__setitem__(key, value)


def _overloads_without_dtype(monkeypatch):
    """A torch older than 2.8: the packets have no .dtype/.dtype_out overloads."""
    real = torch._ops.OpOverloadPacket.overloads
    monkeypatch.setattr(
        torch._ops.OpOverloadPacket, "overloads", lambda self: [o for o in real(self) if "dtype" not in o]
    )


def _library_refuses_meta_kernels(monkeypatch):
    """Library.impl raises, as it does on 2.8-2.12 without allow_override."""

    def impl(self, *args, **kwargs):
        raise RuntimeError("This is not allowed since there's already a kernel registered from python")

    monkeypatch.setattr(torch.library.Library, "impl", impl)


OUT_DTYPE, REINPLACE, VIEWS, STATIC_STRIDES = "out_dtype", "reinplace", "views", "static_strides"

# name -> (what to do to torch (monkeypatch) so that it looks unlike any known release,
#          the features that need what is broken: they fail, the others apply)
HOSTILE_TORCH = {
    "inductor lowerings table missing": (lambda mp: mp.delattr(L, "lowerings"), {OUT_DTYPE, REINPLACE, VIEWS}),
    "register_lowering without lowering_dict": (_register_lowering_without_lowering_dict, {OUT_DTYPE, REINPLACE}),
    "inductor fallback_handler missing": (lambda mp: mp.delattr(L, "fallback_handler"), {OUT_DTYPE, REINPLACE}),
    "inductor decompositions table missing": (lambda mp: mp.delattr(inductor_decomposition, "decompositions"), {OUT_DTYPE}),
    # make_fx and FakeTensorMode need it too: the views and static_strides probes cannot run
    "core meta_table missing": (lambda mp: mp.delattr(torch._decomp, "meta_table"), {OUT_DTYPE, VIEWS, STATIC_STRIDES}),
    "core decomposition_table missing": (lambda mp: mp.delattr(torch._decomp, "decomposition_table"), {OUT_DTYPE, VIEWS}),
    "no out_dtype overloads (torch < 2.8)": (_overloads_without_dtype, {OUT_DTYPE}),
    "Library.impl refuses Meta kernels (fails mid-apply in the core part)": (_library_refuses_meta_kernels, {OUT_DTYPE}),
    # a copy of the table that Inductor does not read: the views self-test sees it
    "lowerings refuses writes (fails mid-apply in the Inductor part)": (
        lambda mp: mp.setattr(L, "lowerings", _RefusingDict(L.lowerings)),
        {OUT_DTYPE, REINPLACE, VIEWS},
    ),
}


def _fix_warnings(record):
    return [w for w in record if issubclass(w.category, RuntimeWarning) and "inductor_addmm_fix" in str(w.message)]


@pytest.mark.parametrize("hostile, failing", HOSTILE_TORCH.values(), ids=HOSTILE_TORCH.keys())
def test_unknown_torch_internals_fail_only_the_features_that_need_them(stock, monkeypatch, hostile, failing):
    tables, before = stock
    hostile(monkeypatch)
    after = tables_snapshot(tables)
    assert after == before, differences(before, after)  # the simulation itself touched nothing
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        status = fix.install()
        fix.install()  # a retry warns no more
    failed = {name for name, state in status.features.items() if state.startswith("failed: ")}
    assert failed == failing, status.features
    messages = [str(w.message) for w in _fix_warnings(record)]
    assert len(messages) == len(failing) and all("torch was left as it was" in m for m in messages), messages
    now = tables_snapshot(tables)
    for name in failing:  # every stage of a failed feature rolled back
        assert of_feature(now, name) == of_feature(before, name), differences(of_feature(before, name), of_feature(now, name))
    for name in set(features.NAMES) - failing:
        assert settled(status, [name]), status.features
    assert not status.installed and not fix.is_installed()
    assert not any(p.feature in failing for p in status.patches)
    fix.uninstall()
    assert tables_snapshot(tables) == before, differences(before, tables_snapshot(tables))


def test_install_works_again_once_torch_is_whole(stock, monkeypatch):
    tables, before = stock
    with monkeypatch.context() as mp:
        mp.delattr(L, "lowerings")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fix.install()
    assert not fix.is_installed()
    status = fix.install()
    assert status.installed
    assert settled(status), status.features
    assert tables_snapshot(tables) != before


def test_a_missing_cache_key_tag_turns_the_compile_caches_off_instead(stock, monkeypatch):
    import torch.compiler.config as cfg

    monkeypatch.delattr(cfg, "cache_key_tag")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: nothing failed
        status = fix.install()
    assert status.installed
    applied = {p.name for p in status.patches if p.applied}
    assert "cache.off" in applied and "cache.key_tag" not in applied
    assert torch._inductor.config.fx_graph_cache is False


def test_an_inductor_failure_after_the_earlier_parts_rolls_them_back():
    """The Inductor part of out_dtype waits for Inductor's import; if it fails then, its
    core and tracing parts are restored too, and the other features are not affected.  Needs an
    interpreter where Inductor is not imported yet."""
    script = textwrap.dedent(
        """
        import sys, warnings
        sys.path.insert(0, "tests")
        warnings.simplefilter("always")
        import torch
        import inductor_addmm_fix as fix
        from helpers import family_ops
        fix.uninstall()  # an installed package's routes applied it at `import torch`
        meta = {str(op): op.py_kernels.get(torch._C.DispatchKey.Meta) for op in family_ops()}
        with warnings.catch_warnings(record=True) as record:
            fix.install(features="out_dtype,views")
            assert fix.status().features["out_dtype"].startswith("applies at first compile"), fix.status().features
            assert meta != {str(op): op.py_kernels.get(torch._C.DispatchKey.Meta) for op in family_ops()}
            assert "torch._inductor.compile_fx" not in sys.modules
            import torch._inductor.lowering as L
            real = L.register_lowering  # out_dtype's lowerings need its lowering_dict=
            L.register_lowering = lambda aten_fn, broadcast=False, type_promotion_kind=None: real(aten_fn)
            import torch._inductor.compile_fx  # the Inductor part is planned now and fails
        features = fix.status().features
        print(features)
        assert not fix.is_installed()
        assert features["out_dtype"].startswith("failed: PlanError"), features
        assert features["views"] == "applied", features
        after = {str(op): op.py_kernels.get(torch._C.DispatchKey.Meta) for op in family_ops()}
        assert after == meta, "the core part of out_dtype was not rolled back"
        mine = [w for w in record if "inductor_addmm_fix" in str(w.message)]
        assert len(mine) == 1, [str(w.message) for w in record]
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "INDUCTOR_ADDMM_FIX"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.slow
def test_a_thousand_install_uninstall_cycles_leave_stock_tables(stock):
    tables, before = stock
    fix.install()
    patched = sorted(differences(before, tables_snapshot(tables)))
    for _ in range(1000):
        fix.uninstall()
        fix.install()
    assert sorted(differences(before, tables_snapshot(tables))) == patched
    fix.uninstall()
    assert tables_snapshot(tables) == before, differences(before, tables_snapshot(tables))
    assert installer.applied_patches() == []


@pytest.mark.slow  # a stress run: 8 threads switching every microsecond
def test_concurrent_install_and_uninstall_are_safe(stock):
    tables, before = stock
    fix.install()
    patched = sorted(differences(before, tables_snapshot(tables)))
    fix.uninstall()
    errors = []
    start = threading.Barrier(8)

    def worker(seed):
        try:
            start.wait()
            for i in range(60):
                (fix.install if (i + seed) % 2 else fix.uninstall)()
                fix.status()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors
    assert not _fix_warnings(record), [str(w.message) for w in record]
    fix.uninstall()
    assert tables_snapshot(tables) == before, differences(before, tables_snapshot(tables))
    fix.install()
    assert sorted(differences(before, tables_snapshot(tables))) == patched
