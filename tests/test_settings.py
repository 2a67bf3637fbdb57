"""The settings that change what a feature does: each read and parsed in one module."""

from __future__ import annotations

import ast
import pathlib
import warnings

import pytest

import inductor_addmm_fix
from inductor_addmm_fix import settings

SETTINGS = [settings.PAIR_BUDGET, settings.LIGER_HEAD]
PACKAGE = pathlib.Path(inductor_addmm_fix.__file__).parent


def _names(path: pathlib.Path, variable: str) -> bool:
    """Whether the module's code (its string constants, docstrings aside) holds the variable's name."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and variable in n.value and id(n) not in docstrings
               for n in ast.walk(tree))  # fmt: skip


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.variable)
def test_only_the_settings_module_names_the_variable(setting):
    naming = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if _names(p, setting.variable))
    assert naming == ["settings.py"]


@pytest.mark.parametrize("setting, good, bad", [(settings.PAIR_BUDGET, "80", "lots"), (settings.LIGER_HEAD, "Loop", "fast")],
                         ids=["pair-budget", "liger-head"])  # fmt: skip
def test_a_value_it_cannot_take_warns_once_per_value_and_the_default_holds(setting, good, bad, monkeypatch):
    monkeypatch.setattr(setting, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert setting.value({setting.variable: bad}) is None
        assert setting.value({setting.variable: bad}) is None
        assert setting.value({setting.variable: good}) is not None
        assert setting.value({}) is None
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and setting.variable in said[0] and setting.expects in said[0] and setting.otherwise in said[0]
    assert setting.status({setting.variable: bad}) == f"{setting.variable}={bad!r} ignored"
    assert setting.status({}) is None


def test_the_values_they_take():
    assert settings.PAIR_BUDGET.value({settings.PAIR_BUDGET.variable: " 1.5 "}) == 3 << 19
    assert settings.PAIR_BUDGET.value({settings.PAIR_BUDGET.variable: "0"}) == 0
    assert [settings.LIGER_HEAD.value({settings.LIGER_HEAD.variable: m.upper()}) for m in settings.LIGER_HEAD_MODES] == list(
        settings.LIGER_HEAD_MODES
    )
