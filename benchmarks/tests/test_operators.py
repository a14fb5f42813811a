"""The operators of one reconstruction step by kind (benchmarks/operators.py), counted rather
than timed: the classification on a known body, and the exact counts per step of small cases.

The counts are held on purpose: a change that adds an operator, a pass over the batch's waves, an
FFT or a host-device wait to every step fails here, and must update the number below (and the
shipped cases' table in benchmarks/records/2026-11-27-performance.md) with the reason; one that removes some updates them
too. The transforms over the batch's waves must equal those of ``ptyacc bench``'s FFT bound
(``bench.ffts_per_step``): the bound times exactly the transforms a step issues. Counted on the
CPU's path (on a GPU the batch floor of several slices and of the near field takes one ``index_add_`` instead
of a loop)."""

import pytest
import torch

import ptyacc
from benchmarks import operators
from ptyacc.speed import bench

MULTISLICE = {"model": {"slices": 3, "slice_thickness_A": 2.0},
              "data": {"simulate": {"scan_shape": [8, 8], "detector_px": 16, "atoms": 6}}}
NEAR_FIELD = {"data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16, "dose": 1e6, "atoms": 20, "seed": 4}},
              "experiment": {"radiation": "xray", "geometry": "near_field", "energy_eV": 12660,
                             "detector_distance_m": 1.12, "detector_pixel_m": 55e-6, "focus_to_sample_m": 3.65e-3,
                             "scan_step_A": 15000},
              "model": {"background": True, "intensity_weights": True},
              "optim": {"batch_size": 6, "loss": "poisson", "start": {"positions": 1}}}
# per step, counted in iteration 1 (the probe and the positions then refined): operators, passes over
# the batch's waves, FFTs (of which over the batch's waves) and host-device waits
# (the simulated patterns are floats, so the first three take the amplitude loss, whose floor in the patterns' units,
# chain.AMPLITUDE_FLOOR_SHARE, is a number added where the bare floor was: no operator of its own)
CASES = {
    "1 mode, 1 slice": ({}, dict(operators=47, passes=16, ffts=6, wave_ffts=2, syncs=0)),
    # the one wait: the batch floor adds the windows one by one from a host list on a CPU (tests/test_syncs.py)
    "1 mode, 3 slices": (MULTISLICE, dict(operators=112, passes=37, ffts=14, wave_ffts=10, syncs=1)),
    "2 probe modes": ({"model": {"probe_modes": 2}}, dict(operators=49, passes=18, ffts=6, wave_ffts=2, syncs=0)),
    # the Poisson loss's cap (chain.capped_intensity) adds three operators and passes: the cap and the maximum, and the
    # loss written around them (benchmarks/records/2026-12-07-poisson-pull-cap.md)
    # the near field's batch floor (0.5 by default there): the batch's illumination (40 operators, 10 passes) and its
    # one wait, as on several slices (benchmarks/records/2026-12-07-near-field-batch-floor.md)
    "near field, refined positions": (NEAR_FIELD, dict(operators=156, passes=54, ffts=8, wave_ffts=6, syncs=1)),
}


def case_config(tmp_path, sections: dict) -> dict:
    """A simulated 6 x 6 scan of 16 x 16 px patterns, 2 iterations of 8 positions, on the CPU's path,
    with ``sections`` ({section: {key: value}}) laid over it."""
    values = {"data": {"simulate": {"scan_shape": [6, 6], "detector_px": 16, "atoms": 6}},
              "experiment": {"energy_eV": 80e3, "semiangle_mrad": 25.0, "defocus_A": 20.0, "scan_step_A": 0.6, "dx_A": 0.3},
              "optim": {"iterations": 2, "batch_size": 8}, "output": {"dir": str(tmp_path / "out")},
              "runtime": {"progress": False, "seed": 3}}
    for name, section in sections.items():
        if name == "experiment":  # X-ray: none of the electron settings
            values[name] = dict(section)
        else:
            values.setdefault(name, {}).update({key: dict(value) if isinstance(value, dict) else value
                                               for key, value in section.items()})
    return values


def test_operators_are_sorted_by_kind():
    waves = torch.ones(4, 8, 8, dtype=torch.complex64)
    with operators.OperatorKinds(wave_elements=4 * 8 * 8) as kinds:
        spectrum = torch.fft.fft2(waves * 2)  # a pass, an FFT over the waves
        torch.fft.ifft2(spectrum[0])  # an FFT of one wave
        spectrum.view(4, 64).abs().sum()  # a view (not an operator), a pass, a small operator
        torch.empty(4, 8, 8)  # an allocation: no kernel
    assert dict(kinds.counts) == dict(operators=5, passes=2, ffts=2, wave_ffts=1, other=1)
    assert kinds.names["_fft_c2c (ffts)"] == 2 and kinds.names["mul (passes)"] == 1


def test_the_fft_bound_counts_the_transforms_over_the_waves():
    assert bench.ffts_per_step(1, shifted=False) == 2  # the detector's transform and its gradient's
    assert bench.ffts_per_step(3, shifted=False) == 10  # and two propagations between slices, each way
    assert bench.ffts_per_step(1, shifted=True, near_field=True) == 6  # the probe shift, the Fresnel step


@pytest.mark.parametrize("case", CASES)
def test_counts_per_step(tmp_path, case):
    sections, expected = CASES[case]
    values = case_config(tmp_path, sections)
    config = ptyacc.load_config(values)
    counts = operators.count_operators(config, iterations=2, from_iteration=1)
    assert counts["wave_ffts"] == counts["bound_ffts"], counts  # the FFT bound times what a step does
    assert counts["operators"] == counts["passes"] + counts["ffts"] + counts["other"]
    assert {k: counts[k] for k in expected} == expected, (counts["by_name"], counts["sync_sites"])
    if not sections.get("model", {}).get("slices") and "experiment" not in sections:
        # the plain backward conjugates the fresh windows in place (``Multislice.vjp_all(consume=True)``): no copy of
        # conj(patches) inside ``mul`` (the same count: a conj_physical_ for a clone, but no new batch of windows)
        assert "clone (passes)" not in counts["by_name"], counts["by_name"]


# runtime.compile: the pass from the detector field to its gradient field of the cases above (their loss, modes,
# conjugated backward and detector response), eager operators against the compiled kernels and the operators left
# outside them: the sums, and in the planar layout (a CPU's) the two copies of the parts into planes
COMPILED_FIELD = {
    "1 mode, 1 slice": (dict(kind="amplitude", conjugated=True),
                        {True: dict(eager_operators=11, compiled=4, step=40),
                         False: dict(eager_operators=11, compiled=2, step=38)}),
    "near field, refined positions": (dict(kind="poisson", conjugated=True, weights=True, background=True),
                                      {True: dict(eager_operators=20, compiled=6, step=142),
                                       False: dict(eager_operators=20, compiled=4, step=140)}),
}


@pytest.mark.processes  # inductor starts its compiler's workers
@pytest.mark.slow
@pytest.mark.parametrize("planar", [True, False], ids=["planar", "interleaved"])
@pytest.mark.parametrize("case", COMPILED_FIELD)
def test_compiled_field_pass_counts(case, planar):
    """The step's eager field pass (its operators are among the step's counted above) and the kernels and operators
    that replace it under runtime.compile, in either layout: the compiled step's operators are CASES' less the one
    plus the other. The planar layout's two kernels (the loss's sum, the gradient field) vectorise on a CPU; its two
    copies outside them are the price."""
    options, expected = COMPILED_FIELD[case]
    g = torch.Generator().manual_seed(0)
    far = torch.complex(torch.randn(8, 1, 1, 16, 16, generator=g), torch.randn(8, 1, 1, 16, 16, generator=g))
    measured = torch.poisson(5 * torch.rand(8, 16, 16, generator=g), generator=g)
    weights = 1 + 0.1 * torch.rand(8, generator=g) if options.get("weights") else None
    background = 0.1 * torch.rand(16, 16, generator=g) if options.get("background") else None
    # the amplitude loss's floor in the patterns' units, as a step passes it
    floor = 1e-4 if options["kind"] == "amplitude" else None
    counts = operators.field_pass_counts(far, measured, options["kind"], weights, background, None,
                                         options["conjugated"], planar=planar, floor=floor)
    step = CASES[case][1]["operators"] - counts["eager"]["operators"] + counts["compiled"]
    assert dict(eager_operators=counts["eager"]["operators"], compiled=counts["compiled"], step=step) == expected[planar], \
        counts
