"""Probes of torch core for the out_dtype matmuls: what the installed torch has, and
what it gets wrong.

Every probe runs the kernel it asks about (on meta tensors, or CPU FakeTensors) rather
than reading the version or the source.  Probes never raise.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ..patching.probes import aten_op

#: The four ops whose ``.dtype`` / ``.dtype_out`` overloads this package fixes.
FAMILY = ("mm", "bmm", "addmm", "baddbmm")


def has_out_dtype_overloads() -> bool:
    """Whether this torch has the ``.dtype``/``.dtype_out`` overloads (2.8 and later)."""
    try:
        return all({"dtype", "dtype_out"} <= set(getattr(torch.ops.aten, name).overloads()) for name in FAMILY)
    except Exception:
        return False


def _meta_operands(name: str) -> tuple[Any, ...]:
    """Small meta-device operands for one overload of the family, bf16 -> fp32."""
    bf16 = dict(device="meta", dtype=torch.bfloat16)
    if name == "mm":
        return (torch.empty(2, 3, **bf16), torch.empty(3, 4, **bf16), torch.float32)
    if name == "bmm":
        return (torch.empty(5, 2, 3, **bf16), torch.empty(5, 3, 4, **bf16), torch.float32)
    if name == "addmm":
        return (
            torch.empty(2, 4, device="meta", dtype=torch.float32),
            torch.empty(2, 3, **bf16),
            torch.empty(3, 4, **bf16),
            torch.float32,
        )
    if name == "baddbmm":
        return (
            torch.empty(5, 2, 4, device="meta", dtype=torch.float32),
            torch.empty(5, 2, 3, **bf16),
            torch.empty(5, 3, 4, **bf16),
            torch.float32,
        )
    raise ValueError(name)


def _result_shape(name: str) -> tuple[int, ...]:
    return (5, 2, 4) if name in ("bmm", "baddbmm") else (2, 4)


def _gives_fp32(fn: Callable[..., Any], name: str, **kwargs: Any) -> bool:
    try:
        out = fn(*_meta_operands(name), **kwargs)
    except Exception:
        return False
    return isinstance(out, torch.Tensor) and out.dtype == torch.float32


def _python_dispatcher():
    from torch._dispatch.python import enable_python_dispatcher

    return enable_python_dispatcher()


def meta_kernel_works(name: str) -> bool:
    """Whether ``aten.<name>.dtype`` and ``.dtype_out`` run on meta tensors and give fp32.

    FakeTensor (hence Dynamo tracing) uses these kernels, directly and under the
    Python dispatcher (Dynamo turns it on: ``op.py_kernels[Meta]``).  On 2.8-2.12
    the meta kernel of ``addmm.dtype`` is the legacy packet decomposition
    (out_dtype lands in ``beta``); ``baddbmm.dtype`` is broken the same way in every
    release; ``mm.dtype`` fails on 2.8/2.9 because ``meta_mm`` takes no
    ``out_dtype``; ``bmm.dtype_out`` has no meta kernel at all before 2.12.
    """
    for which in ("dtype", "dtype_out"):
        op = aten_op(f"{name}.{which}")

        def call(*args, op=op, which=which):
            if which == "dtype":
                return op(*args)
            out = torch.empty(_result_shape(name), device="meta", dtype=torch.float32)
            return op(*args, out=out)

        if not _gives_fp32(call, name):
            return False
        with _python_dispatcher():
            if not _gives_fp32(call, name):
                return False
    return True


def eager_cpu_has_kernel(qualname: str) -> bool:
    """Whether eager mode has a CPU kernel for ``aten.<qualname>`` (``"mm.dtype_out"``):
    runs it on small CPU operands (bf16, fp32 result).  Torch implements the out_dtype
    matmuls for CUDA and XPU only; the dispatcher raises ``NotImplementedError``
    ("Could not run ... from the 'CPU' backend") on the CPU.  Any other outcome counts
    as a kernel."""
    name, _, which = qualname.partition(".")
    try:
        operands = [torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a for a in _meta_operands(name)]
        if which == "dtype_out":
            aten_op(qualname)(*operands, out=torch.empty(_result_shape(name)))
        else:
            aten_op(qualname)(*operands)
    except NotImplementedError:
        return False
    except Exception:
        return True
    return True


def has_no_derivative(qualname: str) -> bool:
    """Whether torch defines no derivative for ``aten.<qualname>`` (``"mm.dtype"``):
    eager's autograd kernel runs the forward and ``backward()`` raises "derivative for
    aten::mm is not implemented".  Runs that kernel on meta operands (a bf16 matrix
    that requires grad), with a mode that answers the op itself, so that no meta kernel
    is needed; False if anything else happens."""
    from torch.utils._python_dispatch import TorchDispatchMode

    name, _, which = qualname.partition(".")
    op = aten_op(qualname)
    shape = _result_shape(name)

    class _Answer(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is op:
                return kwargs["out"] if "out" in kwargs else torch.empty(shape, device="meta", dtype=torch.float32)
            return func(*args, **kwargs)

    try:
        operands = list(_meta_operands(name))
        leaf = operands[-3] = operands[-3].detach().requires_grad_()  # the first matrix operand
        with torch.enable_grad(), _Answer():
            if which == "dtype_out":
                result = op(*operands, out=torch.empty(shape, device="meta", dtype=torch.float32))
            else:
                result = op(*operands)
            torch.autograd.grad(result, leaf, torch.empty_like(result))
    except RuntimeError as error:
        return "not implemented" in str(error)
    except Exception:
        return False
    return False


def _invalid_meta_calls(name: str) -> dict[str, tuple[Any, ...]]:
    """Inputs that eager (CUDA) rejects, by what is wrong with them, as meta tensors."""
    bias, a, b, out_dtype = (None, *_meta_operands(name)) if name in ("mm", "bmm") else _meta_operands(name)
    calls = {
        "operands of different dtypes": (a, b.to(torch.float16), out_dtype),
        "an out_dtype other than the input dtype or fp32": (a.float(), b.float(), torch.bfloat16),
    }
    if bias is None:
        return calls
    calls = {problem: (bias, *args) for problem, args in calls.items()}
    calls["a bias of neither the input dtype nor out_dtype"] = (bias.half(), a, b, out_dtype)
    calls["a bias that does not broadcast to the result"] = (bias.new_empty((3, *bias.shape)), a, b, out_dtype)
    return calls


def meta_kernel_accepts(name: str) -> list[str]:
    """What invalid input the meta kernel of ``aten.<name>.dtype`` lets through.

    A meta kernel that accepts it lets Dynamo trace a call that eager rejects; the
    compiled code then computes something (on small shapes Inductor rewrites the
    product as pointwise code, past every later check) or fails late.  Stock
    kernels accept mixed operand dtypes (mm 2.10+, bmm before 2.12, addmm 2.13+),
    any bias dtype and a bias of higher rank (addmm 2.13+), and from 2.14 any
    out_dtype off CUDA/XPU."""
    op = aten_op(f"{name}.dtype")
    accepted = []
    for problem, args in _invalid_meta_calls(name).items():
        for context in (contextlib.nullcontext, _python_dispatcher, _cpu_fake_tensors):
            try:
                with context() as convert:
                    op(*(convert(a) if convert else a for a in args))
            except Exception:
                continue
            accepted.append(problem)
            break
    return accepted


@contextlib.contextmanager
def _cpu_fake_tensors():
    """CPU FakeTensors under the Python dispatcher, as Dynamo traces CPU inputs.
    Needed because meta tensors count as CUDA for ``device_hint``, and from 2.14
    the stock meta kernels check out_dtype for CUDA/XPU tensors only."""
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode

    # FakeTensor logs every meta kernel that raises, with its traceback: these
    # raise on purpose.
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    silence = _Silence()
    quiet.addFilter(silence)
    try:
        with FakeTensorMode() as mode, _python_dispatcher():

            def convert(a):
                if not isinstance(a, torch.Tensor):
                    return a
                return mode.from_tensor(torch.empty(a.shape, dtype=a.dtype))

            yield convert
    finally:
        quiet.removeFilter(silence)


class _Silence:
    def filter(self, record) -> bool:
        return False


def core_decomposition_works(name: str) -> bool | None:
    """Whether the core decomposition of ``aten.<name>.dtype`` keeps out_dtype.

    None when there is no such decomposition (nothing to fix)."""
    from torch._decomp import decomposition_table

    fn = decomposition_table.get(aten_op(f"{name}.dtype"))
    if fn is None:
        return None
    return _gives_fp32(fn, name)


def eager_kernel_devices(name: str) -> frozenset[str]:
    """Device types with an eager kernel for ``aten.<name>.dtype`` (CUDA; XPU from 2.11)."""
    keys = {"cuda": "CUDA", "xpu": "XPU"}
    found = set()
    for device, key in keys.items():
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}.dtype", key):
                found.add(device)
        except Exception:
            pass
    return frozenset(found)
