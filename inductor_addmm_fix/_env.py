"""The environment variable INDUCTOR_ADDMM_FIX: one switch for every activation route.

Read at interpreter start-up by the ``.pth`` line (which repeats OFF_VALUES: keep
them in step), so this module imports nothing but ``os``."""

from __future__ import annotations

import os

VARIABLE = "INDUCTOR_ADDMM_FIX"
ON_VALUES = frozenset({"1", "true", "on", "yes", ""})
OFF_VALUES = frozenset({"0", "false", "off", "no"})
_warned = False


def enabled_by_env(environ=None) -> bool:
    """True unless INDUCTOR_ADDMM_FIX is 0/false/off/no; an unknown value warns once and counts as on."""
    global _warned
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip().lower()
    if value in OFF_VALUES:
        return False
    if value not in ON_VALUES and not _warned:
        import warnings

        _warned = True
        warnings.warn(
            f"{VARIABLE}={value!r} is not one of 1/true/on/yes or 0/false/off/no; "
            "keeping the default (on)",
            RuntimeWarning,
            stacklevel=2,
        )
    return True
