"""``python -m inductor_addmm_fix [status|check]``: see ``cli``."""

import sys

from .cli import main

sys.exit(main())
