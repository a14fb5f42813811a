"""ptyacc against PtyRAD 1.0 on one GPU, on the same data and settings, at two batch sizes.

The case has the shape of PtyRAD's published timing (Lee et al., arXiv 2505.07814, Table S5:
128 x 128 positions of 128 x 128 px patterns, 12 probe modes, 6 slices; 5.69 to 9.83 s per
iteration on an A100 at batch sizes 1024 to 16), with fewer positions so that both packages
finish in about four minutes on an H100 (--scan 64: a quarter of the positions). The data come
from benchmarks/grid/simulate.py (NumPy multislice, neither package's own forward model). Each
(package, batch size) runs in its own process; each writes seconds per iteration (median after
the first), peak device memory (the CUDA allocator's peak; on a CPU the peak resident set) and
its phase, which is scored here with one scorer for both (NCC with the truth over the scanned
region, zero shift and best sub-pixel shift: benchmarks/grid/packages.py). Both use 12 probe modes,
6 slices of the true thickness, the batch size and iterations given, fixed positions, and each
its own defaults otherwise (PtyRAD: Adam with its default constraints, as in its paper).

    python benchmarks/gpu_race.py OUT --device cuda --ptyrad-python python3       # the GPU race
    python benchmarks/gpu_race.py OUT --tiny --device cpu --ptyrad-python /tmp/venv/bin/python  # dry run

Writes OUT/race.json and OUT/race.md (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAPER_A100_S_PER_ITERATION = {16: 9.83, 64: 6.95, 256: 5.85, 1024: 5.69}  # 16384 positions; Table S5


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ptyrad-python", default=sys.executable, help="a Python that imports ptyrad 1.0")
    parser.add_argument("--scan", type=int, default=64, help="positions per scan side (the paper: 128)")
    parser.add_argument("--batches", type=int, nargs=2, default=(256, 32))
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=240.0, help="runs not yet started after this are skipped")
    parser.add_argument("--tiny", action="store_true", help="a dry run: 6 x 6 scan, 32 px, 2 slices, 2 modes")
    parser.add_argument("--one", nargs=3, metavar=("PACKAGE", "BATCH", "RESULT"), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def case(args) -> dict:
    """The race's case: the paper's shape (or the dry run's tiny one)."""
    if args.tiny:
        return {"detector_px": 32, "scan": 6, "slices": 2, "modes": 2, "iterations": 3, "batches": (12, 6)}
    return {"detector_px": 128, "scan": args.scan, "slices": 6, "modes": 12, "iterations": args.iterations,
            "batches": tuple(args.batches)}


def simulate(path: Path, shape: dict) -> None:
    sys.path.insert(0, str(HERE / "grid"))
    import simulate as grid

    dx = grid.wavelength_A(80e3) / (2 * 60e-3)  # the simulator's pixel at 80 kV, 60 mrad detector edge
    setting = grid.Setting(defocus_A=100.0, edge_mrad=60.0, dose=1e5, slices=shape["slices"], slice_thickness_A=2.0,
                           detector_px=shape["detector_px"], scan_shape=(shape["scan"], shape["scan"]),
                           scan_step_A=2.87 * dx)  # the paper's 0.429 Å step on 0.1494 Å pixels: 2.87 px
    grid.write(str(path), setting)


# ----------------------------------------------------------------------------- one run, in its own process


def peak_bytes(device: str) -> tuple[int, str]:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(), "CUDA allocator peak"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak resident set of the process"


def run_ptyacc(data: Path, shape: dict, batch: int, device: str) -> dict:
    import numpy as np

    import ptyacc

    config = {"data": {"path": str(data)}, "experiment": {"positions": {"key": "positions_A"}},
              "model": {"slices": shape["slices"], "slice_thickness_A": 2.0, "probe_modes": shape["modes"]},
              "optim": {"iterations": shape["iterations"], "batch_size": batch},
              "runtime": {"device": device, "progress": False}}
    rec = ptyacc.reconstruct(ptyacc.load_config(config), write=False)
    times = np.asarray(rec.iteration_times_s, dtype=float)
    peak, measure = peak_bytes(device)
    return {"phase": rec.results.phase.tolist(), "origin_A": [float(v) for v in rec.results.origin_A],
            "iteration_s": times.tolist(), "peak_bytes": peak, "peak_measure": measure, "version": ptyacc.__version__}


def ptyrad_params(data: Path, shape: dict, batch: int, attrs: dict, out: Path) -> dict:
    """PtyRAD's params: the data's calibration, the shared settings, PtyRAD's defaults otherwise."""
    n, k = shape["scan"] ** 2, shape["detector_px"]
    constraint = {"start_iter": 1, "step": 1, "end_iter": None}
    return {
        "init_params": {
            "probe_illum_type": "electron", "probe_kv": attrs["energy_eV"] / 1e3,
            "probe_conv_angle": attrs["semiangle_mrad"], "probe_aberrations": {"C10": -attrs["defocus_A"]},
            "meas_Npix": k, "pos_N_scans": n, "pos_N_scan_slow": shape["scan"], "pos_N_scan_fast": shape["scan"],
            "pos_scan_step_size": attrs["scan_step_A"], "meas_calibration": {"mode": "dk", "value": attrs["dk_invA"]},
            "probe_pmode_max": shape["modes"], "probe_pmode_init_pows": [0.02], "obj_omode_max": 1,
            "obj_Nlayer": shape["slices"], "obj_slice_thickness": 2.0, "meas_permute": None,
            "meas_reshape": [n, k, k], "meas_flipT": None, "meas_crop": None, "meas_pad": None, "meas_resample": None,
            "meas_remove_neg_values": {"mode": "clip_neg", "value": None, "force": False},
            "meas_normalization": {"mode": "max_at_one"}, "probe_normalization": {"mode": "mean_total_ints"},
            "pos_scan_flipT": None, "pos_scan_affine": None, "pos_scan_rand_std": None,
            "meas_source": "file", "meas_params": {"path": str(data), "key": "patterns"},
            "probe_source": "simu", "probe_params": None, "pos_source": "simu", "pos_params": None,
            "obj_source": "simu", "obj_params": None, "tilt_source": "simu",
            "tilt_params": {"tilt_type": "all", "init_tilts": [[0.0, 0.0]]}, "random_seed": 42},
        "model_params": {
            "detector_blur_std": None, "preload_data": True,
            "optimizer_params": {"name": "Adam", "configs": {}, "load_state": None}, "scheduler_params": None,
            "update_params": {"obja": {"start_iter": 1, "lr": 5e-4}, "objp": {"start_iter": 1, "lr": 5e-4},
                              "obj_tilts": {"start_iter": None, "lr": 0.0},
                              "slice_thickness": {"start_iter": None, "lr": 0.0},
                              "probe": {"start_iter": 1, "lr": 1e-4},
                              "probe_pos_shifts": {"start_iter": None, "lr": 0.0}}},
        "loss_params": {"loss_single": {"state": True, "weight": 1.0, "dp_pow": 0.5}, "loss_poissn": {"state": False},
                        "loss_pacbed": {"state": False}, "loss_sparse": {"state": False},
                        "loss_simlar": {"state": False}},
        "constraint_params": {
            "ortho_pmode": constraint, "fix_probe_int": constraint,
            "obj_rblur": {**constraint, "obj_type": "both", "kernel_size": 5, "std": 0.4},
            "obj_zblur": {**constraint, "obj_type": "both", "kernel_size": 5, "std": 1.0},
            "pos_recenter": {"start_iter": None, "step": 1, "end_iter": None, "relax": 0.0}},
        "recon_params": {
            "NITER": shape["iterations"], "INDICES_MODE": {"mode": "full", "subscan_slow": None, "subscan_fast": None},
            "BATCH_SIZE": {"size": batch, "grad_accumulation": 1}, "GROUP_MODE": "random", "SAVE_ITERS": None,
            "output_dir": str(out), "recon_dir_affixes": ["minimal"], "prefix_time": False, "copy_params": False,
            "selected_figs": [], "convergence_monitor": None, "compiler_configs": {"enable": False}},
    }


def run_ptyrad(data: Path, shape: dict, batch: int, device: str, work: Path) -> dict:
    """PtyRAD's own loop (the calls of PtyRADSolver.reconstruct), positions from the file on
    PtyRAD's canvas: canvas pixel [i + offset] is truth pixel [i] (offset as PtyRAD centres its canvas)."""
    import h5py
    import numpy as np
    import torch
    import yaml

    with h5py.File(data) as f:
        attrs = {key: float(f.attrs[key]) for key in ("energy_eV", "semiangle_mrad", "defocus_A", "scan_step_A",
                                                        "dk_invA", "dx_A")}
        centres_px = f["positions_A"][()] / attrs["dx_A"]
    stand_in_gaussian_blur()
    if sys.version_info < (3, 12):
        python_311_source_fix()
    import ptyrad
    from ptyrad.core import PtychoModel
    from ptyrad.params import load_params
    from ptyrad.runtime.device import set_gpu_device
    from ptyrad.solver import PtyRADSolver
    from ptyrad.solver.reconstruction import create_optimizer, create_scheduler, prepare_recon, recon_loop

    work.mkdir(parents=True, exist_ok=True)
    (work / "ptyrad.yaml").write_text(yaml.safe_dump(ptyrad_params(data, shape, batch, attrs, work / "out")))
    params = load_params(str(work / "ptyrad.yaml"), validate=True)
    k = shape["detector_px"]
    corners = centres_px - k // 2
    extent = (1.2 * np.ceil(corners.max(0) - corners.min(0) + k)).astype(int)
    offset = np.round(extent // 2 - k // 2 - corners.mean(0)).astype(int)
    params["init_params"]["pos_source"], params["init_params"]["pos_params"] = "custom", corners + offset
    torch_device = set_gpu_device(0 if device.startswith("cuda") else "cpu")
    solver = PtyRADSolver(params, device=torch_device, seed=42, acc=None)
    model = PtychoModel(solver.init.init_variables, params["model_params"], device=torch_device)
    optimizer = create_optimizer(model.optimizer_params, model.optimizable_params)
    scheduler = create_scheduler(model.scheduler_params, optimizer)
    indices, batches, output_path = prepare_recon(model, solver.init, params)
    batches = [torch.from_numpy(b).to(torch_device) for b in batches]
    recon_loop(model, solver.init, params, optimizer, scheduler, solver.loss_fn, solver.constraint_fn, indices,
               batches, output_path, acc=None)
    peak, measure = peak_bytes(device)
    objp = model.opt_objp.detach().cpu().numpy()  # (object modes, slices, y, x)
    phase = np.tensordot(model.omode_occu.detach().cpu().numpy(), objp, axes=(0, 0)).sum(0)
    return {"phase": phase.tolist(), "origin_A": [float(-v * attrs["dx_A"]) for v in offset],
            "iteration_s": [float(t) for t in model.iter_times], "peak_bytes": peak, "peak_measure": measure,
            "version": ptyrad.__version__}


def stand_in_gaussian_blur() -> None:
    """PtyRAD imports torchvision's gaussian_blur; where torchvision cannot load (a CPU torch without
    its matching torchvision), the same separable Gaussian (reflect padding) stands in."""
    try:
        import torchvision.transforms.functional  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - any failure to load it: the stand-in
        pass
    import types

    import torch

    def gaussian_blur(img, kernel_size, sigma):
        sizes = [kernel_size] * 2 if isinstance(kernel_size, int) else list(kernel_size)
        sigmas = [sigma] * 2 if isinstance(sigma, (int, float)) else list(sigma)
        out = img
        for axis, (size, s) in enumerate(zip(sizes, sigmas)):
            x = torch.arange(size, dtype=img.dtype, device=img.device) - (size - 1) / 2
            taps = torch.exp(-0.5 * (x / s) ** 2)
            taps = taps / taps.sum()
            pad = [0, 0, size // 2, size // 2] if axis == 0 else [size // 2, size // 2, 0, 0]
            flat = out.reshape(-1, 1, *out.shape[-2:])
            kernel = taps.view(1, 1, -1, 1) if axis == 0 else taps.view(1, 1, 1, -1)
            out = torch.nn.functional.conv2d(torch.nn.functional.pad(flat, pad, mode="reflect"), kernel).reshape(out.shape)
        return out

    package = types.ModuleType("torchvision")
    transforms = types.ModuleType("torchvision.transforms")
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.gaussian_blur = gaussian_blur
    package.transforms, transforms.functional = transforms, functional
    sys.modules.update({"torchvision": package, "torchvision.transforms": transforms,
                        "torchvision.transforms.functional": functional})


def python_311_source_fix() -> None:
    """PtyRAD 1.0's ptyrad/plotting/basic.py nests a quote in an f-string (Python 3.12 syntax): on
    3.11 that one module is compiled from its source with the inner quotes swapped."""
    import importlib.abc
    import importlib.machinery

    target, old, new = "ptyrad.plotting.basic", b"{lr_iters['niter'][-1]}", b'{lr_iters["niter"][-1]}'

    class Loader(importlib.machinery.SourceFileLoader):
        def get_data(self, path):
            data = super().get_data(path)
            return data.replace(old, new) if path.endswith(".py") else data

        def path_stats(self, path):  # no bytecode cache: always from the fixed source
            raise OSError

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):
            if name != target:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            spec.loader = Loader(name, spec.origin)
            return spec

    sys.meta_path.insert(0, Finder())


# ----------------------------------------------------------------------------- the race


def launch(args, shape: dict, data: Path, package: str, batch: int) -> dict:
    result = args.out / f"{package}_b{batch}.json"
    python = args.ptyrad_python if package == "ptyrad" else sys.executable
    command = [python, __file__, str(args.out), "--device", args.device, "--data", str(data), "--scan",
               str(shape["scan"]), "--iterations", str(shape["iterations"]), *(["--tiny"] if args.tiny else []),
               "--one", package, str(batch), str(result)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"})
    (args.out / f"{package}_b{batch}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        from ptyacc.speed.speedtest import error_line

        tail = error_line(done.stderr)
        return {"package": package, "batch": batch, "error": tail[:300]}
    run = json.loads(result.read_text())
    return {**run, "package": package, "batch": batch, "wall_s": time.perf_counter() - start}


def score(run: dict, data: Path) -> dict:
    """s/iteration, memory and the NCCs of one run (its phase dropped)."""
    import h5py
    import numpy as np

    sys.path.insert(0, str(HERE / "grid"))
    from packages import score as grid_score

    if "error" in run:
        return run
    with h5py.File(data) as f:
        truth, positions, dx = f["ground_truth/phase"][()], f["positions_A"][()], float(f.attrs["dx_A"])
    times = run.pop("iteration_s")
    ncc = grid_score(np.asarray(run.pop("phase")), run["origin_A"], dx, positions, truth)
    return {**run, **ncc, "s_per_iteration": float(np.median(times[1:] if len(times) > 1 else times)),
            "iterations": len(times)}


def table(runs: list[dict], shape: dict, device: str) -> str:
    lines = [f"{shape['scan']} x {shape['scan']} positions of {shape['detector_px']} px, {shape['modes']} probe modes, "
             f"{shape['slices']} slices, {shape['iterations']} iterations, on {device}", "",
             "| package | batch | s/iteration | peak memory (MiB) | NCC zero shift | NCC best shift |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['package']} | {r['batch']} | failed: {r['error']} | | | |")
        else:
            lines.append(f"| {r['package']} {r['version']} | {r['batch']} | {r['s_per_iteration']:.3f} | "
                         f"{r['peak_bytes'] / 2**20:.0f} | {r['ncc_zero_shift']:.4f} | {r['ncc_best_shift']:.4f} |")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, runs: list[dict], shape: dict, device: str) -> None:
    (out / "race.json").write_text(json.dumps({"case": shape, "device": device, "runs": runs,
                                              "paper_a100_s_per_iteration_16384": PAPER_A100_S_PER_ITERATION}, indent=1))
    (out / "race.md").write_text(table(runs, shape, device))


def main(argv=None) -> int:
    args = parse(argv)
    shape = case(args)
    if args.one:
        package, batch, result = args.one
        if package == "ptyacc":
            run = run_ptyacc(args.data, shape, int(batch), args.device)
        else:
            run = run_ptyrad(args.data, shape, int(batch), args.device, args.out / f"ptyrad_b{batch}")
        Path(result).write_text(json.dumps(run))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = args.out / "race_data.h5"
    simulate(data, shape)
    print(f"simulated {data} in {time.perf_counter() - start:.0f} s", flush=True)
    runs = []
    for batch in shape["batches"]:
        for package in ("ptyacc", "ptyrad"):
            if time.perf_counter() - start > args.budget_s:
                runs.append({"package": package, "batch": batch, "error": f"not run: past --budget-s {args.budget_s:g}"})
                continue
            runs.append(score(launch(args, shape, data, package, batch), data))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "origin_A"}), flush=True)
            write_tables(args.out, runs, shape, args.device)  # after every run: a race cut short keeps what it ran
    print(table(runs, shape, args.device))
    return 1 if any("error" in r and not r["error"].startswith("not run") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
