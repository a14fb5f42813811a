"""The operators of one reconstruction step by kind (benchmarks/records/2026-11-27-performance.md, "Operators per step by
kind"): operators, passes over the batch's waves, FFTs (those over the waves), host-device waits,
and the median step's operators by name. One JSON line, then the listing.

    python -m benchmarks.count_operators configs/demo.yaml
    python -m benchmarks.count_operators configs/petra_nearfield.yaml --iterations 4
    python -m benchmarks.count_operators sim.yaml data.path=sim_32x32.h5 experiment.positions.key=positions_A \\
        optim.batch_size=32 model.probe_modes=4 model.slices=4 model.slice_thickness_A=2
"""

from __future__ import annotations

import argparse
import json

import ptyacc
from benchmarks.operators import count_operators


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a config file ({} in a file: every default)")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE")
    parser.add_argument("--iterations", type=int, default=2, help="run this many; count the last")
    args = parser.parse_args()
    config = ptyacc.load_config(args.config, ["runtime.progress=false", *args.overrides])
    counts = count_operators(config, iterations=args.iterations, from_iteration=args.iterations - 1)
    by_name = counts.pop("by_name")
    print(json.dumps(counts))
    for name, count in sorted(by_name.items(), key=lambda item: -item[1]):
        print(f"{count:5d} {name}")


if __name__ == "__main__":
    main()
