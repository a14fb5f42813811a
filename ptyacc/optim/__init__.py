"""The optimiser machinery below the quantities: parameter groups with their schedule and projections
(``groups.py``), Adam per row of a per-position quantity and the context a step may read (``row_adam.py``),
the object's and the probe's preconditioned descents (``descent.py``) and the ``auto`` values of the
``optim`` keys (``autos.py``). Nothing here imports a quantity or the run: each quantity builds its own
groups from these pieces."""
