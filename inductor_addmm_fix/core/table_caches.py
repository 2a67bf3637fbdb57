"""torch's caches of the tables the patches edit, dropped after every change of them
(the registry calls :func:`drop` after each apply and restore): the fast random
decompositions of Inductor, the decompositions FakeTensor checks, FakeTensor's cache of
op results.  Only modules already imported are touched."""

from __future__ import annotations

import sys


def drop() -> None:
    """Drop torch's copies of the tables the patches edit."""
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
