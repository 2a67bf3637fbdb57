"""The post-grad pass slot: the package's passes (slice_writes, then chunk_order) run
after the user's own, install/uninstall put back exactly what was there, every thread
sees the passes, and the FX graph cache keys on all of them."""

from __future__ import annotations

import threading

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (the Inductor part applies once Inductor is imported)
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

import inductor_addmm_fix
from helpers import compile_and_run
from workloads import CHUNK, flce_inputs, flce_like
from inductor_addmm_fix.inductor.passes import chunk_order
from inductor_addmm_fix.inductor.passes import post_grad_slot as slot

needs_pass = pytest.mark.skipif(not slot.supported(), reason="no post_grad_custom_post_pass in this torch")
needs_chunk_order = pytest.mark.skipif(not chunk_order.supported(), reason="no preserve_node_ordering in this torch")


class UserPass(CustomGraphPass):
    """A user's own post-grad pass, which must keep running, and come back on uninstall."""

    def __init__(self):
        self.calls = 0

    def __call__(self, graph):
        self.calls += 1

    def uuid(self):
        return "user-pass-1"


def _slot_value():
    return inductor_config.post_grad_custom_post_pass


@needs_chunk_order
def test_install_chains_a_users_pass_and_uninstall_restores_it():
    user = UserPass()
    inductor_addmm_fix.uninstall()
    try:
        with inductor_config.patch(post_grad_custom_post_pass=user):
            assert _slot_value() is user
            inductor_addmm_fix.install()
            ours = _slot_value()
            assert slot.is_chained_pass(ours) and ours.previous is user
            assert ours.uuid()[-1] == ("user-pass-1",)  # the FX graph cache keys on both

            compiled = compile_and_run(flce_like, *flce_inputs(torch.float32, rows=3 * CHUNK), no_grad=True)  # 3 chunks
            assert user.calls >= 1 and compiled.events("chunk_order")["graphs"] == 1

            inductor_addmm_fix.uninstall()
            assert _slot_value() is user  # the same object
            inductor_addmm_fix.install()
            inductor_addmm_fix.install()  # idempotent: chained once
            assert _slot_value().previous is user
            inductor_addmm_fix.uninstall()
            assert _slot_value() is user
    finally:
        inductor_addmm_fix.install()
    assert slot.is_chained_pass(_slot_value()) and _slot_value().previous is None


@needs_pass
def test_uninstall_restores_the_stock_value_exactly():
    inductor_addmm_fix.uninstall()
    try:
        stock = _slot_value()
        entry = getattr(inductor_config, "_config", {}).get("post_grad_custom_post_pass")
        layer = vars(entry).copy() if entry is not None else None
        for _ in range(3):
            inductor_addmm_fix.install()
            assert slot.is_chained_pass(_slot_value())
            inductor_addmm_fix.uninstall()
            assert _slot_value() is stock
            if entry is not None:
                after = vars(entry)
                assert {k: v for k, v in after.items() if k != "user_override"} == {
                    k: v for k, v in layer.items() if k != "user_override"
                }
    finally:
        inductor_addmm_fix.install()


@needs_pass
def test_uninstall_after_a_config_patch_of_the_option():
    """``config.patch`` sets the option back to what it read (our pass) on exit; on torch
    2.13 that value becomes the thread's own: uninstall must still take it out."""
    user = UserPass()
    with inductor_config.patch(post_grad_custom_post_pass=None):
        pass
    inductor_addmm_fix.uninstall()
    try:
        assert not slot.is_chained_pass(_slot_value())
        inductor_addmm_fix.install()
        with inductor_config.patch(post_grad_custom_post_pass=user):
            assert _slot_value() is user  # the user's patch wins while it lasts, as in stock torch
        assert slot.is_chained_pass(_slot_value())
        inductor_addmm_fix.uninstall()
        assert not slot.is_chained_pass(_slot_value())
    finally:
        inductor_addmm_fix.install()


@needs_pass
def test_every_thread_sees_the_pass():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_slot_value()))
    thread.start()
    thread.join()
    assert slot.is_chained_pass(seen[0])


@needs_pass
def test_uuid_is_none_when_a_previous_pass_has_none():
    assert slot.make_chained_pass(lambda graph: None).uuid() is None
    assert slot.make_chained_pass([UserPass(), UserPass()]).uuid()[-1] == ("user-pass-1", "user-pass-1")
    assert slot.make_chained_pass(None).uuid() == slot.make_chained_pass(None).uuid()


def test_a_pass_without_a_place_in_the_order_is_refused():
    with pytest.raises(ValueError, match="no place in post_grad_slot.ORDER"):
        slot.register("another_pass", lambda graph: 0)


@needs_pass
def test_the_passes_run_in_the_slot_s_order_and_the_uuid_names_them():
    assert [name for name, _ in slot.active_passes()] == (
        ["slice_writes", "accumulate_pairs", "chunk_order"] if chunk_order.supported() else ["slice_writes", "accumulate_pairs"]
    )
    chained = slot.make_chained_pass(None)
    assert chained.uuid()[1] == chained.passes == tuple(name for name, _ in slot.active_passes())
    inductor_addmm_fix.install(features="-slice_writes")
    try:
        assert "slice_writes" not in slot.make_chained_pass(None).uuid()[1]  # another feature set, another key
    finally:
        inductor_addmm_fix.install()


@needs_pass
def test_the_uuid_changes_with_a_pass_s_settings(monkeypatch):
    """accumulate_pairs' memory budget and splitters decide its output: another budget,
    another cache key."""
    from inductor_addmm_fix.inductor.passes import accumulate_pairs, pair_memory

    before = slot.make_chained_pass(None).uuid()
    monkeypatch.setattr(pair_memory, "FLOOR_BYTES", pair_memory.FLOOR_BYTES * 2)
    assert slot.make_chained_pass(None).uuid() != before
    monkeypatch.undo()
    monkeypatch.setitem(accumulate_pairs.SPLITTERS, "another", lambda first, second: None)
    assert slot.make_chained_pass(None).uuid() != before


def test_status_lists_the_slot_and_each_pass():
    decisions = {p.name: p for p in inductor_addmm_fix.status().patches}
    assert decisions["inductor.post_grad_slot"].applied and decisions["inductor.post_grad_slot"].feature == "shared"
    assert decisions["inductor.pass.slice_writes"].applied


def test_chunk_order_unavailable_without_preserve_node_ordering(monkeypatch):
    monkeypatch.setattr(chunk_order, "supported", lambda: False)
    status = inductor_addmm_fix.install(features="-chunk_order")  # roll it back, then plan it again
    status = inductor_addmm_fix.install()
    assert status.features["chunk_order"].startswith("unavailable on this torch") and "2.10+" in status.features["chunk_order"]
    assert status.features["slice_writes"] == "applied"
    assert [name for name, _ in slot.active_passes()] == ["slice_writes", "accumulate_pairs"]


def test_unavailable_without_the_config_option(monkeypatch):
    monkeypatch.setattr(slot, "supported", lambda: False)
    inductor_addmm_fix.install(features="out_dtype")
    status = inductor_addmm_fix.install()
    for name in ("slice_writes", "chunk_order"):
        assert "post_grad_custom_post_pass" in status.features[name], status.features
    assert status.features["out_dtype"] == "applied"
    assert not slot.is_chained_pass(inductor_config.post_grad_custom_post_pass)
    assert "inductor.post_grad_slot" not in {p.name for p in status.patches}


def test_no_pass_imports_another_pass():
    """What passes share is in ``fx_support``; the slot runs them in its order."""
    import ast
    import pathlib

    folder = pathlib.Path(slot.__file__).parent
    package = "inductor_addmm_fix.inductor.passes"
    passes = set(slot.ORDER)
    for path in [*folder.glob("*.py"), folder.parent / "accumulate_kernel.py"]:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                where = (node.module or "").split(".")[-1]
                imported |= {where} | {a.name for a in node.names} if node.level or package in (node.module or "") else set()
        assert not (imported & (passes - {path.stem})), (path.name, imported & passes)


@needs_pass
def test_the_uuid_covers_the_source_of_what_the_passes_share(monkeypatch):
    hashed = []
    monkeypatch.setattr(slot, "hash_of_files", lambda files: hashed.append(files) or "hash")
    slot.make_chained_pass(None).uuid()
    names = {f.rsplit("/", 1)[-1] for f in hashed[0]}
    assert {"fx_support.py", "pair_memory.py", "adjacent_slices.py", "scatter_chains.py", "post_grad_slot.py"} <= names
