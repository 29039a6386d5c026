"""``python -m calbench``: the same command line as ``calbench``."""

import sys

from calbench.cli import main

sys.exit(main())
