"""Test helper run under `accelerate launch` (or plainly, as one process): reconstructs a
config and writes, per rank, the indices used in every step, the parameter checksum and the
loss history to OUT/rank<R>.json. Optionally perturbs one rank's object to provoke drift."""

import argparse
import json
import os
import signal
from pathlib import Path

import torch

import ptyacc
from ptyacc.reconstruction.distributed import end_process_group, exit_after_launch, get_attribute, parameter_checksum


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--perturb-rank", type=int, default=None)
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in output.dir")
    parser.add_argument("--die-rank", type=int, default=None, help="this rank kills itself (SIGKILL)...")
    parser.add_argument("--die-at", type=int, default=3, help="...at the start of this iteration")
    args = parser.parse_args()

    config = ptyacc.load_config(args.config, args.overrides)
    from ptyacc.reconstruction.distributed import make_accelerator

    accelerator = make_accelerator(config.runtime)
    rank = accelerator.process_index
    used: dict[int, list[list[int]]] = {}
    state = {}

    def on_step(iteration, indices):
        used.setdefault(iteration, []).append(indices.reshape(-1).tolist())
        if rank == args.die_rank and iteration == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == args.perturb_rank and iteration == 1 and "done" not in state:
            with torch.no_grad():
                get_attribute(state["model"], "object").add_(1e-3)
            state["done"] = True

    original_prepare = accelerator.prepare

    def prepare(*objects):
        prepared = original_prepare(*objects)
        state["model"] = prepared[0]
        return prepared

    accelerator.prepare = prepare
    record = {"rank": rank, "world_size": accelerator.num_processes}
    try:
        rec = ptyacc.reconstruct(config, accelerator=accelerator, on_step=on_step, resume=args.resume)
        gradient_bytes = sum(p.numel() * p.element_size() for p in rec.model.parameters() if p.requires_grad)
        record.update(comm_bytes=rec.comm_bytes, comm_time_s=rec.comm_time_s, gradient_bytes=gradient_bytes,
                      traffic=[dict(t.bytes, calls=t.calls) for t in rec.traffic],
                      parameter_bytes={name: p.numel() * p.element_size() for name, p in rec.model.named_parameters()},
                      object_region=[*rec.model.object_origin.tolist(), *rec.model.object.shape[2:4]])
        record.update(loss=rec.loss, checksum=parameter_checksum(rec.model), held=len(rec.data.patterns),
                      held_rows=None if rec.data.pattern_rows is None else rec.data.pattern_rows.tolist())
    except ptyacc.PtyaccError as exc:
        record["error"] = str(exc)
    record["indices"] = used
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    if "error" not in record:
        end_process_group()
        exit_after_launch()


if __name__ == "__main__":
    main()
