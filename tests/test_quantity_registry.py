"""A refined quantity defined here alone, with no change to the package (ptyacc/quantities/registry.py):
a gain per pattern (the beam current of each exposure), registered, refined to the truth on data
that the benchmark grid's NumPy simulator (independent of ptyacc) made with such gains, and saved
in results.h5 under its own name."""

import h5py
import numpy as np
import pytest
import torch
from torch import nn

import ptyacc
from ptyacc.optim.groups import ParameterGroup
from ptyacc.optim.row_adam import RowAdam
from ptyacc.quantities import Quantity, register, unregister

GAIN_SPREAD = 0.2


class PatternGain(Quantity):
    """A gain per pattern, exp(log_gain): every predicted pattern times its position's gain."""

    name = "pattern_gain"

    def __init__(self, positions: int) -> None:
        super().__init__()
        self.log_gain = nn.Parameter(torch.zeros(positions))

    def intensity_factor(self, indices: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.log_gain[indices])

    def groups(self, config, model, priors) -> list[ParameterGroup]:
        # from iteration 2: the object first takes shape; one row per position, stepped at its visits
        return [ParameterGroup(self.name, [self.log_gain], 0.05, 2, optimizer=RowAdam([self.log_gain], 0.05),
                               after_iteration=self.centre)]

    @torch.no_grad()
    def centre(self) -> None:
        self.log_gain -= self.log_gain.mean()  # a common gain is the probe's power

    def saved(self, model) -> dict[str, np.ndarray]:
        return {"gain": torch.exp(self.log_gain.detach()).double().cpu().numpy()}


@pytest.fixture
def gains(grid_simulator, tmp_path):
    """A 14 x 14 scan (80 kV, 100 Å underfocus) whose patterns were taken at currents 20 % rms apart."""
    setting = grid_simulator.Setting(defocus_A=100.0, dose=0, scan_shape=(14, 14), detector_px=48, seed=4)
    sim = grid_simulator.simulate(setting)
    rng = np.random.default_rng(9)
    gain = np.clip(1 + GAIN_SPREAD * rng.standard_normal(196), 0.3, None)
    clean = sim["patterns"].reshape(196, 48, 48).astype(np.float64)
    path = tmp_path / "gains.h5"
    with h5py.File(path, "w") as f:
        f["patterns"] = rng.poisson(clean * 1e5 * gain[:, None, None]).astype(np.float32).reshape(14, 14, 48, 48)
        f["positions_A"] = sim["positions_A"]
        f.attrs.update(energy_eV=setting.energy_eV, semiangle_mrad=setting.semiangle_mrad, defocus_A=100.0,
                       dk_invA=sim["dk_invA"])
    return path, gain


@pytest.mark.slow
def test_a_quantity_defined_in_a_test_is_refined_to_the_truth(gains, tmp_path):
    path, gain = gains
    factory = register(lambda config, model, context: PatternGain(len(model.positions_px)))
    try:
        config = ptyacc.load_config({"data": {"path": str(path)}, "experiment": {"positions": {"key": "positions_A"}},
                                     "optim": {"iterations": 30}, "runtime": {"progress": False},
                                     "output": {"dir": str(tmp_path / "out"), "figures": False}})
        rec = ptyacc.reconstruct(config)
    finally:
        unregister(factory)
    found = rec.results.quantities["pattern_gain"]["gain"]
    relative = found / found.mean() / (gain / gain.mean())
    # measured: correlation 0.991, the gains 4 % rms off (20 % rms given)
    assert np.corrcoef(found, gain)[0, 1] > 0.98 and np.sqrt(np.mean((relative - 1) ** 2)) < 0.06
    with h5py.File(tmp_path / "out" / "results.h5") as f:
        np.testing.assert_array_equal(f["pattern_gain/gain"][()], found)
    assert list(rec.model.quantities) == ["object", "probe", "pattern_gain"]  # the object and the probe first
    # unregistered: the next run has no such quantity
    assert "pattern_gain" not in ptyacc.reconstruct(config, write=False, overwrite=True).model.quantities



class EarlierGain(PatternGain):
    """The same gain written against the earlier protocol, whose ``groups`` took (config, model) only."""

    name = "earlier_gain"

    def groups(self, config, model) -> list[ParameterGroup]:
        return [ParameterGroup(self.name, [self.log_gain], 0.05, 1)]


def test_a_quantity_of_the_earlier_groups_protocol_is_still_refined(gains, tmp_path):
    """``groups(config, model)`` without the priors: the groups are built asking it that way, and it is refined."""
    factory = register(lambda config, model, context: EarlierGain(len(model.positions_px)))
    try:
        config = ptyacc.load_config({"data": {"path": str(gains[0])}, "experiment": {"positions": {"key": "positions_A"}},
                                     "optim": {"iterations": 2}, "runtime": {"progress": False}})
        rec = ptyacc.reconstruct(config, write=False)
    finally:
        unregister(factory)
    assert float(rec.model.quantities["earlier_gain"].log_gain.detach().abs().max()) > 0  # stepped from iteration 1
