"""One warning per process and key, for the machinery and the patches alike (also logged
to the ``inductor_addmm_fix`` logger)."""

from __future__ import annotations

import logging
import sys
import warnings

log = logging.getLogger("inductor_addmm_fix")
_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning, once per process and key; also logged."""
    log.warning("%s", message)
    if key not in _warned:
        _warned.add(key)
        try:
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        except Exception:  # -W error made it an exception: install() never raises; one line instead
            print(f"{message} [RuntimeWarning, not raised]", file=sys.stderr)
