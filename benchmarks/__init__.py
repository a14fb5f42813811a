"""The repository's measuring instruments, not installed with ptyacc: the scaling model and
``ptyacc predict`` (``predict.py``), the operator count of a step (``operators.py``), and the scripts
that run ptyacc against other packages or on grids of simulated data (``*_vs_*.py``, ``grid/``). Run
them from the repository's root as ``python -m benchmarks.<module>`` or ``python benchmarks/<script>.py``;
their tests are ``benchmarks/tests/``. Dated measurements are ``benchmarks/records/``."""
