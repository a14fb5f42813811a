"""Which tuning process this is. Under ``accelerate launch``/``torchrun`` the N processes do not
form a process group: each runs whole trials alone on its own device, and they meet only in the
study's storage. So the launcher's variables are read once and removed, and a GPU process sees
only its own GPU; a trial's Accelerator then makes a plain one-process run (DDP never wraps a
trial's model across processes)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ptyacc.distributed import _launcher_forces_cpu

# What a launcher sets for a process group; a trial must see none of it.
GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                   "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class TuneProcess:
    """This process among the launched ones: ``rank`` of ``world``; ``gpu``: the one GPU it may use
    (its CUDA_VISIBLE_DEVICES entry), None when it was not narrowed (one process, or CPUs)."""

    rank: int
    world: int
    gpu: str | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0


def detach_from_launcher(environ: dict | None = None) -> TuneProcess:
    """This process's rank and world from the launcher's variables, which are then removed from
    ``environ`` (``os.environ``); several processes not forced onto the CPU each see one GPU
    (CUDA_VISIBLE_DEVICES narrowed to the LOCAL_RANK-th of those visible), which must happen
    before anything in the process has started CUDA."""
    environ = os.environ if environ is None else environ
    rank, world = int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1"))
    local = int(environ.get("LOCAL_RANK", str(rank)))
    for name in GROUP_VARIABLES:
        environ.pop(name, None)
    gpu = None
    if world > 1 and not _launcher_forces_cpu("auto", environ):  # harmless on a machine without GPUs
        visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        gpu = visible[local % len(visible)] if visible else str(local)
        environ["CUDA_VISIBLE_DEVICES"] = gpu
    return TuneProcess(rank, world, gpu)

