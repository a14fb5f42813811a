"""Detector formats through RosettaSciIO (ptyacc[formats]): files made here (by rsciio's own
writer, or byte by byte for Merlin .mib and Gatan .dm3/.dm4, and with h5py in Velox's layout for
Velox .emd, which rsciio only reads) give the same patterns as the equivalent HDF5 file, only the
rows asked for, and their calibration."""

from pathlib import Path

import h5py
import numpy as np
import pytest
from gatan_dm import write_dm
from velox_emd import write_velox

from ptyacc.config import load_config
from ptyacc.data import load_data
from ptyacc.data.readers import open_patterns, read_patterns
from ptyacc.errors import DataError

pytest.importorskip("rsciio")

SCAN, DETECTOR = (3, 4), (8, 8)


def patterns_4d(dtype=np.uint16) -> np.ndarray:
    return np.random.default_rng(0).poisson(50, (*SCAN, *DETECTOR)).astype(dtype)


def write_hdf5(path: Path, data: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        f["patterns"] = data
    return path


def write_hspy(path: Path, data: np.ndarray) -> Path:
    """A HyperSpy file by rsciio's writer: 0.5 nm scan steps, detector in 0.2 1/nm, 80 keV, 25 mrad."""
    from rsciio.hspy import file_writer

    def axis(name, size, scale, units, navigate):
        return {"name": name, "size": size, "scale": scale, "units": units, "navigate": navigate, "offset": 0.0}

    axes = [axis("y", SCAN[0], 0.5, "nm", True), axis("x", SCAN[1], 0.5, "nm", True),
            axis("ky", DETECTOR[0], 0.2, "1/nm", False), axis("kx", DETECTOR[1], 0.2, "1/nm", False)]
    metadata = {"General": {"title": "test"}, "Signal": {"signal_type": ""},
                "Acquisition_instrument": {"TEM": {"beam_energy": 80.0, "convergence_angle": 25.0,
                                                   "camera_length": 100.0}}}
    file_writer(str(path), {"data": data, "axes": axes, "metadata": metadata, "original_metadata": {},
                            "tmp_parameters": {}, "attributes": {"_lazy": False}, "learning_results": {},
                            "models": {}, "package_info": {"name": "ptyacc-tests", "version": "0"}})
    return path


def write_mib(path: Path, frames: np.ndarray) -> Path:
    """Quantum Detectors Merlin frames (n, ky, kx) as 12-bit (U16, big-endian) single-chip
    frames, each after its 384-byte header, as the detector writes them."""
    n, ky, kx = frames.shape
    with open(path, "wb") as f:
        for i, frame in enumerate(frames):
            fields = ["MQ1", f"{i + 1:06d}", "00384", "01", f"{kx:04d}", f"{ky:04d}", "U16", "   1x1", "01",
                      "2024-01-01 00:00:00.000000", "0.001000", "0", "0", "0", "MQ1A",
                      f"2024-01-01T00:00:{i:02d}.000000000Z", "1000000.000000ns", "12", ""]  # the padding is a last field
            f.write(",".join(fields).encode().ljust(384, b"\0"))
            f.write(frame.astype(">u2").tobytes())
    return path


def test_hspy_reads_the_hdf5_patterns_only_the_rows_asked_for_and_its_calibration(tmp_path):
    data = patterns_4d()
    hspy, h5 = write_hspy(tmp_path / "scan.hspy", data), write_hdf5(tmp_path / "scan.h5", data)
    rows = np.array([1, 5, 11])
    with open_patterns(hspy) as source:
        assert source.info.format == "rsciio" and source.info.shape == (*SCAN, *DETECTOR)
        np.testing.assert_array_equal(source.read(rows).patterns, read_patterns(h5, rows=rows).patterns)
        np.testing.assert_array_equal(source.read().patterns, read_patterns(h5).patterns)
        attrs = source.info.attrs
    assert attrs["energy_eV"] == 80e3 and attrs["semiangle_mrad"] == 25.0 and attrs["camera_length_m"] == 0.1
    assert attrs["dk_invA"] == pytest.approx(0.02) and attrs["scan_step_A"] == pytest.approx(5.0)
    config = load_config({"data": {"path": str(hspy)}, "experiment": {"check_calibration": False}})
    loaded = load_data(config)
    assert loaded.calibration["energy_eV"] == (80e3, "file")
    assert loaded.calibration["stored_dk_invA"] == (pytest.approx(0.02), "file")
    assert loaded.calibration["scan_step_A"] == (pytest.approx(5.0), "file")
    assert loaded.positions_A[1].tolist() == [0.0, pytest.approx(5.0)]  # fast axis x


def test_merlin_mib_reads_the_frames_as_rsciio_orients_them(tmp_path):
    frames = patterns_4d().reshape(-1, *DETECTOR)
    mib = write_mib(tmp_path / "scan.mib", frames)
    # rsciio turns Merlin frames upside down (Merlin stores the rows bottom first)
    h5 = write_hdf5(tmp_path / "scan.h5", frames[:, ::-1, :].reshape(*SCAN, *DETECTOR))
    with open_patterns(mib, scan_shape=SCAN) as source:
        assert source.info.shape == (*SCAN, *DETECTOR) and source.info.scan_shape == SCAN
        np.testing.assert_array_equal(source.read().patterns, read_patterns(h5).patterns)
        np.testing.assert_array_equal(source.read(np.array([0, 7])).patterns,
                                      read_patterns(h5, rows=np.array([0, 7])).patterns)


def test_a_missing_reader_names_the_extra(tmp_path, monkeypatch):
    import importlib

    real = importlib.import_module

    def without_rsciio(name, *args):
        if name.startswith("rsciio."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_rsciio)
    (tmp_path / "scan.dm4").write_bytes(b"\0" * 64)
    with pytest.raises(DataError, match=r"scan.dm4: reading .dm4 files needs RosettaSciIO's digitalmicrograph reader.*"
                                        r"pip install 'ptyacc\[formats\]'"):
        open_patterns(tmp_path / "scan.dm4")


def test_export_writes_32_bit_tiffs_with_the_pixel_size(tmp_path):
    import tifffile
    from click.testing import CliRunner

    from ptyacc.commands.cli import cli
    from ptyacc.results.h5file import Results, save_results

    rng = np.random.default_rng(3)
    obj = np.exp(1j * rng.uniform(-1, 1, (1, 2, 10, 12))).astype(np.complex64)
    probe = (rng.normal(size=(2, 8, 8)) + 1j * rng.normal(size=(2, 8, 8))).astype(np.complex64)
    save_results(tmp_path / "results.h5", Results(object=obj, probe=probe, positions_A=np.zeros((1, 2)),
                                                  loss=np.ones(2), dx_A=0.25, origin_A=(0.0, 0.0)))
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "results.h5"), "-o", str(tmp_path / "tif")])
    assert result.exit_code == 0, result.output
    expected = {"object_phase.tif": np.angle(obj[0]).sum(0), "object_phase_slices.tif": np.angle(obj[0]),
                "probe_amplitude.tif": np.abs(probe), "probe_phase.tif": np.angle(probe)}
    for name, reference in expected.items():
        with tifffile.TiffFile(tmp_path / "tif" / name) as tif:
            image = tif.asarray()
            assert image.dtype == np.float32, name
            np.testing.assert_allclose(image, reference, rtol=1e-6, atol=1e-6)
            assert tif.imagej_metadata["unit"] == "nm"
            x_resolution = tif.pages[0].tags["XResolution"].value
            assert x_resolution[0] / x_resolution[1] == pytest.approx(1 / 0.025)  # pixels per nm


def test_ncem_emd_reads_the_hdf5_patterns_and_its_axes(tmp_path):
    """An NCEM/Berkeley .emd by rsciio's writer (it keeps the axes' units, not which navigate)."""
    from rsciio.emd import file_writer

    data = patterns_4d()
    names = (("y", 0.5, "nm"), ("x", 0.5, "nm"), ("ky", 0.2, "1/nm"), ("kx", 0.2, "1/nm"))
    axes = [{"name": name, "size": size, "scale": scale, "units": units, "navigate": i < 2, "offset": 0.0}
            for i, ((name, scale, units), size) in enumerate(zip(names, data.shape))]
    file_writer(str(tmp_path / "scan.emd"), {"data": data, "axes": axes, "original_metadata": {},
                                            "metadata": {"General": {"title": "test"}, "Signal": {"signal_type": ""}}})
    h5 = write_hdf5(tmp_path / "scan.h5", data)
    with open_patterns(tmp_path / "scan.emd") as source:
        np.testing.assert_array_equal(source.read(np.array([2, 3, 10])).patterns,
                                      read_patterns(h5, rows=np.array([2, 3, 10])).patterns)
        assert source.info.attrs["dk_invA"] == pytest.approx(0.02) and source.info.attrs["scan_step_A"] == 5.0


LAMBDA_80KV_A = 12.2643 / np.sqrt(80e3 * (1 + 0.978476e-6 * 80e3))  # relativistic electron wavelength


@pytest.mark.parametrize("version, dtype, detector, dk_invA", [(4, np.uint16, (0.2, "1/nm"), 0.02),
                                                               (3, np.float32, (0.2, "1/nm"), 0.02),
                                                               (4, np.float32, (0.5, "mrad"), 0.5e-3 / LAMBDA_80KV_A)])
def test_gatan_dm_reads_the_hdf5_patterns_only_the_rows_asked_for_and_its_calibration(tmp_path, version, dtype,
                                                                                       detector, dk_invA):
    """A 4D-STEM stack in a DM file written here (tests/gatan_dm.py): 0.5 nm scan steps, the detector
    in 1/nm or mrad, 80 kV and a 100 mm camera length in the microscope tags, as Gatan's software keeps
    them (detector axes in mrad need that voltage)."""
    from rsciio.digitalmicrograph import file_reader

    data = patterns_4d(dtype)
    scale, unit = detector
    tags = {"Microscope Info": {"Voltage": 80e3, "STEM Camera Length": 100.0, "Illumination Mode": "STEM"}}
    dm = write_dm(tmp_path / f"scan.dm{version}", data, [0.5, 0.5, scale, scale], ["nm", "nm", unit, unit], tags,
                  version=version)
    (signal,) = file_reader(str(dm))  # rsciio itself reads the file as written
    np.testing.assert_array_equal(signal["data"], data)
    assert [(a["units"], a["navigate"]) for a in signal["axes"]] == [("nm", True)] * 2 + [(unit, False)] * 2
    h5, rows = write_hdf5(tmp_path / "scan.h5", data), np.array([1, 5, 11])
    with open_patterns(dm) as source:
        assert source.info.format == "rsciio" and source.info.shape == (*SCAN, *DETECTOR)
        assert source.info.scan_shape == SCAN
        np.testing.assert_array_equal(source.read(rows).patterns, read_patterns(h5, rows=rows).patterns)
        np.testing.assert_array_equal(source.read().patterns, read_patterns(h5).patterns)
        attrs = source.info.attrs
    # the voltage and camera length are only in DM's tags (rsciio maps them for HyperSpy to apply)
    assert attrs["energy_eV"] == 80e3 and attrs["camera_length_m"] == pytest.approx(0.1)
    assert attrs["dk_invA"] == pytest.approx(dk_invA, rel=1e-4) and attrs["scan_step_A"] == pytest.approx(5.0)
    loaded = load_data(load_config({"data": {"path": str(dm)}, "experiment": {"check_calibration": False}}))
    assert loaded.calibration["energy_eV"] == (80e3, "file")
    assert loaded.calibration["stored_dk_invA"] == (pytest.approx(dk_invA, rel=1e-4), "file")
    assert loaded.positions_A[1].tolist() == [0.0, pytest.approx(5.0)]  # fast axis x


def test_velox_emd_reads_the_hdf5_frames_only_the_rows_asked_for_and_its_calibration(tmp_path):
    """Velox keeps a camera's frames as an image stack (tests/velox_emd.py): rsciio reads it as
    (frame, ky, kx), the scan shape given in the config. 300 kV, 0.1 m camera length, and detector
    pixels of 0.02 1/Å, which rsciio gives as 200 "1 / µm" (it picks the prefix by the detector's size)."""
    from rsciio.emd import file_reader

    frames = patterns_4d().reshape(-1, *DETECTOR)
    emd = write_velox(tmp_path / "scan.emd", frames, pixel_size=2e8, pixel_unit="1/m", voltage_V=300e3,
                      camera_length_m=0.1)
    (signal,) = file_reader(str(emd))  # rsciio itself reads the file as written
    np.testing.assert_array_equal(signal["data"], frames)
    assert [a["navigate"] for a in signal["axes"]] == [True, False, False] and signal["axes"][1]["units"] == "1 / µm"
    h5, rows = write_hdf5(tmp_path / "scan.h5", frames), np.array([0, 4, 11])
    with open_patterns(emd) as source:
        assert source.info.format == "rsciio" and source.info.shape == frames.shape
        np.testing.assert_array_equal(source.read(rows).patterns, read_patterns(h5, rows=rows).patterns)
        np.testing.assert_array_equal(source.read().patterns, read_patterns(h5).patterns)
        attrs = source.info.attrs
    assert attrs["energy_eV"] == 300e3 and attrs["camera_length_m"] == pytest.approx(0.1)
    assert attrs["dk_invA"] == pytest.approx(0.02) and "scan_step_A" not in attrs  # frames carry no scan step
    config = {"data": {"path": str(emd), "scan_shape": list(SCAN)},
              "experiment": {"check_calibration": False, "scan_step_A": 5.0}}
    loaded = load_data(load_config(config))
    assert loaded.calibration["energy_eV"] == (300e3, "file")
    assert loaded.calibration["stored_dk_invA"] == (pytest.approx(0.02), "file")
    assert loaded.scan_shape == SCAN and loaded.positions_A[SCAN[1]].tolist() == [5.0, 0.0]  # frame 4 starts row 1


def test_gatan_dm_in_tem_diffraction_gives_the_camera_length_from_the_indicated_magnification(tmp_path):
    """In TEM diffraction DM keeps the camera length (mm) as the indicated magnification, and rsciio's
    mapping spells that tag group "Microscope_Info"; a voltage that is not a number gives no energy."""
    tags = {"Microscope Info": {"Voltage": "eighty kV", "Illumination Mode": "TEM", "Imaging Mode": "DIFFRACTION",
                                "Indicated Magnification": 250.0}}
    dm = write_dm(tmp_path / "scan.dm4", patterns_4d(), [0.5, 0.5, 0.2, 0.2], ["nm", "nm", "1/nm", "1/nm"], tags)
    with open_patterns(dm) as source:
        attrs = source.info.attrs
    assert attrs["camera_length_m"] == pytest.approx(0.25) and "energy_eV" not in attrs
