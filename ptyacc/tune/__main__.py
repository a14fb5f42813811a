"""``python -m ptyacc.tune config.yaml`` (``accelerate launch -m ptyacc.tune config.yaml`` starts it
once per process): the same as ``ptyacc tune``."""

import sys

from ptyacc.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["tune", *sys.argv[1:]]))
