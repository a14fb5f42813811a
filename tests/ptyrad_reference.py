"""Record what PtyRAD 1.0's own loader makes of two params files, for tests/test_from_ptyrad.py.

Not a test: run it with a Python that has PtyRAD 1.0 (PyPI ``ptyrad``; its torchvision import is
stood in for, the loader does not use it) and the benchmark folder beside the repository:

    python3 -m venv /tmp/ptyrad_venv && /tmp/ptyrad_venv/bin/pip install torch pydantic scipy h5py pytest \\
        pyyaml matplotlib tifffile scikit-learn accelerate && /tmp/ptyrad_venv/bin/pip install --no-deps ptyrad==1.0.0
    /tmp/ptyrad_venv/bin/python tests/ptyrad_reference.py

It writes into tests/data/:
- ``ptyrad_bench_params.yaml``: the params that ``../shared/bench/run_ptyrad.py`` (its
  ``build_yaml``) writes for a small dataset, the data path made relative (``ptyrad_sim.h5``);
- ``ptyrad_own_params.yaml``: a params file in PtyRAD's schema that uses what the first leaves
  out: meas_flipT with a transpose, a detector crop, a scan affine, astigmatism and coma in Haider
  notation, tilts, probe modes, learning rates, regularisers;
- ``ptyrad_geometry.npz``: for each (prefix ``bench_``, ``own_``) PtyRAD's positions (px, the
  probe window's corner in its object canvas, sub-pixel shifts included), its initial probe
  (modes, K, K), its object's shape, dx, and the mean pattern after its flips and crop; and
  (prefix ``model_``) what the saved model below holds;
- ``ptyrad_model.hdf5``: PtyRAD's saved model (its own writer) of the second file's initial state,
  its groups optimizable_tensors, model_attributes and ptyrad_version (the rest left out for size).
The dataset itself is remade by ``tests/test_from_ptyrad.py::write_dataset`` (same recipe).
"""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

import h5py
import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent.parent / "shared" / "bench"
sys.path[:0] = [str(BENCH), str(HERE)]


def stand_in_for_torchvision() -> None:
    """PtyRAD imports torchvision's gaussian_blur at import time; its loader never calls it."""
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.gaussian_blur = None
    transforms = types.ModuleType("torchvision.transforms")
    transforms.functional = functional
    package = types.ModuleType("torchvision")
    package.transforms = transforms
    sys.modules.update({"torchvision": package, "torchvision.transforms": transforms,
                        "torchvision.transforms.functional": functional})


def bench_params(dataset: Path, workdir: Path) -> dict:
    """The params run_ptyrad.py's build_yaml writes for ``dataset`` (its defaults, 2 probe modes)."""
    sys.argv = ["run_ptyrad.py", str(dataset), "--out", str(workdir / "r.npy"), "--pmodes", "2", "--iters", "7"]
    import run_ptyrad  # noqa: E402  (parses sys.argv at import)
    params = run_ptyrad.build_yaml(run_ptyrad.load_dataset(str(dataset)), run_ptyrad.ARGS, str(workdir))
    params["init_params"]["meas_params"]["path"] = dataset.name
    params["recon_params"]["output_dir"] = "ptyrad_output"
    return params


def record(params_path: Path, prefix: str, out: dict) -> tuple:
    """PtyRAD's loader on ``params_path`` (run from its folder, as PtyRAD reads relative paths)."""
    from ptyrad.init import Initializer
    from ptyrad.params import load_params

    params = load_params(str(params_path), validate=True)
    init = Initializer(params["init_params"], seed=0).init_all()
    v = init.init_variables
    out[f"{prefix}positions_px"] = v["crop_pos"].astype(np.float64) + v["probe_pos_shifts"]
    out[f"{prefix}probe"] = np.asarray(v["probe"]).astype(np.complex64)
    out[f"{prefix}object_shape"] = np.asarray(v["obj"].shape)
    out[f"{prefix}dx_A"] = np.float64(v["dx"])
    out[f"{prefix}mean_pattern"] = np.asarray(v["measurements"]).mean(0).astype(np.float32)
    return params, init


def save_model(params: dict, init, path: Path, out: dict) -> None:
    """PtyRAD's saved model (its own writer, as after an iteration) of the initial state, and what
    it holds: object obja exp(i objp), probe, positions (px, window corner)."""
    import torch
    from ptyrad.core import PtychoModel
    from ptyrad.io.save import make_save_dict, save_dict_to_hdf5
    from ptyrad.solver.reconstruction import create_optimizer

    params["recon_params"]["save_result"] = ["model"]
    model = PtychoModel(init.init_variables, params["model_params"], device=torch.device("cpu"))
    model.iter_times.append(0.0)
    optimizer = create_optimizer(model.optimizer_params, model.optimizable_params)
    save = make_save_dict(str(path.parent), model, params, optimizer, None, 1, np.arange(4), {"loss": [1.0]})
    whole = path.with_suffix(".whole.hdf5")
    save_dict_to_hdf5(save, str(whole))
    with h5py.File(whole, "r") as source, h5py.File(path, "w") as kept:  # the groups a start is read from
        for name in ("optimizable_tensors", "model_attributes", "ptyrad_version"):
            source.copy(source[name], kept, name)
    whole.unlink()
    obj = model.opt_obja.detach().numpy() * np.exp(1j * model.opt_objp.detach().numpy())
    out["model_object"] = obj.astype(np.complex64)
    out["model_probe"] = model.get_complex_probe_view().detach().numpy().astype(np.complex64)
    out["model_positions_px"] = model.crop_pos.numpy() + model.opt_probe_pos_shifts.detach().numpy()
    out["model_dx_A"] = np.float64(model.dx)


def main() -> None:
    import os

    stand_in_for_torchvision()
    import ptyrad_py311_compat  # noqa: F401  (PtyRAD 1.0 has a Python 3.12 f-string)
    from test_from_ptyrad import OWN_PARAMS, write_dataset

    data = HERE / "data"
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        dataset = write_dataset(folder / "ptyrad_sim.h5")
        bench = bench_params(dataset, folder)
        own = yaml.safe_load(OWN_PARAMS)
        for name, params in (("bench", bench), ("own", own)):
            text = yaml.safe_dump(params, sort_keys=False, default_flow_style=None, width=120)
            (data / f"ptyrad_{name}_params.yaml").write_text(
                f"# PtyRAD 1.0 params for tests/test_from_ptyrad.py, written by tests/ptyrad_reference.py\n{text}")
            (folder / f"{name}.yaml").write_text(text)
            os.chdir(folder)
            loaded, init = record(folder / f"{name}.yaml", f"{name}_", out)
        save_model(loaded, init, data / "ptyrad_model.hdf5", out)
    np.savez_compressed(data / "ptyrad_geometry.npz", **out)
    print("wrote", data / "ptyrad_geometry.npz", {k: np.shape(v) for k, v in out.items()})


if __name__ == "__main__":
    main()
