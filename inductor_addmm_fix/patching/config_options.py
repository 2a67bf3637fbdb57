"""Config options of torch's config modules as slots: how a patch amends an option's
value (:class:`Amendment`: append a tag, wrap the value, set it) and where the value
lives (:class:`ConfigOption`, process-wide or per thread).  Knows no patch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .slots import ABSENT, Slot

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
