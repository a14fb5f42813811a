"""Reconstructions of other packages read as ptyacc ``Results`` (object (modes, slices, H, W),
probe (modes, K, K), positions_A, dx_A, origin_A), for ``model.init_from``.

Layouts, as those packages write them (read from their code):

- PtyRAD 1.0 (HDF5, ``save_dict_to_hdf5``): ``optimizable_tensors/{obja, objp}`` (omode, Nz, Ny, Nx),
  ``optimizable_tensors/probe`` complex (pmode, K, K), ``optimizable_tensors/probe_pos_shifts`` and
  ``model_attributes/crop_pos`` (N, 2) px whose sum is the corner of each probe window in the object
  (the probe's centre at + K // 2), ``model_attributes/{dx, slice_thickness}`` in Å,
  ``optimizable_tensors/obj_tilts`` (1 or N, 2) mrad (ptyacc's tilt is minus PtyRAD's);
- PtychoShelves / fold_slice ``Niter*.mat``: ``object`` (Ny, Nx[, Nz]) complex, ``probe`` (Ny, Nx[,
  pmode[, variable modes]]), ``outputs.probe_positions`` (N, 2) (x, y) px about the object's centre
  (window corner at (y, x) + ceil(object / 2 - K / 2) - 1), ``p.dx_spec`` (fold_slice's electron
  runs give it in Å, X-ray runs in m: a value under 1e-4 is taken as m). The slice thickness is not
  read (where it is kept differs between versions): a multislice start keeps this config's
  model.slice_thickness_A. MAT v7.3 is HDF5 (axes reversed, complex as real/imag); older MAT files
  are read with SciPy when it is installed;
- py4DSTEM (emdfile HDF5, written by ``ptycho.save``): a group holding ``_object_emd/data`` ((Nz,)
  Ny, Nx; complex, or a real potential for object_type 'potential': transmission exp(i V)),
  ``_probe_emd/data`` ((modes,) K, K), and ``metadatabundle/preprocess_metadata/{positions_px,
  sampling}`` (probe centres in object px, Å per px), ``instantiation_metadata/slice_thicknesses``.

The object pixel [0, 0] is put at (0, 0) Å (``origin_A``); positions are probe centres in Å.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from ptyacc.errors import DataError
from ptyacc.results.h5file import Results, load_results


def read_start(path: Path) -> Results:
    """A previous reconstruction of ptyacc, PtyRAD, PtychoShelves/fold_slice or py4DSTEM; its
    ``attrs['written_by']`` names the package."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"model.init_from: {path} not found")
    if not h5py.is_hdf5(path):
        if path.suffix.lower() == ".mat":
            return _from_mat_v5(path)
        raise DataError(f"model.init_from: {path} is neither HDF5 (ptyacc, PtyRAD, py4DSTEM, MAT v7.3) nor a .mat file")
    with h5py.File(path, "r") as f:
        if "object" in f and "loss" in f:
            return load_results(path)
        if "optimizable_tensors" in f:
            return _from_ptyrad(f)
        if "object" in f and "probe" in f:
            return _from_ptychoshelves(_mat73(f, "object"), _mat73(f, "probe"), _mat73(f, "outputs/probe_positions"),
                                       _mat73(f, "p/dx_spec"))
        group = _py4dstem_group(f)
        if group is not None:
            return _from_py4dstem(group)
    raise DataError(f"model.init_from: {path} holds no reconstruction ptyacc knows (ptyacc results.h5, PtyRAD's "
                    "HDF5, PtychoShelves' Niter*.mat, py4DSTEM's ptychography)")


def _result(obj: np.ndarray, probe: np.ndarray, centres_px: np.ndarray, dx_A: float, source: str,
            slice_thickness_A: float | None) -> Results:
    attrs = {"written_by": source}
    if slice_thickness_A is not None:
        attrs["slice_thickness_A"] = float(slice_thickness_A)
    return Results(object=obj.astype(np.complex64), probe=probe.astype(np.complex64),
                   positions_A=np.asarray(centres_px, dtype=np.float64) * dx_A, loss=np.zeros(0), dx_A=float(dx_A),
                   origin_A=(0.0, 0.0), attrs=attrs)


def _from_ptyrad(f: h5py.File) -> Results:
    tensors, attributes = f["optimizable_tensors"], f["model_attributes"]
    obj = tensors["obja"][()] * np.exp(1j * tensors["objp"][()])  # (omode, Nz, Ny, Nx)
    probe = tensors["probe"][()]
    corners = attributes["crop_pos"][()].astype(np.float64) + tensors["probe_pos_shifts"][()]
    thickness = float(np.ravel(attributes["slice_thickness"][()])[0]) if "slice_thickness" in attributes else None
    result = _result(obj, probe, corners + probe.shape[-1] // 2, float(np.ravel(attributes["dx"][()])[0]),
                     "PtyRAD", thickness)
    if "obj_tilts" in tensors:  # (1, 2) or (N, 2) mrad; PtyRAD's tilt moves the wave the other way
        tilts = -np.asarray(tensors["obj_tilts"][()], dtype=np.float64).reshape(-1, 2)
        result.tilt_mrad = tilts[0] if len(tilts) == 1 else tilts
    return result


def _mat73(f: h5py.File, name: str) -> np.ndarray | None:
    """A MAT v7.3 variable with MATLAB's axis order (h5py sees them reversed), complex made complex."""
    if name not in f:
        return None
    value = f[name][()]
    if value.dtype.names and {"real", "imag"} <= set(value.dtype.names):
        value = value["real"] + 1j * value["imag"]
    return np.transpose(value)


def _from_mat_v5(path: Path) -> Results:
    try:
        from scipy.io import loadmat
    except ImportError:
        raise DataError(f"model.init_from: {path} is a MAT file older than v7.3, which needs SciPy "
                        "(pip install scipy), or save it with -v7.3") from None
    mat = loadmat(path, squeeze_me=True, struct_as_record=False)
    p, outputs = mat.get("p"), mat.get("outputs")
    if "object" not in mat or "probe" not in mat or outputs is None or p is None:
        raise DataError(f"model.init_from: {path} lacks object, probe, outputs or p (not a PtychoShelves Niter*.mat)")
    return _from_ptychoshelves(mat["object"], mat["probe"], outputs.probe_positions, p.dx_spec)


def _from_ptychoshelves(obj: np.ndarray, probe: np.ndarray, positions: np.ndarray | None,
                        dx_spec: np.ndarray | None) -> Results:
    if positions is None or dx_spec is None:
        raise DataError("model.init_from: the PtychoShelves file lacks outputs.probe_positions or p.dx_spec")
    obj = obj[..., None] if obj.ndim == 2 else obj  # (Ny, Nx, Nz)
    probe = probe[..., None] if probe.ndim == 2 else probe
    probe = probe[..., 0] if probe.ndim == 4 else probe  # the first of the variable-probe modes
    window = probe.shape[0]
    positions = np.asarray(positions, dtype=np.float64).reshape(-1, 2)
    corners = positions[:, ::-1] + np.ceil(np.asarray(obj.shape[:2]) / 2 - window / 2) - 1
    dx = float(np.ravel(dx_spec)[0])
    return _result(np.moveaxis(obj, 2, 0)[None], np.moveaxis(probe, 2, 0), corners + window // 2,
                   dx * 1e10 if dx < 1e-4 else dx, "PtychoShelves", None)


def _py4dstem_group(f: h5py.File) -> h5py.Group | None:
    """The first group (depth first) holding both ``_object_emd`` and ``_probe_emd``."""
    found: list[h5py.Group] = []

    def visit(name: str, node: object) -> None:
        if not found and isinstance(node, h5py.Group) and "_object_emd" in node and "_probe_emd" in node:
            found.append(node)
    f.visititems(visit)
    return found[0] if found else None


def _from_py4dstem(group: h5py.Group) -> Results:
    obj = group["_object_emd/data"][()]
    metadata = group["metadatabundle"]
    kind = metadata["instantiation_metadata/object_type"][()] if "instantiation_metadata/object_type" in metadata else b""
    if (kind.decode() if isinstance(kind, bytes) else str(kind)) == "potential" or not np.iscomplexobj(obj):
        obj = np.exp(1j * obj)
    obj = obj[None] if obj.ndim == 2 else obj  # (Nz, Ny, Nx)
    probe = group["_probe_emd/data"][()]
    probe = probe[None] if probe.ndim == 2 else probe
    pre = metadata["preprocess_metadata"]
    sampling = np.ravel(pre["sampling"][()]).astype(np.float64)
    if abs(sampling[0] / sampling[-1] - 1) > 1e-6:
        raise DataError(f"model.init_from: py4DSTEM's object pixels are not square ({sampling} Å)")
    thicknesses = metadata.get("instantiation_metadata/slice_thicknesses")
    thickness = float(np.ravel(thicknesses[()])[0]) if thicknesses is not None and thicknesses.shape else None
    return _result(obj[None], probe, pre["positions_px"][()], float(sampling[0]), "py4DSTEM", thickness)
