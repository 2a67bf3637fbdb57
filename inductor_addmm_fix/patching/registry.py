"""The patch registry: every change this package makes to torch, kept as data.

A :class:`Patch` names one slot inside torch (``slots.py``: a dict entry, a dispatcher
kernel, a Python kernel, a module or class attribute; ``config_options.py``: a config
option) and the object to put there.  :class:`Registry` applies a list of patches
all-or-nothing under one lock, remembers exactly what each slot held before (or that it
was absent), and puts those objects back on ``restore``; after every change it calls
the hooks it was given (the layer that knows torch passes the clearing of torch's
caches of the tables).

This module knows no patch: which patches exist, and why, is declared by the patch
modules (``core/``, ``inductor/``, ``dynamo/``, ``triton_kernels/``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from typing import Any, Callable, Iterable

from .slots import Slot

log = logging.getLogger(__name__)


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


class Registry:
    """Applies patches all-or-nothing and restores exactly what was there."""

    def __init__(self, after_change: Iterable[Callable[[], None]] = ()):
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
