"""The settings that change what a feature does, each read and parsed in one place.

Each is an environment variable read when the feature acts (at each compile), so that a
program may set it after start-up.  A feature asks its :class:`Setting` for the value,
never ``os.environ``; ``python -m inductor_addmm_fix`` shows what :meth:`Setting.status`
says beside the feature.  A value the setting cannot take is ignored, with one warning per
value, and the default holds: a setting never stops a compile.  (The feature selection,
``INDUCTOR_ADDMM_FIX``, is read at start-up by its own module.)
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from typing import Any, Callable

log = logging.getLogger("inductor_addmm_fix")


class Setting:
    """An environment variable: ``parse(raw) -> value`` (raising ValueError for a value
    it cannot take), ``describe(value) -> str`` for the status, and what holds otherwise."""

    def __init__(self, variable: str, parse: Callable[[str], Any], describe: Callable[[Any], str], *,
                 expects: str, otherwise: str) -> None:
        self.variable = variable
        self._parse = parse
        self._describe = describe
        self.expects = expects  # "a number of MiB (0 or more)"
        self.otherwise = otherwise  # what holds where it is unset or ignored
        self._warned: set = set()

    def raw(self, environ=None) -> str:
        """The variable's value, stripped ("" when unset)."""
        return (os.environ if environ is None else environ).get(self.variable, "").strip()

    def parsed(self, raw: str) -> tuple[bool, Any]:
        """(whether ``raw`` is a value it takes, that value)."""
        try:
            return True, self._parse(raw)
        except ValueError:
            return False, None

    def value(self, environ=None) -> Any:
        """The value set, or None where it is unset or ignored (one warning per value)."""
        raw = self.raw(environ)
        if not raw:
            return None
        ok, value = self.parsed(raw)
        if ok:
            return value
        if raw not in self._warned:
            self._warned.add(raw)
            message = f"inductor_addmm_fix: {self.variable}={raw!r} is not {self.expects}; {self.otherwise}"
            try:
                warnings.warn(message, RuntimeWarning, stacklevel=3)
            except Exception:  # -W error: a compile never raises for a setting
                log.warning("%s", message)
        return None

    def status(self, environ=None) -> str | None:
        """What the status shows beside the feature: None where unset (the default)."""
        raw = self.raw(environ)
        if not raw:
            return None
        ok, value = self.parsed(raw)
        return self._describe(value) if ok else f"{self.variable}={raw!r} ignored"


def _mib(raw: str) -> int:
    mib = float(raw)
    if not (mib >= 0 and math.isfinite(mib)):
        raise ValueError(raw)
    return int(mib * 2**20)


#: The extra memory, in bytes, a merged pair of chunks may take (``accumulate_pairs``).
PAIR_BUDGET = Setting(
    "INDUCTOR_ADDMM_FIX_PAIR_BUDGET_MIB", _mib,
    lambda chosen: f"pair budget {chosen / 2**20:g} MiB (INDUCTOR_ADDMM_FIX_PAIR_BUDGET_MIB)",
    expects="a number of MiB (0 or more)",
    otherwise="merged pairs keep the default budget (max(64 MiB, 5% of the accumulator))",
)  # fmt: skip

LIGER_HEAD_MODES = ("auto", "loop", "opaque")


def _mode(raw: str) -> str:
    if raw.lower() not in LIGER_HEAD_MODES:
        raise ValueError(raw)
    return raw.lower()


#: How Liger FLCE's forward is compiled (``liger_head``); ``loop`` compiles JSD's and KL-div's loops too.
LIGER_HEAD = Setting(
    "INDUCTOR_ADDMM_FIX_LIGER_HEAD", _mode, lambda mode: f"INDUCTOR_ADDMM_FIX_LIGER_HEAD={mode}",
    expects=f"one of {', '.join(LIGER_HEAD_MODES)}", otherwise="using auto",
)  # fmt: skip
