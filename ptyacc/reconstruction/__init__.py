"""The reconstruction: the engine and its three phases, the model and its parameter groups, the
hooks after an iteration, the exchange between processes, the initial state, checkpoints and saving."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
