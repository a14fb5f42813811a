"""Test helper run under `accelerate launch` (or plainly): builds and runs a reconstruction and
writes, per rank, the bytes this process holds for the object: the parameter, its gradient
(autograd makes one of the parameter's shape every step) and the object optimizer's state.
OUT/rank<R>.json."""

import json
import sys
from pathlib import Path

import torch

import ptyacc
from ptyacc.reconstruction.distributed import end_process_group, exit_after_launch, make_accelerator
from ptyacc.reconstruction.engine import Reconstructor


def main() -> None:
    config_path, out, *overrides = sys.argv[1:]
    config = ptyacc.load_config(config_path, overrides)
    accelerator = make_accelerator(config.runtime)
    reconstructor = Reconstructor(config, accelerator, write=False)
    reconstructor.build()
    reconstructor.run()
    obj = reconstructor.model.object
    optimizer = next(g.optimizer for g in reconstructor.groups if g.name == "object")
    moments = [t for t in _tensors(optimizer.state_dict()) if t.numel() > 1]
    record = {"object": obj.numel() * obj.element_size(), "gradient": obj.numel() * obj.element_size(),
              "adam": sum(t.numel() * t.element_size() for t in moments), "shape": list(obj.shape),
              "traffic_object": [t.bytes["object"] for t in reconstructor.history.traffic or []]}
    record["total"] = record["object"] + record["gradient"] + record["adam"]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{accelerator.process_index}.json").write_text(json.dumps(record))
    # an orderly end: all ranks done before the process group goes (one of 4 ranks aborted with
    # SIGABRT at exit twice on a loaded machine when each rank simply returned)
    end_process_group()
    exit_after_launch()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


if __name__ == "__main__":
    main()
