"""The first eager call of an out_dtype overload on meta tensors applies the tracing
stage of ``out_dtype`` first, so that it meets the package's meta kernels.

The meta kernels (``core.meta_kernels``) apply when ``torch._dynamo`` is imported:
their probes run torch's own meta kernels and a ``FakeTensorMode``, which import it,
and every tracer imports it first.  A program may also call these overloads eagerly on
meta tensors, with no tracer imported (shape inference on the meta device).  Until the
tracing stage applies, the kernel below holds the Meta key of the eight overloads: it
imports ``torch._dynamo``, whose post-import hook runs the tracing stage (which first
takes this kernel away, so that its probes see torch's own), and calls the op again,
which now runs the kernel the tracing stage chose.  Nothing happens before such a call:
it costs ``import torch`` only the registration.
"""

from __future__ import annotations

import threading

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.probes import aten_op
from ..patching.registry import Patch
from ..patching.slots import DispatcherKernel
from .probes import FAMILY, has_out_dtype_overloads

#: The name every patch of this module starts with: the installer removes them when the
#: tracing stage of the feature begins (``Feature.standins``).
PREFIX = "core.meta_trigger"
RETIRED_BY = "the tracing stage of out_dtype (applied at the first import of torch._dynamo)"
_calling = threading.local()  # .again: this thread runs a stand-in kernel, which calls the op again


def trigger(qualname: str):
    """The Meta kernel that applies the tracing stage, then calls the op again."""
    op = aten_op(qualname)

    def first_meta_call(*args, **kwargs):
        if getattr(_calling, "again", False):  # the tracing stage did not take this kernel away
            raise NotImplementedError(
                f"inductor_addmm_fix: the tracing stage of out_dtype did not replace the stand-in Meta kernel of "
                f"aten::{qualname} (python -m inductor_addmm_fix says why)"
            )
        _calling.again = True
        try:
            import torch._dynamo  # noqa: F401  (its hook applies the tracing stage, removing this kernel)

            return op(*args, **kwargs)
        finally:
            _calling.again = False

    first_meta_call.__name__ = first_meta_call.__qualname__ = f"{qualname.replace('.', '_')}_first_meta_call"
    return first_meta_call


def _tracing_to_come() -> bool:
    """Whether the tracing stage waits: ``torch._dynamo`` is not imported yet."""
    import sys

    return "torch._dynamo" not in sys.modules


def plan() -> list[Decision]:
    require(has_out_dtype_overloads(), "out_dtype overloads of mm/bmm/addmm/baddbmm")
    if not _tracing_to_come():
        return [not_needed(PREFIX, "torch._dynamo is imported: the tracing stage applies now",
                           probe=_tracing_to_come, obsolete_when=RETIRED_BY)]
    patches = [
        Patch(f"{PREFIX}.{name}.{which}", DispatcherKernel(f"{name}.{which}"), trigger(f"{name}.{which}"))
        for name in FAMILY
        for which in ("dtype", "dtype_out")
    ]
    reason = ("an eager call on meta tensors before torch._dynamo is imported applies the tracing stage "
              "first, then runs its meta kernel")
    return [needed(PREFIX, reason, patches, probe=_tracing_to_come, obsolete_when=RETIRED_BY)]
