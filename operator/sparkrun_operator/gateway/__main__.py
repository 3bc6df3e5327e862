"""``python -m sparkrun_operator.gateway --routes FILE --host H --port P``."""

import sys

from .server import main

sys.exit(main())
