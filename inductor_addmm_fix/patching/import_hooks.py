"""Run a callback once a module has finished importing (post-import hook).

The Inductor part of a feature needs ``torch._inductor``, whose import costs over a
second: we wait for ``torch._inductor.compile_fx`` (what every Inductor compile
imports, after the lowering and decomposition tables are complete) instead of
importing it ourselves.  The start-up routes wait for ``torch`` the same way.

This module is imported at interpreter start-up (by the ``.pth`` line), so it uses
only modules Python has loaded already: the finder and loader are duck-typed
(``importlib.abc`` would cost milliseconds), the lock comes from ``_thread``.
"""

from __future__ import annotations

import _thread
import sys

_lock = _thread.allocate_lock()
_pending: dict = {}  # module name -> list of callbacks (functions of no argument)


class _Finder:
    """A meta path finder that wraps the loader of a watched module so that
    callbacks run after its ``exec_module``."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


class _Loader:
    def __init__(self, inner, fullname):
        self._inner = inner
        self._fullname = fullname

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        # Leave no trace: the module keeps its own loader.
        spec = getattr(module, "__spec__", None)
        if getattr(spec, "loader", None) is self:
            spec.loader = self._inner
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._inner
        _fire(self._fullname)

    def __getattr__(self, name):  # get_code, is_package, ... for tools that ask
        return getattr(self._inner, name)


_finder = _Finder()


def _fire(fullname: str) -> None:
    with _lock:
        callbacks = _pending.pop(fullname, [])
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for callback in callbacks:
        callback()  # callbacks must not raise; ours catch everything


def when_imported(fullname: str, callback) -> bool:
    """Call ``callback()`` now if ``fullname`` is imported, else right after its import.

    "Imported" means present in ``sys.modules``: a module that is still executing
    (``torch`` while it runs its ``torch.backends`` entry points) counts as imported.
    Returns True if the callback ran now."""
    with _lock:
        if fullname not in sys.modules:
            callbacks = _pending.setdefault(fullname, [])
            if callback not in callbacks:  # install() may be called many times
                callbacks.append(callback)
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
            return False
    callback()
    return True


def cancel(fullname: str) -> None:
    with _lock:
        _pending.pop(fullname, None)
        if not _pending and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def is_pending(fullname: str) -> bool:
    with _lock:
        return fullname in _pending
