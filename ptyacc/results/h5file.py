"""results.h5 (the figures are ``ptyacc.results.figures``). Called on the main process only.

results.h5 layout (a public contract; add, never rename):
- ``object``       complex64 (object_modes, slices, Ny, Nx) transmission
- ``probe``        complex64 (probe_modes, K, K) centred real-space probe modes
- ``positions_A``  float64 (N, 2) refined probe centres (y, x), same order and frame as the input
- ``loss``         float64 (iterations done,) loss per iteration
- ``iteration_time_s`` float64 (iterations done,) wall time of each iteration (main process)
- ``initial_positions_A`` float64 (N, 2) the positions the run started from (``ptyacc plot``
  draws the corrections from them)
- ``mean_pattern_measured``, ``mean_pattern_predicted`` float64 (K, K), zero frequency at the
  centre: the mean of up to 128 measured patterns and of the model's prediction for them
- ``validation_error`` float64 (iterations done,), runs with ``optim.validation_fraction`` > 0:
  the loss per pattern of the positions left out of the fit, after each iteration (NaN for
  iterations before a resume)
- attributes: ``dx_A`` object pixel size, ``origin_A`` (y, x) position of object pixel [0, 0] in
  the positions' frame, ``config`` (YAML text), ``versions`` (YAML text), ``world_size``,
  ``iterations_done``, ``wavelength_A``, ``loss_name``, ``auto_values`` (YAML text: {key: value} of
  the config keys given as ``auto`` that ptyacc resolved for this run, every one of them:
  ``reconstruction/autos.py``; e.g. optim.loss, optim.regularize.tv_phase, runtime.threads, data.hold,
  experiment.defocus_A, data.bad_pixels: the number of pixels left out), ``warnings`` (YAML text: the list of
  the run's lines that start ``warning:``, each naming the config key to change: ``data/trouble.py``).
- multi-process runs: ``comm_bytes`` int64 and ``comm_time_s`` float64 (iterations of this launch,):
  gradient bytes all-reduced per iteration by each process, and the seconds those all-reduces took
  on the main process (waiting for the slowest process included); ``comm_bytes_object``,
  ``comm_bytes_probe``, ``comm_bytes_other`` int64, the same bytes by kind of parameter (they sum
  to ``comm_bytes``), and ``comm_calls`` int64, the collectives launched
- group ``calibration``: every calibration value the run used, one attribute each (energy_eV,
  wavelength_A, semiangle_mrad, defocus_A, scan_step_A, scan_rotation_deg, stored_dk_invA or
  stored_dx_A (as calibrated, before ``data.transform``), dx_A and dk_invA (as used), X-ray
  detector_distance_m and detector_pixel_m), and beside each ``<name>_source``: where it came
  from (config, file, default, fitted, derived)
- multislice runs with a tilt (``experiment.tilt_mrad``, ``optim.start.tilt``): ``tilt_mrad`` float64
  (2,) or (N, 2) per position, [y, x] in mrad (the convention in ptyacc/physics/tilt.py); with a
  tilt or a refined slice thickness, the attribute ``slice_thickness_A`` (the refined value)
- runs with a detector blur (``model.detector_blur_px``, ``optim.start.detector_blur``): the attribute
  ``detector_blur_px``, its sigma at the end (px of the prepared patterns)
- group ``detector``: what the run measured of the detector from the data: ``bad_pixels`` int64
  (M, 2) [row, col] of the pixels left out of the loss, as stored (``data.bad_pixels: auto``);
  ``descan_px`` float64 (N, 2) the shift (dy, dx) in prepared pixels by which each pattern was moved
  back and ``descan_plane`` (2, 3) the plane fitted to the disk centres, per axis [at the mean position,
  per Å of y, per Å of x], ``descan_per_position`` bool () whether the shifts were kept per position
  (the plane fits poorly) rather than the plane's, ``descan_rms_px`` float64 (2,) the plane's rms
  residual and the centres' own noise (``data.transform.descan: auto``), ``descan_in_model`` bool () True
  where the patterns were left as read and the model moved its predictions instead (``descan_model:
  ramp``; the shifts then those the model applies); ``scan_rotation_deg`` float64 ()
  and ``orientation_flags`` bool (3,) (transpose, flip_y, flip_x) measured from the centre of mass
  (``experiment.scan_rotation_deg: auto``, ``data.transform.orientation: auto`` in a file without basis vectors);
  ``orientation_by_trials`` bool (), present (True) where trial reconstructions chose the X-ray far field's flags
  (the centre of mass could not tell the handedness);
  ``flip_about_zero`` bool (2,) (y, x), present where a flip turned the patterns about the zero frequency
  instead of reversing them (``prepare.Preparation.flip_about_zero``)
- group ``probe_variation`` (``model.probe_variation``): ``modes`` complex64 (V + 1, K, K), the first
  probe mode P_0 (the mean probe) and the V eigen-probes E_k, and ``weights`` float64 (N, V + 1): the
  first probe mode at position j is sum_k weights[j, k] modes[k] (``ptyacc/quantities/probe_variation.py``)
- group ``scans`` (the top-level ``scans:``, several scans of one object): ``probes`` complex64 (S, P, K,
  K), each scan's probe modes (``/probe`` is scan 0's), and ``scan_of_position`` int64 (N,); the
  positions of all scans follow each other in ``positions_A``
- a group per refined quantity of its own module (``ptyacc/quantities/``), its ``saved`` arrays
- group ``fitted``: the refined quantities that have no place above: ``background`` float64
  (K, K) in counts, unshifted layout (``model.background``), ``intensity_weights`` float64 (N,)
  (``model.intensity_weights``), ``scan_affine`` float64 (2, 2), the scan's distortion M of
  ``optim.start.scan_affine`` (the positions already include it)
- X-ray runs (``experiment.radiation: xray``) also in metres, X-ray's unit: ``positions_m``
  float64 (N, 2) and attributes ``dx_m``, ``origin_m``, each the Å value times 1e-10.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from ptyacc.errors import DataError
from ptyacc.results.outdir import atomic_write
from ptyacc.version import __version__

METRE_PER_A = 1e-10
_NOT_QUANTITIES = ("calibration", "detector")  # every other group of results.h5 is one of ``Results.quantities``
COUNTS = ("comm_bytes", "comm_bytes_object", "comm_bytes_probe", "comm_bytes_other", "comm_calls")  # int64


@dataclass
class Results:
    """A reconstruction, as saved in results.h5 (see the module docstring for shapes)."""

    object: np.ndarray
    probe: np.ndarray
    positions_A: np.ndarray
    loss: np.ndarray
    dx_A: float
    origin_A: tuple[float, float]
    attrs: dict[str, Any] = field(default_factory=dict)
    iteration_time_s: np.ndarray | None = None
    mean_pattern_measured: np.ndarray | None = None  # (K, K), zero frequency at the centre
    mean_pattern_predicted: np.ndarray | None = None
    calibration: dict[str, tuple[float, str]] | None = None  # {name: (value, source)}
    initial_positions_A: np.ndarray | None = None  # (N, 2) the positions the run started from
    comm_bytes: np.ndarray | None = None  # multi-process runs, per iteration of this launch
    comm_time_s: np.ndarray | None = None
    comm_bytes_object: np.ndarray | None = None
    comm_bytes_probe: np.ndarray | None = None
    comm_bytes_other: np.ndarray | None = None
    comm_calls: np.ndarray | None = None
    validation_error: np.ndarray | None = None  # runs with validation positions, per iteration
    tilt_mrad: np.ndarray | None = None  # (2,) or (N, 2) [y, x] mrad, multislice with a tilt
    detector: dict[str, np.ndarray] | None = None  # measured from the data (group ``detector``)
    quantities: dict[str, dict[str, np.ndarray]] | None = None  # groups ``probe_variation``, ``scans``, ``fitted``...

    @property
    def phase(self) -> np.ndarray:
        """(Ny, Nx) object phase summed over slices (object mode 0)."""
        return np.angle(self.object[0]).sum(axis=0)

    @property
    def config(self) -> dict:
        return yaml.safe_load(self.attrs.get("config", "{}"))

    @property
    def is_xray(self) -> bool:
        return _is_xray(self)


def versions() -> dict[str, str]:
    import accelerate
    import torch

    return {"ptyacc": __version__, "python": sys.version.split()[0], "torch": str(torch.__version__),
            "accelerate": accelerate.__version__, "numpy": np.__version__, "h5py": h5py.__version__}


def save_results(path: Path, results: Results) -> None:
    """Write results.h5 atomically: a temporary file in the same folder, then a rename, so an
    interrupted save never leaves a corrupt file under the final name. A full disk raises
    OutputError with the space needed; the previous results.h5, if any, is untouched."""
    arrays = (results.object, results.probe, results.positions_A, results.loss, results.iteration_time_s,
              results.mean_pattern_measured, results.mean_pattern_predicted, results.comm_bytes, results.comm_time_s)
    needed = sum(np.asarray(a).nbytes for a in arrays if a is not None)
    xray = _is_xray(results)
    with atomic_write(path, needed, "the run stops: free space and run again (--resume continues from the newest "
                      "checkpoint, if output.checkpoint_every is set)") as tmp, h5py.File(tmp, "w") as f:
        f.create_dataset("object", data=results.object.astype(np.complex64))
        f.create_dataset("probe", data=results.probe.astype(np.complex64))
        f.create_dataset("positions_A", data=results.positions_A.astype(np.float64))
        f.create_dataset("loss", data=np.asarray(results.loss, dtype=np.float64))
        for name in ("iteration_time_s", "mean_pattern_measured", "mean_pattern_predicted", "validation_error",
                     "initial_positions_A", "tilt_mrad"):
            if getattr(results, name) is not None:
                f.create_dataset(name, data=np.asarray(getattr(results, name), dtype=np.float64))
        for name in COUNTS:
            if getattr(results, name) is not None:
                f.create_dataset(name, data=np.asarray(getattr(results, name), dtype=np.int64))
        if results.comm_time_s is not None:
            f.create_dataset("comm_time_s", data=np.asarray(results.comm_time_s, dtype=np.float64))
        f.attrs["dx_A"] = results.dx_A
        f.attrs["origin_A"] = np.asarray(results.origin_A, dtype=np.float64)
        if xray:
            f.create_dataset("positions_m", data=results.positions_A.astype(np.float64) * METRE_PER_A)
            f.attrs["dx_m"] = results.dx_A * METRE_PER_A
            f.attrs["origin_m"] = np.asarray(results.origin_A, dtype=np.float64) * METRE_PER_A
        for key, value in results.attrs.items():
            f.attrs[key] = value
        for group, arrays in (results.quantities or {}).items():
            for name, array in arrays.items():
                f.create_dataset(f"{group}/{name}", data=array)
        write_calibration_groups(f, results.detector, results.calibration)


def write_calibration_groups(f: h5py.File, detector: dict[str, np.ndarray] | None,
                             calibration: dict[str, tuple[float, str]] | None) -> None:
    """The groups ``detector`` (each array measured from the data) and ``calibration`` (each value, and
    beside it as ``<name>_source`` where it came from) of results.h5 (module docstring) in the open file
    ``f``; none where empty. ``ptyacc info --save`` writes the same."""
    for name, array in (detector or {}).items():
        f.create_dataset(f"detector/{name}", data=array)
    if calibration:
        group = f.create_group("calibration")
        for name, (value, source) in calibration.items():
            group.attrs[name], group.attrs[f"{name}_source"] = value, source


def load_results(path: str | Path) -> Results:
    """Read a results.h5 written by ptyacc."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: results file not found")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in ("object", "probe", "positions_A", "loss") if k not in f]
            if missing:
                raise DataError(f"{path}: not a ptyacc results file (missing {', '.join(missing)})")
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            calibration = _read_calibration(f["calibration"]) if "calibration" in f else None
            return Results(object=f["object"][()], probe=f["probe"][()], positions_A=f["positions_A"][()],
                           loss=f["loss"][()], dx_A=float(attrs.pop("dx_A")),
                           **{name: f[name][()] for name in ("iteration_time_s", "mean_pattern_measured",
                                                             "mean_pattern_predicted", "comm_time_s",
                                                             "validation_error", "initial_positions_A", "tilt_mrad",
                                                             *COUNTS)
                              if name in f},
                           origin_A=tuple(float(v) for v in attrs.pop("origin_A")), attrs=attrs,
                           calibration=calibration,
                           detector={name: d[()] for name, d in f["detector"].items()} if "detector" in f else None,
                           quantities={name: {key: d[()] for key, d in group.items()} for name, group in f.items()
                                       if isinstance(group, h5py.Group) and name not in _NOT_QUANTITIES} or None)
    except OSError as exc:
        raise DataError(f"{path}: cannot be read as HDF5 ({exc})") from None


def _read_calibration(group: h5py.Group) -> dict[str, tuple[float, str]]:
    """The ``calibration`` group as {name: (value, source)}."""
    attrs = group.attrs
    return {name: (float(attrs[name]), str(attrs[f"{name}_source"])) for name in attrs
            if not name.endswith("_source")}


def _is_xray(results: Results) -> bool:
    return ((results.config or {}).get("experiment") or {}).get("radiation") == "xray"
