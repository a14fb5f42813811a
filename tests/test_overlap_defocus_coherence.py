"""The defocus of the Fourier regions' coherence (ptyacc/data/overlap_orientation.py, ``overlap_defocus``)
on partly coherent patterns of the independent simulator (benchmarks/grid/simulate.py: the source size and
the focal spread of the calibration matrix, 0.35 A and 30 A): a 16 x 16 raster whose disk's edge pixels see
the sample moved 9.5 steps, where the plain transforms of the pixels' images read the defocus 8-12 % low
(the wrap-around jump's leak, ``overlap_focus.periodic_spectra``); and a coherent 24 x 24 raster that the
plain transforms read within 3 %, which must stay so."""

import numpy as np
import pytest

from ptyacc.data.overlap_orientation import overlap_defocus

K, STEP_A = 48, 0.45


def read_defocus(grid_simulator, defocus_A: float, side: int, partial: bool, dose: float, seed: int) -> float:
    setting = grid_simulator.Setting(detector_px=K, scan_shape=(side, side), scan_step_A=STEP_A, dose=dose,
                                     defocus_A=defocus_A, edge_mrad=60.0, seed=seed,
                                     source_size_A=0.35 if partial else 0.0, focal_spread_A=30.0 if partial else 0.0)
    result = grid_simulator.simulate(setting)
    stored = result["patterns"].reshape(-1, K, K).astype(np.float64)
    nominal = 1.3 * defocus_A  # the file's nominal defocus 30 % off: only the search's range and sign
    found = overlap_defocus(stored, (side, side), np.diag([STEP_A, STEP_A]), result["wavelength_A"],
                            result["dk_invA"], nominal)
    assert found is not None
    return found


@pytest.mark.parametrize("defocus_A", [170.0, -170.0])
def test_partly_coherent_small_raster_reads_the_defocus_within_5_percent(grid_simulator, defocus_A):
    found = read_defocus(grid_simulator, defocus_A, 16, partial=True, dose=1e5, seed=1)
    assert found == pytest.approx(defocus_A, rel=0.05)


def test_coherent_raster_still_reads_the_defocus_within_3_percent(grid_simulator):
    found = read_defocus(grid_simulator, 150.0, 24, partial=False, dose=1e5, seed=2)
    assert found == pytest.approx(150.0, rel=0.03)
