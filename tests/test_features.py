"""The features a user can name: each can be turned off by ``install(features=...)``
and by ``INDUCTOR_ADDMM_FIX``, each is its own failure domain (a failure in one leaves
the others applied and warns once), the cache tag follows the feature set, and
``uninstall()`` restores everything."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (so that install() applies both stages at once)

import inductor_addmm_fix as fix
from helpers import differences, of_feature, settled, settled_states, tables_snapshot
from inductor_addmm_fix.patching import warn
from inductor_addmm_fix import features
from inductor_addmm_fix.activation import selection, startup
from inductor_addmm_fix.inductor import accumulate_kernel, lowerings, out_fallback_sizes, reinplace, views
from inductor_addmm_fix.dynamo import function_attributes, float_specializations, liger_head, power_of_2_sizes, static_strides
from inductor_addmm_fix.inductor.passes import accumulate_pairs, chunk_order, post_grad_slot, slice_writes
from inductor_addmm_fix.triton_kernels import analysis, analysis_cache, clones, float_args, float_types

ALL = frozenset(features.NAMES)
#: Features that change torch's slots here (not unavailable, not found unneeded by a probe).
APPLIES = {name: state == "applied" for name, state in settled_states().items()}


@pytest.fixture
def stock(monkeypatch):
    """The slots as stock torch has them; the package installed afresh afterwards (what
    a test planned under its monkeypatches is not kept), and its memory of warnings given
    emptied for the test."""
    fix.uninstall()
    snapshot = tables_snapshot()
    monkeypatch.setattr(warn, "_warned", set())
    yield snapshot
    monkeypatch.undo()
    fix.uninstall()
    fix.install()


def package_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, RuntimeWarning) and "inductor_addmm_fix" in str(w.message)]


# ---------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    "spec, selected, unknown",
    [
        (None, ALL, ()),
        ("", ALL, ()),
        (" 1 ", ALL, ()),
        ("ALL", ALL, ()),
        ("on", ALL, ()),
        ("0", set(), ()),
        (" Off ", set(), ()),
        ("no", set(), ()),
        ("1,-slice_writes", ALL - {"slice_writes"}, ()),
        ("-chunk_order", ALL - {"chunk_order"}, ()),
        ("-chunk_order, -views", ALL - {"chunk_order", "views"}, ()),
        ("out_dtype", {"out_dtype"}, ()),
        ("out_dtype, reinplace", {"out_dtype", "reinplace"}, ()),
        ("+views", {"views"}, ()),
        ("all,-views", ALL - {"views"}, ()),
        ("maybe", ALL, ("maybe",)),
        ("out_dtype,typo,-nope", {"out_dtype"}, ("typo", "-nope")),
        (["reinplace", "views"], {"reinplace", "views"}, ()),
        (("-out_dtype",), ALL - {"out_dtype"}, ()),
        ([], set(), ()),
    ],
)
def test_a_spec_selects_features(spec, selected, unknown):
    assert selection.parse(spec) == (frozenset(selected), unknown)


def test_the_features_are_named_in_the_public_api():
    assert fix.FEATURES == (
        "out_dtype",
        "reinplace",
        "memory_estimate",
        "accumulate_kernel",
        "views",
        "slice_writes",
        "chunk_order",
        "accumulate_pairs",
        "triton_clones",
        "triton_float_args",
        "triton_float_types",
        "triton_analysis",
        "triton_analysis_cache",
        "float_specializations",
        "static_strides",
        "power_of_2_sizes",
        "function_attributes",
        "liger_head",
    )


# ---------------------------------------------------------------- turning features off
@pytest.mark.parametrize("name", features.NAMES)
def test_each_feature_can_be_turned_off_by_install(stock, name):
    status = fix.install(features=f"-{name}")
    assert status.features[name] == f"off (install(features='-{name}'))"
    assert of_feature(tables_snapshot(), name) == of_feature(stock, name)  # its slots are stock
    assert settled(status, ALL - {name}), status.features
    assert not any(p.feature == name for p in status.patches)
    assert status.installed
    status = fix.install()
    assert settled(status, ALL), status.features
    assert of_feature(tables_snapshot(), name) != of_feature(stock, name) or not APPLIES[name]


NEEDED = [(f.name, needed) for f in features.FEATURE_TABLE for needed in f.needs]


@pytest.mark.parametrize("name, needed", NEEDED, ids=[f"{n} needs {m}" for n, m in NEEDED])
def test_a_feature_is_off_while_one_it_needs_is_off(stock, name, needed):
    status = fix.install(features=f"-{needed}")
    assert status.features[name] == f"off (needs the {needed} feature, which is not applied)"
    assert of_feature(tables_snapshot(), name) == of_feature(stock, name)
    assert not any(p.feature == name for p in status.patches)


@pytest.mark.parametrize("name, needed", NEEDED, ids=[f"{n} needs {m}" for n, m in NEEDED])
def test_a_feature_comes_back_with_one_it_needs(stock, name, needed):
    fix.install(features=f"-{needed}")
    status = fix.install()
    assert settled(status, [name, needed]), status.features
    assert of_feature(tables_snapshot(), name) != of_feature(stock, name) or not APPLIES[name]


@pytest.mark.parametrize("name", features.NAMES)
def test_each_feature_can_be_turned_off_by_the_environment_variable(stock, monkeypatch, name):
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX", f"1,-{name}")
    startup.activate(startup.ENTRY_POINT)  # what torch's entry point does at `import torch`
    status = fix.status()
    assert status.activation == "entry-point"
    assert status.features[name] == f"off (INDUCTOR_ADDMM_FIX=1,-{name})"
    assert of_feature(tables_snapshot(), name) == of_feature(stock, name)
    assert settled(status, ALL - {name}), status.features


def test_naming_features_selects_only_those(stock):
    status = fix.install(features=["reinplace", "views"])
    assert {n for n, s in status.features.items() if s == "applied"} == {"reinplace", "views"}
    for name in ("out_dtype", "slice_writes", "chunk_order"):
        assert status.features[name].startswith("off (") and of_feature(tables_snapshot(), name) == of_feature(stock, name)


def test_the_environment_variable_off_selects_no_route_and_nothing(stock, monkeypatch):
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX", "off")
    startup.activate(startup.ENTRY_POINT)
    assert not fix.status().installed and fix.status().activation is None
    assert tables_snapshot() == stock


def test_install_features_none_applies_every_feature_whatever_the_variable_says(stock, monkeypatch):
    monkeypatch.setenv("INDUCTOR_ADDMM_FIX", "-views")
    assert settled(fix.install(), ALL)


def test_unknown_names_warn_once_and_are_ignored(stock):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fix.install(features="out_dtype,bogus")
        status = fix.install(features="out_dtype,bogus")
    (message,) = package_warnings(record)
    assert "ignoring 'bogus'" in message and "out_dtype" in message
    assert status.features["out_dtype"] == "applied" and status.features["views"].startswith("off (")


def test_uninstall_after_a_partial_selection_restores_every_slot(stock):
    fix.install(features="-slice_writes,-views")
    fix.install(features="views,chunk_order")
    fix.uninstall()
    after = tables_snapshot()
    assert after == stock, differences(stock, after)


def test_the_cache_tag_names_the_feature_set():
    every = torch.compiler.config.cache_key_tag
    fix.install(features="-slice_writes")
    fewer = torch.compiler.config.cache_key_tag
    fix.install(features="reinplace")
    one = torch.compiler.config.cache_key_tag
    fix.install()
    assert torch.compiler.config.cache_key_tag == every
    tags = [t[t.index(";inductor_addmm_fix=") :] for t in (every, fewer, one)]
    assert len(set(tags)) == 3, tags
    assert all(t.count(";inductor_addmm_fix=") == 1 for t in (every, fewer, one))


# ---------------------------------------------------------------- failure domains
def _raise(*args, **kwargs):
    raise RuntimeError("simulated: torch internals changed under us")


#: feature -> (module, function) whose failure it suffers: a plan, a self-test
FAILURES = {
    "out_dtype": (lowerings, "plan"),  # the Inductor part: its core part is rolled back too
    "reinplace": (reinplace, "plan"),
    "memory_estimate": (out_fallback_sizes, "plan"),
    "accumulate_kernel": (accumulate_kernel, "plan"),
    "views": (views, "self_test"),  # fails after its patches are applied
    "slice_writes": (slice_writes, "plan"),
    "chunk_order": (chunk_order, "plan"),
    "accumulate_pairs": (accumulate_pairs, "plan"),
    "triton_clones": (clones, "plan"),
    "triton_float_args": (float_args, "plan"),
    "triton_float_types": (float_types, "plan"),
    "triton_analysis": (analysis, "self_test"),  # fails after its patches are applied
    "triton_analysis_cache": (analysis_cache, "plan"),
    "float_specializations": (float_specializations, "plan"),
    "static_strides": (static_strides, "self_test"),  # fails after its patch is applied
    "power_of_2_sizes": (power_of_2_sizes, "plan"),
    "function_attributes": (function_attributes, "plan"),
    "liger_head": (liger_head, "plan"),
}


@pytest.mark.parametrize("name", features.NAMES)
def test_a_failure_in_one_feature_leaves_the_others_applied_and_warns_once(stock, monkeypatch, name):
    if not APPLIES[name]:
        pytest.skip(f"{name} is {settled_states()[name]}")
    module, function = FAILURES[name]
    monkeypatch.setattr(module, function, _raise)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        status = fix.install()
        again = fix.install()  # tried again: fails again, warns no more
    (message,) = package_warnings(record)
    assert f"the {name} feature could not be applied" in message and "simulated" in message
    for s in (status, again):
        assert s.features[name] == "failed: RuntimeError: simulated: torch internals changed under us"
        assert settled(s, ALL - {name}), s.features
        assert not s.installed
    assert of_feature(tables_snapshot(), name) == of_feature(stock, name)  # every stage of it rolled back
    monkeypatch.undo()
    assert settled(fix.install(), ALL)  # torch is whole again: it applies
    fix.uninstall()
    after = tables_snapshot()
    assert after == stock, differences(stock, after)


def test_a_failure_of_shared_machinery_fails_the_features_that_need_it(stock, monkeypatch):
    monkeypatch.setattr(post_grad_slot, "plan", _raise)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        status = fix.install()
    users = {"slice_writes", "accumulate_pairs"} | ({"chunk_order"} if APPLIES["chunk_order"] else set())
    assert {n for n, s in status.features.items() if s.startswith("failed: ")} == users
    assert all("post_grad_slot" in status.features[n] for n in users)
    assert len(package_warnings(record)) == len(users)
    assert settled(status, ALL - users)
    assert not post_grad_slot.is_chained_pass(torch._inductor.config.post_grad_custom_post_pass)
    assert "inductor_addmm_fix=" in torch.compiler.config.cache_key_tag  # still there for the others


def test_a_feature_this_torch_does_not_need_is_reported_so(stock, monkeypatch):
    monkeypatch.setattr(views, "as_strided_of_a_slice_reads_past_its_storage", lambda: False)
    status = fix.install()
    assert status.features["views"] == "not needed on this torch"
    (decision,) = [p for p in status.patches if p.feature == "views"]
    assert not decision.applied and decision.reason == "as_strided of a slice reads within its storage"
    assert of_feature(tables_snapshot(), "views") == of_feature(stock, "views")


def test_status_reports_each_decision_with_its_feature_probe_and_retiring_change():
    status = fix.status()
    assert set(status.features) == ALL
    named = {p.feature for p in status.patches}
    assert named <= ALL | {"shared"} and "out_dtype" in named and "shared" in named
    for p in status.patches:
        assert p.reason and p.probe and p.obsolete_when, p
    decisions = {p.name: p for p in status.patches}
    assert decisions["core.meta.baddbmm.dtype"].probe == "core.probes.meta_kernel_works"
    assert decisions["inductor.lowering.addmm.dtype"].feature == "out_dtype"


# ---------------------------------------------------------------- one parser, one warning
def test_the_unknown_word_warning_names_every_word_the_parser_takes():
    text = selection.unknown_words_message("INDUCTOR_ADDMM_FIX=maybe", ("maybe",), ALL)
    for word in (*selection.ON, *selection.OFF, *features.NAMES):
        assert word in text.split("words taken are ")[1], word
        assert selection.parse(word)[1] == ()  # and the parser takes each word it names
    assert "'-'" in text and selection.parse("-views")[1] == () and selection.parse("+views")[1] == ()


def test_the_selection_is_parsed_and_the_variable_read_in_activation_only():
    """installer, __init__ and the command line take the selection from activation/."""
    from pathlib import Path

    package = Path(fix.__file__).parent
    for path in package.rglob("*.py"):
        if path.parent.name == "activation" and path.name in ("selection.py", "env.py"):
            continue
        source = path.read_text()
        assert "def parse(" not in source, path
        assert "INDUCTOR_ADDMM_FIX\"" not in source and "get(VARIABLE" not in source, path
