"""Which tuning process this is. Under ``accelerate launch``/``torchrun`` the N processes do not
form a process group: each runs whole trials alone on its own device, and they meet only in the
study's storage. So the launcher's variables are read once and removed, and a GPU process makes
its own GPU the current device; a trial's Accelerator then makes a plain one-process run there
(DDP never wraps a trial's model across processes)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ptyacc.reconstruction.distributed import _launcher_forces_cpu

# What a launcher sets for a process group; a trial must see none of it.
GROUP_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                   "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class TuneProcess:
    """This process among the launched ones: ``rank`` of ``world``; ``gpu``: the index of the GPU
    its trials use, None for one process (the default device) or on CPUs."""

    rank: int
    world: int
    gpu: int | None = None

    @property
    def main(self) -> bool:
        return self.rank == 0


def detach_from_launcher(environ: dict | None = None) -> TuneProcess:
    """This process's rank and world from the launcher's variables, which are then removed from
    ``environ`` (``os.environ``); with GPUs, several processes not forced onto the CPU each make
    the LOCAL_RANK-th GPU (modulo their number) the current one, where its trials run."""
    environ = os.environ if environ is None else environ
    rank, world = int(environ.get("RANK", "0")), int(environ.get("WORLD_SIZE", "1"))
    local = int(environ.get("LOCAL_RANK", str(rank)))
    for name in GROUP_VARIABLES:
        environ.pop(name, None)
    gpu = None
    if world > 1 and not _launcher_forces_cpu("auto", environ) and torch.cuda.is_available():
        gpu = local % torch.cuda.device_count()  # more processes than GPUs share them in turn
        torch.cuda.set_device(gpu)
    return TuneProcess(rank, world, gpu)

