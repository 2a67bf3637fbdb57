"""The post-grad pass slot: the plugin's passes (Tiers 2f, 2e) run after the user's own,
install/uninstall put back exactly what was there, and the FX graph cache keys on both."""

from __future__ import annotations

import threading

import pytest
import torch
import torch._inductor.compile_fx  # noqa: F401  (Tier 2 is applied once Inductor is imported)
import torch._inductor.config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

import inductor_addmm_fix
from inductor_addmm_fix import tier2_inductor_chunk_order as t2o
from inductor_addmm_fix import tier2_inductor_post_grad as t2p

from test_chunk_order import compile_flce, inputs

needs_pass = pytest.mark.skipif(not t2p.supported(), reason="no post_grad_custom_post_pass in this torch")
needs_chunk_order = pytest.mark.skipif(not t2o.supported(), reason="no preserve_node_ordering in this torch")


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
            assert t2p.is_chained_pass(ours) and ours.previous is user
            assert ours.uuid()[3] == ("user-pass-1",)  # the FX graph cache keys on both

            x, w, target = inputs(torch.float32)
            _, _, counts = compile_flce(x, w, target)
            assert user.calls >= 1 and counts["graphs"] == 1

            inductor_addmm_fix.uninstall()
            assert _slot_value() is user  # the same object
            inductor_addmm_fix.install()
            inductor_addmm_fix.install()  # idempotent: chained once
            assert _slot_value().previous is user
            inductor_addmm_fix.uninstall()
            assert _slot_value() is user
    finally:
        inductor_addmm_fix.install()
    assert t2p.is_chained_pass(_slot_value()) and _slot_value().previous is None


@needs_pass
def test_uninstall_restores_the_stock_value_exactly():
    inductor_addmm_fix.uninstall()
    try:
        stock = _slot_value()
        entry = getattr(inductor_config, "_config", {}).get("post_grad_custom_post_pass")
        layer = vars(entry).copy() if entry is not None else None
        for _ in range(3):
            inductor_addmm_fix.install()
            assert t2p.is_chained_pass(_slot_value())
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
        assert not t2p.is_chained_pass(_slot_value())
        inductor_addmm_fix.install()
        with inductor_config.patch(post_grad_custom_post_pass=user):
            assert _slot_value() is user  # the user's patch wins while it lasts, as in stock torch
        assert t2p.is_chained_pass(_slot_value())
        inductor_addmm_fix.uninstall()
        assert not t2p.is_chained_pass(_slot_value())
    finally:
        inductor_addmm_fix.install()


@needs_pass
def test_every_thread_sees_the_pass():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_slot_value()))
    thread.start()
    thread.join()
    assert t2p.is_chained_pass(seen[0])


@needs_pass
def test_uuid_is_none_when_a_previous_pass_has_none():
    assert t2p.make_chained_pass(lambda graph: None).uuid() is None
    assert t2p.make_chained_pass([UserPass(), UserPass()]).uuid()[3] == ("user-pass-1", "user-pass-1")
    assert t2p.make_chained_pass(None).uuid() == t2p.make_chained_pass(None).uuid()


def test_status_lists_the_patch():
    decisions = {p.name: p for p in inductor_addmm_fix.status().patches}
    assert decisions["inductor.post_grad_passes"].applied


def test_chunk_order_not_run_without_preserve_node_ordering(monkeypatch):
    from inductor_addmm_fix import _plan

    monkeypatch.setattr(t2o, "supported", lambda: False)
    assert [name for name, _ in t2p.plugin_passes()] == ["slice_writes"]
    decision = _plan._plan_post_grad_passes()
    assert decision.needed and "2.10+" in decision.reason


def test_not_planned_without_the_config_option(monkeypatch):
    from inductor_addmm_fix import _plan

    monkeypatch.setattr(t2p, "supported", lambda: False)
    decision = _plan._plan_post_grad_passes()
    assert not decision.needed and not decision.patches
    assert "post_grad_custom_post_pass" in decision.reason
