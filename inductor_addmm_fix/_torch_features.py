"""Probes of the installed torch: what it has and what it gets wrong.

Every patch is gated on a probe of behaviour or signature, never on a version
number alone; the version is reported for humans.  Probes never raise: a probe
that cannot answer says so, and the plan treats that as "torch looks different
from what we know", which makes ``install()`` warn and leave torch untouched.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable

import torch

aten = torch.ops.aten

#: The four ops whose ``.dtype`` / ``.dtype_out`` overloads this package fixes.
FAMILY = ("mm", "bmm", "addmm", "baddbmm")


def torch_version() -> str:
    return str(torch.__version__)


def torch_release() -> tuple[int, ...]:
    """The release tuple of the installed torch, e.g. (2, 13, 0); for reports only."""
    from packaging.version import Version

    return Version(torch.__version__.split("+")[0]).release


def has_out_dtype_overloads() -> bool:
    """Whether this torch has the ``.dtype``/``.dtype_out`` overloads (2.8 and later)."""
    try:
        return all(
            {"dtype", "dtype_out"} <= set(getattr(aten, name).overloads()) for name in FAMILY
        )
    except Exception:
        return False


def overload(name: str, which: str = "dtype") -> torch._ops.OpOverload:
    return getattr(getattr(aten, name), which)


def takes_parameter(fn: Callable[..., Any], parameter: str) -> bool | None:
    """Whether ``fn`` (seen through functools.wraps) has a parameter of that name."""
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


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
        op = overload(name, which)

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
    op = overload(name)
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


def core_decomposition(name: str) -> Any:
    from torch._decomp import decomposition_table

    return decomposition_table.get(overload(name))


def core_decomposition_works(name: str) -> bool | None:
    """Whether the core decomposition of ``aten.<name>.dtype`` keeps out_dtype.

    None when there is no such decomposition (nothing to fix)."""
    fn = core_decomposition(name)
    if fn is None:
        return None
    return _gives_fp32(fn, name)


def is_packet_wide(table: dict, name: str) -> bool:
    """Whether ``table`` maps ``aten.<name>.dtype`` to the very object registered
    for ``aten.<name>.default``: a packet-wide entry that knows nothing of out_dtype."""
    entry = table.get(overload(name))
    return entry is not None and entry is table.get(overload(name, "default"))


def inductor_kernel_takes_out_dtype(name: str) -> bool | None:
    """Whether Inductor's ``tuned_<name>`` accepts ``out_dtype`` (mm: 2.10+, bmm: 2.8+)."""
    try:
        if name == "mm":
            from torch._inductor.kernel.mm import tuned_mm as fn
        else:
            from torch._inductor.kernel.bmm import tuned_bmm as fn
    except Exception:
        return None
    return takes_parameter(fn, "out_dtype")


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


def cache_key_tag_supported() -> bool:
    """Whether ``torch.compiler.config.cache_key_tag`` exists (2.8-2.15 have it)."""
    try:
        import torch.compiler.config as cfg

        return isinstance(getattr(cfg, "cache_key_tag", None), str)
    except Exception:
        return False


def config_is_per_thread(module: Any, name: str) -> bool:
    """Whether assigning ``module.name`` sets it for the calling thread only (2.13+:
    the entry keeps user assignments in a ``ContextVar``)."""
    import contextvars

    try:
        entry = module._config[name]
        from torch.utils._config_module import _UNSET_SENTINEL  # noqa: F401  (needed to restore)
    except Exception:
        return False
    return isinstance(getattr(entry, "user_override", None), contextvars.ContextVar) and hasattr(entry, "default")
