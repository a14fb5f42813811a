"""``python -m ptyacc.tune config.yaml`` (``accelerate launch -m ptyacc.tune config.yaml`` starts it
once per process): the same as ``ptyacc tune``."""

import sys

from ptyacc.tune.command import main

if __name__ == "__main__":
    sys.exit(main())
