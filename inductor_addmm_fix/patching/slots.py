"""The kinds of slot inside torch that a patch writes to: a dict entry, a Python kernel,
a dispatcher kernel, a module or class attribute.  Each reads what it holds, writes a
value, and puts back what it held; a slot that may hold one of this package's wrappers
splices it out on restore (:func:`wrapper_over`).  Config options are slots of their own
(``config_options.py``).  This module knows no patch and no torch module.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

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


def stock_of(value: Any) -> Any:
    """What is under every wrapper of this package, splicing or not: each names what it
    wraps ``stock`` (what a probe of torch's own code reads)."""
    while hasattr(value, "stock"):
        value = value.stock
    return value
