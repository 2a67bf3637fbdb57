"""The environment variable INDUCTOR_ADDMM_FIX: one switch for every activation route,
and the features they apply (the spec of ``features.parse``).

Read at interpreter start-up by the ``.pth`` line (which repeats the off values of
``features.OFF``: keep them in step), so this module imports nothing but ``os``.
"""

from __future__ import annotations

import os

from ..features import NAMES, OFF

VARIABLE = "INDUCTOR_ADDMM_FIX"
#: Where a warning about the variable's value points (the ``filename`` of the warning).
WHERE = f"<environment variable {VARIABLE}>"


def value(environ=None) -> str:
    """The variable's value ("" when unset)."""
    return (os.environ if environ is None else environ).get(VARIABLE, "")


def enabled_by_env(environ=None) -> bool:
    """False when INDUCTOR_ADDMM_FIX is 0/false/off/no (any case): every route is off."""
    return value(environ).strip().lower() not in OFF


def selected_by(environ=None) -> str:
    """How status() names this selection: ``INDUCTOR_ADDMM_FIX=<value>`` (or unset)."""
    current = (os.environ if environ is None else environ).get(VARIABLE)
    return f"{VARIABLE} unset" if current is None else f"{VARIABLE}={current}"


def unknown_words_message(source: str, unknown, selected) -> str:
    """The warning for words of a selection that are neither a feature nor on/off."""
    applied = [n for n in NAMES if n in selected]
    effect = "every feature" if len(applied) == len(NAMES) else ", ".join(applied) or "no feature"
    return (
        f"inductor_addmm_fix: {source}: ignoring {', '.join(map(repr, unknown))}, not a feature "
        f"({', '.join(NAMES)}) nor on/off (1, 0); applying {effect}"
    )
