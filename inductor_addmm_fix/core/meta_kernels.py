"""Meta kernels of the out_dtype overloads: shapes, dtypes and eager's checks.

FakeTensor (hence Dynamo tracing, for every backend) runs the Meta kernel of an op,
directly or through the Python dispatcher (``op.py_kernels[Meta]``, which Dynamo turns
on), after looking in ``torch._decomp.meta_table``.  The stock kernels are broken in
three ways, all found by running them (``core.probes``):

* on 2.8-2.12 the Meta kernel of ``addmm.dtype`` is the legacy packet decomposition,
  which binds ``out_dtype`` to ``beta`` (``'torch.dtype' * FakeTensor``);
  ``baddbmm.dtype`` is broken the same way in every release up to 2.15; on 2.8/2.9
  ``meta_mm`` takes no ``out_dtype``; ``bmm.dtype_out`` has no Meta kernel before 2.12;
* elsewhere they accept input that eager rejects (operands of different dtypes, a
  bias of a third dtype or of higher rank, from 2.14 any out_dtype off CUDA/XPU), so
  compiled code computes something eager refuses.

Where either probe fails, the kernels below go into all three slots, for both
overloads, and a self-test runs them again.  Their checks also go into FakeTensor's
table of op implementations, which it consults before the meta kernel: invalid input
then raises there, without the traceback FakeTensor logs for a meta kernel's error.
"""

from __future__ import annotations

import torch
from torch._prims_common.wrappers import out_wrapper

from ..patching.declare import Decision, PlanError, needed, not_needed, require
from ..patching.probes import aten_op
from ..patching.registry import Patch
from ..patching.slots import DictEntry, DispatcherKernel, PyKernel
from .checks import (
    check_addmm_dtype,
    check_baddbmm_dtype,
    check_bias,
    check_bmm_dtype,
    check_bmm_operands,
    check_mm_dtype,
    check_mm_operands,
)
from .probes import FAMILY, has_out_dtype_overloads, meta_kernel_accepts, meta_kernel_works

RETIRED_BY = {
    "mm": "pytorch/pytorch#163393 (torch 2.10): meta_mm takes out_dtype",
    "bmm": "pytorch/pytorch#163393 (torch 2.10): meta_mm takes out_dtype",
    "addmm": "pytorch/pytorch#179634 (torch 2.13): dedicated addmm_dtype decomposition",
    "baddbmm": "none yet: baddbmm is registered packet-wide up to torch 2.15",
}
LAX_RETIRED_BY = "none yet: the stock meta kernels check fewer preconditions than the eager kernels"


def meta_mm_dtype(self, mat2, out_dtype):
    """mm.dtype: [M, K] @ [K, N] -> [M, N] of out_dtype."""
    check_mm_operands(self, mat2, out_dtype)
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype)


def meta_bmm_dtype(self, mat2, out_dtype):
    """bmm.dtype: [B, M, K] @ [B, K, N] -> [B, M, N] of out_dtype."""
    check_bmm_operands(self, mat2, out_dtype)
    return self.new_empty((self.shape[0], self.shape[1], mat2.shape[2]), dtype=out_dtype)


def meta_addmm_dtype(self, mat1, mat2, out_dtype, *, beta=1, alpha=1):
    """addmm.dtype: like mm.dtype; ``self`` broadcasts to [M, N]."""
    check_mm_operands(mat1, mat2, out_dtype)
    shape = (mat1.shape[0], mat2.shape[1])
    check_bias(self, shape, mat1.dtype, out_dtype)
    return mat1.new_empty(shape, dtype=out_dtype)


def meta_baddbmm_dtype(self, batch1, batch2, out_dtype, *, beta=1, alpha=1):
    """baddbmm.dtype: [B, M, K] @ [B, K, N] -> [B, M, N]; ``self`` broadcasts to it."""
    check_bmm_operands(batch1, batch2, out_dtype)
    shape = (batch1.shape[0], batch1.shape[1], batch2.shape[2])
    check_bias(self, shape, batch1.dtype, out_dtype)
    return batch1.new_empty(shape, dtype=out_dtype)


meta_mm_dtype_out = out_wrapper(exact_dtype=True)(meta_mm_dtype)
meta_bmm_dtype_out = out_wrapper(exact_dtype=True)(meta_bmm_dtype)
meta_addmm_dtype_out = out_wrapper(exact_dtype=True)(meta_addmm_dtype)
meta_baddbmm_dtype_out = out_wrapper(exact_dtype=True)(meta_baddbmm_dtype)


#: op name -> (meta for .dtype, meta for .dtype_out)
META_KERNELS = {
    "mm": (meta_mm_dtype, meta_mm_dtype_out),
    "bmm": (meta_bmm_dtype, meta_bmm_dtype_out),
    "addmm": (meta_addmm_dtype, meta_addmm_dtype_out),
    "baddbmm": (meta_baddbmm_dtype, meta_baddbmm_dtype_out),
}

#: op name -> the checks of its .dtype meta kernel, alone
CHECKS = {
    "mm": check_mm_dtype,
    "bmm": check_bmm_dtype,
    "addmm": check_addmm_dtype,
    "baddbmm": check_baddbmm_dtype,
}


def _checks_before_meta(name: str):
    """A FakeTensor op implementation (``fake_impls.op_implementations_dict``) that runs
    the checks of the meta kernel, then answers NotImplemented: FakeTensor goes on to the
    meta kernel.  Invalid input raises here, as eager's kernel would, and not inside the
    meta kernel, where FakeTensor logs every exception ("failed while attempting to run
    meta", with a traceback through this module) before Dynamo reports it."""
    check = CHECKS[name]
    position = 3 if name in ("addmm", "baddbmm") else 2  # of out_dtype

    def checks_before_meta(fake_mode, func, *args, out=None, **kwargs):
        check(*args, **kwargs)
        if out is not None:  # what out_wrapper(exact_dtype=True) checks, in its words
            out_dtype = args[position] if len(args) > position else kwargs["out_dtype"]
            torch._check(
                out.dtype == out_dtype,
                lambda: f"Expected out tensor to have dtype {out_dtype} but got {out.dtype} instead",
            )
        return NotImplemented

    checks_before_meta.__name__ = checks_before_meta.__qualname__ = f"{name}_dtype_checks"
    return checks_before_meta


def _slots(name: str) -> list[Patch]:
    """The three places FakeTensor looks for the Meta kernel of both overloads, and its
    table of op implementations, where the checks run first (``_checks_before_meta``)."""
    from torch._decomp import meta_table

    patches = []
    for which, meta in zip(("dtype", "dtype_out"), META_KERNELS[name]):
        op = aten_op(f"{name}.{which}")
        patches += [
            Patch(f"core.meta_table.{name}.{which}", DictEntry(meta_table, op, "torch._decomp.meta_table"), meta),
            Patch(f"core.meta_kernel.{name}.{which}", DispatcherKernel(f"{name}.{which}"), meta),
            Patch(f"core.meta_py_kernel.{name}.{which}", PyKernel(op, torch._C.DispatchKey.Meta), meta),
        ]
        fake_impls = _fake_impls_table()
        if fake_impls is not None and op not in fake_impls:
            table = "torch._subclasses.fake_impls.op_implementations_dict"
            patches.append(Patch(f"core.fake_checks.{name}.{which}", DictEntry(fake_impls, op, table), _checks_before_meta(name)))
    return patches


def _fake_impls_table():
    """FakeTensor's table of op implementations, consulted before the meta kernel (2.8 to
    2.15); None where torch has no such dict (only the log noise of invalid input stays)."""
    try:
        from torch._subclasses import fake_impls
    except ImportError:
        return None
    table = getattr(fake_impls, "op_implementations_dict", None)
    return table if isinstance(table, dict) else None


def plan() -> list[Decision]:
    """One decision per op: replace its Meta kernels where they fail on out_dtype or
    accept what eager rejects."""
    require(has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    decisions = []
    for name in FAMILY:
        decision = f"core.meta.{name}.dtype"
        if not meta_kernel_works(name):
            reason = "the meta kernel fails on out_dtype, so FakeTensor (Dynamo tracing) fails"
            decisions.append(needed(decision, reason, _slots(name), probe=meta_kernel_works, obsolete_when=RETIRED_BY[name]))
            continue
        accepted = meta_kernel_accepts(name)
        if accepted:
            # Eager rejects these; a meta kernel that lets them through makes compiled
            # code accept them too (or fail late, in Inductor).
            reason = "the meta kernel accepts " + ", ".join(accepted) + ", which eager rejects"
            decisions.append(needed(decision, reason, _slots(name), probe=meta_kernel_accepts, obsolete_when=LAX_RETIRED_BY))
        else:
            reason = "stock meta kernel keeps out_dtype and rejects what eager rejects"
            decisions.append(not_needed(decision, reason, probe=meta_kernel_accepts, obsolete_when=RETIRED_BY[name]))
    return decisions


def self_test() -> None:
    """After patching, every op of the family runs on meta tensors, gives out_dtype and
    rejects what eager rejects; else :class:`PlanError` (the feature is rolled back)."""
    broken = [n for n in FAMILY if not meta_kernel_works(n)]
    if broken:
        raise PlanError(
            "self-test failed after patching: " + ", ".join(f"{n}.dtype" for n in broken) + " still fail on meta tensors"
        )
    lax = {n: meta_kernel_accepts(n) for n in FAMILY}
    lax = {n: problems for n, problems in lax.items() if problems}
    if lax:
        raise PlanError(
            "self-test failed after patching: "
            + "; ".join(f"{n}.dtype still accepts {', '.join(p)}" for n, p in lax.items())
        )
