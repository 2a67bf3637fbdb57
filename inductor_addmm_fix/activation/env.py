"""The environment variable INDUCTOR_ADDMM_FIX: one switch for every activation route,
and the features they apply (written as ``selection`` parses it).  Everything in the
package that reads the variable reads it here.

Read at interpreter start-up by the ``.pth`` line (which repeats the off values of
``selection.OFF``: keep them in step), so this module imports nothing but ``os`` and
``selection``.
"""

from __future__ import annotations

import os

from .selection import is_off, parse, words

VARIABLE = "INDUCTOR_ADDMM_FIX"
#: Where a warning about the variable's value points (the ``filename`` of the warning).
WHERE = f"<environment variable {VARIABLE}>"


def raw(environ=None) -> str | None:
    """The variable's value, None when unset."""
    return (os.environ if environ is None else environ).get(VARIABLE)


def value(environ=None) -> str:
    """The variable's value ("" when unset)."""
    return raw(environ) or ""


def enabled_by_env(environ=None) -> bool:
    """False when INDUCTOR_ADDMM_FIX is 0/false/off/no (any case): every route is off."""
    return not is_off(value(environ))


def selected_by(environ=None) -> str:
    """How status() names this selection: ``INDUCTOR_ADDMM_FIX=<value>`` (or unset)."""
    current = raw(environ)
    return f"{VARIABLE} unset" if current is None else f"{VARIABLE}={current}"


def off_by(environ=None) -> str | None:
    """``INDUCTOR_ADDMM_FIX=0`` where the variable turns every route off, else None."""
    return None if enabled_by_env(environ) else f"{VARIABLE}={raw(environ)}"


def switch(environ=None) -> str:
    """``; INDUCTOR_ADDMM_FIX=-views,typo ('typo' ignored)``: the variable as set, for the
    status line, with the words of it that name nothing (ignored; a value of such words
    only selects every feature: ``INDUCTOR_ADDMM_FIX=maybe (ignored)``); "" when unset."""
    current = raw(environ)
    if current is None:
        return ""
    unknown = parse(current)[1]
    if unknown and len(unknown) == len(words(current)):
        return f"; {VARIABLE}={current} (ignored)"
    return f"; {VARIABLE}={current}" + (f" ({', '.join(map(repr, unknown))} ignored)" if unknown else "")
