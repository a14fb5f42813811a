"""Multi-process correctness: real processes on CPU joined by gloo, compared with one process,
plus unit tests of the backend choice and the launch guards."""

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.data import load_data
from ptyacc.data.positions import raster_positions_A
from ptyacc.errors import DistributedError
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.reconstruction.distributed import (
    _refuse_mixed_precision,
    bare_optimizer,
    check_world_size,
    choose_backend,
    end_process_group,
    get_attribute,
    parameter_checksum,
    unwrap,
)
from ptyacc.reconstruction.exchange import WHOLE_FRACTION
from ptyacc.speed.speedtest import free_port

WORKER = Path(__file__).with_name("distributed_worker.py")
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
CPU_CONFIG = Path(__file__).parents[1] / "configs" / "accelerate" / "cpu_multi_process.yaml"


# ----------------------------------------------------------------------------- unit tests


@pytest.mark.parametrize("requested, device, system, expected", [
    ("auto", "cuda", "Linux", "nccl"),
    ("auto", "cpu", "Linux", "gloo"),
    ("auto", "cuda", "Windows", "gloo"),
    ("auto", "mps", "Darwin", "gloo"),
    ("gloo", "cuda", "Linux", "gloo"),
    ("nccl", "cuda", "Linux", "nccl"),
])
def test_backend_choice(requested, device, system, expected):
    assert choose_backend(requested, device, system) == expected


@pytest.mark.parametrize("device, system", [("cpu", "Linux"), ("cuda", "Windows"), ("mps", "Darwin")])
def test_forcing_nccl_where_it_cannot_run_is_refused(device, system):
    with pytest.raises(DistributedError, match="nccl needs CUDA GPUs on Linux"):
        choose_backend("nccl", device, system)


def test_backend_auto_follows_the_platform(monkeypatch):
    """With no explicit system, the choice reads platform.system()."""
    import ptyacc.reconstruction.distributed as dist

    monkeypatch.setattr(dist.platform, "system", lambda: "Windows")
    assert choose_backend("auto", "cuda") == "gloo"
    monkeypatch.setattr(dist.platform, "system", lambda: "Linux")
    assert choose_backend("auto", "cuda") == "nccl"


def test_backend_and_timeout_reach_the_process_group_kwargs():
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    from ptyacc.config import RuntimeConfig
    from ptyacc.reconstruction.distributed import kwargs_handlers

    runtime = RuntimeConfig(timeout_s=42.0, backend="gloo")
    ddp, group = kwargs_handlers(runtime, "cuda", {"WORLD_SIZE": "2"})
    assert isinstance(ddp, DistributedDataParallelKwargs) and ddp.find_unused_parameters is False
    assert isinstance(group, InitProcessGroupKwargs)
    assert group.backend == "gloo" and group.timeout.total_seconds() == 42.0
    assert len(kwargs_handlers(runtime, "cpu", {})) == 1  # one process: no process group to configure


def test_more_processes_than_gpus_is_refused(monkeypatch):
    import ptyacc.reconstruction.distributed as dist

    monkeypatch.setattr(dist.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist.torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    dist._check_gpu_count({"LOCAL_WORLD_SIZE": "2"})
    with pytest.raises(DistributedError, match="4 processes on this node but only 2 visible GPU"):
        dist._check_gpu_count({"LOCAL_WORLD_SIZE": "4"})


def test_mig_slices_with_several_processes_are_refused(monkeypatch):
    import ptyacc.reconstruction.distributed as dist

    monkeypatch.setattr(dist.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist.torch.cuda, "get_device_name", lambda i: "NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    dist._check_gpu_count({"LOCAL_WORLD_SIZE": "1"})  # one process on one slice is fine
    with pytest.raises(DistributedError, match="MIG slices cannot be joined"):
        dist._check_gpu_count({"LOCAL_WORLD_SIZE": "2"})


def test_world_size_mismatch_is_refused():
    """Processes that a launcher counted as 2 but that are not connected would duplicate work."""
    check_world_size(2, {"WORLD_SIZE": "2"})
    check_world_size(1, {})
    with pytest.raises(DistributedError, match="WORLD_SIZE=2 processes but this one joined a group of 1"):
        check_world_size(1, {"WORLD_SIZE": "2"})


@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8"])
def test_mixed_precision_is_refused_with_the_reason(precision):
    _refuse_mixed_precision({"ACCELERATE_MIXED_PRECISION": "no"})
    with pytest.raises(DistributedError, match=f"mixed precision '{precision}'.*complex"):
        _refuse_mixed_precision({"ACCELERATE_MIXED_PRECISION": precision})


def test_get_attribute_sees_through_ddp(tmp_path):
    """get_attribute/unwrap give the same objects for the bare model and a DDP-wrapped one."""
    import torch.distributed as dist

    model = torch.nn.Linear(2, 2)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
        assert unwrap(wrapped) is model and unwrap(model) is model
        assert get_attribute(wrapped, "weight") is model.weight
        assert parameter_checksum(wrapped) == parameter_checksum(model)
    finally:
        dist.destroy_process_group()


def test_bare_optimizer_steps_as_accelerates_wrapper():
    """Stepping the optimizer inside Accelerate's wrapper gives the wrapper's parameters bit for
    bit; a wrapper with a gradient scaler is kept (its step does more than the inner one's)."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    results = []
    for bare in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        assert bare_optimizer(optimizer) is optimizer.optimizer
        for _ in range(3):
            model(torch.arange(8.0).view(2, 4)).square().sum().backward()
            (bare_optimizer(optimizer) if bare else optimizer).step()
            (bare_optimizer(optimizer) if bare else optimizer).zero_grad(set_to_none=True)
            assert all(p.grad is None for p in model.parameters())
        results.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
    plain = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    assert bare_optimizer(plain) is plain

    class Scaled:
        optimizer, scaler = plain, object()

    assert isinstance(bare_optimizer(Scaled()), Scaled)


EXIT_SCRIPT = """
import atexit, sys
from pathlib import Path
from ptyacc.reconstruction.distributed import exit_after_launch
atexit.register(lambda: Path(sys.argv[1]).write_text("at-exit ran"))
print("flushed", end="")
exit_after_launch(7)
print("not a launched process: went on")
"""


@pytest.mark.parametrize("world", ["1", "2"])
def test_exit_after_launch_ends_a_launched_process_after_its_exit_handlers(tmp_path, world):
    """Launched (WORLD_SIZE 2): the at-exit handlers run, the output is flushed and the process
    exits with the given code at once; alone (WORLD_SIZE 1) nothing happens."""
    marker = tmp_path / "marker"
    done = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(marker)], capture_output=True, text=True,
                          env={**os.environ, "WORLD_SIZE": world}, timeout=120)
    assert marker.read_text() == "at-exit ran"
    if world == "2":
        assert (done.returncode, done.stdout) == (7, "flushed")
    else:
        assert (done.returncode, done.stdout) == (0, "flushednot a launched process: went on\n")


def test_end_process_group_leaves_the_group(tmp_path):
    """The end of a launched run leaves the process group (and does nothing without one)."""
    import torch.distributed as dist

    end_process_group()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert dist.is_initialized()
    end_process_group()
    assert not dist.is_initialized()


def test_no_model_module_access_and_no_unused_parameter_search():
    """DESIGN rules 2 and 6: `.module` only inside the unwrap helper; never find_unused_parameters=True."""
    root = Path(ptyacc.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "find_unused_parameters=True" not in text, path
        if path.name != "distributed.py":
            assert ".module" not in text, path


def test_shipped_accelerate_configs_never_ask_for_mixed_precision():
    folder = Path(__file__).parents[1] / "configs" / "accelerate"
    names = sorted(p.name for p in folder.glob("*.yaml"))
    assert names == ["cpu_multi_process.yaml", "multi_gpu.yaml", "multi_node.yaml", "single_gpu.yaml"]
    for name in names:
        settings = yaml.safe_load((folder / name).read_text())
        assert settings["mixed_precision"] == "no" and settings["use_cpu"] is False


def test_model_state_is_real_valued():
    """DESIGN rule 1: no complex parameter or buffer, so none can reach a collective."""
    config = ptyacc.load_config(tiny_config(Path("/tmp")), ["optim.start.positions=0", "model.slices=2"])
    from ptyacc.data import load_data
    from ptyacc.physics.geometry import ObjectGeometry
    from ptyacc.reconstruction.engine import build_model

    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    model = build_model(config, data, geometry)
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    assert {"quantities.object.transmission", "quantities.probe.modes", "quantities.positions.offsets_px",
            "propagator"} <= set(tensors)
    assert not [name for name, t in tensors.items() if t.is_complex()]


@pytest.mark.parametrize("refine", [False, True])
def test_step_footprint_is_the_box_of_its_windows_or_the_whole_object(refine, monkeypatch):
    """The footprint of a step is the bounding box of its windows where the forward pass puts
    them (fixed corners, or the current refined positions); a box covering WHOLE_FRACTION of
    the object or more is sent whole (None)."""
    from ptyacc.reconstruction import exchange as exchange_module
    from ptyacc.reconstruction.engine import build_model
    from ptyacc.reconstruction.exchange import GradientExchange

    config = ptyacc.load_config(tiny_config(Path("/tmp")), ["optim.start.positions=0"] if refine else [])
    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    model = build_model(config, data, geometry)
    if refine:
        with torch.no_grad():
            model.position_offsets[3] = torch.tensor([2.0, -3.0])
    exchange, k = GradientExchange(model, world=2), data.detector_px
    positions = model.positions().detach().numpy()[[3, 4]]
    corners = np.clip(np.round(positions - k // 2), 0, np.array(geometry.shape) - k).astype(int)
    exchange.begin_step(torch.tensor([3, 4]))
    assert exchange.box == (corners[:, 0].min(), corners[:, 0].max() + k, corners[:, 1].min(), corners[:, 1].max() + k)
    everything = torch.arange(data.n_patterns)
    exchange.begin_step(everything)  # this object's margin leaves the windows 86% of it
    y0, y1, x0, x1 = exchange.box
    assert 0.8 < (y1 - y0) * (x1 - x0) / (geometry.shape[0] * geometry.shape[1]) < WHOLE_FRACTION
    monkeypatch.setattr(exchange_module, "WHOLE_FRACTION", 0.8)
    exchange.begin_step(everything)
    assert exchange.box is None


# ----------------------------------------------------------------------------- real processes


def environment() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", ACCELERATE_USE_CPU="1")
    env.pop("WORLD_SIZE", None)
    return env


def launch(args: list[str], processes: int, timeout: int = 300, extra: list[str] = ()) -> subprocess.CompletedProcess:
    if processes == 1:
        command = [sys.executable, *args]
    else:
        command = [*ACCELERATE, "--config_file", str(CPU_CONFIG), "--num_processes", str(processes),
                   "--main_process_port", str(free_port()), *extra, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment())
    assert done.returncode == 0, _failure_report(done.stderr)
    return done


# a run on 1 process, on 2, on 2 with shard_data and on 2 with the object split (which batches as shard_data does):
# (name, processes, settings), for ``launch_configs``
ONE_TWO_DATA_SPLIT = (("one", 1, []), ("two", 2, []), ("data", 2, ["runtime.shard_data=true"]),
                      ("split", 2, ["runtime.shard_object=true"]))


def launch_configs(folder: Path, runs) -> dict[str, Path]:
    """Each (name, config dict, processes, settings) of ``runs`` written to ``folder``/name.yaml and
    run by the worker with its output in ``folder``/name/results; {name: ``folder``/name}."""
    outs = {}
    for name, config, processes, settings in runs:
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        out = folder / name
        sets = [item for setting in [*settings, f"output.dir={out / 'results'}"] for item in ("--set", setting)]
        launch([str(WORKER), str(path), str(out / "records"), *sets], processes)
        outs[name] = out
    return outs


def launched_four_ways(folder: Path, config: dict) -> dict[str, tuple[dict, np.ndarray]]:
    """``config`` run on 1 process (p1), 2 (p2), 2 with the data sharded (data) and 2 with the object split (split):
    {name: (results.h5's auto_values, its object)}."""
    outs = launch_configs(folder, [("p1", config, 1, []), ("p2", config, 2, []),
                                   ("data", config, 2, ["runtime.shard_data=true"]),
                                   ("split", config, 2, ["runtime.shard_object=true"])])
    found = {}
    for name, out in outs.items():
        with h5py.File(out / "results" / "results.h5") as f:
            found[name] = (yaml.safe_load(f.attrs["auto_values"]), f["object"][()])
    return found


def _failure_report(stderr: str) -> str:
    """What a failed launch printed: the lines that name a cause wherever they stand (a rank's
    own message is followed by pages of the launcher's), then the end."""
    words = ("Error", "error", "terminate", "what()", "Abort", "abort", "Traceback", "signal", "Signal")
    causes = [line for line in stderr.splitlines() if any(word in line for word in words)]
    return "\n".join(causes[:40]) + "\n--- end of stderr ---\n" + stderr[-2000:]


def ranks(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


@pytest.fixture(scope="module")
def mp_config(tmp_path_factory) -> Path:
    """49 positions (batch 8: global batches of 8 and 9, split 4/4 and 4/5 over 2 ranks),
    position refinement from iteration 2, probe updates from iteration 3, 10 iterations."""
    folder = tmp_path_factory.mktemp("mp")
    config = tiny_config(folder, optim={"iterations": 10, "batch_size": 8, "start": {"probe": 3, "positions": 2}})
    config["data"]["simulate"].update(scan_shape=[7, 7], position_jitter_A=0.1)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def one_and_two(mp_config) -> dict:
    """The same config on 1 process and on 2 processes."""
    runs = {}
    for processes in (1, 2):
        out = mp_config.parent / f"p{processes}"
        launch([str(WORKER), str(mp_config), str(out / "records"), "--set", f"output.dir={out / 'results'}"],
               processes)
        runs[processes] = out
    return runs


@pytest.mark.slow
def test_each_position_once_per_epoch_over_ranks(one_and_two):
    """Shares of 2 real processes are disjoint, cover all 49 positions every epoch, come in the
    same number of steps on each rank, and the order changes from epoch to epoch."""
    records = ranks(one_and_two[2] / "records")
    assert [r["world_size"] for r in records] == [2, 2]
    orders = []
    for epoch in map(str, range(10)):
        steps = [r["indices"][epoch] for r in records]
        assert len(steps[0]) == len(steps[1]) == 6
        used = [i for rank_steps in steps for step in rank_steps for i in step]
        assert sorted(used) == list(range(49))
        assert not set(sum(steps[0], [])) & set(sum(steps[1], []))
        orders.append(steps[0])
    assert len({json.dumps(o) for o in orders}) == 10


@pytest.mark.slow
def test_two_processes_give_the_one_process_answer(one_and_two):
    """Same loss history and object up to float rounding, with position refinement on and a
    probe that starts later than the object (measured: relative object difference ~1e-6)."""
    one = ptyacc.load_results(one_and_two[1] / "results" / "results.h5")
    two = ptyacc.load_results(one_and_two[2] / "results" / "results.h5")
    np.testing.assert_allclose(two.loss, one.loss, rtol=1e-4)
    relative = np.linalg.norm(two.object - one.object) / np.linalg.norm(one.object)
    assert relative < 1e-4, relative
    assert np.abs(two.positions_A - one.positions_A).max() < 1e-4
    moved = np.abs(one.positions_A - raster_positions_A((7, 7), 0.6)).max()
    assert moved > 1e-3  # position refinement really ran
    assert two.attrs["world_size"] == 2 and one.attrs["world_size"] == 1


@pytest.mark.slow
def test_ranks_end_bit_identical_and_write_the_same_files(one_and_two):
    records = ranks(one_and_two[2] / "records")
    assert records[0]["checksum"] == records[1]["checksum"]
    files = [sorted(p.name for p in (one_and_two[n] / "results").iterdir()) for n in (1, 2)]
    assert files[0] == files[1] == ["loss.png", "object_phase.png", "positions.png", "probe.png", "results.h5", "run.log",
                                    "summary.png"]


def global_steps(records: list[dict], epoch: int) -> list[np.ndarray]:
    """The global batch of every step of an epoch: the ranks' pieces of that step together."""
    pieces = [r["indices"][str(epoch)] for r in records]
    return [np.concatenate(step) for step in zip(*pieces, strict=True)]


@pytest.mark.slow
def test_exchange_sends_the_footprint_in_one_collective_per_step(mp_config, one_and_two):
    """Per step, one collective of: the object gradient inside the bounding box of the global
    batch's windows (worked out here from the initial positions, for the iterations before
    position refinement starts), the whole probe gradient and the position gradient; the split
    sums to the total, the saved datasets equal the counts, and one process exchanges nothing."""
    records = ranks(one_and_two[2] / "records")
    config = ptyacc.load_config(mp_config)
    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    k = data.detector_px
    corners = np.clip(np.round(geometry.positions_px - k // 2), 0, np.array(geometry.shape) - k).astype(int)
    sizes = records[0]["parameter_bytes"]
    object_bytes_per_px = sizes["quantities.object.transmission"] // (geometry.shape[0] * geometry.shape[1])
    for record in records:
        for iteration, traffic in enumerate(record["traffic"]):
            steps = global_steps(records, iteration)
            assert traffic["calls"] == len(steps)
            assert traffic["probe"] == len(steps) * sizes["quantities.probe.modes"]
            assert traffic["other"] == len(steps) * sizes["quantities.positions.offsets_px"]
            assert record["comm_bytes"][iteration] == traffic["object"] + traffic["probe"] + traffic["other"]
            if iteration < 2:  # positions still as loaded
                boxes = [(c[:, 0].max() + k - c[:, 0].min()) * (c[:, 1].max() + k - c[:, 1].min())
                         for c in (corners[step] for step in steps)]
                area = geometry.shape[0] * geometry.shape[1]  # a box of WHOLE_FRACTION or more: sent whole
                boxes = [box if box < WHOLE_FRACTION * area else area for box in boxes]
                assert traffic["object"] == object_bytes_per_px * sum(boxes)
            assert traffic["object"] < len(steps) * sizes["quantities.object.transmission"]
        assert all(t > 0 for t in record["comm_time_s"]) and len(record["comm_time_s"]) == 10
    single = ranks(one_and_two[1] / "records")[0]
    assert single["comm_bytes"] == [] and single["comm_time_s"] == []
    saved = ptyacc.load_results(one_and_two[2] / "results" / "results.h5")
    # the run's summary, then each process's peak memory (data.hold's memory lines)
    log = [line for line in (one_and_two[2] / "results" / "run.log").read_text().splitlines()
           if not line.split(" ", 1)[1].startswith(("memory", "finish: "))]
    mean_mib = sum(records[0]["comm_bytes"]) / len(records[0]["comm_bytes"]) / 2**20
    assert log[-1].endswith(f"communication: {mean_mib:.2f} MiB exchanged per iteration, "
                            f"{sum(records[0]['comm_time_s']) / sum(saved.iteration_time_s):.0%} of the iteration "
                            "time spent waiting")
    assert "done: 10 iterations in " in log[-2] and log[-2].endswith(f"final loss {records[0]['loss'][-1]:.6g}")
    single_log = [line for line in (one_and_two[1] / "results" / "run.log").read_text().splitlines()
                  if not line.split(" ", 1)[1].startswith(("memory", "finish: "))]
    assert "done: 10 iterations in " in single_log[-1]  # one process: no communication line
    assert saved.comm_bytes.tolist() == records[0]["comm_bytes"]
    assert saved.comm_bytes_object.tolist() == [t["object"] for t in records[0]["traffic"]]
    assert saved.comm_calls.tolist() == [t["calls"] for t in records[0]["traffic"]]
    assert saved.comm_time_s.shape == (10,)
    assert ptyacc.load_results(one_and_two[1] / "results" / "results.h5").comm_bytes is None


@pytest.mark.slow
def test_footprint_exchange_equals_the_dense_one(mp_config, one_and_two, tmp_path):
    """runtime.object_exchange: dense sums the whole object gradient every step; the footprint
    exchange must give the same parameters bit for bit (outside the footprint every process's
    gradient is exactly zero), while sending fewer bytes."""
    launch([str(WORKER), str(mp_config), str(tmp_path / "records"), "--set", "runtime.object_exchange=dense",
            "--set", f"output.dir={tmp_path / 'results'}"], 2)
    dense, footprint = ranks(tmp_path / "records")[0], ranks(one_and_two[2] / "records")[0]
    assert dense["checksum"] == footprint["checksum"]
    assert dense["loss"] == footprint["loss"]
    steps = [len(global_steps([dense], i)) for i in range(10)]
    object_bytes = dense["parameter_bytes"]["quantities.object.transmission"]
    assert [t["object"] for t in dense["traffic"]] == [n * object_bytes for n in steps]
    assert sum(t["object"] for t in footprint["traffic"]) < sum(t["object"] for t in dense["traffic"])


@pytest.mark.slow
def test_four_processes_give_the_one_process_answer(mp_config, one_and_two, tmp_path):
    """4 real processes (on 2 cores: correctness only) match 1 process, position refinement and a
    delayed probe start included."""
    launch([str(WORKER), str(mp_config), str(tmp_path / "records"), "--set", f"output.dir={tmp_path / 'results'}",
            "--set", "output.figures=false"], 4)
    one = ptyacc.load_results(one_and_two[1] / "results" / "results.h5")
    four = ptyacc.load_results(tmp_path / "results" / "results.h5")
    records = ranks(tmp_path / "records")
    assert len(records) == 4 and len({r["checksum"] for r in records}) == 1
    np.testing.assert_allclose(four.loss, one.loss, rtol=1e-4)
    relative = np.linalg.norm(four.object - one.object) / np.linalg.norm(one.object)
    assert relative < 1e-4, relative
    assert np.abs(four.positions_A - one.positions_A).max() < 1e-4


@pytest.mark.slow
def test_sharded_data_holds_a_share_per_rank_and_converges(mp_config, one_and_two, tmp_path):
    """runtime.shard_data: each of 2 ranks holds about half the patterns (a spatial region),
    steps only inside it, every position is still used once per epoch, ranks stay in sync,
    and the result converges to the replicated one (not bit-equal: batches differ)."""
    out = tmp_path / "results"
    launch([str(WORKER), str(mp_config), str(tmp_path / "records"), "--set", "runtime.shard_data=true",
            "--set", f"output.dir={out}"], 2)
    records = ranks(tmp_path / "records")
    shares = [set(r["held_rows"]) for r in records]
    assert [r["held"] for r in records] == [25, 24]  # 49 positions split 25 / 24
    assert not shares[0] & shares[1] and shares[0] | shares[1] == set(range(49))
    for epoch in map(str, range(10)):
        for record, share in zip(records, shares, strict=True):
            used = [i for step in record["indices"][epoch] for i in step]
            assert set(used) <= share
        assert sorted(i for r in records for step in r["indices"][epoch] for i in step) == list(range(49))
    assert records[0]["checksum"] == records[1]["checksum"]
    sharded = ptyacc.load_results(out / "results.h5")
    replicated = ptyacc.load_results(one_and_two[1] / "results" / "results.h5")
    assert sharded.loss[-1] < 0.15 * sharded.loss[0]
    assert sharded.loss[-1] < 1.2 * replicated.loss[-1]
    px = (replicated.positions_A - replicated.origin_A) / replicated.dx_A  # the scanned region
    (r0, c0), (r1, c1) = np.ceil(px.min(0)).astype(int), np.floor(px.max(0)).astype(int)
    a, b = (np.angle(r.object[0, 0, r0:r1, c0:c1]).ravel() for r in (sharded, replicated))
    assert np.corrcoef(a, b)[0, 1] > 0.9


@pytest.mark.slow
def test_speedtest_writes_tables_and_figure(mp_config, tmp_path):
    """`ptyacc speedtest --processes 1,2 --trials 1`: real launches, per-iteration CSV, summary with
    speed-up relative to 1 process and the spread of final losses, and a PNG."""
    import csv

    out = tmp_path / "st"
    done = subprocess.run([sys.executable, "-c", "from ptyacc.commands.cli import entry_point; entry_point()", "speedtest",
                           str(mp_config), "--processes", "1,2", "--trials", "1", "-o", str(out),
                           "--threads-per-process", "1", "--set", "optim.iterations=3"],
                          capture_output=True, text=True, timeout=300, env=environment())
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(open(out / "speedtest.csv")))
    assert len(rows) == 6 and {r["processes"] for r in rows} == {"1", "2"}
    summary = list(csv.DictReader(open(out / "speedtest_summary.csv")))
    assert [s["processes"] for s in summary] == ["1", "2"]
    assert float(summary[0]["speedup"]) == 1.0
    ratio = float(summary[0]["s_per_iteration"]) / float(summary[1]["s_per_iteration"])
    assert float(summary[1]["speedup"]) == pytest.approx(ratio)
    final = [float(s["final_loss_mean"]) for s in summary]
    assert final[1] == pytest.approx(final[0], rel=1e-4)  # same answer on 1 and 2 processes
    assert (out / "speedtest.png").stat().st_size > 1000
    assert "| processes | trials | s/iteration | exchange s/iteration (waiting) |" in done.stdout
    assert float(summary[0]["comm_mib_per_iteration"]) == 0.0
    two = ptyacc.load_results(out / "p2_t0" / "results.h5")
    assert float(summary[1]["comm_mib_per_iteration"]) == pytest.approx(np.median(two.comm_bytes) / 2**20)
    assert float(summary[1]["comm_mib_per_iteration"]) > 0
    for kind in ("object", "probe", "other"):  # the split, as saved by the run
        assert float(summary[1][f"comm_{kind}_mib_per_iteration"]) == pytest.approx(
            np.median(getattr(two, f"comm_bytes_{kind}")) / 2**20)
    assert float(summary[1]["collectives_per_iteration"]) == np.median(two.comm_calls) > 0
    waiting = float(summary[1]["waiting_fraction"])
    assert waiting == pytest.approx(np.median(two.comm_time_s) / float(summary[1]["s_per_iteration"]))
    assert 0 < waiting < 1


@pytest.mark.slow
def test_torchrun_gives_the_one_process_answer(mp_config, one_and_two, tmp_path):
    """`torchrun --nproc_per_node 2 -m ptyacc.run` works like accelerate launch."""
    out = tmp_path / "results"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), "-m", "ptyacc.run", str(mp_config), "--set", f"output.dir={out}", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment())
    assert done.returncode == 0, done.stderr[-3000:]
    one = ptyacc.load_results(one_and_two[1] / "results" / "results.h5")
    two = ptyacc.load_results(out / "results.h5")
    assert two.attrs["world_size"] == 2
    assert np.linalg.norm(two.object - one.object) / np.linalg.norm(one.object) < 1e-4
