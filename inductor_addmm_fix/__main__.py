"""``python -m inductor_addmm_fix [status|check]``: see ``_cli``."""

import sys

from ._cli import main

sys.exit(main())
