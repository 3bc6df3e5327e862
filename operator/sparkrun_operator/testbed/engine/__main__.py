"""``python -m sparkrun_operator.testbed.engine serve MODEL ...``."""

import sys

from . import main

sys.exit(main())
