"""In-process checks of the activation pieces: the environment variable, the .pth
line, the post-import hook, the start-up route, warnings (the routes themselves, in
fresh interpreters, are in test_activation.py; the command line in test_cli.py)."""

import ast
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

import inductor_addmm_fix as fix
from inductor_addmm_fix.patching import warn
from inductor_addmm_fix.activation import env, selection, startup
from inductor_addmm_fix.cli import check
from inductor_addmm_fix.patching import import_hooks

ROOT = Path(__file__).resolve().parents[1]


def test_pth_line_knows_the_same_off_values_as_the_package():
    line = (ROOT / "inductor_addmm_fix.pth").read_text()
    assert line.count("\n") == 1 and line.startswith("import ")  # site runs one "import" line
    code = ast.literal_eval(re.search(r'exec\((".*")\)', line).group(1))
    off = ast.literal_eval(re.search(r"not in (\(.*?\))", code).group(1))
    assert set(off) == set(selection.OFF)


@pytest.mark.parametrize(
    "value, enabled",
    [("", True), ("1", True), ("on", True), ("TRUE", True), ("-views", True), (" 0 ", False), ("off", False), ("No", False)],
)
def test_env_values(value, enabled):
    assert env.enabled_by_env({env.VARIABLE: value}) is enabled


def test_unknown_env_value_warns_once_and_keeps_every_feature(monkeypatch):
    fix.uninstall()
    monkeypatch.setattr(warn, "_warned", set())
    monkeypatch.setattr(selection, "_warned", set())
    monkeypatch.setenv(env.VARIABLE, "maybe")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        startup.activate(startup.ENTRY_POINT)
        fix.uninstall()
        startup.activate(startup.ENTRY_POINT)
    assert len(caught) == 1 and "ignoring 'maybe'" in str(caught[0].message)
    # It points at the variable, not at this package's code.
    assert caught[0].filename == env.WHERE and caught[0].category is RuntimeWarning
    assert "INDUCTOR_ADDMM_FIX=maybe" in str(caught[0].message)
    states = fix.status().features.values()
    assert all(s.startswith(("applied", "applies at first compile", "not needed on this torch", "unavailable")) for s in states)


def test_post_import_hook_runs_after_the_module_and_leaves_its_loader(tmp_path, monkeypatch):
    (tmp_path / "hooked_module_xyz.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def callback():
        seen.append(sys.modules["hooked_module_xyz"].VALUE)

    assert not import_hooks.when_imported("hooked_module_xyz", callback)
    import hooked_module_xyz as module

    assert seen == [42]
    assert not isinstance(module.__loader__, import_hooks._Loader)  # its own loader again
    assert module.__spec__.loader is module.__loader__
    assert not import_hooks.is_pending("hooked_module_xyz")
    assert import_hooks._finder not in sys.meta_path or import_hooks._pending
    del sys.modules["hooked_module_xyz"]


def test_torch_is_not_still_importing_once_imported():
    assert not startup._still_importing(torch)


def test_activate_with_the_env_var_off_changes_nothing(monkeypatch):
    monkeypatch.setenv(env.VARIABLE, "0")
    calls = []
    monkeypatch.setattr(startup, "_install", calls.append)
    startup.activate(startup.ENTRY_POINT)
    assert calls == []


def test_activate_never_raises(monkeypatch):
    def boom(route):
        raise RuntimeError("simulated")

    monkeypatch.delenv(env.VARIABLE, raising=False)
    monkeypatch.setattr(startup, "_install", boom)
    monkeypatch.setattr(startup, "_warned", False)
    with pytest.warns(RuntimeWarning, match="not activated by entry-point"):
        startup.activate(startup.ENTRY_POINT)


def test_error_summary_keeps_the_cause_of_a_subprocess_error():
    error = RuntimeError(
        "SubprocException: An exception occurred in a subprocess:\n\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    g()\nLoweringException: TypeError: tuned_addmm() takes 3\n  target: x\n'
    )
    assert check._first_line(error) == (
        "RuntimeError: SubprocException: An exception occurred in a subprocess: "
        "LoweringException: TypeError: tuned_addmm() takes 3"
    )


@pytest.mark.parametrize("name", ["entry_point", "from_pth"])
def test_the_start_up_names_of_0_1_0_still_load(name):
    """Stale metadata (an old egg-info or .pth) may name ``inductor_addmm_fix._startup``:
    torch raises from ``import torch`` if that entry point cannot be loaded."""
    from importlib.metadata import EntryPoint

    loaded = EntryPoint(name="inductor_addmm_fix", value=f"inductor_addmm_fix._startup:{name}",
                        group="torch.backends").load()
    assert loaded is getattr(startup, name)
    loaded()  # installed already (conftest): idempotent, no warning
    assert fix.is_installed()


def test_install_with_an_unknown_name_warns_at_the_callers_line(monkeypatch):
    monkeypatch.setattr(selection, "_warned", set())
    with pytest.warns(RuntimeWarning, match="ignoring 'maybe'") as caught:
        fix.install(features="maybe,-views")
    assert caught[0].filename == __file__
    assert fix.status().features["views"].startswith("off")
    assert fix.status().active  # out_dtype on: applied, or applying at the first compile


def test_warnings_turned_into_errors_never_escape_the_activation(monkeypatch, capsys):
    """Under ``python -W error`` a failure is still one line, never an exception:
    raising here would break ``import torch`` (its entry point) or start-up (the .pth)."""
    from inductor_addmm_fix import installer

    def boom(route):
        raise RuntimeError("simulated")

    monkeypatch.delenv(env.VARIABLE, raising=False)
    monkeypatch.setattr(startup, "_install", boom)
    monkeypatch.setattr(startup, "_warned", False)
    monkeypatch.setattr(warn, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        startup.activate(startup.ENTRY_POINT)
        startup.activate(startup.PTH)
        installer.warn_once("test", "inductor_addmm_fix: simulated failure")
        startup.warn("inductor_addmm_fix: simulated", filename=env.WHERE)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "inductor_addmm_fix: not activated by entry-point (RuntimeError: simulated) [RuntimeWarning, not raised]",
        "inductor_addmm_fix: simulated failure [RuntimeWarning, not raised]",
        "inductor_addmm_fix: simulated [RuntimeWarning, not raised]",
    ]


def test_unknown_env_value_under_warnings_as_errors_still_activates(monkeypatch, capsys):
    fix.uninstall()
    monkeypatch.setattr(selection, "_warned", set())
    monkeypatch.setenv(env.VARIABLE, "maybe,-views")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        startup.activate(startup.ENTRY_POINT)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ignoring 'maybe'" in err
    assert fix.is_installed() and fix.status().features["views"] == "off (INDUCTOR_ADDMM_FIX=maybe,-views)"
