"""Every module that ``features.py`` names keeps the contract of
``patching/protocol.py``: it defines ``plan()``, each hook it defines is one the
installer or the machinery calls, with the signature they call it with, it defines
nothing that looks like a hook and is none (a typo is never called), and a module of
one feature imports a module of another only where the feature ``needs`` that one."""

from __future__ import annotations

import ast
import difflib
import inspect
from pathlib import Path

import pytest

from inductor_addmm_fix import features
from inductor_addmm_fix.patching.protocol import HOOKS, REQUIRED, FeatureModule, MachineryModule, hook, imported

PACKAGE = Path(features.__file__).parent
PATCH_FOLDERS = ("core", "inductor", "triton_kernels", "dynamo")
FEATURE_MODULES = [(f.name, m) for f in features.FEATURE_TABLE for m in f.modules]
OWNER = {m: f.name for f in features.FEATURE_TABLE for m in f.modules}
PROTOCOL_NAMES = {m.__name__ for m in (*REQUIRED, *HOOKS)}


def called_with(member) -> int:
    """How many arguments the installer or the machinery passes to ``member``."""
    return len(inspect.signature(member).parameters) - 1  # less the protocol's self


def signature_problems(module, member) -> list[str]:
    """What is wrong with the function ``module`` defines for ``member``."""
    function = hook(module, member)
    if not callable(function):
        return [f"{member.__name__} is {function!r}, not a function"]
    signature, wanted = inspect.signature(function), inspect.signature(member)
    problems = []
    try:
        signature.bind(*range(called_with(member)))
    except TypeError as error:
        problems.append(f"{member.__name__}{signature} cannot be called with {called_with(member)} arguments: {error}")
    if signature.return_annotation not in (inspect.Signature.empty, wanted.return_annotation):
        problems.append(f"{member.__name__} returns {signature.return_annotation}, not {wanted.return_annotation}")
    return problems


def _normal(name: str) -> str:
    name = name.lower().replace("_", "")
    return name[:-1] if name.endswith("s") else name


def looks_like(name: str, member: str) -> bool:
    """Whether ``name`` is ``member`` but for case, underscores and a plural (``_Plan``,
    ``self_tests``, ``cache_setting``), or, for a longer member, one letter
    (``idle_her``)."""
    a, b = _normal(name), _normal(member)
    return a == b or (len(b) >= 6 and difflib.SequenceMatcher(None, a, b).ratio() >= 0.9)


def near_misses(names) -> list[str]:
    """The names that look like a member of the protocol and are none."""
    out = []
    for name in names:
        if name in PROTOCOL_NAMES or name.startswith("__"):
            continue
        out += [f"{name} (like {member})" for member in sorted(PROTOCOL_NAMES) if looks_like(name, member)]
    return out


@pytest.mark.parametrize("feature, name", FEATURE_MODULES, ids=[m for _, m in FEATURE_MODULES])
def test_each_feature_module_keeps_the_protocol(feature, name):
    module = imported(name)
    problems = []
    for member in REQUIRED:
        if hook(module, member) is None:
            problems.append(f"defines no {member.__name__}()")
    for member in (*REQUIRED, *HOOKS):
        if hook(module, member) is not None:
            problems += signature_problems(module, member)
    problems += [f"defines {n}, which is no member of FeatureModule" for n in near_misses(vars(module))]
    assert not problems, f"{feature}: {name}: {problems}"


@pytest.mark.parametrize("name", list(features.MACHINERY.values()))
def test_each_machinery_module_keeps_its_protocol(name):
    module = imported(name)
    problems = signature_problems(module, MachineryModule.plan)
    problems += [f"defines the feature hook {m.__name__}(), not called on machinery" for m in HOOKS if hook(module, m)]
    problems += [f"defines {n}, which is no member of the protocol" for n in near_misses(vars(module))]
    assert not problems, f"{name}: {problems}"


def module_names() -> list[str]:
    """Every module of the package, dotted below it (``inductor.passes.fx_support``)."""
    paths = PACKAGE.rglob("*.py")
    return [".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__") for p in paths]


def path_of(name: str) -> Path:
    path = PACKAGE.joinpath(*name.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"


def test_modules_of_no_feature_define_no_hook():
    """A hook on a module that no feature names (a helper of one) would never be called."""
    problems = []
    for name in module_names():
        if name.split(".")[0] not in PATCH_FOLDERS or name in OWNER or name in features.MACHINERY.values():
            continue
        tree = ast.parse(path_of(name).read_text())
        defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        defined += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
        problems += [f"{name}: {d}" for d in defined if d in PROTOCOL_NAMES]
        problems += [f"{name}: {d}" for d in near_misses(defined)]
    assert not problems, problems


def imports_of(name: str) -> set[str]:
    """The package's modules that module ``name`` imports anywhere in its source (inside
    functions too), from its source."""
    modules, out = set(module_names()), set()
    package = name.split(".") if path_of(name).name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path_of(name).read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == PACKAGE.name:
                base = node.module.split(".")[1:]
            else:
                continue
            candidates = [base] + [base + [alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name.split(".")[1:] for alias in node.names if alias.name.split(".")[0] == PACKAGE.name]
        else:
            continue
        out |= {".".join(c) for c in candidates if c and ".".join(c) in modules}
    return out


def test_a_feature_imports_modules_of_another_only_where_it_needs_it():
    """Followed through the modules of no feature (helpers, the installer): a module of a
    feature reached that way is one this feature's code uses."""
    problems = []
    for feature in features.FEATURE_TABLE:
        for start in feature.modules:
            seen, todo = set(), [start]
            while todo:
                for name in imports_of(todo.pop()) - seen:
                    seen.add(name)
                    if name not in OWNER:
                        todo.append(name)
                    elif OWNER[name] != feature.name and OWNER[name] not in feature.needs:
                        problems.append(f"{feature.name}: {start} imports {name}, a module of {OWNER[name]}")
    assert not problems, problems


@pytest.mark.parametrize(
    "name", ["self_tests", "_self_test", "selfTest", "idle_her", "setting", "cache_setting", "_plan", "Plans"]
)
def test_a_name_like_a_hook_is_seen(name):
    assert near_misses([name])


@pytest.mark.parametrize(
    "name", ["plan_edges", "plan_cat", "_plain", "PLANE", "settle", "self_tested_ops", "idle", "SETTINGS_FILE"]
)
def test_a_name_unlike_any_hook_is_not(name):
    assert not near_misses([name])


def test_the_import_check_sees_an_import_of_another_feature_s_module():
    assert "inductor.reinplace" in imports_of("inductor.accumulate_kernel")
    assert "inductor.passes.post_grad_slot" in imports_of("inductor.passes.accumulate_pairs")
    assert "inductor.lowering_table" in imports_of("inductor.reinplace")  # an import inside a function


def test_the_protocol_names_what_the_modules_define():
    """Each hook is defined by some feature module (a hook nothing defines is a hook
    nothing needs), and what a hook is called with is what its callers pass."""
    defined = {m.__name__ for _, name in FEATURE_MODULES for m in HOOKS if hook(imported(name), m) is not None}
    assert defined == {m.__name__ for m in HOOKS}
    assert called_with(FeatureModule.plan) == 0 and called_with(MachineryModule.plan) == 2
