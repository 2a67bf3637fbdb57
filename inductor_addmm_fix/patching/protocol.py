"""What a patch module defines for the installer and the machinery: the one contract
between ``features.py``, which names a feature's modules by stage (and no function),
and the modules it names.

:class:`FeatureModule` is a module that ``features.FEATURE_TABLE`` names: ``plan()``
it must define; the other members are hooks it may define, found on the module by
their names here (:func:`hook`) and called as each member's docstring says.
:class:`MachineryModule` is a module of ``features.MACHINERY``.  Code refers to a hook
by its member (``hook(module, FeatureModule.self_test)``), never by a spelled name;
``tests/test_feature_protocol.py`` checks every module against this file.  Knows no
patch.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

if TYPE_CHECKING:
    from .declare import Decision

_PACKAGE = __name__.rsplit(".", 2)[0]  # "inductor_addmm_fix"


class FeatureModule(Protocol):
    """A patch module of a feature, named in ``features.FEATURE_TABLE`` under a stage."""

    def plan(self) -> list[Decision]:
        """Required.  Probe the installed torch and declare what the module may patch,
        one ``Decision`` each (``patching.declare``); ``PlanError`` where torch looks
        unlike any known, ``Unavailable`` where it lacks what the patch needs.  Called
        when the module's stage applies, in the order the feature names its modules."""

    def self_test(self) -> None:
        """Raise if the patches, applied, do not work.  Called once every module of the
        feature's stage has planned and its patches are applied; a failure rolls the
        feature back."""

    def idle_here(self) -> str | None:
        """None where the feature can act in this process, else why not (hardware it
        needs is not here).  Asked by the status of an applied feature, shown beside
        "applied" as ``idle: <what it says>``."""

    def settings(self) -> str | None:
        """None where the feature runs as by default, else what is set.  Asked by the
        status of an applied feature, shown beside "applied"."""

    def cache_settings(self) -> tuple:
        """What the output of the module's post-grad pass depends on besides its source
        and the graph: the post-grad slot's ``uuid()``, a key of the FX graph cache,
        includes it."""


class MachineryModule(Protocol):
    """A module of shared machinery (``features.MACHINERY``), applied while a feature
    that needs it is."""

    def plan(self, users: Any, package_version: str) -> list[Decision]:
        """Its decisions for ``users`` (what the features applied that need it have
        applied) and the package's version; planned again when ``users`` changes."""


#: What a feature module must define.
REQUIRED = (FeatureModule.plan,)
#: What a feature module may define.
HOOKS = (FeatureModule.self_test, FeatureModule.idle_here, FeatureModule.settings, FeatureModule.cache_settings)


def hook(module: Any, member: Callable[..., Any]) -> Callable[..., Any] | None:
    """``module``'s function for ``member`` (``FeatureModule.self_test``), or None where
    it defines none."""
    return getattr(module, member.__name__, None)


def imported(name: str) -> ModuleType:
    """The patch module ``name`` (``"inductor.views"``), imported."""
    return importlib.import_module(f"{_PACKAGE}.{name}")


def hooks(modules: Iterable[str], member: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """The functions for ``member`` of those of ``modules`` (names) that define one, in order."""
    for name in modules:
        function = hook(imported(name), member)
        if function is not None:
            yield function
