"""Kept for the old path ``ptyacc.apidoc`` and ``python -m ptyacc.apidoc``: this name is the module ``ptyacc.commands.apidoc``."""

import runpy
from sys import modules

if __name__ == "__main__":
    runpy.run_module("ptyacc.commands.apidoc", run_name="__main__")
else:
    from ptyacc.commands import apidoc

    modules[__name__] = apidoc
