"""Test helper run under `accelerate launch`: reconstructs each config of a JSON file
{name: config path} in turn on the same processes (write=False) and saves the main process's
final object as OUT/<name>.npy."""

import json
import sys
from pathlib import Path

import numpy as np

import ptyacc
from ptyacc.reconstruction.distributed import end_process_group, exit_after_launch, make_accelerator


def main() -> None:
    jobs, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    accelerator = None
    for name, path in jobs.items():
        config = ptyacc.load_config(path)
        accelerator = accelerator or make_accelerator(config.runtime)
        result = ptyacc.reconstruct(config, accelerator=accelerator, write=False)
        if accelerator.is_main_process:
            np.save(out / f"{name}.npy", result.model.object.detach().cpu().numpy())
    end_process_group()
    exit_after_launch()


if __name__ == "__main__":
    main()
