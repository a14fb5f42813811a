"""data.hold: patterns on the device, in host memory or read from the file each step give the
same reconstruction for every reader, on one process and on two (shard_data); auto chooses from
the free memory (mocked here) and says why; disk mode's host memory does not grow with the data."""

import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import conftest
import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config
from test_distributed import launch

import ptyacc
from ptyacc.config import load_config
from ptyacc.data import hold as hold_module
from ptyacc.data.hold import MemoryFigures
from ptyacc.data.load import load_data
from ptyacc.data.simulate import simulate_dataset
from ptyacc.data.stream import StreamedStore
from ptyacc.errors import ConfigError

WORKER = Path(__file__).with_name("hold_worker.py")
MODES = ("device", "host", "disk")
SCAN = (6, 6)
K = 16


def simulated(tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(36, 16, 16) uint16 Poisson counts, zero frequency at the centre, and their positions (Å)."""
    config = load_config(tiny_config(tmp_path, data={"simulate": {"scan_shape": list(SCAN), "detector_px": K,
                                                                  "atoms": 6, "dose": 2e4}}))
    data = simulate_dataset(config)
    centred = torch.fft.fftshift(data.patterns, dim=(-2, -1)).numpy()
    return np.rint(centred).astype(np.uint16), data.positions_A


def write_files(folder: Path) -> dict[str, dict]:
    """One file per reader holding the same patterns; for each, the ``data`` section that reads it
    and the ``experiment.positions`` it needs."""
    counts, positions = simulated(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "positions.h5", "w") as f:
        f["positions_A"] = positions
    elsewhere = {"path": str(folder / "positions.h5"), "key": "positions_A"}
    with h5py.File(folder / "scan.h5", "w") as f:  # one chunk per scan row, compressed: the demo's layout
        f.create_dataset("patterns", data=counts.reshape(*SCAN, K, K), chunks=(1, SCAN[1], K, K), compression="gzip")
        f["positions_A"] = positions
    with h5py.File(folder / "scan.cxi", "w") as f:  # with a dark frame: prepared patterns are not counts
        f["cxi_version"] = 160
        f["entry_1/instrument_1/detector_1/data"] = counts
        f["entry_1/instrument_1/detector_1/data_dark"] = np.full((K, K), 0.25, np.float32)
        mask = np.zeros((K, K), np.uint32)
        mask[2, 3] = 1
        f["entry_1/instrument_1/detector_1/mask"] = mask
    np.save(folder / "scan.npy", counts)
    with h5py.File(folder / "scan.mat", "w", userblock_size=512) as f:
        f["dp"] = counts.transpose(1, 2, 0).T  # MATLAB's dp(:, :, n) as MATLAB writes it
    with open(folder / "scan.mat", "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, written by ptyacc tests".ljust(116))
    frames = np.zeros((len(counts), 128 + 2, 128), "<f4")  # EMPAD's 128 x 128 detector, cropped to K x K
    frames[:, 64 - K // 2:64 + K // 2, 64 - K // 2:64 + K // 2] = counts
    frames.tofile(folder / "scan.raw")
    scan = {"scan_shape": list(SCAN)}
    matlab_v5 = {}
    try:
        from scipy.io import savemat
    except ImportError:  # MAT v5 files are read through scipy, an optional dependency
        pass
    else:
        savemat(folder / "v5.mat", {"dp": counts.transpose(1, 2, 0)})
        matlab_v5 = {"mat_v5": {"data": {"path": str(folder / "v5.mat")}, "positions": elsewhere}}
    return matlab_v5 | {"hdf5": {"data": {"path": str(folder / "scan.h5")}, "positions": {"key": "positions_A"}},
            "cxi": {"data": {"path": str(folder / "scan.cxi")}, "positions": elsewhere},
            "npy": {"data": {"path": str(folder / "scan.npy")}, "positions": elsewhere},
            "mat": {"data": {"path": str(folder / "scan.mat"), "key": "dp"}, "positions": elsewhere},
            "empad": {"data": {"path": str(folder / "scan.raw"), **scan, "transform": {"crop": K}}, "positions": elsewhere}}


def reader_config(folder: Path, reader: dict, mode: str, **runtime) -> dict:
    config = tiny_config(folder, optim={"iterations": 3, "batch_size": 8, "start": {"probe": 1, "positions": 2}},
                         runtime=runtime)
    config["data"] = {**reader["data"], "hold": mode}
    config["experiment"]["positions"] = reader["positions"]
    # the EMPAD frames are the 16 px patterns padded to 128 px, so the configured dx_A (of the stored
    # frame) does not describe them: the equality of the modes is the point here, not the calibration
    config["experiment"]["check_calibration"] = "transform" not in reader["data"]
    return config


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    folder = tmp_path_factory.mktemp("hold")
    return folder, write_files(folder)


def reconstruct(config: dict) -> ptyacc.reconstruction.engine.Reconstruction:
    return ptyacc.reconstruct(load_config(config), write=False)


@pytest.mark.parametrize("reader", ["hdf5", "cxi", "npy", "mat", "mat_v5", "empad"])
def test_every_mode_gives_the_device_result_for_every_reader(files, reader):
    """Object, probe and refined positions after 3 iterations (position refinement from the 2nd)
    are bit-identical whether the patterns are on the device, in host memory or read from the
    file; host mode keeps counts as uint16, and both streamed modes read steps ahead."""
    folder, readers = files
    if reader not in readers:
        pytest.skip("MAT v5 files need scipy")
    runs = {mode: reconstruct(reader_config(folder, readers[reader], mode)) for mode in MODES}
    device = runs["device"].model
    for mode in ("host", "disk"):
        model = runs[mode].model
        for name in ("object", "probe", "positions_px"):
            assert torch.equal(getattr(model, name), getattr(device, name)), (reader, mode, name)
        assert runs[mode].data.hold.mode == mode
    assert runs["disk"].data.streamed.bytes["host"] == 0
    counts = reader != "cxi"  # a dark frame is subtracted from the CXI patterns: float32 in host memory
    expected = np.uint16 if counts else np.float32
    assert runs["host"].data.streamed.read.patterns.dtype == expected
    # optim.loss: auto sees the same in every mode: counts (whose runs have a deviance, whatever the loss) or not
    assert all((run.poisson_deviance is not None) == counts for run in runs.values()), reader


def test_prefetch_reads_the_steps_ahead(files):
    """The steps the loop asks for are the ones the store read ahead (none read when asked but the
    sample of the saved mean patterns), and their patterns equal the device store's."""
    folder, readers = files
    config = load_config(reader_config(folder, readers["hdf5"], "disk"))
    data = load_data(config)
    store = StreamedStore(data.streamed.read, None, data.n_patterns, "cpu")
    in_memory = load_data(load_config(reader_config(folder, readers["hdf5"], "device"))).patterns
    from ptyacc.data.store import EpochBatches

    batches = EpochBatches(np.zeros((data.n_patterns, 2)), 8, 1, "random", 3, store=store)
    for epoch in range(2):
        batches.set_epoch(epoch)
        for item in range(len(batches)):
            step = batches[item]
            assert torch.equal(step.measured, in_memory[step.indices])
    assert (store.prefetched, store.direct) == (2 * len(batches), 0)
    shuffled = torch.tensor([7, 3, 30, 3])
    assert torch.equal(store.measured(shuffled), in_memory[shuffled])
    assert store.direct == 1


@pytest.mark.slow
def test_two_processes_sharded_every_mode_and_reader(files):
    """Two processes with runtime.shard_data (each reads only its share): for every reader, host
    and disk modes give the device mode's object bit for bit (one launch runs them all); so does
    disk mode with runtime.shard_object (the main process's tile)."""
    folder, readers = files
    jobs = {}
    for name, reader in readers.items():
        for mode in MODES:
            path = folder / f"mp_{name}_{mode}.yaml"
            path.write_text(yaml.safe_dump(reader_config(folder, reader, mode, shard_data=True)))
            jobs[f"{name}_{mode}"] = str(path)
    for mode in ("device", "disk"):  # with the object split too (runtime.shard_object)
        path = folder / f"mp_tiles_{mode}.yaml"
        config = reader_config(folder, readers["hdf5"], mode, shard_object=True)
        config["model"] = {"object_padding_px": 4}  # tiles at least a probe window wide
        path.write_text(yaml.safe_dump(config))
        jobs[f"tiles_{mode}"] = str(path)
    (folder / "jobs.json").write_text(json.dumps(jobs))
    out = folder / "mp_objects"
    launch([str(WORKER), str(folder / "jobs.json"), str(out)], 2)
    for name in readers:
        two = {mode: np.load(out / f"{name}_{mode}.npy") for mode in MODES}
        for mode in ("host", "disk"):
            assert np.array_equal(two[mode], two["device"]), (name, mode, np.abs(two[mode] - two["device"]).max())
    assert not np.array_equal(two["device"], np.ones_like(two["device"]))  # the object did change
    assert np.array_equal(np.load(out / "tiles_disk.npy"), np.load(out / "tiles_device.npy"))


def fake_memory(monkeypatch, device_free_mib: float, host_available_mib: float) -> None:
    figures = MemoryFigures(int(device_free_mib * 2**20), int(host_available_mib * 2**20))
    monkeypatch.setattr(hold_module, "memory_figures", lambda device: figures)


@pytest.mark.slow
@pytest.mark.parametrize(("device_mib", "host_mib", "expected"), [(1.0, 1.0, "device"), (0.05, 0.2, "host"),
                                                                    (0.05, 0.03, "disk")])
def test_auto_chooses_by_the_free_memory_and_says_why(files, monkeypatch, capsys, device_mib, host_mib, expected):
    """36 prepared float32 patterns of 16^2 take 36 KiB on the device and 18 KiB as uint16 in host
    memory; auto keeps them within half of the (mocked) free memory and names the figures."""
    folder, readers = files
    fake_memory(monkeypatch, device_mib, host_mib)
    config = reader_config(folder, readers["hdf5"], "auto")
    config["optim"]["iterations"] = 1
    config["output"]["dir"] = str(folder / f"auto_{expected}")
    ptyacc.reconstruct(load_config(config))
    said = capsys.readouterr().err
    line = next(line for line in said.splitlines() if "data.hold:" in line)
    assert line.startswith(f"ptyacc: data.hold: {expected} (")
    assert {"device": "36.0 KiB fit in 0.5 x 1.0 MiB free on the cpu device",
            "host": "36.0 KiB do not fit in 0.5 x 51.2 KiB free on the cpu device; 18.0 KiB fit in 0.5 x 204.8 KiB "
                    "available host memory",
            "disk": "18.0 KiB do not fit in 0.5 x 30.7 KiB available host memory"}[expected] in line
    log = (folder / f"auto_{expected}" / "run.log").read_text()
    assert f"data.hold: {expected} (" in log
    assert re.search(r"memory: [\d.]+ [MG]iB peak host RSS", log.splitlines()[-1])  # the test process's own peak


def test_disk_needs_a_file():
    with pytest.raises(ConfigError, match="data.hold: disk reads the patterns from data.path"):
        load_config({"data": {"simulate": {}, "hold": "disk"}})


RSS_SCRIPT = """
import sys
import ptyacc
from ptyacc.config import load_config
from ptyacc.data.hold import peak_rss_bytes
ptyacc.reconstruct(load_config(sys.argv[1]), write=False)
print(peak_rss_bytes() // 1024)
"""


def peak_rss_kib(config: dict, folder: Path, name: str) -> int:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    # glibc raises its mmap threshold after each large free, so that freed step buffers stay in the
    # heap and count in RSS for a while; a fixed threshold shows what the run itself holds
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(path)], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS of this process alone: Linux's VmHWM")
def test_disk_mode_memory_does_not_grow_with_the_patterns(tmp_path):
    """The same object area scanned with 8 and with 32 copies of each frame (96 MiB more as float32
    between the two): peak RSS in disk mode rises by less than an eighth of that, from HDF5 and
    from a memory-mapped .npy file (whose pages read are let go), in device mode by most of the
    added bytes. Measured: +1 MiB from 2048 to 8192 positions; +15 MiB while the model kept every
    position's sub-pixel shift factors (1 KiB each at K = 64), which this bound refuses. (From 1
    copy the rise includes a one-time part of up to ~10 MiB.)"""
    base, repeat, k, side = 8, 32, 64, 16
    rng = np.random.default_rng(0)
    frames = rng.poisson(20.0, size=(side * side, k, k)).astype(np.uint16)
    positions = np.stack(np.meshgrid(np.arange(float(side)), np.arange(float(side)), indexing="ij"), -1
                         ).reshape(-1, 2) * 0.6
    peaks = {}
    for copies in (base, repeat):
        path = tmp_path / f"x{copies}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("patterns", data=np.repeat(frames, copies, axis=0), chunks=(16, k, k))
            f["positions_A"] = np.repeat(positions, copies, axis=0)
        np.save(tmp_path / f"x{copies}.npy", np.repeat(frames, copies, axis=0))  # read through a memory map
        for mode, data_path in (("device", path), ("disk", path), ("disk_npy", tmp_path / f"x{copies}.npy")):
            config = tiny_config(tmp_path, optim={"iterations": 1, "batch_size": 128})
            config["data"] = {"path": str(data_path), "hold": mode.split("_")[0]}
            config["experiment"]["positions"] = {"path": str(path), "key": "positions_A"}
            peaks[mode, copies] = peak_rss_kib(config, tmp_path, f"{mode}{copies}")
    added_kib = (repeat - base) * frames.size * 4 // 1024
    for disk in ("disk", "disk_npy"):
        assert peaks[disk, repeat] - peaks[disk, base] < 0.125 * added_kib, (peaks, added_kib)
    assert peaks["device", repeat] - peaks["device", base] > 0.8 * added_kib, (peaks, added_kib)


def live_array_bytes() -> int:
    """Bytes of every torch tensor's and NumPy array's memory that this process's objects reach, each
    storage counted once."""
    storages: dict[int, int] = {}
    for found in gc.get_objects():
        if isinstance(found, torch.Tensor) and found.layout == torch.strided:
            try:
                storage = found.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            except RuntimeError:  # a compiler's fake tensor (other tests' torch.compile) holds no memory
                continue
        elif isinstance(found, np.ndarray):
            base = found
            while isinstance(base.base, np.ndarray):
                base = base.base
            storages[base.__array_interface__["data"][0]] = base.nbytes
    return sum(storages.values())


@pytest.mark.slow
def test_disk_mode_keeps_a_few_numbers_per_position_not_its_shift_factors(tmp_path):
    """Positions off the pixel grid, each with its own sub-pixel rest: what a disk-mode run leaves
    alive (model, store, batches, data) grows by less than 96 bytes per position, the positions,
    their window corners and rests and the batches' indices; not by their probe-shift factors
    (2 K complex numbers, 512 bytes at K = 32, 1 KiB at K = 64), which are made for a step's
    positions when it takes them. Kept for every position they took 36 MiB on a 192 x 192 raster of
    64 px patterns, x1.17 of a 24 x 24 raster's peak memory instead of x1.06
    (benchmarks/records/2026-12-02-disk-memory.md)."""
    k, frames = 32, 256
    rng = np.random.default_rng(0)
    counts = rng.poisson(20.0, size=(frames, k, k)).astype(np.uint16)
    # a raster 1.5 px apart: every other row and column half a pixel off the grid
    grid = np.stack(np.meshgrid(np.arange(16.0), np.arange(16.0), indexing="ij"), -1).reshape(-1, 2) * 0.45
    alive = {}
    for copies in (2, 8):
        path = tmp_path / f"x{copies}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("patterns", data=np.repeat(counts, copies, axis=0), chunks=(16, k, k))
            f["positions_A"] = np.repeat(grid, copies, axis=0) + rng.uniform(-0.01, 0.01, (frames * copies, 2))
        config = tiny_config(tmp_path, optim={"iterations": 1, "batch_size": 64})
        config["data"] = {"path": str(path), "hold": "disk"}
        config["experiment"]["positions"] = {"path": str(path), "key": "positions_A"}
        gc.collect()
        before = live_array_bytes()
        run = ptyacc.reconstruct(load_config(config), write=False)
        assert not run.model.uniform_shift and run.model.needs_shift  # a factor per position in each step
        gc.collect()
        alive[copies] = live_array_bytes() - before
        del run
    per_position = (alive[8] - alive[2]) / (6 * frames)
    assert per_position < 96, alive


def test_a_step_reads_its_scattered_rows_run_by_run(tmp_path, monkeypatch):
    """Rows spread over an HDF5 dataset are read as their runs of consecutive rows, one slice
    each; contiguous rows in one slice; the patterns are those of the file either way."""
    from ptyacc.data.readers import read_patterns

    data = np.random.default_rng(1).poisson(5.0, size=(200, 8, 8)).astype(np.uint16)
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("patterns", data=data, chunks=(1, 8, 8))
    selections = []
    original = h5py.Dataset.__getitem__

    def spy(self, selection):
        block = original(self, selection)
        if self.name == "/patterns":
            selections.append(len(block))
        return block

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    scattered = np.array([3, 40, 41, 90, 150, 151, 152, 199])
    np.testing.assert_array_equal(read_patterns(path, rows=scattered).patterns, data[scattered])
    assert selections == [1, 2, 1, 3, 1]  # its runs; the stretch 3..199 would be 197 patterns
    selections.clear()
    np.testing.assert_array_equal(read_patterns(path, rows=np.arange(20, 31)).patterns, data[20:31])
    assert selections == [11]


def test_slow_chunk_layout_is_named_with_its_cost_and_fixed_by_convert(files, tmp_path, capsys):
    """The scan file's gzip chunks of 6 patterns pass; chunks of 36 patterns get one warning naming
    the cost and the fix, which `ptyacc convert --streaming` applies (chunks of one pattern)."""
    from ptyacc.commands.cli import main

    folder, readers = files
    counts = np.load(folder / "scan.npy")
    slow = tmp_path / "slow.h5"
    with h5py.File(slow, "w") as f:
        f.create_dataset("patterns", data=counts, chunks=(36, K, K), compression="gzip")
        f["positions_A"] = h5py.File(folder / "positions.h5")["positions_A"][()]
    config = reader_config(folder, {"data": {"path": str(slow)}, "positions": {"key": "positions_A"}}, "disk")
    config["optim"]["iterations"] = 1
    reconstruct(config)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "compressed chunks of 36 patterns" in warnings[0] and "up to 36 x the reading" in warnings[0]
    assert "ptyacc convert slow.h5 OUT.h5 --streaming" in warnings[0]
    fast = tmp_path / "fast.h5"
    assert main(["convert", str(slow), str(fast), "--streaming"]) == 0
    with h5py.File(fast) as f:
        assert (f["patterns"].chunks, f["patterns"].compression) == ((1, K, K), None)
        np.testing.assert_array_equal(f["patterns"][()], counts)
    assert hold_module.SLOW_CHUNK_PATTERNS < 36
    config["data"]["path"] = str(fast)
    reconstruct(config)
    assert "warning" not in capsys.readouterr().err


def test_xray_probe_from_the_mean_pattern_is_the_same_in_every_mode(tmp_path):
    """X-ray data start from the mean pattern (not from optics): for noise-free (float-valued)
    patterns held in the file or in host memory, that mean and the counts that scale the probe
    give the probe and object of the patterns on the device, bit for bit."""
    from ptyacc.data.export import write_dataset

    experiment = {"radiation": "xray", "energy_eV": 8000.0, "detector_distance_m": 2.0, "detector_pixel_m": 75e-6,
                  "scan_step_A": 2000.0}
    simulated = load_data(load_config({"data": {"simulate": {"scan_shape": [4, 4], "detector_px": 16, "atoms": 4,
                                                             }}, "experiment": experiment}))
    write_dataset(tmp_path / "x.h5", simulated)
    models = {}
    for mode in MODES:
        config = {"data": {"path": str(tmp_path / "x.h5"), "hold": mode},
                  "experiment": {**experiment, "positions": {"key": "positions_A"}},
                  "optim": {"iterations": 2, "batch_size": 4, "start": {"probe": 1}},
                  "runtime": {"progress": False}}
        models[mode] = reconstruct(config).model
    for mode in ("host", "disk"):
        for name in ("object", "probe"):
            assert torch.equal(getattr(models[mode], name), getattr(models["device"], name)), (mode, name)


def test_info_states_the_bytes_of_each_mode_and_the_choice(files, monkeypatch):
    """`ptyacc info` gives the patterns' bytes on disk, on the device (float32) and in host memory
    (uint16 counts), and the mode auto would choose under the (mocked) free memory."""
    from ptyacc.commands.info import data_report

    folder, readers = files
    fake_memory(monkeypatch, 0.05, 0.2)
    lines = data_report(load_config(reader_config(folder, readers["npy"], "auto")), sample=8)
    size = (folder / "scan.npy").stat().st_size / 1024
    assert (f"patterns: {size:.1f} KiB on disk; data.hold device: 36.0 KiB on the device (float32); host: 18.0 KiB "
            "in host memory (uint16)") in "\n".join(lines)
    device = conftest.test_device()  # the device the config names (cuda where the suite runs on a GPU)
    assert any(line.startswith(f"data.hold: host on {device} (36.0 KiB do not fit") for line in lines), lines


def test_resume_in_disk_mode(files, tmp_path):
    """Stopped after 2 of 3 iterations and resumed from the checkpoint: disk mode ends where device
    mode, stopped and resumed the same way, ends (the resumed epoch's steps are read ahead too)."""
    folder, readers = files
    objects = {}
    for mode in ("device", "disk"):
        config = reader_config(folder, readers["hdf5"], mode)
        config["output"].update(dir=str(tmp_path / mode), checkpoint_every=1, figures=False)
        config["optim"]["iterations"] = 2
        ptyacc.reconstruct(load_config(config))
        config["optim"]["iterations"] = 3
        objects[mode] = ptyacc.reconstruct(load_config(config), resume=True).model.object
        assert "resumed from" in (tmp_path / mode / "run.log").read_text()
    assert torch.equal(objects["disk"], objects["device"])


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_cgroup_memory_limit_bounds_the_host_memory(tmp_path, version):
    """Inside a container or batch job whose cgroup caps memory, auto judges host memory by what
    the cap leaves (limit - usage); without a cap (v2 "max", v1's huge number) there is no bound."""
    from ptyacc.data.hold import cgroup_room_bytes

    proc = tmp_path / "cgroup"
    if version == "v2":
        proc.write_text("0::/job/step\n")
        folder, names = tmp_path / "job" / "step", ("memory.max", "memory.current")
    else:
        proc.write_text("9:cpu,cpuacct:/job\n4:memory:/job\n")
        folder, names = tmp_path / "memory" / "job", ("memory.limit_in_bytes", "memory.usage_in_bytes")
    folder.mkdir(parents=True)
    (folder / names[0]).write_text(f"{2**30}\n")
    (folder / names[1]).write_text(f"{2**28}\n")
    assert cgroup_room_bytes(proc, tmp_path) == 2**30 - 2**28
    (folder / names[0]).write_text("max\n" if version == "v2" else "9223372036854771712\n")
    assert cgroup_room_bytes(proc, tmp_path) is None
    assert cgroup_room_bytes(tmp_path / "none", tmp_path) is None


def test_a_file_that_fails_during_the_run_is_named(files, monkeypatch):
    """A read that fails in the middle of a disk-mode run (the file moved or cut short) is a
    DataError naming the file and the fix, raised where the loop asked for the step."""
    from ptyacc.data.readers import PatternFile
    from ptyacc.data.store import ShardPlan, pattern_store
    from ptyacc.errors import DataError

    folder, readers = files
    data = load_data(load_config(reader_config(folder, readers["hdf5"], "disk")))
    store = pattern_store(data, ShardPlan(1, 0), "cpu")

    def broken(self, rows=None, prepare=None):
        raise OSError("Can't read data (file truncated)")

    monkeypatch.setattr(PatternFile, "read", broken)
    with pytest.raises(DataError, match=r"scan.h5: reading 3 patterns during the run failed \(Can't read data.*"
                                        r"the file must stay in place"):
        store.measured(torch.tensor([4, 0, 9]))


def test_a_pattern_held_by_another_process_is_an_error_not_a_wrong_row():
    """A store holding positions 3, 5 and 7 of 10 answers those and refuses position 4 (once its
    missing rows were -1, and -1 silently read the last held pattern)."""
    from ptyacc.data.store import PatternStore

    patterns = torch.arange(3 * 2 * 2, dtype=torch.float32).reshape(3, 2, 2)
    store = PatternStore(patterns, np.array([3, 5, 7]), n_positions=10)
    np.testing.assert_array_equal(store.measured(torch.tensor([7, 3])).numpy(), patterns[[2, 0]].numpy())
    with pytest.raises(IndexError):
        store.measured(torch.tensor([4]))


def test_the_held_counts_are_a_field_set_with_the_patterns_and_again_when_they_change():
    """``PtychoData.counts_total`` (the probe's scale) is the float64 sum of the held patterns, made
    when the dataset is, and made again by ``dataclasses.replace``."""
    import dataclasses

    from ptyacc.data.dataset import PtychoData

    patterns = torch.rand(5, 4, 4) * 1000
    data = PtychoData(patterns, np.zeros((5, 2)), 0.2, 0.02, 20.0, {})
    expected = float(np.sum(patterns.numpy().astype(np.float64)))
    assert data.counts_total.dtype == torch.float64 and float(data.counts_total) == pytest.approx(expected, rel=1e-12)
    assert data.held_counts_total() is data.counts_total and data.mean_intensity == pytest.approx(expected / 5)
    part = dataclasses.replace(data, patterns=patterns[:2], positions_A=np.zeros((2, 2)))
    assert float(part.counts_total) == pytest.approx(float(np.sum(patterns[:2].numpy().astype(np.float64))), rel=1e-12)
