"""``python -m calbench.training``: the same as ``calbench train``."""

import os
import sys

from calbench.training.cli import main

code = main()
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    # A DDP worker (torchrun, accelerate launch) whose run has ended: its adapter is written, its
    # process group destroyed. It leaves without the interpreter's teardown, where freeing what
    # gloo's threads still hold can abort the process after a good run ("terminate called without
    # an active exception", exit -6: seen once in CI, on a loaded machine).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
