"""``python -m ptyacc.run config.yaml [--set key=value ...]``: the launcher-friendly entry point
(``accelerate launch -m ptyacc.run config.yaml`` starts it once per process)."""

import sys

from ptyacc.commands.cli import main


def run_main(argv: list[str] | None = None) -> int:
    """Same as ``ptyacc run``."""
    args = sys.argv[1:] if argv is None else argv
    return main(["run", *args])


if __name__ == "__main__":
    sys.exit(run_main())
