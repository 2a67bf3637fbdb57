"""In-process checks of the activation pieces (the routes themselves, in fresh
interpreters, are in test_activation.py)."""

import ast
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

from inductor_addmm_fix import _check, _cli, _env, _import_hooks, _startup

ROOT = Path(__file__).resolve().parents[1]


def test_pth_line_knows_the_same_off_values_as_the_package():
    line = (ROOT / "inductor_addmm_fix.pth").read_text()
    assert line.count("\n") == 1 and line.startswith("import ")  # site runs one "import" line
    code = ast.literal_eval(re.search(r'exec\((".*")\)', line).group(1))
    off = ast.literal_eval(re.search(r"not in (\(.*?\))", code).group(1))
    assert set(off) == _env.OFF_VALUES


@pytest.mark.parametrize(
    "value, enabled", [("", True), ("1", True), ("on", True), ("TRUE", True), (" 0 ", False), ("off", False), ("No", False)]
)
def test_env_values(value, enabled):
    assert _env.enabled_by_env({_env.VARIABLE: value}) is enabled


def test_unknown_env_value_warns_once_and_keeps_the_default(monkeypatch):
    monkeypatch.setattr(_env, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _env.enabled_by_env({_env.VARIABLE: "maybe"})
        assert _env.enabled_by_env({_env.VARIABLE: "perhaps"})
    assert len(caught) == 1 and "keeping the default" in str(caught[0].message)


def test_post_import_hook_runs_after_the_module_and_leaves_its_loader(tmp_path, monkeypatch):
    (tmp_path / "hooked_module_xyz.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def callback():
        seen.append(sys.modules["hooked_module_xyz"].VALUE)

    assert not _import_hooks.when_imported("hooked_module_xyz", callback)
    import hooked_module_xyz as module

    assert seen == [42]
    assert not isinstance(module.__loader__, _import_hooks._Loader)  # its own loader again
    assert module.__spec__.loader is module.__loader__
    assert not _import_hooks.is_pending("hooked_module_xyz")
    assert _import_hooks._finder not in sys.meta_path or _import_hooks._pending
    del sys.modules["hooked_module_xyz"]


def test_torch_is_not_still_importing_once_imported():
    assert not _startup._still_importing(torch)


def test_activate_with_the_env_var_off_changes_nothing(monkeypatch):
    monkeypatch.setenv(_env.VARIABLE, "0")
    calls = []
    monkeypatch.setattr(_startup, "_install", calls.append)
    _startup.activate(_startup.ENTRY_POINT)
    assert calls == []


def test_activate_never_raises(monkeypatch):
    def boom(route):
        raise RuntimeError("simulated")

    monkeypatch.delenv(_env.VARIABLE, raising=False)
    monkeypatch.setattr(_startup, "_install", boom)
    monkeypatch.setattr(_startup, "_warned", False)
    with pytest.warns(RuntimeWarning, match="not activated by entry-point"):
        _startup.activate(_startup.ENTRY_POINT)


def test_error_summary_keeps_the_cause_of_a_subprocess_error():
    error = RuntimeError(
        "SubprocException: An exception occurred in a subprocess:\n\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n    g()\nLoweringException: TypeError: tuned_addmm() takes 3\n  target: x\n'
    )
    assert _check._first_line(error) == (
        "RuntimeError: SubprocException: An exception occurred in a subprocess: "
        "LoweringException: TypeError: tuned_addmm() takes 3"
    )


def test_check_without_the_device_asked_for_cannot_run(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _cli.main(["check", "--device", "cuda"]) == _check.CANNOT_RUN
    assert "could not run" in capsys.readouterr().out


def test_status_command_in_process(capsys):
    assert _cli.main([]) == 0
    out = capsys.readouterr().out
    assert "installed: yes" in out and "routes:" in out and "INDUCTOR_ADDMM_FIX:" in out
