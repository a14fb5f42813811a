"""ptyacc as a user installs it: the demo's config and data ship inside the package (ptyacc/demo/),
`ptyacc demo` runs them from any folder as `ptyacc run configs/demo.yaml` does in the clone, and the
sdist and the wheel build, pass `twine check`, hold the package with its demo and nothing of the
clone's tests, virtual environment or results; the wheel installed into a fresh virtual environment
outside the clone runs the demo to the clone's object."""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from ptyacc.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "ptyacc" / "demo"
DEMO_FILES = {"ptyacc/demo/demo.yaml", "ptyacc/demo/demo_mos2.h5"}
# what the clone holds and no artefact should: the suite, a virtual environment, run outputs, the clone's configs
NOT_SHIPPED = ("tests/", ".venv/", "results/", "runs/", "configs/", "examples/", "docs/", "build/")


def outputs(results: Path) -> dict[str, np.ndarray]:
    with h5py.File(results) as f:
        return {"object": f["object"][()], "probe": f["probe"][()], "loss": f["loss"][()]}


def assert_same_run(ours: Path, clones: Path, device: str) -> None:
    """Two runs of the demo: bit for bit on the CPU; to float rounding on a GPU."""
    a, b = outputs(ours), outputs(clones)
    assert a["loss"].shape == b["loss"].shape
    for key in a:
        if device == "cpu":
            assert np.array_equal(a[key], b[key]), f"/{key} differs from the clone's run"
        else:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6 * np.abs(b[key]).max(), err_msg=key)


def test_the_shipped_demo_config_is_the_clones():
    """ptyacc/demo/demo.yaml (what `ptyacc demo` runs) and configs/demo.yaml (what the clone's docs
    run) set the same keys to the same values, and their data paths name the same file."""
    clone = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    shipped = yaml.safe_load((SHIPPED / "demo.yaml").read_text())
    clone_data = (ROOT / "configs" / clone["data"].pop("path")).resolve()
    shipped_data = (SHIPPED / shipped["data"].pop("path")).resolve()
    assert clone_data == shipped_data == SHIPPED / "demo_mos2.h5"
    assert clone == shipped


@pytest.mark.slow
def test_ptyacc_demo_is_ptyacc_run_on_the_demo_config(tmp_path, capsys, monkeypatch):
    from conftest import test_device

    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--iterations", "1"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == str(tmp_path / "results" / "demo" / "results.h5")  # the config's output.dir, from the cwd
    clone = tmp_path / "clone"
    assert main(["run", str(ROOT / "configs" / "demo.yaml"), "--quiet", "--set", "optim.iterations=1",
                 "--set", f"output.dir={clone}"]) == 0
    assert_same_run(Path(printed), clone / "results.h5", test_device())

    assert main(["demo", "-k", "1"]) == 2  # the folder holds the first run's results
    assert "--overwrite" in capsys.readouterr().err
    assert main(["demo", "-k", "1", "--output-dir", "other: #1"]) == 0  # a folder name that YAML would misread
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(tmp_path / "other: #1" / "results.h5")


def fresh_copy(folder: Path) -> Path:
    """The clone's files that git tracks or would track (not those it ignores), copied to
    ``folder``: what a fresh clone holds. A build in the clone itself reads the file list that an
    earlier build left in the ignored ptyacc.egg-info/, and would ship the demo even if
    pyproject.toml no longer asked for it."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is not there to copy
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def built(dist: Path, source: Path) -> tuple[Path, Path]:
    """The sdist and the wheel that `python -m build` makes of ``source``, in ``dist``. Without
    isolation: the build backend (setuptools, in the `test` extra) is this environment's, so the
    build needs no package index."""
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    return sdist, wheel


@pytest.mark.slow
def test_the_wheel_installed_outside_the_clone_runs_the_demo(tmp_path):
    from conftest import test_device

    assert not tmp_path.is_relative_to(ROOT)
    sdist, wheel = built(tmp_path / "dist", fresh_copy(tmp_path / "source"))
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr

    in_wheel = zipfile.ZipFile(wheel).namelist()
    assert DEMO_FILES | {"ptyacc/__init__.py", "ptyacc/commands/cli.py"} <= set(in_wheel)
    assert all(name.startswith(("ptyacc/", "ptyacc-")) for name in in_wheel), "the wheel holds more than the package"
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert DEMO_FILES | {"pyproject.toml", "README.md", "ptyacc/commands/cli.py"} <= in_sdist
    assert not [n for n in in_sdist | set(in_wheel) if n.startswith(NOT_SHIPPED)]
    # the demo file is 0.6 MB of it; a data set or a build left in the package would show here
    assert wheel.stat().st_size < 2_000_000 and sdist.stat().st_size < 2_000_000

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    binary = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # torch pinned as the clone's suite runs it; --no-compile: byte-compiling torch is most of the install's time
    install = subprocess.run([str(binary / "python"), "-m", "pip", "install", "-q", "--no-compile",
                              "torch==2.13.0", str(wheel)], capture_output=True, text=True, env=env)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(binary / "python"), "-c", "import ptyacc; print(ptyacc.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where  # the installed package, not the clone's
    demo = subprocess.run([str(binary / "ptyacc"), "demo", "--iterations", "2"], cwd=elsewhere, env=env,
                          capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr[-3000:]
    results = elsewhere / "results" / "demo" / "results.h5"
    assert demo.stdout.strip().splitlines()[-1] == str(results)

    clone = tmp_path / "clone"
    subprocess.run([sys.executable, "-m", "ptyacc.run", "configs/demo.yaml", "--quiet", "--set", "optim.iterations=2",
                    "--set", f"output.dir={clone}"], cwd=ROOT, env=env, check=True, capture_output=True)
    assert_same_run(results, clone / "results.h5", test_device())
