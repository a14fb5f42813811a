"""runtime.shard_object: the tiling (unit), Adam on a tile against torch's, the errors, and real
processes (2 and 4, gloo) against the same config with runtime.shard_data alone."""

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import tiny_config
from test_distributed import WORKER, launch, ranks

import ptyacc
from ptyacc.data import load_data, spatial_shards
from ptyacc.data.positions import raster_positions_A
from ptyacc.data.store import ShardPlan, spatial_bisection
from ptyacc.errors import ConfigError
from ptyacc.optim.groups import fast_adam
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.reconstruction.tiles import TiledAdam, Tiling, plan_tiling

K = 16


# ----------------------------------------------------------------------------- the tiling


def scan(layout: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if layout == "raster":
        return raster_positions_A((8, 8), 0.9) + rng.normal(scale=0.05, size=(64, 2))
    return rng.uniform(0, 8.0, size=(80, 2)) * [1.0, 1.6]


@pytest.mark.parametrize("layout", ["raster", "random"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 6])
def test_tiles_partition_the_object_and_follow_the_shards(layout, world):
    """Every pixel owned once; the shards are spatial_shards'; each shard's centre pixels lie
    in its own tile where the shards are whole blocks of scan rows and columns (8 x 8 raster on
    1, 2, 4 processes; a shard boundary through a scan row cannot be followed by a straight
    cut); every window a position can reach, moved by up to the margin, lies in its process's
    local region, which holds the owned tile."""
    positions_A = scan(layout, world)
    geometry = ObjectGeometry.around(positions_A, 0.3, K)
    shards, cut = spatial_bisection(positions_A, world)
    assert all((a == b).all() for a, b in zip(shards, spatial_shards(positions_A, world), strict=True))
    margin = 3.0
    tiling = Tiling.plan(shards, cut, geometry.positions_px, geometry.shape, K, margin)
    owners = np.zeros(geometry.shape, dtype=int)
    for y0, y1, x0, x1 in tiling.owned:
        owners[y0:y1, x0:x1] += 1
    assert (owners == 1).all()
    high = np.array(geometry.shape) - K
    for r, shard in enumerate(shards):
        (y0, y1, x0, x1), (ly0, ly1, lx0, lx1) = tiling.owned[r], tiling.local[r]
        centres = np.round(geometry.positions_px[shard])
        if layout == "raster" and world in (1, 2, 4):
            assert ((centres[:, 0] >= y0) & (centres[:, 0] < y1) & (centres[:, 1] >= x0) & (centres[:, 1] < x1)).all()
        assert ly0 <= y0 and y1 <= ly1 and lx0 <= x0 and x1 <= lx1
        for dy in (-margin, margin):
            for dx in (-margin, margin):
                moved = geometry.positions_px[shard] + [dy, dx]
                corners = np.clip(np.round(moved - K // 2), 0, high)
                assert (corners[:, 0] >= ly0).all() and (corners[:, 0] + K <= ly1).all()
                assert (corners[:, 1] >= lx0).all() and (corners[:, 1] + K <= lx1).all()


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.9, 0.95)])
def test_tiled_adam_steps_like_torch_adam_and_reads_and_writes_its_state_dicts(betas):
    """One tile = the whole object: the same iterates as torch's (fused) Adam, a learning-rate
    change included, with torch's betas and with ptyacc's default ones; the whole-object state
    dict is torch Adam's, and a tile of it is loaded."""
    torch.manual_seed(0)
    shape = (12, 10)
    one = Tiling(shape, 4, ((0, 12, 0, 10),), ((0, 12, 0, 10),), (np.arange(3),))
    param = torch.nn.Parameter(torch.randn(1, 2, *shape, 2))
    reference = torch.nn.Parameter(param.detach().clone())
    fast = fast_adam(torch.device("cpu"))
    tiled = TiledAdam(param, 0.01, one, 0, 1, betas=betas, fused=fast.get("fused"))
    adam = torch.optim.Adam([reference], lr=0.01, betas=betas, **fast)
    for step in range(6):
        gradient = torch.randn_like(param)
        param.grad, reference.grad = gradient.clone(), gradient.clone()
        if step == 3:
            tiled.param_groups[0]["lr"] = adam.param_groups[0]["lr"] = 0.003
        tiled.step()
        adam.step()
    assert torch.equal(param.detach(), reference.detach())
    whole = tiled.full_state_dict()
    fresh = torch.optim.Adam([torch.nn.Parameter(reference.detach().clone())], lr=1.0)
    fresh.load_state_dict(whole)
    assert fresh.param_groups[0]["lr"] == 0.003
    torch.testing.assert_close(whole["state"][0]["exp_avg"], adam.state[reference]["exp_avg"])
    assert int(whole["state"][0]["step"]) == 6
    two = Tiling(shape, 4, ((0, 5, 0, 10), (5, 12, 0, 10)), ((0, 9, 0, 10), (2, 12, 0, 10)),
                 (np.arange(2), np.arange(2, 4)))
    second = TiledAdam(torch.nn.Parameter(torch.zeros(1, 2, 10, 10, 2)), 1.0, two, 1, 2)
    second.load_state_dict(adam.state_dict())
    torch.testing.assert_close(second.exp_avg_sq, adam.state[reference]["exp_avg_sq"][..., 5:12, :, :])
    assert second.steps == 6 and second.param_groups[0]["lr"] == 0.003
    copy = TiledAdam(torch.nn.Parameter(torch.zeros(1, 2, 10, 10, 2)), 1.0, two, 1, 2)
    copy.load_state_dict(second.state_dict())  # the NaN guard's snapshot and rollback
    torch.testing.assert_close(copy.exp_avg, second.exp_avg)
    assert copy.steps == 6


@pytest.mark.parametrize("owned, held", [((0, 21, 0, 40), (0, 28, 0, 40)), ((0, 40, 17, 40), (0, 40, 9, 40))],
                         ids=["rows", "columns"])
def test_a_tile_steps_with_the_bits_of_torch_adam_on_the_whole_object(owned, held):
    """The owned pixels of a tile (a band of rows; of columns, a strided view of the held region) take
    the very bits that torch's Adam (its fused kernel, as the replicated run has it) gives the whole
    object, and the halo is left alone. The same formula written with tensor operations rounds 1 ulp
    apart on a few values in ten thousand (torch 2.13), which a refined scan affine's normalised steps
    carried to split-object and sharded-data losses 0.1 % apart within the first iteration."""
    torch.manual_seed(1)
    shape = (40, 40)
    whole = torch.nn.Parameter(torch.randn(1, 2, *shape, 2))
    y0, y1, x0, x1 = held
    start = whole.detach()[..., y0:y1, x0:x1, :].clone()
    tile = torch.nn.Parameter(start.clone())
    fast = fast_adam(torch.device("cpu"))
    tiled = TiledAdam(tile, 0.01, Tiling(shape, 4, (owned,), (held,), (np.arange(3),)), 0, 1, fused=fast.get("fused"))
    adam = torch.optim.Adam([whole], lr=0.01, **fast)
    for step in range(5):
        if step == 1:
            snapshot = whole.detach().clone(), copy.deepcopy(adam.state_dict()), tile.detach().clone(), tiled.state_dict()
        # gradients over twelve decades, as an object's are from the scan's middle to beyond its edge
        gradient = torch.randn_like(whole) * 10.0 ** torch.randint(-9, 3, whole.shape)
        whole.grad, tile.grad = gradient.clone(), gradient[..., y0:y1, x0:x1, :].clone()
        adam.step()
        tiled.step()
        if step == 2:  # the NaN guard's rollback to the snapshot: both step on from its step count
            with torch.no_grad():
                whole.copy_(snapshot[0])
                tile.copy_(snapshot[2])
            adam.load_state_dict(snapshot[1])
            tiled.load_state_dict(snapshot[3])
    a, b, c, d = owned
    mine = (..., slice(a - y0, b - y0), slice(c - x0, d - x0), slice(None))
    assert torch.equal(tile.detach()[mine], whole.detach()[..., a:b, c:d, :])
    halo = torch.ones_like(start, dtype=torch.bool)
    halo[mine] = False
    assert torch.equal(tile.detach()[halo], start[halo])


# ----------------------------------------------------------------------------- errors


def test_a_tile_narrower_than_the_probe_window_is_refused(tmp_path):
    """A 42 x 42 px object: 4 tiles of about 21 x 21 px fit the 16 px window; 5 do not (one
    tile is 12 px wide), and the message names the most processes that fit."""
    config = tiny_config(tmp_path)
    config["data"]["simulate"].update(scan_shape=[7, 7])
    config["experiment"]["scan_step_A"] = 1.2
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    config = ptyacc.load_config(path, ["runtime.shard_object=true"])
    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    assert geometry.shape == (42, 42)
    plan_tiling(config, ShardPlan.spatial(data.positions_A, 4, 0), geometry.positions_px, geometry.shape, K, 4)
    with pytest.raises(ConfigError, match=r"runtime.shard_object: with 5 processes the tile of process 3 is 12 px "
                                          r"wide, narrower than the 16 px probe window .* use at most 4 processes"):
        plan_tiling(config, ShardPlan.spatial(data.positions_A, 5, 0), geometry.positions_px, geometry.shape, K, 4)


def test_more_processes_than_positions_is_refused():
    with pytest.raises(ConfigError, match="runtime.shard_data: 3 positions cannot be shared by 4 processes"):
        ShardPlan.spatial(np.zeros((3, 2)), 4, 0)


@pytest.mark.slow
def test_one_process_with_shard_object_is_the_usual_run(tmp_path):
    """Allowed: one tile is the whole object; run.log says so, and the result is the plain run's."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(tmp_path)))
    plain = ptyacc.reconstruct(ptyacc.load_config(path, [f"output.dir={tmp_path / 'plain'}"]))
    split = ptyacc.reconstruct(ptyacc.load_config(path, ["runtime.shard_object=true",
                                                         f"output.dir={tmp_path / 'split'}"]))
    assert np.array_equal(plain.results.object, split.results.object)
    assert "one process holds the whole object" in (tmp_path / "split" / "run.log").read_text()
    said = [line.split(" ", 1)[1] for line in (tmp_path / "plain" / "run.log").read_text().splitlines()]
    assert not [line for line in said if line.startswith("runtime.shard_object")]  # the plain run splits nothing


# ----------------------------------------------------------------------------- real processes


@pytest.fixture(scope="module")
def tiled_config(tmp_path_factory) -> Path:
    """test_distributed's config on a larger scan (10 x 10 positions 10 px apart, a 108 x 108 px
    object, so that the halos are thinner than the object): position refinement from
    iteration 2, probe from iteration 3, 10 iterations, a checkpoint every 5. Position steps of 0.01 px
    (the default before 0.1): this run's loss rises 3-fold when the probe starts, and ten times larger
    position steps there carry the halo sums' rounding to 1.5e-3 of the loss (rtol 1e-4 below)."""
    folder = tmp_path_factory.mktemp("tiles")
    config = tiny_config(folder, optim={"iterations": 10, "batch_size": 8, "start": {"probe": 3, "positions": 2},
                                        "lr": {"positions": 0.01}},
                         output={"figures": False, "checkpoint_every": 5})
    config["data"]["simulate"].update(scan_shape=[10, 10], position_jitter_A=0.1)
    config["experiment"]["scan_step_A"] = 3.0
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def tiled_runs(tiled_config) -> dict:
    """(mode, processes) -> output folder, for shard_data and shard_object on 2 and 4 processes."""
    runs = {}
    for processes in (2, 4):
        for mode in ("shard_data", "shard_object"):
            out = tiled_config.parent / f"{mode}{processes}"
            launch([str(WORKER), str(tiled_config), str(out / "records"), "--set", f"runtime.{mode}=true",
                    "--set", f"output.dir={out / 'results'}"], processes)
            runs[mode, processes] = out
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_split_object_gives_the_sharded_data_answer(tiled_config, tiled_runs, processes):
    """Same object (rel. L2 < 1e-4), positions, origin and loss as runtime.shard_data alone, with
    position refinement and a delayed probe; the shared parameters stay bit-identical."""
    data = ptyacc.load_results(tiled_runs["shard_data", processes] / "results" / "results.h5")
    split = ptyacc.load_results(tiled_runs["shard_object", processes] / "results" / "results.h5")
    # origin_A follows the probe's drift (model.recenter.hold_probe), which the two agree on to rounding
    assert split.object.shape == data.object.shape and np.allclose(split.origin_A, data.origin_A, rtol=0, atol=1e-4)
    relative = np.linalg.norm(split.object - data.object) / np.linalg.norm(data.object)
    assert relative < 1e-4, relative
    np.testing.assert_allclose(split.loss, data.loss, rtol=1e-4)
    # on 4 processes the edge positions' refinement carries the halo sums' rounding further: on one build machine two
    # of 100 positions differed by up to 8.1e-4 A (2.4 % of the largest move; the object 3e-7, the loss 1.6e-6;
    # on 2 processes bit-identical), at the code before the X-ray changes too, where the machine before gave 1e-4
    assert np.abs(split.positions_A - data.positions_A).max() < (1e-4 if processes == 2 else 2e-3)
    initial = load_data(ptyacc.load_config(tiled_config)).positions_A
    assert np.abs(split.positions_A - initial).max() > 1e-3  # position refinement ran
    records = ranks(tiled_runs["shard_object", processes] / "records")
    assert len({r["checksum"] for r in records}) == 1
    sizes = {tuple(r["object_region"][2:]) for r in records}
    whole = data.object.shape[-2] * data.object.shape[-1]
    held = sum(r["object_region"][2] * r["object_region"][3] for r in records)
    assert held < 2 * whole and max(a * b for a, b in sizes) < 0.8 * whole


def segments_px(records: list[dict], config_path: Path, processes: int) -> int:
    """Pixels of all seg(s, r) = O_s ∩ L_r, s != r: L_r as the processes hold them, O_r the
    tiles of the shard bisection (checked as a partition by the unit test)."""
    config = ptyacc.load_config(config_path)
    data = load_data(config)
    geometry = ObjectGeometry.around(data.positions_A, data.dx_A, data.detector_px)
    plan = ShardPlan.spatial(data.positions_A, processes, 0)
    owned = plan_tiling(config, plan, geometry.positions_px, geometry.shape, data.detector_px, 1).owned
    local = [(y, y + h, x, x + w) for y, x, h, w in (r["object_region"] for r in records)]
    total = 0
    for s, (a, b, c, d) in enumerate(owned):
        for r, (e, f, g, h) in enumerate(local):
            if s != r:
                total += max(0, min(b, f) - max(a, e)) * max(0, min(d, h) - max(c, g))
    return total


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_split_object_exchanges_the_halos_only(tiled_config, tiled_runs, processes):
    """Per step one DDP collective (probe, positions) and two of the halo segments (gradients,
    then values): object bytes = 2 x segments x 8 bytes per complex pixel per step, fewer than the
    footprint exchange of runtime.shard_data alone moves."""
    split = ranks(tiled_runs["shard_object", processes] / "records")
    footprint = ranks(tiled_runs["shard_data", processes] / "records")[0]
    pixels = segments_px(split, tiled_config, processes)
    for record in split:
        for iteration, traffic in enumerate(record["traffic"]):
            steps = len(record["indices"][str(iteration)])
            assert traffic["calls"] == 3 * steps
            assert traffic["object"] == steps * 2 * pixels * 8
    split_bytes = np.mean([t["object"] for t in split[0]["traffic"]])
    footprint_bytes = np.mean([t["object"] for t in footprint["traffic"]])
    assert split_bytes < footprint_bytes, (split_bytes, footprint_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["preconditioned", "adam"])
def test_split_object_resumes_from_its_checkpoint(tiled_config, tiled_runs, optimizer, tmp_path):
    """A 2-process split run's checkpoint after 5 iterations (the whole object and the object's
    optimizer state, as a replicated run's: Adam's moments of the whole object, or none for the
    preconditioned descent, the default on this one slice) resumed on 2 processes ends where the
    uninterrupted run did."""
    uninterrupted = tiled_runs["shard_object", 2] / "results"
    chosen = ["--set", f"optim.object_optimizer={optimizer}"]
    if optimizer == "adam":
        uninterrupted = tmp_path / "adam"
        launch([str(WORKER), str(tiled_config), str(tmp_path / "adam_records"), "--set", "runtime.shard_object=true",
                "--set", f"output.dir={uninterrupted}", *chosen], 2)
    out = tmp_path / "results"
    shutil.copytree(uninterrupted / "checkpoints", out / "checkpoints")
    (out / "checkpoints" / "ckpt_000010.pt").unlink()
    saved = torch.load(out / "checkpoints" / "ckpt_000005.pt", weights_only=True)
    whole = saved["model"]["quantities.object.transmission"]
    assert whole.shape[-3:-1] == ptyacc.load_results(uninterrupted / "results.h5").object.shape[-2:]
    state = saved["optimizers"][saved["optimizer_names"].index("object")]
    if optimizer == "adam":
        assert state["state"][0]["exp_avg"].shape == whole.shape
    else:
        assert state["state"] == {} and state["param_groups"][0]["floor"] == 0.1
    launch([str(WORKER), str(tiled_config), str(tmp_path / "records"), "--set", "runtime.shard_object=true",
            "--set", f"output.dir={out}", "--resume", *chosen], 2)
    resumed = ptyacc.load_results(out / "results.h5")
    reference = ptyacc.load_results(uninterrupted / "results.h5")
    np.testing.assert_allclose(resumed.loss, reference.loss, rtol=1e-5)
    relative = np.linalg.norm(resumed.object - reference.object) / np.linalg.norm(reference.object)
    assert relative < 1e-5, relative
    assert "resumed from" in (out / "run.log").read_text()


MEMORY_WORKER = Path(__file__).with_name("tile_memory_worker.py")


@pytest.mark.slow
def test_split_object_holds_under_035_of_the_object_state_per_process_on_4(tmp_path):
    """A 514 x 514 px, 4-slice object (31 x 31 positions 16 px apart, 32 px window): object,
    gradient and Adam state per process on 4 processes <= 0.35 x one process's (measured
    0.28), counted from the tensors each process holds after a run. (Adam asked for: on several
    slices auto now takes the preconditioned step, whose state is not two moments.)"""
    config = {"data": {"simulate": {"scan_shape": [31, 31], "detector_px": 32, "atoms": 200,
                                    "position_jitter_A": 0.05}},
              "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 20.0, "scan_step_A": 4.8,
                             "dx_A": 0.3},
              "model": {"slices": 4},
              "optim": {"iterations": 1, "batch_size": 64, "start": {"probe": 1, "positions": 0},
                        "object_optimizer": "adam"},
              "output": {"figures": False, "dir": str(tmp_path / "out")}, "runtime": {"progress": False, "seed": 3}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    launch([str(MEMORY_WORKER), str(path), str(tmp_path / "one")], 1)
    launch([str(MEMORY_WORKER), str(path), str(tmp_path / "four"), "runtime.shard_object=true"], 4)
    one, four = ranks(tmp_path / "one")[0], ranks(tmp_path / "four")
    assert one["shape"] == [1, 4, 514, 514, 2] and one["total"] == 4 * 1 * 4 * 514 * 514 * 2 * 4
    ratio = max(r["total"] for r in four) / one["total"]
    assert ratio <= 0.35, ratio
