"""Every slot of torch that inductor_addmm_fix may touch, as a comparable snapshot.

Shared by test_install_uninstall.py and test_robustness.py.  ``live_tables()``
captures the table objects themselves, so that a test which hides an attribute of
torch (to simulate renamed internals) can still read the real tables."""

from __future__ import annotations

import sys

import torch

FAMILY = ("mm", "bmm", "addmm", "baddbmm")
OVERLOADS = ("dtype", "dtype_out")


def family_ops():
    """The eight OpOverloads the plugin is about."""
    return [getattr(getattr(torch.ops.aten, name), which) for name in FAMILY for which in OVERLOADS]


def live_tables() -> dict:
    """name -> the table object (dicts and sets that the plugin may edit)."""
    import torch._inductor.config  # noqa: F401
    from torch._decomp import decomposition_table, meta_table
    from torch._inductor.decomposition import decompositions
    from torch._inductor.lowering import lowerings

    return {
        "decomp": decomposition_table,
        "meta": meta_table,
        "inductor": decompositions,
        "lowering": lowerings,
        "impls": torch.library._impls,
        "compiler_config": torch.compiler.config,
    }


def tables_snapshot(tables: dict | None = None) -> dict:
    """Every slot the plugin may touch: table entries by identity, the Meta kernel
    the dispatcher runs (its registration site), the Python Meta kernel, the
    ``torch.library`` bookkeeping, the cache key tag and the import hooks."""
    tables = live_tables() if tables is None else tables
    snap = {}
    for op in family_ops():
        for label in ("decomp", "meta", "inductor", "lowering"):
            table = tables[label]
            snap[(label, str(op))] = id(table[op]) if op in table else None
        kernel = op.py_kernels.get(torch._C.DispatchKey.Meta)
        snap[("py_kernels", str(op))] = None if kernel is None else id(kernel)
        qualname = f"{op._schema.name.split('::')[1]}.{op._overloadname}"
        snap[("dispatcher", str(op))] = torch._C._dispatch_dump(f"aten::{qualname}")
        snap[("torch.library._impls", str(op))] = f"aten/{qualname}/Meta" in tables["impls"]
    snap["cache_key_tag"] = tables["compiler_config"].cache_key_tag
    snap["meta_path"] = tuple(type(finder).__qualname__ for finder in sys.meta_path)
    return snap


def differences(before: dict, after: dict) -> list[str]:
    """The slots that differ, for assertion messages."""
    return [str(key) for key in before.keys() | after.keys() if before.get(key) != after.get(key)]
