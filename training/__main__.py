"""``python -m calbench.training``: the same as ``calbench train``."""

import sys

from calbench.training.cli import main

sys.exit(main())
