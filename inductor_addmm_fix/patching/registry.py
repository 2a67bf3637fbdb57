"""The patch registry: every change this package makes to torch, kept as data.

A :class:`Patch` names one slot inside torch (a dict entry, a dispatcher kernel, a
Python kernel, a module or class attribute, a config option) and the object to put
there.  :class:`Registry` applies a list of patches all-or-nothing under one lock,
remembers exactly what each slot held before (or that it was absent), and puts those
objects back on ``restore``.

This module knows the kinds of slot, not the patches: which patches exist, and why,
is declared by the patch modules (``core/``, ``inductor/``, ``dynamo/``,
``triton_kernels/``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
import warnings
from typing import Any, Callable, Iterable

log = logging.getLogger(__name__)


class _Absent:
    """Marks a slot that held nothing before a patch."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


class Slot:
    """One place inside torch that a patch writes to."""

    #: The slot cannot hand back the object it held (a dispatcher registration):
    #: ``unwrite`` restores from the token of ``write`` alone.
    restores_by_token = False

    def read(self) -> Any:
        raise NotImplementedError

    def value_for(self, old: Any, replacement: Any) -> Any:
        """What a patch stores here, given what the slot held."""
        return replacement

    def write(self, value: Any) -> Any:
        """Store ``value`` (``ABSENT`` removes it); return a token for ``unwrite``."""
        raise NotImplementedError

    def unwrite(self, token: Any, saved: Any) -> None:
        """Undo ``write`` and bring back ``saved``."""
        self.write(saved)

    def still_ours(self, current: Any, installed: Any) -> bool:
        """Whether the slot still holds what we wrote (nobody patched over us)."""
        return current is installed

    def describe(self) -> str:
        raise NotImplementedError


class _Splicing:
    """A slot whose value may be one of this package's wrappers of what it held
    (``splices = True``, what it wraps in ``stock``): undoing a patch under such a
    wrapper hands the wrapper what that patch replaced (see :func:`wrapper_over`)."""

    def unwrite(self, token: Any, saved: Any) -> None:
        over = wrapper_over(self.read(), token)
        if over is None:
            self.write(saved)
        else:
            over.stock = saved

    def still_ours(self, current: Any, installed: Any) -> bool:
        return current is installed or wrapper_over(current, installed) is not None


@dataclasses.dataclass(eq=False)
class DictEntry(_Splicing, Slot):
    """``table[key]`` of a plain dict (decomposition and lowering tables).  With
    ``wraps`` the patch's replacement is a factory, ``replacement(old) -> new``, for a
    wrapper of what the entry held (another feature's entry, say)."""

    table: dict
    key: Any
    table_name: str
    wraps: bool = False

    def read(self) -> Any:
        return self.table.get(self.key, ABSENT)

    def value_for(self, old: Any, replacement: Any) -> Any:
        return replacement(old) if self.wraps else replacement

    def write(self, value: Any) -> Any:
        if value is ABSENT:
            self.table.pop(self.key, None)
        else:
            self.table[self.key] = value
        return value

    def describe(self) -> str:
        return f"{self.table_name}[{self.key}]"


@dataclasses.dataclass(eq=False)
class PyKernel(Slot):
    """``op.py_kernels[key]``: what the Python dispatcher runs (Dynamo and make_fx
    turn it on) instead of the C++ kernel.  A write also clears the op's dispatch
    cache, as ``OpOverload.py_impl`` does."""

    op: Any
    dispatch_key: Any  # torch._C.DispatchKey

    def read(self) -> Any:
        return self.op.py_kernels.get(self.dispatch_key, ABSENT)

    def write(self, value: Any) -> None:
        if value is ABSENT:
            self.op.py_kernels.pop(self.dispatch_key, None)
        else:
            self.op.py_kernels[self.dispatch_key] = value
        cache = getattr(self.op, "_dispatch_cache", None)
        if isinstance(cache, dict):
            cache.clear()

    def describe(self) -> str:
        return f"{self.op}.py_kernels[{self.dispatch_key}]"


@dataclasses.dataclass(eq=False)
class DispatcherKernel(Slot):
    """The kernel of one aten overload for one dispatch key (here: Meta).

    The dispatcher stacks registrations: destroying ours brings the previous
    kernel back, so ``read`` has no object to return and restoring is done from the
    token.  ``torch.library`` also keeps a set of keys registered from Python; we
    put it back as it was."""

    qualname: str  # e.g. "addmm.dtype"
    dispatch_key: str = "Meta"
    restores_by_token = True

    @property
    def _impls_key(self) -> str:
        return f"aten/{self.qualname}/{self.dispatch_key}"

    def read(self) -> Any:
        import torch

        has = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{self.qualname}", self.dispatch_key)
        return f"<{'a' if has else 'no'} {self.dispatch_key} kernel>"

    def write(self, value: Any) -> Any:
        import torch

        had_key = self._impls_key in torch.library._impls
        lib = torch.library.Library("aten", "IMPL", self.dispatch_key)
        with warnings.catch_warnings():
            # The dispatcher warns that we override the kernel: that is the point.
            warnings.simplefilter("ignore")
            lib.impl(self.qualname, value, self.dispatch_key, allow_override=True)
        return (lib, had_key)

    def unwrite(self, token: Any, saved: Any) -> None:
        import torch

        lib, had_key = token
        lib._destroy()
        if had_key:
            torch.library._impls.add(self._impls_key)

    def describe(self) -> str:
        return f"dispatcher[aten::{self.qualname}, {self.dispatch_key}]"


@dataclasses.dataclass(eq=False)
class Attribute(_Splicing, Slot):
    """An attribute as a module or class stores it in its ``__dict__``: a function that
    torch calls by its global name, a class's staticmethod.  The patch's replacement is
    a factory: ``replacement(old) -> new`` wraps the object that was there (the raw
    ``__dict__`` entry, so a staticmethod stays one)."""

    owner: Any
    attr: str
    owner_name: str

    def read(self) -> Any:
        return vars(self.owner).get(self.attr, ABSENT)

    def value_for(self, old: Any, replacement: Any) -> Any:
        return replacement(old)

    def write(self, value: Any) -> Any:
        if value is ABSENT:
            if self.attr in vars(self.owner):
                delattr(self.owner, self.attr)
        else:
            setattr(self.owner, self.attr, value)
        return value

    def describe(self) -> str:
        return f"{self.owner_name}.{self.attr}"


def wrapper_over(value: Any, inner: Any) -> Any:
    """The wrapper in ``value``'s chain of this package's wrappers whose ``stock`` is
    ``inner``, or None.  Two features may wrap one function (torch calls it by one
    name); a wrapper that calls what it wraps through its ``stock`` attribute, and says
    so with ``splices = True``, lets either feature be rolled back alone: the other's
    wrapper is given what was under the one rolled back."""
    while getattr(value, "splices", False):
        if value.stock is inner:
            return value
        value = value.stock
    return None


def innermost(value: Any) -> Any:
    """What is under every wrapper of this package that names what it wraps ``stock``."""
    while getattr(value, "splices", False):
        value = value.stock
    return value


# ---------------------------------------------------------------- config options
class Amendment:
    """How a patch changes a config option: ``apply`` to the old value, recognize
    an amended value, and take the amendment out of a value again (which may have
    changed since: a user appending to a tag, a ``config.patch`` pinning it)."""

    def apply(self, value: Any) -> Any:
        raise NotImplementedError

    def applied_to(self, value: Any) -> bool:
        raise NotImplementedError

    def undo(self, value: Any, before: Any) -> Any:
        """``value`` without the amendment; ``before`` is what was there before it."""
        raise NotImplementedError


@dataclasses.dataclass(eq=False)
class AppendTag(Amendment):
    """Append ``tag`` to a string option; undoing removes that tag only, so whatever a
    user appended meanwhile survives."""

    tag: str

    def apply(self, value: Any) -> Any:
        return value + self.tag

    def applied_to(self, value: Any) -> bool:
        return isinstance(value, str) and self.tag in value

    def undo(self, value: Any, before: Any) -> Any:
        return value.replace(self.tag, "", 1)


@dataclasses.dataclass(eq=False)
class WrapValue(Amendment):
    """Wrap the old value in an object of ours that keeps it as ``.previous`` (a chain
    of graph passes); undoing unwraps every layer of ours."""

    wrap: Callable[[Any], Any]
    is_ours: Callable[[Any], bool]

    def apply(self, value: Any) -> Any:
        return self.wrap(value)

    def applied_to(self, value: Any) -> bool:
        return self.is_ours(value)

    def undo(self, value: Any, before: Any) -> Any:
        while self.is_ours(value):
            value = value.previous
        return value


@dataclasses.dataclass(eq=False)
class SetValue(Amendment):
    """Replace the value (a switch turned off); undoing puts back the value before."""

    value: Any

    def apply(self, value: Any) -> Any:
        return self.value

    def applied_to(self, value: Any) -> bool:
        return value == self.value

    def undo(self, value: Any, before: Any) -> Any:
        return before


@dataclasses.dataclass(eq=False)
class ConfigOption(Slot):
    """An option of a torch config module, such as ``torch.compiler.config.cache_key_tag``.

    Where assignments are process-wide (before torch 2.13) the option is read and
    assigned through the module (``getattr``/``setattr``).  From torch 2.13
    ``ConfigModule`` keeps assignments in a ``ContextVar``: an assignment reaches the
    calling thread only, and backward graphs compile in autograd's own threads.  With
    ``per_thread`` we therefore write the layer that every thread reads when it has
    not assigned the option itself, ``env_value_default`` (``default`` would be
    deep-copied into a reading thread on first read); ConfigModule has no public
    interface for it.  If the calling thread has assigned its own value, that value
    is amended too (through ``setattr``), and restoring takes the amendment out of
    the restoring thread's own value.  Another thread's own value is out of reach:
    it keeps whatever it assigned, as an assignment replaces the value on any torch."""

    owner: Any
    attr: str
    owner_name: str
    amendment: Amendment
    per_thread: bool = False

    def _entry(self) -> Any:
        return self.owner._config[self.attr]

    def _own_value(self) -> Any:
        from torch.utils._config_module import _UNSET_SENTINEL

        value = self._entry().user_override.get()
        return ABSENT if value is _UNSET_SENTINEL else value

    def value_for(self, old: Any, replacement: Any) -> Any:
        return self.amendment.apply(old)

    def read(self) -> Any:
        if not self.per_thread:
            return getattr(self.owner, self.attr)
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = self._entry()
        return entry.default if entry.env_value_default is _UNSET_SENTINEL else entry.env_value_default

    def write(self, value: Any) -> Any:
        if not self.per_thread:
            setattr(self.owner, self.attr, value)
            return value
        entry = self._entry()
        own = self._own_value()
        token = (entry.env_value_default, own)  # restored exactly, unset included
        entry.env_value_default = value
        if own is not ABSENT and not self.amendment.applied_to(own):
            setattr(self.owner, self.attr, self.amendment.apply(own))
        return token

    def unwrite(self, token: Any, saved: Any) -> None:
        if not self.per_thread:
            current = self.read()
            unchanged = current is token or (isinstance(current, str) and current == token)
            setattr(self.owner, self.attr, saved if unchanged else self.amendment.undo(current, saved))
            return
        layer, own_before = token
        self._entry().env_value_default = layer
        own = self._own_value()
        # Our amendment of this thread's value, or the process-wide value that a
        # ``config.patch`` left as the thread's own value on exit: take it out.
        if own is not ABSENT and self.amendment.applied_to(own):
            restored = self.amendment.undo(own, own_before)
            if restored is ABSENT:
                delattr(self.owner, self.attr)  # the thread had no value of its own
            else:
                setattr(self.owner, self.attr, restored)

    def still_ours(self, current: Any, installed: Any) -> bool:
        if isinstance(self.amendment, WrapValue):
            return current is installed
        return current is installed or self.amendment.applied_to(current)

    def describe(self) -> str:
        return f"{self.owner_name}.{self.attr}" + (" (process-wide)" if self.per_thread else "")


# ---------------------------------------------------------------- patches
@dataclasses.dataclass(eq=False)
class Patch:
    """One change to torch: the slot, and the object to put there (for a config
    option, its amendment of the old value decides)."""

    name: str  # stable id, e.g. "inductor.lowering.addmm.dtype"
    slot: Slot
    replacement: Any = None

    def new_value(self, old: Any) -> Any:
        return self.slot.value_for(old, self.replacement)


@dataclasses.dataclass
class _Applied:
    patch: Patch
    saved: Any
    installed: Any
    token: Any


def drop_torch_table_caches() -> None:
    """Drop torch's copies of the tables the patches edit (after every change)."""
    decomposition = sys.modules.get("torch._inductor.decomposition")
    fast = getattr(decomposition, "fast_random_decomps", None)
    if hasattr(fast, "cache_clear"):
        fast.cache_clear()
    fake_tensor = sys.modules.get("torch._subclasses.fake_tensor")
    check = getattr(fake_tensor, "torch_decomp_decompositions", None)
    if hasattr(check, "cache_clear"):
        check.cache_clear()
    mode = getattr(fake_tensor, "FakeTensorMode", None)
    cache = getattr(mode, "cache", None)
    if isinstance(cache, dict):
        cache.clear()


class Registry:
    """Applies patches all-or-nothing and restores exactly what was there."""

    def __init__(self, after_change: Iterable[Callable[[], None]] = (drop_torch_table_caches,)):
        self._lock = threading.RLock()
        self._applied: list[_Applied] = []
        self._after_change = list(after_change)

    def applied(self) -> list[Patch]:
        with self._lock:
            return [a.patch for a in self._applied]

    def apply(self, patches: Iterable[Patch]) -> None:
        """Apply every patch, or none: a failure rolls back the ones already made."""
        with self._lock:
            done: list[_Applied] = []
            try:
                for patch in patches:
                    saved = patch.slot.read()
                    new = patch.new_value(saved)
                    token = patch.slot.write(new)
                    done.append(_Applied(patch, saved, new, token))
                    log.debug("applied %s at %s", patch.name, patch.slot.describe())
            except BaseException:
                self._undo(done)
                self._notify()
                raise
            self._applied.extend(done)
            self._notify()

    def restore(self, only: Iterable[Patch] | None = None) -> list[str]:
        """Undo the applied patches (all, or ``only`` those), newest first.

        Returns one message per slot that someone else changed after us: such a
        slot is left as it is."""
        with self._lock:
            if only is None:
                chosen, kept = self._applied, []
            else:
                ids = {id(p) for p in only}
                chosen = [a for a in self._applied if id(a.patch) in ids]
                kept = [a for a in self._applied if id(a.patch) not in ids]
            problems = self._undo(list(chosen))
            for gone in chosen:  # a kept wrapper that went over one undone now wraps what that one saved
                for k in kept:
                    if k.saved is gone.installed:
                        k.saved = gone.saved
            self._applied = kept
            self._notify()
            return problems

    def _undo(self, applied: list[_Applied]) -> list[str]:
        problems = []
        for a in reversed(applied):
            slot = a.patch.slot
            if not slot.restores_by_token and not slot.still_ours(slot.read(), a.installed):
                problems.append(
                    f"{slot.describe()} was changed by someone else after {a.patch.name} was applied; left as it is"
                )
                continue
            slot.unwrite(a.token, a.saved)
        return problems

    def _notify(self) -> None:
        for hook in self._after_change:
            with contextlib.suppress(Exception):
                hook()
