"""``python -m sparkrun_testbed.engine serve MODEL ...``."""

import sys

from . import main

sys.exit(main())
