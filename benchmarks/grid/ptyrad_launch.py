"""Run ../shared/bench/run_ptyrad.py in a PtyRAD venv whose torchvision cannot load.

PtyRAD 1.0 imports ``torchvision.transforms.functional.gaussian_blur`` (its blur regularisers and
detector blur). With the CPU torch 2.13.0 the only torchvision wheel pip resolves is the CUDA build
of 0.28.0, which fails to import ("operator torchvision::nms does not exist"). When the real
torchvision does not import, this launcher puts the bench's stand-in (``ptychi_compat``: a separable
Gaussian with torchvision's taps and reflect padding) in its place, adds ``gaussian_blur`` on top of
it, and runs the harness unchanged with the same arguments.

    /tmp/ptyrad-venv/bin/python benchmarks/grid/ptyrad_launch.py BENCH_DIR DATASET [run_ptyrad.py arguments]
"""

import runpy
import sys
import types
from pathlib import Path


def install_gaussian_blur(bench: Path) -> None:
    """``torchvision.transforms.functional.gaussian_blur`` from the bench's GaussianBlur stand-in."""
    sys.path.insert(0, str(bench))
    import ptychi_compat

    if ptychi_compat.TORCHVISION_STATUS == "real":
        return
    transforms = sys.modules["torchvision.transforms"]
    functional = types.ModuleType("torchvision.transforms.functional")

    def gaussian_blur(img, kernel_size, sigma):
        return transforms.GaussianBlur(kernel_size, sigma)(img)

    functional.gaussian_blur = gaussian_blur
    transforms.functional = functional
    sys.modules["torchvision.transforms.functional"] = functional


def main() -> None:
    bench = Path(sys.argv[1])
    install_gaussian_blur(bench)
    sys.argv = [str(bench / "run_ptyrad.py"), *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
