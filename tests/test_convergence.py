"""optim.stop and optim.iterations: auto: the rule, the schedule's early end, and runs that end when converged."""

import math

import numpy as np
import pytest
import yaml
from conftest import tiny_config
from test_distributed import launch_configs

import ptyacc
from ptyacc.config.steps import AUTO_GAIN, AUTO_ITERATIONS
from ptyacc.errors import ConfigError
from ptyacc.optim.groups import LrSchedule, lr_factor
from ptyacc.quantities.object import DepthBlurStages
from ptyacc.reconstruction.convergence import Convergence, fall_share, resolved_iterations
from ptyacc.reconstruction.history import History


def test_fall_share_is_the_last_windows_fall_over_the_whole_fall():
    loss = [10.0, 6.0, 5.0, 4.5, 4.4]
    assert fall_share(loss, 2) == pytest.approx((5.0 - 4.4) / (10.0 - 4.4))
    assert fall_share(loss, 4) == pytest.approx(1.0)
    assert fall_share(loss, 5) is None  # not window + 1 iterations yet
    assert fall_share([3.0, 3.0, 3.5], 1) is None  # no fall at all: nothing to judge by
    # a loss that rose first is measured from its highest value
    assert fall_share([5.0, 8.0, 6.0, 4.0], 1) == pytest.approx((6.0 - 4.0) / (8.0 - 4.0))
    # an offset (the Poisson loss's counts' own likelihood) changes nothing
    assert fall_share([x - 1e6 for x in loss], 2) == pytest.approx(fall_share(loss, 2))


def test_a_finished_schedule_falls_from_where_it_was_to_the_final_fraction():
    schedule = LrSchedule(100, 0.1, scale=0.5)
    before = [schedule.factor(i) for i in range(30)]
    schedule.finish(30, 35)
    assert before == [0.5 * lr_factor(i, 100, 0.1) for i in range(30)]
    tail = [schedule.factor(i) for i in range(30, 35)]
    expected = [0.5 * (0.1 + (lr_factor(30, 100, 0.1) - 0.1) * 0.5 * (1 + math.cos(math.pi * k / 4))) for k in range(5)]
    np.testing.assert_allclose(tail, expected, rtol=1e-12)
    assert tail[0] == pytest.approx(0.5 * lr_factor(30, 100, 0.1))  # no jump where it turns
    assert tail[-1] == pytest.approx(0.5 * 0.1)
    assert all(a > b for a, b in zip(tail, tail[1:]))
    at_once = LrSchedule(100, 0.1)
    at_once.finish(30, 31)  # one iteration left: it takes the final fraction
    assert at_once.factor(30) == pytest.approx(0.1)


def test_the_rule_ends_the_run_final_iterations_after_it_is_met_and_not_before_it_judges():
    schedule = LrSchedule(50, 0.1)
    rule = Convergence(gain=0.05, window=2, final_iterations=3, first_judged=6, schedule=schedule)
    history = History(50)
    said = []
    for loss in [100.0, 50.0, 40.0, 39.9, 39.85, 39.8, 39.79, 39.78]:
        history.record(loss, 0.1, None)
        said.append(rule(history))
    # flat from the 4th iteration, but judged only from the 6th: met there ((39.9 - 39.8) / 60.2 < 0.05)
    assert said[:5] == [None] * 5 and said[5] is not None and said[6:] == [None, None]
    assert rule.converged_after == 6 and history.iterations == 9
    assert schedule.ends_from == 6 and schedule.iterations == 9
    assert "converged after 6 iterations" in said[5] and "ending after 9 of 50" in said[5]
    assert rule.share == pytest.approx((39.9 - 39.8) / (100.0 - 39.8))


def test_a_loss_that_climbs_is_said_not_called_converged():
    """A loss that rose over the window meets the rule (its share is below the gain) but is no convergence: the
    line is a warning naming the rise and the keys, and the run still ends final_iterations later (the falling
    learning rates bring it down)."""
    rule = Convergence(gain=0.05, window=2, final_iterations=3, first_judged=4, schedule=LrSchedule(50, 0.1))
    history = History(50)
    said = []
    for loss in [100.0, 50.0, 40.0, 45.0, 52.0, 60.0]:
        history.record(loss, 0.1, None)
        said.append(rule(history))
    # at the 4th (50 - 45) / (100 - 45) = 0.09: not met; at the 5th (40 - 52) / (100 - 52): the last two rose by a
    # quarter of the whole fall
    assert said[:4] == [None] * 4 and said[4].startswith("warning: the loss rose over the last 2 iterations (by 0.25")
    assert "not converged" in said[4] and "ending after 8 of 50" in said[4]
    assert all(key in said[4] for key in ("optim.preconditioned_step", "optim.lr", "optim.preconditioner_batch_floor"))
    assert rule.converged_after == 5 and history.iterations == 8 and said[5] is None


def test_a_staged_depth_blur_eases_at_the_rules_first_finding_and_the_rule_judges_again_a_window_later():
    depth = DepthBlurStages(start=8.0, after=1.0)
    assert depth.staged and depth.sigma == 8.0 and DepthBlurStages(1.0, 1.0).staged is False
    schedule = LrSchedule(50, 0.1)
    rule = Convergence(gain=0.05, window=2, final_iterations=3, first_judged=4, schedule=schedule, depth=depth)
    history = History(50)
    said = []
    for loss in [100.0, 50.0, 40.0, 39.9, 39.85, 39.8, 30.0, 29.9, 29.89, 29.88]:
        history.record(loss, 0.1, None)
        said.append(rule(history))
    # met at 5 ((40 - 39.85) / 60.15 < 0.05): the blur eases, judged again from 5 + 2 = 7; the easing lets the loss
    # fall (at 7 and 8 the last two fell 0.14 of the whole: not met); met again at 9 ((30 - 29.89) / 70.11): the run
    # ends 3 later
    assert said[:4] == [None] * 4 and "the depth blur eased after 5 iterations: 8 slices" in said[4]
    assert "now 1 (depth_blur_slices): judged again from iteration 7" in said[4]
    assert depth.eased_after == 5 and depth.sigma == 1.0 and not depth.staged
    assert said[5:8] == [None, None, None] and "converged after 9 iterations" in said[8]
    assert "ending after 12 of 50" in said[8] and rule.converged_after == 9 and history.iterations == 12
    assert said[9] is None
    assert [DepthBlurStages.half_of(n) for n in (1, 2, 7, 20)] == [1, 1, 3, 10]


def test_the_rule_never_extends_a_run_and_waits_for_the_last_quantity_to_start(tmp_path):
    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 12, "stop": {"gain": 0.1, "window": 4,
                                                                                        "final_iterations": 20}}))
    rule = Convergence.of(config, [0, 1, 7], LrSchedule(12, 0.1))
    assert rule.first_judged == 7 + 1 + 4
    history = History(12)
    for loss in [9.0, 5.0] + [4.0] * 10:
        history.record(loss, 0.1, None)
        rule(history)
    assert history.iterations == 12  # met at the last iteration: nothing more is run
    assert Convergence.of(ptyacc.load_config(tiny_config(tmp_path)), [0], LrSchedule(2, 0.1)) is None


def test_iterations_auto_is_a_ceiling_with_the_rule_on(tmp_path):
    config = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": "auto"}))
    resolved, values = resolved_iterations(config)
    assert resolved.optim.iterations == AUTO_ITERATIONS and resolved.optim.stop.gain == AUTO_GAIN
    assert values == {"optim.iterations": AUTO_ITERATIONS, "optim.stop.gain": AUTO_GAIN}
    given = ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": "auto", "stop": {"gain": 0.002}}))
    assert resolved_iterations(given)[1] == {"optim.iterations": AUTO_ITERATIONS}
    assert resolved_iterations(given)[0].optim.stop.gain == 0.002
    numbered = ptyacc.load_config(tiny_config(tmp_path))
    assert resolved_iterations(numbered) == (numbered, {})


@pytest.mark.parametrize("key, value, said", [("stop.gain", 0, "optim.stop.gain: must be in (0, 1)"),
                                              ("stop.window", 0, "optim.stop.window: must be >= 1"),
                                              ("iterations", 0, "optim.iterations: must be auto or >= 1")])
def test_impossible_stop_settings_are_refused_with_their_key(tmp_path, key, value, said):
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        ptyacc.load_config(tiny_config(tmp_path), [f"optim.{key}={value}"])


def _stopping_config(tmp_path) -> dict:
    return tiny_config(tmp_path, optim={"iterations": 60, "batch_size": 8,
                                        "stop": {"gain": 0.02, "window": 3, "final_iterations": 2}})


def _first_met(loss: list[float], gain: float, window: int, first_judged: int) -> int:
    """The first number of iterations done at which the last window fell by less than gain of the whole fall (from
    the highest loss so far)."""
    for done in range(first_judged, len(loss) + 1):
        seen = np.asarray(loss[:done])
        whole = seen.max() - seen[-1]
        if whole > 0 and (seen[-1 - window] - seen[-1]) < gain * whole:
            return done
    raise AssertionError("the rule was never met")


@pytest.mark.slow
def test_a_run_ends_two_iterations_after_its_loss_stopped_falling(tmp_path):
    rec = ptyacc.reconstruct(ptyacc.load_config(_stopping_config(tmp_path)))
    loss = list(rec.loss)
    converged = rec.results.attrs["converged_after_iterations"]
    # the probe starts at iteration 1 (the default): the rule judges from 1 + 1 + 3 iterations done
    assert converged == _first_met(loss, 0.02, 3, 5)
    assert len(loss) == converged + 2 < 60
    log = (tmp_path / "out" / "run.log").read_text()
    assert f"converged after {converged} iterations" in log and f"ending after {converged + 2} of 60" in log
    saved = ptyacc.load_results(tmp_path / "out" / "results.h5")
    assert len(saved.loss) == len(loss) and saved.attrs["converged_after_iterations"] == converged


@pytest.mark.slow
def test_two_processes_stop_where_one_does(tmp_path):
    config = _stopping_config(tmp_path)
    config["data"]["simulate"].update(scan_shape=[7, 7])
    # on three slices with a staged depth blur: the rule's first finding eases it, its second ends the run
    config["model"] = {"slices": 3, "slice_thickness_A": 2.0}
    config["optim"]["regularize"] = {"depth_blur_start_slices": 2.0, "depth_blur_slices": 0.5}
    outs = launch_configs(tmp_path, [(f"p{n}", config, n, []) for n in (1, 2)])
    one, two = (ptyacc.load_results(outs[f"p{n}"] / "results" / "results.h5") for n in (1, 2))
    assert one.attrs["converged_after_iterations"] == two.attrs["converged_after_iterations"]
    eased = one.attrs["depth_blur_eased_after_iterations"]
    assert eased == two.attrs["depth_blur_eased_after_iterations"] < one.attrs["converged_after_iterations"]
    assert len(one.loss) == len(two.loss) < 60
    np.testing.assert_allclose(two.loss, one.loss, rtol=1e-4)
    assert np.linalg.norm(two.object - one.object) / np.linalg.norm(one.object) < 1e-4
    assert yaml.safe_load(one.attrs["config"])["optim"]["stop"]["gain"] == 0.02


def test_a_fixed_run_eases_its_depth_blur_after_half_its_iterations_and_a_resumed_run_keeps_when(tmp_path, monkeypatch):
    """Without a stop rule the first stage (``optim.regularize.depth_blur_start_slices``) lasts half the iterations;
    a checkpoint keeps when it ended, so a resumed run neither blurs with the start value again nor moves the end."""
    import ptyacc.quantities.object as object_module
    from ptyacc.reconstruction.checkpoint import checkpoint_folder

    used, blur = [], object_module.blur_depth
    monkeypatch.setattr(object_module, "blur_depth", lambda obj, sigma: (used.append(sigma), blur(obj, sigma))[1])
    config = ptyacc.load_config(tiny_config(
        tmp_path, model={"slices": 3, "slice_thickness_A": 2.0}, output={"checkpoint_every": 1, "keep_checkpoints": 9},
        optim={"iterations": 6, "regularize": {"depth_blur_start_slices": 2.0, "depth_blur_slices": 0.5}}))
    rec = ptyacc.reconstruct(config)
    assert used == [2.0] * 3 + [0.5] * 3  # one blur after each iteration
    assert rec.results.attrs["depth_blur_eased_after_iterations"] == 3
    assert "the depth blur eased after 3 iterations: 2 slices" in (tmp_path / "out" / "run.log").read_text()
    for late in sorted(checkpoint_folder(tmp_path / "out").glob("ckpt_*.pt"))[4:]:  # back to 4 iterations done
        late.unlink()
    used.clear()
    resumed = ptyacc.reconstruct(config, resume=True)
    assert used == [0.5, 0.5] and resumed.results.attrs["depth_blur_eased_after_iterations"] == 3
    np.testing.assert_allclose(resumed.loss[:4], rec.loss[:4])
    # auto on a weak scatterer: one stage, nothing eased
    one_stage = ptyacc.load_config(tiny_config(tmp_path / "b", model={"slices": 3, "slice_thickness_A": 2.0}))
    assert "depth_blur_eased_after_iterations" not in ptyacc.reconstruct(one_stage, write=False).results.attrs


@pytest.mark.parametrize("key", ["depth_blur_slices", "depth_blur_start_slices"])
def test_a_depth_blur_on_one_slice_is_refused_with_its_key(tmp_path, key):
    with pytest.raises(ConfigError, match=f"optim.regularize.{key}: blurs a multislice object along depth"):
        ptyacc.load_config(tiny_config(tmp_path), [f"optim.regularize.{key}=2"])
    assert ptyacc.load_config(tiny_config(tmp_path), [f"optim.regularize.{key}=0"])  # 0 (off) is fine on one slice
