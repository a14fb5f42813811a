"""Bad configs and bad data files, through the real command line.

Each case is one mistake a user can make. `ptyacc run` must answer it with exit code 2 and
one line `ptyacc: error: ...` on stderr that names the key or file and what is wrong, with no
traceback, and must write nothing but run.log. Every case runs in-process through
``ptyacc.commands.cli.main`` (fast); the cases marked ``subprocess`` also run as
``python -m ptyacc.run`` in a fresh process, to prove the real entry point behaves the same.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config

from ptyacc.commands.cli import main

DELETE = object()  # in a case's config: remove this key from the base config
SUBPROCESS_TIMEOUT_S = 120

# A good HDF5 input: (3, 4) scan of 8 x 8 patterns, calibrated by the file's attributes.
GOOD_PATTERNS = np.random.default_rng(0).poisson(5.0, size=(3, 4, 8, 8)).astype(np.float32)
GOOD_ATTRS = {"energy_eV": 80e3, "semiangle_mrad": 20.0, "defocus_A": 10.0, "dk_invA": 0.25, "scan_step_A": 0.5}
POSITIONS_A = np.stack(np.meshgrid(np.arange(3) * 0.5, np.arange(4) * 0.5, indexing="ij"), -1).reshape(-1, 2)
FROM_FILE = {"positions": {"key": "positions_A"}}
# the good file as X-ray far-field data: 8 keV, detector 1.12 m away, 55 µm pixels
XRAY_ATTRS = {"energy_eV": 8e3, "detector_distance_m": 1.12, "detector_pixel_m": 55e-6, "scan_step_A": 1e4,
              "semiangle_mrad": DELETE, "defocus_A": DELETE, "dk_invA": DELETE}

NEEDS_NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


def h5_file(name: str = "data.h5", attrs: dict | None = None, **datasets: np.ndarray) -> Callable[[Path], None]:
    """A writer of an HDF5 file in the case folder: ``datasets`` (default: good 4D patterns)
    and the good attributes updated by ``attrs`` (a DELETE value removes one)."""
    datasets = datasets or {"patterns": GOOD_PATTERNS}
    merged = {k: v for k, v in {**GOOD_ATTRS, **(attrs or {})}.items() if v is not DELETE}

    def write(folder: Path) -> None:
        with h5py.File(folder / name, "w") as f:
            for key, value in datasets.items():
                f[key] = value
            f.attrs.update(merged)

    return write


def text_file(name: str, text: str) -> Callable[[Path], None]:
    """A writer of a text file in the case folder."""
    return lambda folder: (folder / name).write_text(text)


def folder(name: str) -> Callable[[Path], None]:
    """A maker of an empty folder in the case folder."""
    return lambda parent: (parent / name).mkdir()


def output_lock(host: str | None = None, text: str | None = None) -> Callable[[Path], None]:
    """A maker of out/.ptyacc.lock naming a live process (the test runner's parent) on ``host``
    (default: this one), or holding ``text``: another run uses the output folder."""
    record = {"pid": os.getppid(), "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00",
              "command": "ptyacc run other.yaml", "token": "other"}

    def write(parent: Path) -> None:
        (parent / "out").mkdir()
        (parent / "out" / ".ptyacc.lock").write_text(json.dumps(record) if text is None else text)

    return write


@dataclass(frozen=True)
class Case:
    """One mistake. ``expected``: substrings of the error line; ``{config}``, ``{data}`` and
    ``{dir}`` stand for the config file, the data file and the case folder."""

    name: str
    expected: tuple[str, ...]
    config: dict | object = field(default_factory=dict)  # merged into the base config; DELETE: no config file
    base: str = "simulate"  # or "file": data.path = data.h5 (calibration from its attributes)
    files: tuple[Callable[[Path], None], ...] = ()
    text: str | None = None  # the config file's whole text, instead of a config
    args: tuple[str, ...] = ()  # after the config file
    env: dict = field(default_factory=dict)  # only for subprocess cases
    subprocess: bool = False
    in_process: bool = True
    timeout_s: float = SUBPROCESS_TIMEOUT_S
    marks: pytest.MarkDecorator | tuple = ()


def bad(name: str, *expected: str, **kwargs) -> Case:
    """A case on the simulated base config (no data file needed)."""
    return Case(name, expected, **kwargs)


def file_case(name: str, *expected: str, files: tuple | None = None, **kwargs) -> Case:
    """A case reading data.h5 (by default a good one) instead of simulating."""
    return Case(name, expected, base="file", files=(h5_file(),) if files is None else files, **kwargs)


CASES = [
    # --- the config file itself and the command line
    bad("yaml_unclosed_bracket", "{config}: not valid YAML at line 4, column 16 ('    detector_px: 16'): "
        "expected ',' or ']'", "flow sequence that starts at line 3, column 17: '    scan_shape: [6, 6'",
        text="data:\n  simulate:\n    scan_shape: [6, 6\n    detector_px: 16\n", subprocess=True),
    bad("yaml_unclosed_bracket_at_the_end", "{config}: not valid YAML at line 2, column 1 (end of file)",
        "starts at line 1, column 21: 'optim: {iterations: [1'", text="optim: {iterations: [1\n"),
    bad("yaml_tab_indent", "{config}: not valid YAML at line 3, column 1 ('\\tbatch_size: 8')",
        "indent with spaces, not tabs", text="optim:\n  iterations: 5\n\tbatch_size: 8\n"),
    bad("yaml_unclosed_quote", "{config}: not valid YAML at line 2, column 1 (end of file)",
        "quoted scalar that starts at line 1, column 15: 'output: {dir: \"out}'", text='output: {dir: "out}\n'),
    bad("config_is_a_data_file", "{config}: not a text file; a YAML config is expected",
        files=(h5_file("config.yaml"),), config=DELETE),
    bad("config_is_a_list", "{config}: the top level must be a mapping of sections", text="- optim\n- data\n",
        subprocess=True),
    bad("config_file_missing", "{config}: config file not found", config=DELETE),
    bad("set_without_equals", "--set optim.iterations: expected key.path=value",
        args=("--set", "optim.iterations"), subprocess=True),
    bad("set_into_a_scalar", "--set optim.iterations.max: iterations is not a section",
        args=("--set", "optim.iterations.max=3")),
    bad("set_bad_value", "optim.batch_size: must be auto or >= 1, got -4", args=("--set", "optim.batch_size=-4")),
    # --- unknown keys at every depth
    bad("unknown_section", "optimizer: unknown key (did you mean 'optim'?)", config={"optimizer": {"iterations": 3}}),
    bad("unknown_key", "optim.batchsize: unknown key (did you mean 'batch_size'?)", config={"optim": {"batchsize": 8}},
        subprocess=True),
    bad("unknown_key_depth_3", "optim.lr.probes: unknown key (did you mean 'probe'?)",
        config={"optim": {"lr": {"probes": 0.1}}}),
    bad("unknown_key_in_simulate", "data.simulate.detector: unknown key (did you mean 'detector_px'?)",
        config={"data": {"simulate": {"detector": 16}}}),
    bad("unknown_key_in_positions", "experiment.positions.keys: unknown key (did you mean 'key'?)",
        config={"experiment": {"positions": {"keys": "xy"}}}),
    bad("unknown_aberration", "experiment.aberrations.C31: unknown aberration",
        config={"experiment": {"aberrations": {"C31": 100.0}}}),
    # --- wrong types
    bad("string_for_int", "optim.iterations: expected an integer, got 'ten'", config={"optim": {"iterations": "ten"}}),
    bad("fraction_for_int", "optim.batch_size: expected an integer, got 8.5", config={"optim": {"batch_size": 8.5}}),
    bad("bool_for_int", "model.slices: expected an integer, got True", config={"model": {"slices": True}}),
    bad("list_for_scalar", "optim.batch_size: expected an integer, got [8, 16]",
        config={"optim": {"batch_size": [8, 16]}}),
    bad("mapping_for_scalar", "experiment.energy_eV: expected a number, got {'value': 80000}",
        config={"experiment": {"energy_eV": {"value": 80000}}}),
    bad("scalar_for_list", "model.object_amplitude_bounds: expected a list, got 0.5",
        config={"model": {"object_amplitude_bounds": 0.5}}),
    bad("scalar_for_list_in_simulate", "data.simulate.scan_shape: expected a list, got 6",
        config={"data": {"simulate": {"scan_shape": 6}}}),
    bad("scalar_for_section", "optim: expected a mapping of keys, got int 5", config={"optim": 5}),
    bad("string_for_bool", "runtime.progress: expected true or false, got 'no way'",
        config={"runtime": {"progress": "no way"}}),
    # --- sizes that must be positive
    bad("batch_size_zero", "optim.batch_size: must be auto or >= 1, got 0", config={"optim": {"batch_size": 0}}),
    bad("iterations_negative", "optim.iterations: must be auto or >= 1, got -3", config={"optim": {"iterations": -3}}),
    bad("slices_zero", "model.slices: must be >= 1, got 0", config={"model": {"slices": 0}}),
    bad("probe_modes_zero", "model.probe_modes: must be >= 1, got 0", config={"model": {"probe_modes": 0}}),
    bad("detector_px_zero", "data.simulate.detector_px: must be an even integer >= 8, got 0",
        config={"data": {"simulate": {"detector_px": 0}}}),
    bad("simulated_scan_one_number", "data.simulate.scan_shape: must be two positive integers, got [6]",
        config={"data": {"simulate": {"scan_shape": [6]}}}),
    file_case("data_scan_one_number", "data.scan_shape: must be two positive integers [slow, fast], got [12]",
              config={"data": {"scan_shape": [12]}}),
    bad("threads_zero", "runtime.threads: must be >= 1, auto or null, got 0", config={"runtime": {"threads": 0}}),
    bad("timeout_zero", "runtime.timeout_s: must be > 0, got 0.0", config={"runtime": {"timeout_s": 0}}),
    bad("slice_thickness_negative", "model.slice_thickness_A: must be > 0, got -2.0",
        config={"model": {"slice_thickness_A": -2}}),
    bad("keep_checkpoints_zero", "output.keep_checkpoints: must be >= 1, got 0",
        config={"output": {"keep_checkpoints": 0}}),
    # --- values out of range
    bad("lr_negative", "optim.lr.object: must be >= 0, got -0.01", config={"optim": {"lr": {"object": -0.01}}}),
    bad("lr_final_fraction_above_1", "optim.lr_final_fraction: must be auto or in (0, 1], got 1.5",
        config={"optim": {"lr_final_fraction": 1.5}}),
    bad("amplitude_bounds_reversed", "model.object_amplitude_bounds: must be [min, max] with 0 <= min < max, "
        "got [1.0, 0.0]", config={"model": {"object_amplitude_bounds": [1.0, 0.0]}}),
    bad("energy_negative", "experiment.energy_eV: must be > 0, got -80000.0",
        config={"experiment": {"energy_eV": -80e3}}),
    bad("defocus_twice", "experiment.defocus_A: give defocus_A or aberrations.C10, not both",
        config={"experiment": {"aberrations": {"C10": -20.0}}}),
    # --- values outside a fixed set
    bad("loss_enum", "optim.loss: must be one of auto, amplitude, poisson, got 'l2'", config={"optim": {"loss": "l2"}}),
    bad("grouping_enum", "optim.grouping: must be one of random, compact, got 'spiral'",
        config={"optim": {"grouping": "spiral"}}),
    bad("device_enum", "runtime.device: must be one of auto, cpu, cuda, mps, got 'gpu'",
        config={"runtime": {"device": "gpu"}}),
    bad("backend_enum", "runtime.backend: must be one of auto, nccl, gloo, got 'mpi'",
        config={"runtime": {"backend": "mpi"}}),
    bad("radiation_enum", "experiment.radiation: must be one of electron, xray, got 'electrons' "
        "(did you mean 'electron'?)", config={"experiment": {"radiation": "electrons"}}),
    bad("positions_enum", "experiment.positions: must be one of raster, got 'file'",
        config={"experiment": {"positions": "file"}}),
    # --- where the data come from
    bad("path_and_simulate", "data: give exactly one of `path` (a data file) or `simulate`",
        config={"data": {"path": "data.h5"}}),
    bad("neither_path_nor_simulate", "data: give exactly one of `path` (a data file) or `simulate`",
        config={"data": {"simulate": DELETE}}),
    file_case("data_file_missing", "{data}: data file not found", files=(), subprocess=True),
    file_case("data_path_is_a_folder", "{dir}/scans: is a folder, not an HDF5 file",
              files=(folder("scans"),), config={"data": {"path": "scans"}}),
    file_case("not_hdf5", "{data}: cannot be read as HDF5", files=(text_file("data.h5", "slow,fast\n1,2\n"),),
              subprocess=True),
    file_case("no_3d_dataset", "{data}: no 3D or 4D numeric dataset found; set data.key",
              files=(h5_file(image=np.ones((8, 8)), energies=np.ones(3)),)),
    file_case("ambiguous_datasets", "{data}: several datasets could hold the patterns (a, b); set data.key",
              files=(h5_file(a=GOOD_PATTERNS, b=GOOD_PATTERNS),)),
    file_case("wrong_key", "{data}: no dataset 'diffraction' (data.key); datasets: patterns",
              config={"data": {"key": "diffraction"}}),
    file_case("key_is_a_group", "{data}: no dataset 'entry' (data.key)",
              files=(h5_file(**{"entry/data": GOOD_PATTERNS}),), config={"data": {"key": "entry"}}),
    # --- what the patterns look like
    file_case("patterns_2d", "{data}:/patterns: expected 3D (N, ky, kx) or 4D (slow, fast, ky, kx) patterns, "
              "found shape (8, 8)", files=(h5_file(patterns=np.ones((8, 8))),)),
    file_case("patterns_5d", "found shape (2, 3, 2, 8, 8)", files=(h5_file(patterns=np.ones((2, 3, 2, 8, 8))),)),
    file_case("patterns_not_square", "{data}: patterns must be square, found 8 x 6",
              files=(h5_file(patterns=np.ones((3, 4, 8, 6))),)),
    file_case("patterns_empty", "{data}:/patterns: is empty (shape (0, 8, 8))",
              files=(h5_file(patterns=np.ones((0, 8, 8))),), config={"data": {"scan_shape": [1, 1]}}),
    file_case("patterns_complex", "{data}:/patterns: pattern values must be real numbers",
              files=(h5_file(patterns=GOOD_PATTERNS.astype(np.complex64)),)),
    file_case("patterns_nan", "{data}: 64 NaN/Inf pattern values; set data.nonfinite: zero",
              files=(h5_file(patterns=np.where(np.arange(12)[:, None, None] == 5, np.nan,
                                               GOOD_PATTERNS.reshape(12, 8, 8)).reshape(3, 4, 8, 8)),),
              subprocess=True),
    file_case("patterns_negative_refused", "{data}: negative pattern values (min -1)",
              files=(h5_file(patterns=-np.ones((3, 4, 8, 8))),), config={"data": {"negative": "error"}}),
    # --- data.transform: crop, bin, pad
    bad("bin_zero", "data.transform.bin: must be >= 1, got 0", config={"data": {"transform": {"bin": 0}}}),
    bad("crop_offset_without_crop", "data.transform.crop_offset: needs crop",
        config={"data": {"transform": {"crop_offset": [1, 1]}}}),
    bad("transform_on_simulated_data", "data.transform: prepares patterns read from data.path",
        config={"data": {"transform": {"flip_x": True}}}),
    file_case("crop_larger_than_patterns", "{data}: data.transform.crop: a 10 x 10 crop centred does not fit in the "
              "stored 8 x 8 patterns", config={"data": {"transform": {"crop": 10}}}),
    file_case("bin_not_dividing", "{data}: data.transform.bin: 3 does not divide the stored pattern size 8 x 8",
              config={"data": {"transform": {"bin": 3}}}),
    file_case("pad_too_small", "{data}: data.transform.pad: 6 is smaller than the 8 x 8 px patterns",
              config={"data": {"transform": {"pad": 6}}}),
    bad("orientation_auto_with_flips", "data.transform.orientation: auto sets transpose, flip_y and flip_x from "
        "the file", config={"data": {"transform": {"orientation": "auto", "flip_x": True}}}),
    file_case("orientation_auto_without_basis", "{data}: data.transform.orientation: auto needs the detector's "
              "basis_vectors", config={"data": {"transform": {"orientation": "auto"}}}),
    # --- scan and positions
    file_case("scan_shape_mismatch", "data.scan_shape: [5, 5] gives 25 positions but the data has 12 patterns",
              config={"data": {"scan_shape": [5, 5]}}),
    file_case("scan_shape_attribute_mismatch", "{data}: attribute scan_shape [5, 5] gives 25 positions but the data "
              "has 12 patterns", files=(h5_file(attrs={"scan_shape": [5, 5]}, patterns=GOOD_PATTERNS.reshape(12, 8, 8)),)),
    file_case("scan_shape_attribute_one_number", "{data}: attribute scan_shape must be two positive integers "
              "[slow, fast], got 12", files=(h5_file(attrs={"scan_shape": 12}, patterns=GOOD_PATTERNS.reshape(12, 8, 8)),)),
    file_case("scan_shape_missing", "data.scan_shape: needed for raster positions with 3D patterns",
              files=(h5_file(patterns=GOOD_PATTERNS.reshape(12, 8, 8)),)),
    file_case("positions_wrong_shape", "{data}:positions_A: positions must be (N, 2) (y, x), found shape (12, 3)",
              files=(h5_file(patterns=GOOD_PATTERNS, positions_A=np.zeros((12, 3))),),
              config={"experiment": FROM_FILE}),
    file_case("positions_wrong_count", "{data}:positions_A: 10 positions for 12 patterns",
              files=(h5_file(patterns=GOOD_PATTERNS, positions_A=POSITIONS_A[:10]),),
              config={"experiment": FROM_FILE}),
    file_case("positions_dataset_missing", "{data}: no dataset 'positions_A' (experiment.positions.key)",
              config={"experiment": FROM_FILE}),
    file_case("positions_file_missing", "{dir}/pos.h5: data file not found",
              config={"experiment": {"positions": {"path": "pos.h5"}}}),
    # --- calibration from the file's attributes
    file_case("energy_missing", "experiment.energy_eV: needed, and the data file has no 'energy_eV' attribute",
              files=(h5_file(attrs={"energy_eV": DELETE}),)),
    file_case("sampling_missing", "experiment.dk_invA: needed (or experiment.dx_A), and the data file has neither",
              files=(h5_file(attrs={"dk_invA": DELETE}),)),
    file_case("scan_step_missing", "experiment.scan_step_A: needed for raster positions",
              files=(h5_file(attrs={"scan_step_A": DELETE}),)),
    file_case("semiangle_missing", "experiment.semiangle_mrad: needed to build the initial probe",
              files=(h5_file(attrs={"semiangle_mrad": DELETE}),)),
    file_case("energy_attribute_negative", "{data}: attribute energy_eV must be > 0, got -80000.0",
              files=(h5_file(attrs={"energy_eV": -80e3}),)),
    file_case("dk_attribute_zero", "{data}: attribute dk_invA must be > 0, got 0.0",
              files=(h5_file(attrs={"dk_invA": 0.0}),)),
    file_case("energy_attribute_text", "{data}: attribute energy_eV must be a number, got '80 kV'",
              files=(h5_file(attrs={"energy_eV": "80 kV"}),)),
    bad("bright_field_fit_and_dx", "experiment.dk_from_bright_field: fits dk_invA from the patterns; give it or "
        "dk_invA/dx_A, not both", config={"experiment": {"dk_from_bright_field": True}}),
    file_case("bright_field_disk_missing", "{data}: no bright-field disk inside the detector",
              "set experiment.dk_invA (or dx_A) instead of experiment.dk_from_bright_field",
              config={"experiment": {"dk_from_bright_field": True}}),
    file_case("bright_field_without_semiangle", "experiment.semiangle_mrad: needed by experiment.dk_from_bright_field",
              files=(h5_file(attrs={"semiangle_mrad": DELETE}),), config={"experiment": {"dk_from_bright_field": True}}),
    # --- a config value that contradicts the data file (an override far beyond a correction)
    file_case("scan_shape_against_4d_axes", "data.scan_shape: [4, 3] against the scan axes [3, 4] of the 4D patterns "
              "in {data}", files=(h5_file(patterns=GOOD_PATTERNS, positions_A=POSITIONS_A),),
              config={"data": {"scan_shape": [4, 3]}, "experiment": FROM_FILE}, subprocess=True),
    file_case("scan_shape_against_positions_from_file", "data.scan_shape: [5, 5] gives 25 positions but the data has "
              "12 patterns", files=(h5_file(patterns=GOOD_PATTERNS.reshape(12, 8, 8), positions_A=POSITIONS_A),),
              config={"data": {"scan_shape": [5, 5]}, "experiment": FROM_FILE}),
    file_case("energy_in_kilo_electronvolts", "experiment.energy_eV: 80 against 80000 from {data} (energy_eV), a "
              "factor 1e+03 apart", config={"experiment": {"energy_eV": 80}}, subprocess=True),
    file_case("semiangle_in_radians", "experiment.semiangle_mrad: 0.02 against 20 from {data} (semiangle_mrad)",
              config={"experiment": {"semiangle_mrad": 0.02}}),
    file_case("dk_in_inverse_nanometres", "experiment.dk_invA: 2.5 against 0.25 from {data} (dk_invA), a factor 10",
              config={"experiment": {"dk_invA": 2.5}}),
    file_case("dx_against_the_file_dk", "experiment.dx_A: 5 against 0.5 from {data} (1 / (8 px x dk_invA 0.25))",
              config={"experiment": {"dx_A": 5.0}}),
    file_case("scan_step_in_nanometres", "experiment.scan_step_A: 0.05 against 0.5 from {data} (scan_step_A)",
              config={"experiment": {"scan_step_A": 0.05}}),
    file_case("detector_distance_in_millimetres", "experiment.detector_distance_m: 1120 against 1.12 from {data} "
              "(detector_distance_m)", files=(h5_file(attrs=XRAY_ATTRS),),
              config={"experiment": {"radiation": "xray", "detector_distance_m": 1120}}),
    file_case("radiation_against_the_file", "experiment.radiation: electron, but {data} holds xray data (attribute "
              "radiation); set experiment.radiation: xray", files=(h5_file(attrs={"radiation": "xray"}),),
              subprocess=True),
    # --- the machine and the launcher
    bad("cuda_without_gpu", "runtime.device: cuda requested but torch sees no CUDA GPU",
        config={"runtime": {"device": "cuda"}}, subprocess=True, marks=NEEDS_NO_GPU),
    bad("nccl_on_cpu", "runtime.backend: nccl needs CUDA GPUs, got runtime.device: cpu; use gloo or auto",
        config={"runtime": {"device": "cpu", "backend": "nccl"}}, subprocess=True),
    bad("nccl_on_a_machine_without_gpu", "runtime.backend: nccl needs CUDA GPUs",
        config={"runtime": {"backend": "nccl"}}, marks=NEEDS_NO_GPU),
    bad("too_many_probe_modes", "model.probe_modes: the probe (window 8 x 8 px) cannot carry 100 independent modes",
        config={"data": {"simulate": {"detector_px": 8, "scan_shape": [3, 3]}}, "model": {"probe_modes": 100}},
        subprocess=True),
    bad("world_size_without_rank", "WORLD_SIZE", env={"WORLD_SIZE": "2"}, subprocess=True, in_process=False,
        timeout_s=60),
    bad("accelerate_started_one_of_two_processes", "`accelerate launch` started one process where its settings ask "
        "for several", "--multi_gpu --num_processes N` with ACCELERATE_USE_CPU=1",
        env={"ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": "29500"}, subprocess=True, in_process=False, timeout_s=60),
    bad("output_dir_is_a_file", "output.dir", files=(text_file("out", "not a folder"),)),
    # --- the output folder is in use by another run (--overwrite and --resume do not bypass that)
    bad("output_dir_in_use", "output.dir: {out} is in use by another ptyacc run (pid ", "ptyacc run other.yaml",
        "wait for it to end or choose another output.dir", files=(output_lock(),), subprocess=True),
    bad("output_dir_in_use_overwrite", "output.dir: {out} is in use by another ptyacc run", files=(output_lock(),),
        args=("--overwrite",)),
    bad("output_dir_in_use_resume", "output.dir: {out} is in use by another ptyacc run", files=(output_lock(),),
        args=("--resume",)),
    bad("output_dir_locked_on_another_host", "output.dir: {out} is in use by a ptyacc run on host node-elsewhere",
        "cannot be checked from", "if that run has ended, delete {out}/.ptyacc.lock",
        files=(output_lock(host="node-elsewhere"),)),
    bad("output_dir_lock_names_no_run", "output.dir: {out} holds a lock file that names no run ({out}/.ptyacc.lock)",
        files=(output_lock(text=""),)),
]


def _merge(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` merged in, section by section (DELETE removes a key)."""
    out = dict(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def prepare(case: Case, tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """Write the case's files; the command-line arguments after `run`, and the placeholders."""
    for write in case.files:
        write(tmp_path)
    config_path = tmp_path.resolve() / "config.yaml"
    if case.text is not None:
        config_path.write_text(case.text)
    elif case.config is not DELETE:
        config = tiny_config(tmp_path)
        if case.base == "file":
            config["data"] = {"path": "data.h5"}
            config["experiment"] = {}
        config_path.write_text(yaml.safe_dump(_merge(config, case.config)))
    names = {"config": str(config_path), "data": str(config_path.parent / "data.h5"), "dir": str(config_path.parent),
             "out": str(tmp_path / "out")}  # tiny_config's output.dir
    return [str(config_path), *case.args], names


def check(case: Case, code: int, stdout: str, stderr: str, names: dict, before: set[str] = frozenset()) -> None:
    """Exit code 2, one error line holding the expected texts, no traceback, nothing written but
    run.log (``before``: what the output folder held before the run)."""
    everything = f"exit code {code}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    assert "Traceback" not in stdout + stderr, everything
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ptyacc: error: "), everything
    for text in case.expected:
        for name, value in names.items():
            text = text.replace("{" + name + "}", value)
        assert text in lines[0], everything
    assert code == 2, everything
    assert stdout == "", everything
    out_dir = Path(names["out"])
    if out_dir.is_dir():
        assert {p.name for p in out_dir.iterdir()} <= {"run.log", *before}, everything


def contents(folder: str) -> set[str]:
    """The names in ``folder`` (none if it does not exist)."""
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


def params(cases: list[Case]) -> list:
    """The cases as pytest parameters, named and marked."""
    return [pytest.param(c, id=c.name, marks=c.marks) for c in cases]


@pytest.mark.parametrize("case", params([c for c in CASES if c.in_process]))
def test_bad_input_in_process(case: Case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, names = prepare(case, tmp_path)
    before = contents(names["out"])
    code = main(["run", *args])
    captured = capsys.readouterr()
    check(case, code, captured.out, captured.err, names, before)


@pytest.mark.slow
@pytest.mark.parametrize("case", params([c for c in CASES if c.subprocess]))
def test_bad_input_real_process(case: Case, tmp_path):
    args, names = prepare(case, tmp_path)
    before = contents(names["out"])
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", **case.env)
    done = subprocess.run([sys.executable, "-m", "ptyacc.run", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=case.timeout_s)
    check(case, done.returncode, done.stdout, done.stderr, names, before)
