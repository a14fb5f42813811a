"""The scaling model against known answers: ring all-reduce times by hand, its limits, the
batch schedule and bytes of tiny cases against ptyacc's own batches and model, the fits."""

import math

import numpy as np
import pytest
import torch
import yaml

from benchmarks.gpu_cases import (
    PTYRAD_A100_ITERATION_S,
    PTYRAD_CASE,
    gpu_step_cost,
    h100_assumption,
    speedup_table,
)
from benchmarks.link_check import (
    LinkMeasurement,
    fit_link,
    measure_link,
)
from benchmarks.scaling import (
    LINKS,
    Exchange,
    Link,
    StepCost,
    ddp_bucket_count,
    dense_exchange,
    epoch_load,
    fit_step_cost,
    footprint_exchange,
    predict_iteration,
    raster_layout,
    ring_allreduce_s,
)
from benchmarks.scaling_check import (
    CheckRow,
    CheckSamples,
    ExchangeOverhead,
    format_check,
    measure_exchange_overhead,
    warm_iterations,
)
from ptyacc.data import EpochBatches
from ptyacc.errors import PtyaccError
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities.detector_fit import DetectorFit
from ptyacc.quantities.model import PtychoModel
from ptyacc.quantities.object import ObjectTransmission
from ptyacc.quantities.positions import PositionCorrections
from ptyacc.quantities.probe import Probe

MIB = 2**20


# ----------------------------------------------------------------------------- ring all-reduce


def test_ring_allreduce_by_hand():
    link = Link("test", latency_s=1e-5, bandwidth_bytes_per_s=1e9)
    # N = 4: 2*3 hops of 10 us, and 2*3/4 of 1 MB at 1 GB/s
    assert ring_allreduce_s(1e6, 4, link) == pytest.approx(6e-5 + 1.5e-3)
    # N = 2: 2 hops, the whole buffer once
    assert ring_allreduce_s(1e6, 2, link) == pytest.approx(2e-5 + 1e-3)
    # one device: nothing to exchange; an empty buffer still pays the latencies
    assert ring_allreduce_s(1e6, 1, link) == 0.0
    assert ring_allreduce_s(0, 8, link) == pytest.approx(14e-5)


def test_ring_bandwidth_term_tends_to_twice_the_buffer():
    link = Link("test", 0.0, 1.0)
    assert ring_allreduce_s(1000, 1000, link) == pytest.approx(2 * 999)


# ----------------------------------------------------------------------------- schedule and prediction


@pytest.mark.parametrize("n, batch, devices", [(64, 16, 4), (100, 7, 3), (10, 4, 3), (37, 100, 4), (9, 2, 4)])
def test_epoch_load_matches_the_batches_dataset(n, batch, devices):
    positions = np.random.default_rng(0).uniform(0, 50, size=(n, 2))
    batches = EpochBatches(positions, batch, devices, "random", seed=0)
    steps = [batches._pieces[s] for s in range(batches.n_steps)]
    assert epoch_load(n, batch, devices) == (batches.n_steps, sum(max(len(p) for p in step) for step in steps))


def test_infinite_link_gives_compute_over_n_plus_update():
    ideal = Link("ideal", latency_s=0.0, bandwidth_bytes_per_s=math.inf)
    cost = StepCost(fixed_s=0.0, per_pattern_s=1e-3, update_s=2e-3)
    exchange = Exchange("any", bytes_per_step=1e9, collectives_per_step=3)
    for devices in (1, 2, 4, 8):
        p = predict_iteration(cost, exchange, ideal, devices, n_patterns=64, batch_size=16)
        assert p.exchange_s == 0.0
        assert p.iteration_s == pytest.approx(64 * 1e-3 / devices + 4 * 2e-3)  # 4 steps of replicated update


def test_one_device_has_no_exchange():
    cost = StepCost(fixed_s=1e-3, per_pattern_s=1e-4, update_s=1e-3)
    awful = Link("awful", latency_s=10.0, bandwidth_bytes_per_s=1.0)
    p = predict_iteration(cost, Exchange("dense", 1e9, 5), awful, 1, n_patterns=100, batch_size=10)
    assert p.exchange_s == 0.0
    assert p.iteration_s == pytest.approx(10 * 1e-3 + 100 * 1e-4 + 10 * 1e-3)


def test_prediction_with_a_link_by_hand():
    link = Link("test", latency_s=1e-4, bandwidth_bytes_per_s=1e8)
    cost = StepCost(fixed_s=2e-3, per_pattern_s=1e-4)
    exchange = Exchange("dense", bytes_per_step=1e6, collectives_per_step=2, collectives_per_iteration=1)
    p = predict_iteration(cost, exchange, link, devices=2, n_patterns=40, batch_size=10)
    # 4 steps of 5 patterns each per device; per step 2 collectives of 2 hops + 1 MB once at 100 MB/s;
    # one more collective per iteration
    assert p.compute_s == pytest.approx(4 * (2e-3 + 5e-4))
    assert p.exchange_s == pytest.approx(4 * (2 * 2e-4 + 1e-2) + 2e-4)


def test_more_processes_than_cores_share_them():
    link = Link("test", latency_s=1e-4, bandwidth_bytes_per_s=1e8)
    cost = StepCost(fixed_s=1e-3, per_pattern_s=1e-4)
    exchange = Exchange("dense", 1e5, 1)
    alone = predict_iteration(cost, exchange, link, 4, 64, 16)
    shared = predict_iteration(cost, exchange, link, 4, 64, 16, cores=2)
    assert shared.iteration_s == pytest.approx(2 * alone.iteration_s)
    assert predict_iteration(cost, exchange, link, 2, 64, 16, cores=2) == predict_iteration(cost, exchange, link, 2, 64, 16)


def test_shared_slowdown_stretches_shared_cores_only():
    link = Link("test", latency_s=1e-4, bandwidth_bytes_per_s=1e8)
    cost, slowed = StepCost(1e-3, 1e-4), StepCost(1e-3, 1e-4, update_s=2e-4, shared_slowdown=1.3)
    exchange = Exchange("dense", 1e5, 1)
    base = predict_iteration(StepCost(1e-3, 1e-4, update_s=2e-4), exchange, link, 2, 64, 16, cores=2)
    shared = predict_iteration(slowed, exchange, link, 2, 64, 16, cores=2)
    assert (shared.compute_s, shared.update_s, shared.exchange_s) == pytest.approx(
        (1.3 * base.compute_s, 1.3 * base.update_s, 1.3 * base.exchange_s))
    # four processes on two cores: half a core each, and the slowdown of sharing on top
    four = predict_iteration(slowed, exchange, link, 4, 64, 16, cores=2)
    assert four.compute_s == pytest.approx(2 * 1.3 * predict_iteration(cost, exchange, link, 4, 64, 16).compute_s)
    # one process has the machine to itself; dedicated devices (no cores given) share nothing
    assert predict_iteration(slowed, exchange, link, 1, 64, 16, cores=2).compute_s == pytest.approx(
        predict_iteration(cost, exchange, link, 1, 64, 16).compute_s)
    assert predict_iteration(slowed, exchange, link, 2, 64, 16).compute_s == pytest.approx(
        predict_iteration(cost, exchange, link, 2, 64, 16).compute_s)


@pytest.mark.processes
def test_side_by_side_runs_are_independent_whole_runs(tmp_path):
    """The runs started together for the slowdown each run the whole config alone (no process
    group): the same losses as a lone run, and every warm iteration's time comes back."""
    from pathlib import Path

    import ptyacc
    from benchmarks.scaling_check import run_side_by_side
    from ptyacc.results.h5file import load_results

    config = Path(__file__).parents[2] / "configs" / "simulated.yaml"
    sets = ["optim.iterations=3", "data.simulate.scan_shape=[6,6]", "data.simulate.detector_px=16",
            "runtime.progress=false"]
    times = run_side_by_side(config, sets, 2, tmp_path / "beside")
    assert len(times) == 2 * 2 and all(t > 0 for t in times)  # 2 copies x the 2 iterations after the first
    lone = ptyacc.reconstruct(ptyacc.load_config(config, [*sets, f"output.dir={tmp_path / 'lone'}"]), write=False)
    for copy in ("copy0", "copy1"):
        assert load_results(tmp_path / "beside" / copy / "results.h5").loss.tolist() == pytest.approx(lone.loss, rel=1e-6)


# ----------------------------------------------------------------------------- bytes from the geometry


def test_footprint_bytes_of_a_tiny_case_by_hand():
    # 2 x 2 scan, 2 px apart, 4 px windows: canvas margin 4//2 + 1 = 3 px, centres at 3 and 5,
    # canvas 8 x 8, window corners at 1 and 3
    layout = raster_layout((2, 2), 2.0, 4)
    assert layout.object_shape == (8, 8)
    assert layout.window_corners().tolist() == [[1, 1], [1, 3], [3, 1], [3, 3]]
    probe_floats = 4 * 4 * 2
    assert dense_exchange(layout).bytes_per_step == 4 * (8 * 8 * 2 + probe_floats)
    # one step of all 4: box rows 1..7, columns 1..7 = 36 px
    assert footprint_exchange(layout, 4).bytes_per_step == 4 * (36 * 2 + probe_floats)
    # two compact steps of 2 (the scan is cut across y first): each box 4 rows x 6 columns
    assert footprint_exchange(layout, 2, "compact").bytes_per_step == 4 * (24 * 2 + probe_floats)


def test_footprint_counts_slices_and_modes():
    one = raster_layout((6, 6), 3.0, 8)
    many = raster_layout((6, 6), 3.0, 8, slices=3, object_modes=2, probe_modes=5)
    probe = lambda layout: layout.probe_modes * 8 * 8 * 2 * 4  # noqa: E731
    obj_one = footprint_exchange(one, 9).bytes_per_step - probe(one)
    obj_many = footprint_exchange(many, 9).bytes_per_step - probe(many)
    assert obj_many == pytest.approx(6 * obj_one)


def test_layout_parameters_are_the_models():
    """The bytes DDP all-reduces today: every parameter of PtychoModel, in its order."""
    layout = raster_layout((3, 4), 2.5, 8, slices=2, probe_modes=3, object_modes=2, refine_positions=True,
                           background=True, intensity_weights=True)
    geometry = ObjectGeometry(1.0, (0.0, 0.0), layout.object_shape, layout.positions_px)
    probe = torch.ones(3, 8, 8, dtype=torch.complex64)
    model = PtychoModel(ObjectTransmission(layout.object_shape, modes=2, slices=2), Probe(probe), geometry,
                        propagator=torch.ones(8, 8, dtype=torch.complex64),
                        refine_positions=True)
    model.quantities["positions"] = PositionCorrections(model.positions_px)
    model.quantities["fitted"] = DetectorFit(8, len(layout.positions_px), background=True, weights=True)
    expected = [(name, p.numel()) for name, p in model.named_parameters()]
    assert layout.parameter_floats() == expected
    assert dense_exchange(layout).bytes_per_step == sum(p.numel() * 4 for p in model.parameters())
    assert np.array_equal(layout.window_corners(), model.fixed_corners.numpy())


def test_ddp_bucket_count():
    assert ddp_bucket_count([100_000, 100_000]) == 1
    assert ddp_bucket_count([30 * MIB, MIB // 2]) == 1  # the probe does not fill the first bucket, the object joins it
    assert ddp_bucket_count([30 * MIB, 2 * MIB]) == 2  # the probe fills the first bucket on its own
    assert ddp_bucket_count([10 * MIB, 10 * MIB, 10 * MIB, 2 * MIB]) == 2  # 2 MiB, then 10 + 10 + 10 >= 25 MiB
    assert ddp_bucket_count([20 * MIB, 20 * MIB, 20 * MIB, 2 * MIB]) == 3


# ----------------------------------------------------------------------------- fits


def test_fit_step_cost_recovers_known_costs():
    fixed, per_pattern, n = 3e-3, 2e-4, 256
    runs = [(n // b, n, n // b * fixed + n * per_pattern) for b in (16, 64, 128)]
    cost = fit_step_cost(runs)
    assert cost.fixed_s == pytest.approx(fixed)
    assert cost.per_pattern_s == pytest.approx(per_pattern)
    with pytest.raises(ValueError, match="two different"):
        fit_step_cost(runs[:1])


def test_fit_link_recovers_known_link():
    true = Link("true", 150e-6, 1.3e9)
    sizes = [8, 1024, 2**17, 2**22, 2**24]
    for processes in (2, 4):
        link = fit_link(sizes, [ring_allreduce_s(b, processes, true) for b in sizes], processes)
        assert link.latency_s == pytest.approx(true.latency_s)
        assert link.bandwidth_bytes_per_s == pytest.approx(true.bandwidth_bytes_per_s)
    # a slower largest buffer decides the bandwidth; the small ones alone the latency
    slow = [ring_allreduce_s(b, 2, true) for b in sizes[:-1]] + [ring_allreduce_s(2**24, 2, Link("", 150e-6, 0.5e9))]
    link = fit_link(sizes, slow, 2)
    assert link.bandwidth_bytes_per_s < 0.6e9
    assert link.latency_s == pytest.approx(true.latency_s, rel=0.01)
    with pytest.raises(ValueError, match="at least 1 MiB"):
        fit_link(sizes[:3], slow[:3], 2)


def test_gpu_assumption_reproduces_its_source():
    """On PtyRAD's own case and GPU the assumed cost is PtyRAD's fitted cost."""
    gpu = h100_assumption()
    k, s, p = PTYRAD_CASE["window_px"], PTYRAD_CASE["slices"], PTYRAD_CASE["probe_modes"]
    layout = raster_layout((128, 128), 3.0, k, slices=s, probe_modes=p)
    on_a100 = gpu_step_cost(layout, gpu.__class__(**{**gpu.__dict__, "memory_bytes_per_s": 2.04e12}))
    n = PTYRAD_CASE["n_patterns"]
    for batch, seconds in PTYRAD_A100_ITERATION_S.items():
        model = n // batch * on_a100.fixed_s + n * on_a100.per_pattern_s
        assert model == pytest.approx(seconds, rel=0.1)
    assert 0 < gpu.efficiency < 1


def test_speedup_table_rows():
    layout = raster_layout((8, 8), 3.0, 16)
    table = speedup_table(layout, 8, StepCost(1e-3, 1e-4, 1e-5), devices=(1, 2, 16))
    rows = table.splitlines()
    assert rows[2].startswith("| 1 | 1.00 / 1.00 | 1.00 / 1.00")
    assert rows[4].startswith("| 16* | –")  # NVLink stops at one node of 8; 16 devices exceed the batch of 8
    assert len(rows[0].split("|")) == len(LINKS) + 3


# ----------------------------------------------------------------------------- this machine


def test_link_measurements_pool_their_repeats():
    true = Link("true", 2e-4, 1e9)
    sizes = (8, 2**16, 2**20)
    slow = LinkMeasurement(2, sizes, tuple((2 * ring_allreduce_s(b, 2, true),) for b in sizes))
    fast = LinkMeasurement(2, sizes, tuple((ring_allreduce_s(b, 2, true),) for b in sizes))
    pooled = slow + fast + fast
    assert pooled.min_s == fast.min_s
    assert pooled.best_link.latency_s == pytest.approx(true.latency_s)
    assert pooled.link.bandwidth_bytes_per_s == pytest.approx(true.bandwidth_bytes_per_s)  # medians: the fast ones
    with pytest.raises(ValueError, match="same processes"):
        slow + LinkMeasurement(4, sizes, slow.times_s)


def test_taking_part_in_the_exchange_costs_every_step_of_a_multi_device_run():
    """exchange_fixed_s: per step, on every device of a multi-device run (times the time-sharing
    share on a CPU), not on one device."""
    exchange, link = Exchange("any", bytes_per_step=1e5, collectives_per_step=1), Link("l", 1e-4, 1e9)
    plain, joined = StepCost(1e-3, 1e-4), StepCost(1e-3, 1e-4, exchange_fixed_s=5e-4)
    for devices, cores, share in ((2, None, 1.0), (4, 2, 2.0)):
        base = predict_iteration(plain, exchange, link, devices, 64, 16)
        more = predict_iteration(joined, exchange, link, devices, 64, 16)
        if cores:
            base = predict_iteration(plain, exchange, link, devices, 64, 16, cores=cores)
            more = predict_iteration(joined, exchange, link, devices, 64, 16, cores=cores)
        assert more.exchange_s - base.exchange_s == pytest.approx(share * 4 * 5e-4)  # 4 steps per iteration
        assert (more.compute_s, more.update_s) == (base.compute_s, base.update_s)
    assert predict_iteration(joined, exchange, link, 1, 64, 16) == predict_iteration(plain, exchange, link, 1, 64, 16)


def test_exchange_overhead_per_step_and_pooling():
    a = ExchangeOverhead(4, (1.0, 1.2), (1.4, 1.8))
    assert a.per_step_s() == pytest.approx((1.6 - 1.1) / 4)
    assert a.per_step_s(min) == pytest.approx((1.4 - 1.0) / 4)
    assert ExchangeOverhead(4, (1.0,), (0.9,)).per_step_s() == 0.0  # faster joined: noise, no negative cost
    pooled = a + ExchangeOverhead(4, (1.0,), (1.0,), same_loss=False)
    assert pooled.plain_s == (1.0, 1.2, 1.0) and not pooled.same_loss
    with pytest.raises(ValueError, match="same steps"):
        a + ExchangeOverhead(8, (1.0,), (1.0,))


def test_check_rows_predict_with_the_measured_overhead_of_taking_part():
    """The check's rows: 1-process rows are the fit; a multi-process row's prediction holds the
    link measured for its process count and the overhead measured for its batch size, per step."""
    layout, true = raster_layout((8, 8), 3.0, 16), Link("true", 2e-4, 1e9)
    n, sizes = layout.n_patterns, (8, 2**14, 2**20)
    samples = CheckSamples()
    samples.links[2] = LinkMeasurement(2, sizes, tuple((ring_allreduce_s(b, 2, true),) for b in sizes))
    for batch, one_s in ((8, 0.10), (32, 0.04)):
        steps = epoch_load(n, batch, 1)[0]
        samples.times[(batch, 1)], samples.times[(batch, 2)] = [one_s], [0.9 * one_s]
        samples.comm[(batch, 1)], samples.comm_s[(batch, 1)] = [], []
        samples.comm[(batch, 2)] = [steps * dense_exchange(layout).bytes_per_step]
        samples.comm_s[(batch, 2)] = [0.01]
    fits = samples.fits(n, [8, 32])
    assert fits[min].fixed_s * 8 + fits[min].per_pattern_s * n == pytest.approx(0.10)
    bare = samples.row(layout, 0, fits, 8, 2, cores=2)
    assert bare.exchange_fixed_s == 0.0 and bare.exchange == "dense (whole object)"
    samples.overheads[8] = ExchangeOverhead(8, (0.10, 0.10), (0.108, 0.108))  # 1 ms per step
    row = samples.row(layout, 0, fits, 8, 2, cores=2)
    assert row.exchange_fixed_s == pytest.approx(1e-3)
    assert row.predicted_median_s - bare.predicted_median_s == pytest.approx(8 * 1e-3)
    assert samples.row(layout, 0, fits, 8, 1, cores=2).predicted_median_s == pytest.approx(0.10)


@pytest.mark.processes
def test_measure_exchange_overhead_in_one_process(tmp_path):
    """A real one-process group: the run with DDP and the exchange hook computes exactly what the
    plain run computes (the same loss every iteration), with the loader's steps per iteration.
    The times are not asserted on."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"simulate": {"scan_shape": [6, 6], "detector_px": 32}},
                                      "optim": {"batch_size": 8}, "output": {"dir": str(tmp_path / "out")}}))
    measured = measure_exchange_overhead(config, [], iterations=3)
    assert measured.steps == 36 // 8
    assert len(measured.plain_s) == len(measured.joined_s) == 2  # the first iteration warms up
    assert measured.same_loss


def test_check_statistics_and_verdict():
    assert warm_iterations([9.0, 1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]  # the first iteration warms up
    assert warm_iterations([9.0, 1.0]) == [9.0, 1.0]
    rows = [CheckRow(32, 1, "–", None, 1e6, 5e5, 0.10, 0.09, 0.10, 0.09, 0.0, None),
            CheckRow(32, 2, "dense (whole object)", 1e6, 1e6, 5e5, 0.10, 0.08, 0.14, 0.09, 0.01, 0.02)]
    text = format_check(rows, StepCost(1e-3, 1e-4), StepCost(1e-3, 1e-4), cores=2)
    assert "medians: largest deviation of the multi-process predictions 40% (NOT within 25%)" in text
    assert "minima: largest deviation of the multi-process predictions 12% (within 25%)" in text



@pytest.mark.processes
def test_measure_link_between_two_processes():
    """Real processes; every timed all-reduce is checked for the right sum in the workers. The
    times themselves are not asserted on (a busy machine may make 8 B slower than 1 MiB): the fit
    is tested on known times above and below."""
    measurement = measure_link(2, sizes_bytes=(8, 2**20), repeats=3)
    assert measurement.sizes_bytes == (8, 2**20)
    assert [len(t) for t in measurement.times_s] == [3, 3]
    assert all(t > 0 for times in measurement.times_s for t in times)
    assert measurement.min_s == [min(t) for t in measurement.times_s]


def test_link_fit_of_disturbed_times_is_a_clear_error():
    """What the failed CI run measured under load: 8 B slower than 1 MiB. One line, no traceback."""
    with pytest.raises(PtyaccError, match="other work on this machine disturbed"):
        fit_link((8, 2**20), [0.00353, 0.00337], 2)


def test_predict_refuses_a_check_it_cannot_fit(capsys):
    from pathlib import Path

    from benchmarks.predict import predict
    from ptyacc.command_line import run_command

    def main(args: list[str]) -> int:  # ``ptyacc predict`` runs this command in a process of its own (tests/test_cli.py)
        return run_command(predict, args, prog_name="ptyacc predict")

    config = str(Path(__file__).parents[2] / "configs" / "simulated.yaml")
    assert main([config, "--processes", "2,4"]) == 2
    assert "--processes must include 1" in capsys.readouterr().err
    assert main([config, "--batch-sizes", "32"]) == 2
    assert main([config, "--batch-sizes", "200,256"]) == 2  # 256 positions: one step either way
    assert "give different numbers of steps" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the object split (scaling_tiles)

from benchmarks.scaling_tiles import (  # noqa: E402
    Case,
    GridTiling,
    Scan,
    TileSizes,
    largest_fitting,
    largest_side,
    layout_tiling,
    replicated_memory,
    split_exchange,
    split_memory,
    tile_sizes,
)
from ptyacc.reconstruction.tiles import HaloExchange  # noqa: E402


def test_memory_of_a_tiny_case_by_hand():
    # 100 px object, 2 slices, 1 object mode: 2 x 2 floats = 16 bytes per pixel; 96 other floats (384 B)
    case = Case(object_px=100, n_patterns=10, window_px=4, slices=2, probe_modes=3, other_floats=96)
    one = replicated_memory(case, batch_size=4, devices=1)
    # object 1600, gradient 1600, Adam 2 x (1600 + 384), others value + gradient 768,
    # patterns 10 x 16 x 4 = 640, waves 4 patterns x 3 modes x 2 slices x 16 px x 8 B = 3072
    assert (one.object, one.gradient, one.adam, one.other_parameters, one.patterns, one.waves) == \
        (1600, 1600, 3968, 768, 640, 3072)
    assert one.total == 11648
    # two processes: 5 patterns and a batch of 2 each; the split holds 60 px and owns 50
    two = split_memory(case, 4, 2, TileSizes(held_px=60, owned_px=50, segment_px=20, narrowest_px=5))
    assert (two.object, two.gradient, two.adam, two.patterns, two.waves) == (960, 960, 2 * (800 + 384), 320, 1536)
    assert two.total == 960 + 960 + 2368 + 768 + 320 + 1536
    assert replicated_memory(case, 4, 2).total == 1600 + 1600 + 3968 + 768 + 320 + 1536


def test_largest_fitting_stops_at_the_boundary():
    assert largest_fitting(lambda s: s * s <= 1000, 1, 1000) == 31
    assert largest_fitting(lambda s: s * s <= 1024, 1, 1000) == 32
    assert largest_fitting(lambda s: False, 5, 9) == 4


def test_largest_side_is_the_last_that_fits():
    scan = Scan(window_px=16, step_px=4.0, slices=2, probe_modes=2, batch_size=8)
    for split, devices in ((False, 1), (False, 4), (True, 4)):
        fits = scan.fits_split if split else scan.fits_replicated
        memory = (split_memory(scan.case(300), 8, devices, scan.grid(300, devices)) if split
                  else replicated_memory(scan.case(300), 8, devices))
        budget = memory.total  # exactly what a 300 px object takes
        side = largest_side(scan, devices, split, device_bytes=budget + 1000, reserve_bytes=1000)
        assert side >= 300 and fits(side, devices, budget) and not fits(side + 1, devices, budget)
        assert largest_side(scan, devices, split, device_bytes=budget - 1 + 1000, reserve_bytes=1000) < 300 \
            or scan.case(299) == scan.case(300)


def test_grid_tiling_by_hand():
    # h = K/2 + margin - step/2 = 5 + 1 - 1 = 5 px past each inner edge
    four = GridTiling(side_px=100, window_px=10, step_px=2.0, margin_px=1.0, devices=4).sizes()
    assert (four.held_px, four.owned_px, four.segment_px) == (55 * 55, 50 * 50, 2 * 5 * 100 * 2 + 4 * 25)
    eight = GridTiling(100, 10, 2.0, 1.0, 8).sizes()  # 4 rows x 2 columns of 25 x 50 px tiles
    assert (eight.held_px, eight.owned_px, eight.segment_px) == (35 * 55, 25 * 50, 2 * 5 * 100 * 4 + 4 * 25 * 3)
    one = GridTiling(100, 10, 2.0, 1.0, 1).sizes()
    assert (one.held_px, one.segment_px) == (100 * 100, 0)


@pytest.mark.parametrize("devices", [2, 4, 8, 16])
def test_grid_tiling_agrees_with_tiles_py(devices):
    scan = Scan(window_px=16, step_px=3.0, slices=1)
    layout = raster_layout((64, 64), scan.step_px, scan.window_px)
    assert layout.object_shape[0] == layout.object_shape[1]
    tiling = layout_tiling(layout, devices, 1.0)
    exact = tile_sizes(tiling)
    # the packed buffer of tiles.py's halo exchange is exactly the segments counted here
    assert exact.segment_px == HaloExchange(tiling, 0, devices).pixels
    grid = GridTiling(layout.object_shape[0], scan.window_px, scan.step_px, 1.0, devices).sizes()
    # the halo bytes within 2%; the busiest held region within 15%, never under (an inner tile with
    # a halo on every side, where tiles.py's edge tiles also own the canvas margins)
    assert grid.segment_px == pytest.approx(exact.segment_px, rel=0.02)
    assert exact.held_px <= grid.held_px <= 1.15 * exact.held_px
    assert grid.owned_px == pytest.approx(exact.owned_px, rel=0.15)


def test_split_exchange_bytes_and_collectives():
    case = Case(object_px=100, n_patterns=10, window_px=4, slices=2, other_floats=96)
    exchange = split_exchange(case, TileSizes(60, 50, 20, 5), [384])
    # two halo all-reduces of 20 px x 16 B, and one DDP bucket of the 384 B of other parameters
    assert exchange.bytes_per_step == 2 * 20 * 16 + 384
    assert exchange.collectives_per_step == 3
