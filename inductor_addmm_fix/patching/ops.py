"""The package's own operators, ``torch.ops.inductor_addmm_fix.<name>``: each defined once
per process, on first use, and kept (compiled code may call one later, and an operator
cannot be undefined safely)."""

from __future__ import annotations

import threading
from typing import Any, Callable

NAMESPACE = "inductor_addmm_fix"
_lock = threading.Lock()
_libraries: dict[str, Any] = {}  # operator name -> the torch.library.Library that defines it


def package_op(name: str, schema: str, kernels: dict[str, Callable[..., Any]], fake: Callable[..., Any] | None = None) -> Any:
    """``torch.ops.inductor_addmm_fix.<name>.default``, defined on first use: ``schema`` its
    signature, ``kernels`` its implementations by dispatch key, ``fake`` (if given) its
    fake-tensor kernel."""
    import torch

    with _lock:
        if name not in _libraries:
            library = torch.library.Library(NAMESPACE, "FRAGMENT")
            library.define(schema)
            for key, kernel in kernels.items():
                library.impl(name, kernel, key)
            if fake is not None:
                torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=library)
            _libraries[name] = library
    return getattr(getattr(torch.ops, NAMESPACE), name).default
