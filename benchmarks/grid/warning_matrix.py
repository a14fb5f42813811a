"""How many deliberately wrong configs ptyacc's checks catch, and how many right ones they
accuse: files of the independent simulator (simulate.py here), each loaded (``ptyacc.load_data``:
the checks run there) with the true config and with configs wrong in one way; a config counts as
caught when the data's lines hold one starting ``warning:``.

    python benchmarks/grid/warning_matrix.py WORKDIR [--quick]

prints one row per (file, config) and the totals."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py

sys.path.insert(0, str(Path(__file__).parent))
import simulate  # noqa: E402  (benchmarks/grid/simulate.py, the independent simulator)

from ptyacc.config import load_config  # noqa: E402
from ptyacc.data.load import load_data  # noqa: E402

BASE = dict(detector_px=48, scan_step_A=0.4, dose=3e4, edge_mrad=50.0, blur_px=0.6, descan_offset_px=(0.3, -0.2),
            descan_px_per_A=((0.03, 0.02), (-0.02, 0.03)), hot_pixels=3, dead_pixels=4)
FILES = {  # name: the simulator's settings beyond BASE
    "random-24-rot9-df60": dict(scan_shape=(24, 24), defocus_A=60.0, scan_rotation_deg=9.0, seed=1),
    "random-32-rot-37-df-80-T": dict(scan_shape=(32, 32), defocus_A=-80.0, scan_rotation_deg=-37.0, transpose=True,
                                     seed=2),
    "wse2-28-rot9-df180-partly": dict(scan_shape=(28, 28), scan_step_A=1.0, defocus_A=180.0, scan_rotation_deg=9.0,
                                      sample="wse2", source_size_A=0.3, focal_spread_A=20.0, gain_sigma=0.05, seed=3),
    "wse2-32-rot9-df120-fy": dict(scan_shape=(32, 32), defocus_A=120.0, scan_rotation_deg=9.0, sample="wse2",
                                  flip_y=True, seed=4),
    "wse2-28-rot9-df120-partly": dict(scan_shape=(28, 28), defocus_A=120.0, scan_rotation_deg=9.0, sample="wse2",
                                      source_size_A=0.2, focal_spread_A=10.0, gain_sigma=0.05, seed=5),
    "random-24-rot20-df60-1e3": dict(scan_shape=(24, 24), defocus_A=60.0, scan_rotation_deg=20.0, dose=1e3, seed=6),
    # the parallax's images overlap too little (shifts of 11 of 28 steps) and the centre of mass is noise
    "wse2-28-step0.4-df180-partly": dict(scan_shape=(28, 28), defocus_A=180.0, scan_rotation_deg=9.0, sample="wse2",
                                         source_size_A=0.3, focal_spread_A=20.0, gain_sigma=0.05, seed=3),
}


def truth_config(path: Path, setting) -> dict:
    """The config that tells the truth: the true rotation, flips and defocus on the nominal raster."""
    return {"data": {"path": str(path), "bad_pixels": "auto",
                     "transform": {"transpose": setting.transpose, "flip_y": setting.flip_y, "flip_x": setting.flip_x,
                                   "descan": "auto"}},
            "experiment": {"scan_rotation_deg": setting.scan_rotation_deg, "defocus_A": setting.defocus_A,
                           "scan_step_A": setting.scan_step_A}}


def variants(setting) -> dict[str, tuple[bool, dict]]:
    """name: (wrong?, the change to the true config's experiment / transform)."""
    rotation, defocus = setting.scan_rotation_deg, setting.defocus_A
    out = {"right": (False, {})}
    for off in (10, 30, 60, 90):
        out[f"rotation {off:+d}"] = (True, {"experiment": {"scan_rotation_deg": rotation + off}})
    out["transposed"] = (True, {"transform": {"transpose": not setting.transpose}})
    out["turned 180 (flip_y, flip_x)"] = (True, {"transform": {"flip_y": not setting.flip_y,
                                                               "flip_x": not setting.flip_x}})
    out["defocus sign"] = (True, {"experiment": {"defocus_A": -defocus}})
    out["defocus +30%"] = (True, {"experiment": {"defocus_A": 1.3 * defocus}})
    out["defocus -30%"] = (True, {"experiment": {"defocus_A": 0.7 * defocus}})
    out["raster as positions"] = (True, {"experiment": {"scan_rotation_deg": 0.0, "scan_step_A": None,
                                                        "positions": {"key": "positions_A"}}})
    out["autos"] = (False, {"experiment": {"scan_rotation_deg": "auto", "defocus_A": "auto"},
                            "transform": {"orientation": "auto"}})
    return out


def changed(config: dict, change: dict) -> dict:
    out = {"data": {**config["data"], "transform": {**config["data"]["transform"], **change.get("transform", {})}},
           "experiment": {**config["experiment"], **change.get("experiment", {})}}
    out["experiment"] = {k: v for k, v in out["experiment"].items() if v is not None}
    if "orientation" in change.get("transform", {}):
        out["data"]["transform"] = {"orientation": "auto", "descan": "auto"}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("work", type=Path)
    parser.add_argument("--quick", action="store_true", help="the first file only")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    caught = wrong = alarms = right = 0
    for name, extra in list(FILES.items())[:1 if args.quick else None]:
        setting = simulate.Setting(**{**BASE, **extra})
        path = args.work / f"{name}.h5"
        if not path.exists():
            simulate.write(str(path), setting)
        with h5py.File(path) as f:
            assert f["positions_A"].shape[0] == setting.scan_shape[0] * setting.scan_shape[1]
        base = truth_config(path, setting)
        for label, (is_wrong, change) in variants(setting).items():
            data = load_data(load_config(changed(base, change)))
            warnings = [line for line in data.checks if line.startswith("warning:")]
            if is_wrong:
                wrong, caught = wrong + 1, caught + bool(warnings)
            else:
                right, alarms = right + 1, alarms + bool(warnings)
            said = " | ".join(w[9:120] for w in warnings) or "-"
            print(f"{name:28s} {label:28s} {'wrong' if is_wrong else 'right'} {len(warnings)}  {said}", flush=True)
    print(f"caught {caught} of {wrong} wrong configs; false alarms on {alarms} of {right} right ones")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
