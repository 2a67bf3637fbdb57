"""Dynamo: ``hasattr``, ``getattr`` with a default, and plain class attributes of an
autograd Function are answered as constants, with guards.

``AutogradFunctionVariable`` (an ``autograd.Function`` subclass while Dynamo traces)
knows ``apply``, ``forward`` and ``backward`` and little else: ``hasattr(F, name)`` and
``getattr(F, name, default)`` break the graph ("Unsupported hasattr call"), and a plain
attribute such as ``F.flag`` comes back as a ``GetAttrVariable`` whose truth Dynamo
cannot test, which skips the whole frame.  Liger's ``liger_fused_linear_cross_entropy``
(0.8.5, the path of every Liger-patched Hugging Face model) opens with
``getattr(LigerFusedLinearCrossEntropyFunction, "supports_inner_impl_dispatch", False)``:
a compiled model breaks its graph there, and each break costs two more graphs per
compiled shape.

Where the class comes from a source Dynamo can guard (a module global, an attribute),
we answer ``hasattr`` as a user-defined class's (a ``HASATTR`` guard) and read an
attribute whose value is None, a bool, an int, a float or a str as a constant guarded
on its value; anything else (methods, descriptors, a class without a source) is traced
as before.

Upstream: none known (torch 2.8 through 2.15 break on ``hasattr`` of an autograd Function).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from ..patching.declare import Decision, needed, not_needed, require
from ..patching.registry import Patch
from ..patching.slots import ABSENT, Attribute

NAME = "dynamo.function_attributes"
RETIRED_BY = "none known: AutogradFunctionVariable defines no call_obj_hasattr (torch 2.8-2.15)"
OWNER = "torch._dynamo.variables.misc.AutogradFunctionVariable"
_NOT_PLAIN = object()


def plain_class_attribute(cls: type, name: str) -> Any:
    """The value of ``cls.name`` where it is a plain constant (None, bool, int, float,
    str) found without running a descriptor, else ``_NOT_PLAIN``."""
    try:
        value = inspect.getattr_static(cls, name)
    except AttributeError:
        return _NOT_PLAIN
    return value if value is None or type(value) in (bool, int, float, str) else _NOT_PLAIN


def answers_hasattr() -> bool:
    """Whether the installed Dynamo answers ``hasattr`` of an autograd Function itself."""
    from torch._dynamo.variables.misc import AutogradFunctionVariable

    return "call_obj_hasattr" in vars(AutogradFunctionVariable)


def attribute_entry() -> str:
    """The method through which Dynamo reads an attribute of the variable: ``tp_getattro_impl``
    where ``AutogradFunctionVariable`` defines one (torch 2.15), else ``var_getattr``."""
    from torch._dynamo.variables.misc import AutogradFunctionVariable

    return "tp_getattro_impl" if "tp_getattro_impl" in vars(AutogradFunctionVariable) else "var_getattr"


def hasattr_as_a_class(stock: Any) -> Callable[..., Any]:
    """``call_obj_hasattr`` that answers as ``UserDefinedClassVariable`` does (a guard on
    the attribute's presence) where the class has a source."""
    from torch._dynamo.variables.misc import AutogradFunctionVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    def call_obj_hasattr(self, tx, name):
        if self.source is not None:
            return UserDefinedClassVariable(self.fn_cls, source=self.source).call_obj_hasattr(tx, name)
        if stock is ABSENT:
            return super(AutogradFunctionVariable, self).call_obj_hasattr(tx, name)
        return stock(self, tx, name)

    return call_obj_hasattr


def plain_attributes(entry: str) -> Callable[[Any], Callable[..., Any]]:
    """A factory of the attribute entry ``entry`` that builds plain class attributes as
    guarded constants and hands every other name to what was there."""

    def factory(stock: Any) -> Callable[..., Any]:
        from torch._dynamo.source import AttrSource
        from torch._dynamo.variables.base import VariableTracker
        from torch._dynamo.variables.misc import AutogradFunctionVariable

        def attribute(self, tx, name):
            value = plain_class_attribute(self.fn_cls, name) if self.source is not None else _NOT_PLAIN
            if value is not _NOT_PLAIN:
                return VariableTracker.build(tx, value, AttrSource(self.source, name))
            if stock is ABSENT:
                return getattr(super(AutogradFunctionVariable, self), entry)(tx, name)
            return stock(self, tx, name)

        return attribute

    return factory


def plan() -> list[Decision]:
    from torch._dynamo.variables import base, misc, user_defined

    require(hasattr(misc, "AutogradFunctionVariable"), OWNER)
    require(callable(getattr(user_defined.UserDefinedClassVariable, "call_obj_hasattr", None)),
            "UserDefinedClassVariable.call_obj_hasattr")  # fmt: skip
    require(callable(getattr(base.VariableTracker, "build", None)), "VariableTracker.build")
    entry = attribute_entry()
    require(callable(getattr(misc.AutogradFunctionVariable, entry, None)), f"AutogradFunctionVariable.{entry}")
    if answers_hasattr():
        return [not_needed(NAME, "Dynamo answers hasattr of an autograd Function", probe=answers_hasattr,
                           obsolete_when=RETIRED_BY)]  # fmt: skip
    owner = misc.AutogradFunctionVariable
    patches = [
        Patch(NAME, Attribute(owner, "call_obj_hasattr", OWNER), hasattr_as_a_class),
        Patch(NAME, Attribute(owner, entry, OWNER), plain_attributes(entry)),
    ]
    reason = (
        "hasattr / getattr(F, name, default) of an autograd Function breaks the graph, and a plain class "
        "attribute skips the frame (Liger FLCE's functional entry: two more graphs per compiled shape)"
    )
    return [needed(NAME, reason, patches, probe=answers_hasattr, obsolete_when=RETIRED_BY)]
