"""The environment variable INDUCTOR_ADDMM_FIX: one switch for every activation route."""

from __future__ import annotations

import os
import warnings

VARIABLE = "INDUCTOR_ADDMM_FIX"
_ON = {"1", "true", "on", "yes", ""}
_OFF = {"0", "false", "off", "no"}
_warned = False


def enabled_by_env(environ=None) -> bool:
    """True unless INDUCTOR_ADDMM_FIX is 0/false/off/no; an unknown value warns once and counts as on."""
    global _warned
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON and not _warned:
        _warned = True
        warnings.warn(
            f"{VARIABLE}={value!r} is not one of 1/true/on/yes or 0/false/off/no; "
            "keeping the default (on)",
            RuntimeWarning,
            stacklevel=2,
        )
    return True
