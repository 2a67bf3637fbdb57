"""The patch registry: every change this package makes to torch, kept as data.

A :class:`Patch` names one slot inside torch (a dict entry, a dispatcher kernel, a
config attribute), the object to put there, and why.  :class:`Registry` applies a
list of patches all-or-nothing under one lock, remembers exactly what each slot
held before (or that it was absent), and puts those objects back on ``restore``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
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

    def read(self) -> Any:
        raise NotImplementedError

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


@dataclasses.dataclass(eq=False)
class DictEntry(Slot):
    """``table[key]`` of a plain dict (decomposition and lowering tables)."""

    table: dict
    key: Any
    table_name: str

    def read(self) -> Any:
        return self.table.get(self.key, ABSENT)

    def write(self, value: Any) -> None:
        if value is ABSENT:
            self.table.pop(self.key, None)
        else:
            self.table[self.key] = value

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
class ConfigValue(Slot):
    """A config attribute such as ``torch._inductor.config.fx_graph_cache``."""

    owner: Any
    attr: str
    owner_name: str

    def read(self) -> Any:
        return getattr(self.owner, self.attr)

    def write(self, value: Any) -> None:
        setattr(self.owner, self.attr, value)

    def still_ours(self, current: Any, installed: Any) -> bool:
        return current == installed

    def describe(self) -> str:
        return f"{self.owner_name}.{self.attr}"


@dataclasses.dataclass(eq=False)
class TagInString(ConfigValue):
    """A string attribute of a config module to which we append one tag, such as
    ``torch.compiler.config.cache_key_tag``.  Restoring removes our tag only, so
    whatever the user appended meanwhile survives."""

    tag: str = ""

    def still_ours(self, current: Any, installed: Any) -> bool:
        return isinstance(current, str) and self.tag in current

    def unwrite(self, token: Any, saved: Any) -> None:
        current = self.read()
        if current == saved + self.tag:
            self.write(saved)  # the exact object that was there
        else:
            self.write(current.replace(self.tag, "", 1))


@dataclasses.dataclass(eq=False)
class TagInConfigDefault(TagInString):
    """Like :class:`TagInString`, for a torch config option whose assignments are
    per thread: from torch 2.13 ``ConfigModule`` keeps ``setattr`` values in a
    ``ContextVar``, so assigning would tag the calling thread only, and an
    ``uninstall()`` from another thread could not see the tag to remove it.

    We tag the process-wide layer that every thread reads when it has not assigned
    the option itself (the value from the environment variable if there was one,
    else the default) and, if the calling thread has assigned it, that thread's
    value too.  Restoring puts the layer back exactly and removes the tag from the
    restoring thread's own value.  Another thread's own value is out of reach: it
    keeps whatever it assigned, as assigning replaces the tag on any torch."""

    def _entry(self) -> Any:
        return self.owner._config[self.attr]

    def _field(self) -> str:
        from torch.utils._config_module import _UNSET_SENTINEL

        return "default" if self._entry().env_value_default is _UNSET_SENTINEL else "env_value_default"

    def _own_value(self) -> Any:
        from torch.utils._config_module import _UNSET_SENTINEL

        value = self._entry().user_override.get()
        return None if value is _UNSET_SENTINEL else value

    def read(self) -> Any:
        return getattr(self._entry(), self._field())

    def write(self, value: Any) -> None:
        setattr(self._entry(), self._field(), value)
        own = self._own_value()
        if isinstance(own, str) and self.tag not in own:
            setattr(self.owner, self.attr, own + self.tag)

    def unwrite(self, token: Any, saved: Any) -> None:
        current = self.read()
        restored = saved if current == saved + self.tag else current.replace(self.tag, "", 1)
        setattr(self._entry(), self._field(), restored)
        own = self._own_value()
        if isinstance(own, str) and self.tag in own:
            setattr(self.owner, self.attr, own.replace(self.tag, "", 1))

    def describe(self) -> str:
        return f"{self.owner_name}.{self.attr} (process-wide)"


@dataclasses.dataclass(eq=False)
class PassInConfig(ConfigValue):
    """A config option holding graph passes (``post_grad_custom_post_pass``) into which
    we chain ours: the patch's value is derived from the old one (an object that runs
    it first and keeps it as ``.previous``); restoring puts back the very object that
    was there.

    With ``per_thread`` (torch 2.13+, where ``setattr`` on a config reaches the calling
    thread only, and backward graphs may compile in autograd's device threads), we write
    the process-wide layer instead: ``env_value_default``, which every thread that has
    not assigned the option reads, returned as it is (``default`` would be deep-copied
    into the reading thread on first read).  If the calling thread has assigned its own
    passes, they are chained too (``wrap``), and restored on ``unwrite`` from that
    thread, as is our value that ``config.patch`` leaves as the thread's own value on
    exit.  Another thread's own value is out of reach, as with the cache tag."""

    per_thread: bool = False
    wrap: Any = None  # callable(old) -> new, for the calling thread's own value
    is_ours: Any = None  # callable(value) -> bool

    def _entry(self) -> Any:
        return self.owner._config[self.attr]

    def _own_value(self) -> Any:
        from torch.utils._config_module import _UNSET_SENTINEL

        value = self._entry().user_override.get()
        return ABSENT if value is _UNSET_SENTINEL else value

    def read(self) -> Any:
        if not self.per_thread:
            return super().read()
        from torch.utils._config_module import _UNSET_SENTINEL

        entry = self._entry()
        return entry.default if entry.env_value_default is _UNSET_SENTINEL else entry.env_value_default

    def write(self, value: Any) -> Any:
        if not self.per_thread:
            return super().write(value)
        entry = self._entry()
        token = {"layer": entry.env_value_default, "own": ABSENT}
        entry.env_value_default = value
        own = self._own_value()
        if own is not ABSENT and self.wrap is not None and not self.is_ours(own):
            wrapped = self.wrap(own)
            setattr(self.owner, self.attr, wrapped)
            token["own"] = wrapped
        return token

    def unwrite(self, token: Any, saved: Any) -> None:
        if not self.per_thread:
            return super().unwrite(token, saved)
        self._entry().env_value_default = token["layer"]  # exactly as it was, unset included
        own = self._own_value()
        if own is not ABSENT and self.is_ours(own):
            # Our wrapper of this thread's passes, or the process-wide value that a
            # ``config.patch`` pinned here on exit: unwrap it.
            while self.is_ours(own):
                own = own.previous
            setattr(self.owner, self.attr, own)

    def still_ours(self, current: Any, installed: Any) -> bool:
        return current is installed

    def describe(self) -> str:
        where = " (process-wide)" if self.per_thread else ""
        return f"{self.owner_name}.{self.attr}{where}"


@dataclasses.dataclass(eq=False)
class DispatcherKernel(Slot):
    """The kernel of one aten overload for one dispatch key (here: Meta).

    The dispatcher stacks registrations: destroying ours brings the previous
    kernel back, so ``read`` has no object to return and restoring is done by
    ``unwrite``.  ``torch.library`` also keeps a set of keys registered from
    Python; we put it back as it was.
    """

    qualname: str  # e.g. "addmm.dtype"
    dispatch_key: str = "Meta"

    @property
    def _impls_key(self) -> str:
        return f"aten/{self.qualname}/{self.dispatch_key}"

    def read(self) -> Any:
        import torch

        has = torch._C._dispatch_has_kernel_for_dispatch_key(
            f"aten::{self.qualname}", self.dispatch_key
        )
        return f"<{'a' if has else 'no'} {self.dispatch_key} kernel>"

    def write(self, value: Any) -> Any:
        import torch

        impls = torch.library._impls
        had_key = self._impls_key in impls
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
class Patch:
    """One change to torch: where, what, and why."""

    name: str  # stable id, e.g. "tier2.lowering.addmm.dtype"
    tier: str  # "core" (Tier 1) or "inductor" (Tier 2) or "cache"
    slot: Slot
    replacement: Any  # the new object, or a callable(old) -> new when derive=True
    why: str  # what is broken in stock torch
    obsolete_when: str  # the upstream change that makes this patch unnecessary
    derive: bool = False

    def new_value(self, old: Any) -> Any:
        return self.replacement(old) if self.derive else self.replacement


@dataclasses.dataclass
class _Applied:
    patch: Patch
    saved: Any
    installed: Any
    token: Any


class Registry:
    """Applies patches all-or-nothing and restores exactly what was there."""

    def __init__(self, after_change: Iterable[Callable[[], None]] = ()):
        self._lock = threading.RLock()
        self._applied: list[_Applied] = []
        self._after_change = list(after_change)

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def applied(self) -> list[Patch]:
        with self._lock:
            return [a.patch for a in self._applied]

    def saved_value(self, name: str) -> Any:
        """The object a patch replaced (``ABSENT`` if none); KeyError if not applied."""
        with self._lock:
            for a in self._applied:
                if a.patch.name == name:
                    return a.saved
        raise KeyError(name)

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
            self._applied = kept
            self._notify()
            return problems

    def _undo(self, applied: list[_Applied]) -> list[str]:
        problems = []
        for a in reversed(applied):
            slot = a.patch.slot
            if isinstance(slot, DispatcherKernel):
                slot.unwrite(a.token, a.saved)
                continue
            current = slot.read()
            if not slot.still_ours(current, a.installed):
                problems.append(
                    f"{slot.describe()} was changed by someone else after "
                    f"{a.patch.name} was applied; left as it is"
                )
                continue
            slot.unwrite(a.token, a.saved)
        return problems

    def _notify(self) -> None:
        for hook in self._after_change:
            with contextlib.suppress(Exception):
                hook()
