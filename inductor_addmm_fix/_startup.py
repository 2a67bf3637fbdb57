"""Compatibility: the start-up module's name before 0.2.0.

Releases up to 0.1.0 registered the ``torch.backends`` entry point as
``inductor_addmm_fix._startup:entry_point`` and their ``.pth`` line imported
``inductor_addmm_fix._startup`` and called ``from_pth()``.  Metadata of such an install
can outlive it (a stale ``inductor_addmm_fix.egg-info`` in a source tree on ``sys.path``,
an old ``.dist-info`` or ``.pth`` left in site-packages), and torch raises from
``import torch`` when an entry point of that group cannot be loaded.  This module keeps
those names loadable; both go through the same gate as the current routes
(``activation/startup.py``).  Imported at interpreter start-up: it imports nothing else.
"""

from .activation.startup import entry_point, from_pth

__all__ = ["entry_point", "from_pth"]
