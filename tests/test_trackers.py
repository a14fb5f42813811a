"""Trackers (output.trackers): what TensorBoard and MLflow hold after a run, read back with
their own readers and compared with results.h5 and with values computed here; one process
logs in a 2-process run; an interrupted run closes them; a run without trackers imports
none of them; run.log through Accelerate's logger."""

import logging
import math
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml
from conftest import tiny_config

import ptyacc
from ptyacc.errors import ConfigError

ITERATIONS = 5
# both away from their defaults: optim.object_optimizer and probe_optimizer auto then choose Adam,
# whose learning rates are these
LR_OBJECT, LR_PROBE, FINAL_FRACTION = 0.02, 0.02, 0.3


def tracked_config(tmp_path, trackers: list[str], **output) -> dict:
    """A quick run (36 positions of 16 x 16 px) with the probe from iteration 1 and the
    positions from iteration 2, logged every iteration, pictures every 2."""
    return tiny_config(tmp_path, optim={"iterations": ITERATIONS, "lr": {"object": LR_OBJECT, "probe": LR_PROBE},
                                        "lr_final_fraction": FINAL_FRACTION, "start": {"probe": 1, "positions": 2}},
                       output={"trackers": trackers, "image_every": 2, "project": "watch", **output})


def events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    return accumulator


def cosine(iteration: int) -> float:
    return FINAL_FRACTION + (1 - FINAL_FRACTION) * 0.5 * (1 + math.cos(math.pi * iteration / (ITERATIONS - 1)))


@pytest.fixture(scope="module")
def tensorboard_run(tmp_path_factory):
    pytest.importorskip("tensorboard")
    tmp_path = tmp_path_factory.mktemp("tb")
    config = ptyacc.load_config(tracked_config(tmp_path, ["tensorboard"]))
    rec = ptyacc.reconstruct(config)
    return tmp_path / "out", rec


@pytest.mark.slow
def test_tensorboard_holds_one_loss_per_iteration_equal_to_the_results(tensorboard_run):
    out, _ = tensorboard_run
    loss = h5py.File(out / "results.h5")["loss"][()]
    logged = events(out / "watch").Scalars("loss")
    assert [e.step for e in logged] == list(range(1, ITERATIONS + 1))
    np.testing.assert_allclose([e.value for e in logged], loss, rtol=1e-6)  # TensorBoard keeps float32


def test_tensorboard_holds_the_learning_rates_each_group_stepped_with(tensorboard_run):
    out, _ = tensorboard_run
    scalars = events(out / "watch")
    for name, lr, start in (("object", LR_OBJECT, 0), ("probe", LR_PROBE, 1), ("positions", None, 2)):
        logged = scalars.Scalars(f"lr/{name}")
        assert [e.step for e in logged] == list(range(1, ITERATIONS + 1))
        for e in logged:
            if e.step - 1 < start:
                assert e.value == 0.0, (name, e.step)
            elif lr is not None:
                assert e.value == pytest.approx(lr * cosine(e.step - 1), rel=1e-6), (name, e.step)
            else:
                assert e.value > 0


def test_tensorboard_holds_probe_powers_and_position_correction_of_the_final_state(tensorboard_run):
    out, rec = tensorboard_run
    scalars = events(out / "watch")
    with h5py.File(out / "results.h5") as f:
        probe, positions_A, dx_A = f["probe"][()], f["positions_A"][()], f.attrs["dx_A"]
    power = (np.abs(probe) ** 2).sum(axis=(1, 2))
    for m in range(len(probe)):
        assert scalars.Scalars(f"probe/mode_{m}_power_fraction")[-1].value == pytest.approx(power[m] / power.sum(),
                                                                                            rel=1e-5)
    initial_A = rec.data.positions_A
    expected = np.sqrt((((positions_A - initial_A) / dx_A) ** 2).sum(axis=1).mean())
    logged = scalars.Scalars("positions/rms_correction_px")
    assert logged[-1].step == ITERATIONS and expected > 0
    assert logged[-1].value == pytest.approx(expected, rel=1e-4)


def test_tensorboard_holds_the_pictures_at_the_expected_steps_and_shapes(tensorboard_run):
    out, _ = tensorboard_run
    pictures = events(out / "watch")
    with h5py.File(out / "results.h5") as f:
        obj, probe = f["object"][()], f["probe"][()]
    modes, k = probe.shape[0], probe.shape[-1]
    expected = {"object/phase_sum": obj.shape[-2:], "object/amplitude": obj.shape[-2:],
                "probe/modes": (k, modes * (k + 2) + 64), "mean_pattern/measured_vs_predicted": (k, 2 * k + 2)}
    assert set(expected) | {"positions"} == set(pictures.Tags()["images"])
    for tag, (height, width) in expected.items():
        logged = pictures.Images(tag)
        assert [e.step for e in logged] == [2, 4, ITERATIONS], tag
        assert {(e.height, e.width) for e in logged} == {(height, width)}, tag
    assert max(pictures.Images("positions")[-1].height, pictures.Images("positions")[-1].width) == 256


def test_tensorboard_holds_the_resolved_config_as_hyperparameters(tensorboard_run):
    out, _ = tensorboard_run
    (stored,) = (out / "watch").glob("*/hparams.yml")
    hparams = yaml.safe_load(stored.read_text())
    assert hparams["optim.iterations"] == ITERATIONS and hparams["output.trackers"] == "[tensorboard]"
    assert hparams["optim.lr.object"] == LR_OBJECT and hparams["data.simulate.scan_shape"] == "[6, 6]"


@pytest.mark.processes
def test_mlflow_gives_back_the_losses_and_the_pictures(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    config = ptyacc.load_config(tracked_config(tmp_path, ["mlflow"]))
    ptyacc.reconstruct(config)
    out = tmp_path / "out"
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("watch").experiment_id])
    history = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
    assert [m.step for m in history] == list(range(1, ITERATIONS + 1))
    np.testing.assert_allclose([m.value for m in history], h5py.File(out / "results.h5")["loss"][()], rtol=1e-12)
    assert run.data.params["optim.iterations"] == str(ITERATIONS)
    images = [a.path for a in client.list_artifacts(run.info.run_id, "images")]
    assert any(p.startswith("images/object_phase_sum+step+4+") and p.endswith(".png") for p in images), images


@pytest.mark.slow
def test_poisson_deviance_of_each_iteration(tmp_path):
    pytest.importorskip("tensorboard")
    config = ptyacc.load_config(tracked_config(tmp_path, ["tensorboard"], image_every=0))
    config.optim.loss = "poisson"
    rec = ptyacc.reconstruct(config)
    measured = rec.data.patterns.double().numpy()
    saturated = (measured - measured * np.log(np.maximum(measured, 1e-30))).sum()
    counted = (measured >= 1).sum()
    scalars = events(tmp_path / "out" / "watch")
    logged = scalars.Scalars("poisson_deviance")
    expected = (np.asarray(rec.loss) * rec.data.n_patterns - saturated) / (0.5 * counted)
    np.testing.assert_allclose([e.value for e in logged], expected, rtol=1e-5)
    assert scalars.Scalars("poisson_deviance_final")[-1].value == pytest.approx(rec.poisson_deviance, rel=1e-6)


@pytest.mark.slow
def test_poisson_deviance_of_the_fitted_positions_read_from_the_file(tmp_path):
    """With positions left out of the fit and the patterns left in the file (data.hold: disk),
    the logged deviance is that of the fitted positions, whose loss is per fitted pattern."""
    pytest.importorskip("tensorboard")
    from ptyacc.data import load_data
    from ptyacc.data.export import write_dataset
    from ptyacc.reconstruction.validation import validation_positions

    simulated = tracked_config(tmp_path, ["tensorboard"], image_every=0)
    write_dataset(tmp_path / "data.h5", load_data(ptyacc.load_config(simulated)))
    config = ptyacc.load_config({**simulated, "data": {"path": str(tmp_path / "data.h5"), "hold": "disk"},
                                 "experiment": {"positions": {"key": "positions_A"}}})
    config.optim.loss, config.optim.validation_fraction = "poisson", 0.25
    rec = ptyacc.reconstruct(config)
    left_out = validation_positions(rec.data.positions_A, 0.25, config.runtime.seed)
    with h5py.File(tmp_path / "data.h5") as f:
        measured = np.delete(f["patterns"][()].astype(np.float64), left_out, axis=0)
    saturated = (measured - measured * np.log(np.maximum(measured, 1e-30))).sum()
    counted = (measured >= 1).sum()
    logged = events(tmp_path / "out" / "watch").Scalars("poisson_deviance")
    expected = (np.asarray(rec.loss) * len(measured) - saturated) / (0.5 * counted)
    np.testing.assert_allclose([e.value for e in logged], expected, rtol=1e-5)


def test_the_validation_error_is_logged_where_the_history_has_one(tmp_path):
    """optim.validation_fraction (another change) gives History a ``validation`` list; without
    one there is no validation scalar."""
    pytest.importorskip("tensorboard")
    from ptyacc.reconstruction.engine import Reconstructor
    from ptyacc.watch.trackers import Trackers

    reconstructor = Reconstructor(ptyacc.load_config(tracked_config(tmp_path, ["tensorboard"])))
    with reconstructor.closing:
        reconstructor.build()
        reconstructor.run()
        (hook,) = [h for h in reconstructor.hooks if isinstance(h, Trackers)]
        assert "validation_error" not in hook.scalars(reconstructor.history)
        reconstructor.history.validation = [0.5, 0.25]
        assert hook.scalars(reconstructor.history)["validation_error"] == 0.25


def test_an_interrupted_run_closes_its_trackers(tmp_path):
    """Interrupted in iteration 3: the TensorBoard writer is closed (flushed), and its file
    holds the two iterations done, pictures included."""
    pytest.importorskip("tensorboard")
    from ptyacc.reconstruction.distributed import make_accelerator

    config = ptyacc.load_config(tracked_config(tmp_path, ["tensorboard"], image_every=1))
    accelerator = make_accelerator(config.runtime, config.output)
    writers = []

    def interrupt(iteration, indices):
        writers.extend(tracker.writer for tracker in accelerator.trackers)
        if iteration == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ptyacc.reconstruct(config, accelerator=accelerator, on_step=interrupt)
    assert writers and all(writer.all_writers is None for writer in writers)  # SummaryWriter.close() done
    assert accelerator.trackers == []
    logged = events(tmp_path / "out" / "watch")
    assert [e.step for e in logged.Scalars("loss")] == [1, 2]
    assert [e.step for e in logged.Images("probe/modes")] == [1, 2]


def test_trackers_that_fail_to_start_are_closed(tmp_path, monkeypatch):
    """A tracker that fails while starting (here TensorBoard's hyperparameters; a W&B login, in
    life) stops the run, and the trackers already started are closed."""
    pytest.importorskip("tensorboard")
    from accelerate.tracking import TensorBoardTracker

    from ptyacc.reconstruction.distributed import make_accelerator

    started = []

    def refuse(self, values):
        started.append(self.writer)
        raise RuntimeError("no hyperparameters today")

    monkeypatch.setattr(TensorBoardTracker, "store_init_configuration", refuse)
    config = ptyacc.load_config(tracked_config(tmp_path, ["tensorboard"]))
    accelerator = make_accelerator(config.runtime, config.output)
    with pytest.raises(RuntimeError, match="no hyperparameters today"):
        ptyacc.reconstruct(config, accelerator=accelerator)
    assert len(started) == 1 and started[0].all_writers is None and accelerator.trackers == []


def test_a_missing_tracker_package_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    absent = ("wandb", "alembic")  # a tracker, and a module the mlflow extra brings
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a))
    config = ptyacc.load_config(tracked_config(tmp_path, ["tensorboard", "wandb", "mlflow"]))
    with pytest.raises(ConfigError, match=r"output.trackers: wandb, mlflow configured but not installed; install "
                                          r"with pip install 'ptyacc\[wandb,mlflow\]', or remove them"):
        ptyacc.reconstruct(config)
    assert not (tmp_path / "out" / "watch").exists()


def test_unknown_tracker_and_bad_intervals_are_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"output.trackers\[0\]: must be one of .*'tensorbord' \(did you mean"):
        ptyacc.load_config({"output": {"trackers": ["tensorbord"]}})
    with pytest.raises(ConfigError, match="output.log_every: must be >= 1, got 0"):
        ptyacc.load_config({"output": {"log_every": 0}})


NO_TRACKERS = """
import sys, ptyacc, yaml
ptyacc.reconstruct(ptyacc.load_config(yaml.safe_load(sys.argv[1])))
loaded = [m for m in ("ptyacc.watch.trackers", "ptyacc.watch.tracker_images", "tensorboard", "torch.utils.tensorboard",
                      "mlflow", "wandb") if m in sys.modules]
print("loaded:", loaded)
"""


def test_a_run_without_trackers_imports_none_of_them(tmp_path):
    config = tiny_config(tmp_path, optim={"iterations": 1})
    done = subprocess.run([sys.executable, "-c", NO_TRACKERS, yaml.safe_dump(config)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loaded: []" in done.stdout


@pytest.mark.slow
def test_run_log_lines_reach_the_handlers_of_ptyaccs_logger(tmp_path):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("ptyacc").addHandler(handler)
    try:
        ptyacc.reconstruct(ptyacc.load_config(tiny_config(tmp_path)))
    finally:
        logging.getLogger("ptyacc").removeHandler(handler)
    lines = (tmp_path / "out" / "run.log").read_text().splitlines()
    assert len(records) == len(lines) and "[RANK" not in "".join(lines)
    assert [line.split(" ", 1)[1] for line in lines] == [r.getMessage().removeprefix("[RANK 0] ") for r in records]
    # the start-up before the first iteration's line; the summary, the finish, then (data.hold) the run's
    # peak memory: the last lines reach the handlers too
    messages = [line.split(" ", 1)[1] for line in lines]
    first = next(i for i, m in enumerate(messages) if m.startswith("iteration 1/2: "))
    assert messages[first - 1].startswith("start-up: the first iteration began ") and " s reading the data" in messages[first - 1]
    assert messages[-3].startswith("done: 2 iterations")
    assert messages[-2].startswith("finish: ") and messages[-2].endswith("s from the last iteration's end to the results "
                                                                          "saved (the deviance, results.h5, figures)")
    assert messages[-1].startswith("memory: ")


@pytest.mark.processes
@pytest.mark.slow
def test_two_processes_log_once_from_the_main_process(tmp_path):
    pytest.importorskip("tensorboard")
    from test_distributed import launch

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tracked_config(tmp_path, ["tensorboard"])))
    launch(["-m", "ptyacc.run", str(config), "--quiet"], 2)
    out = tmp_path / "out"
    files = [p for p in (out / "watch").rglob("*") if p.is_file()]
    writers = {p.name.split(".")[-2] for p in files if p.name.startswith("events.out.tfevents.")}  # their pids
    assert len(writers) == 1, files
    logged = events(out / "watch").Scalars("loss")
    assert [e.step for e in logged] == list(range(1, ITERATIONS + 1))
    np.testing.assert_allclose([e.value for e in logged], h5py.File(out / "results.h5")["loss"][()], rtol=1e-6)
    saved = ptyacc.load_results(out / "results.h5")
    scalars = events(out / "watch")
    for kind in ("object", "probe", "other"):
        assert [e.value for e in scalars.Scalars(f"exchange/{kind}_bytes")] == getattr(saved, f"comm_bytes_{kind}").tolist()
    np.testing.assert_allclose([e.value for e in scalars.Scalars("exchange/waiting_fraction")],
                               saved.comm_time_s / saved.iteration_time_s, rtol=1e-5)


def test_the_seed_reaches_python_and_numpy(tmp_path):
    """runtime.seed goes through accelerate.utils.set_seed: after a run that draws nothing from
    them, Python's and NumPy's generators are where the seed put them."""
    import random

    ptyacc.reconstruct(ptyacc.load_config(tiny_config(tmp_path, runtime={"seed": 11})), write=False)
    drawn = random.random(), np.random.random()
    random.seed(11)
    np.random.seed(11)
    assert drawn == (random.random(), np.random.random())


def test_pictures_of_a_multislice_object_and_the_probe_key():
    from ptyacc.results.figures import complex_to_rgb as _complex_to_rgb
    from ptyacc.watch.tracker_images import WHEEL_PX, colour_wheel, object_images, positions_image

    rows, cols = np.mgrid[0:20, 0:30]
    phases = np.stack([0.01 * cols, 0.02 * rows])  # (slices, Ny, Nx)
    obj = (np.exp(1j * phases) * np.array([1.0, 0.5])[:, None, None])[None]  # (1, 2, 20, 30)
    images = object_images(obj, (slice(0, 20), slice(0, 30)))
    assert set(images) == {"object/phase_sum", "object/amplitude", "object/phase_slice_0", "object/phase_slice_1"}
    total = phases.sum(axis=0)
    summed = images["object/phase_sum"][..., 0].astype(int)
    assert summed[np.unravel_index(total.argmax(), total.shape)] == 255 and summed[0, 0] == 0
    assert np.all(np.diff(images["object/phase_slice_0"][0, :, 0].astype(int)) >= 0)  # phase grows along x
    assert images["object/phase_sum"].shape == (20, 30, 3) and images["object/phase_sum"].dtype == np.uint8

    wheel = colour_wheel().astype(int)
    right, top = wheel[WHEEL_PX // 2, -2], wheel[1, WHEEL_PX // 2]  # just inside the rim
    np.testing.assert_allclose(right, 255 * _complex_to_rgb(np.array([1.0 + 0j]))[0], atol=12)  # phase 0
    np.testing.assert_allclose(top, 255 * _complex_to_rgb(np.array([1j]))[0], atol=12)  # phase +pi/2 upwards

    picture = positions_image(np.array([[0.0, 0.0], [10.0, 10.0]]), np.array([[0.0, 0.0], [10.0, 5.0]]), 64)
    assert tuple(picture[1, 1]) == (255, 40, 40) and tuple(picture[62, 62]) == (150, 150, 150)
    assert tuple(picture[62, round(5 * 61 / 10) + 1]) == (255, 40, 40)


def test_the_positions_picture_has_its_longer_side_exactly_whatever_the_rounding():
    """Its longer side is the span times (side - 3) / span, which float rounding can put a hair
    above side - 3: that hair must not add a row or column (it did for 51 of these 300 scans)."""
    from ptyacc.watch.tracker_images import positions_image

    for seed in range(300):
        rng = np.random.default_rng(seed)
        initial = rng.uniform(0, 50, (30, 2))
        picture = positions_image(initial, initial + rng.normal(0, 0.3, (30, 2)))
        assert max(picture.shape[:2]) == 256, seed
