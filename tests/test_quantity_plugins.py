"""A quantity from outside the package, as an installed plug-in: a package written here into a folder
of its own (its module and a dist-info with an entry point of the group ``ptyacc.quantities``), found
by ``importlib.metadata`` through the path alone, with no change to ptyacc's files. Its config section
``quantities.pattern_gain`` is checked as the package's own sections are, and a run on two launched
processes finds the plug-in as one process does and ends where it ends."""

import os
import re
import sys
import textwrap

import h5py
import numpy as np
import pytest
import yaml

import ptyacc
from ptyacc.config.plugins import remove_plugin
from tests.conftest import tiny_config

PLUGIN = "pattern_gain"

# the plug-in's module: only ptyacc.extend, the public path, is imported from ptyacc
PLUGIN_SOURCE = '''
"""A gain per pattern (the beam current of each exposure), refined from its own options."""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ptyacc.extend import ParameterGroup, Quantity, QuantityPlugin, RowAdam, clamp, option, require


@dataclass
class GainOptions:
    """quantities.pattern_gain"""

    start: int = option(1, "Iteration from which the gains are refined.")
    lr: float = option(0.05, "Adam's step of the log gain.")
    bound: float = option(0.5, "Largest |log gain|.")

    def _check(self, path):
        require(self.bound > 0, f"{path}.bound", f"must be > 0, got {self.bound}")


class PatternGain(Quantity):
    name = "pattern_gain"

    def __init__(self, positions, options):
        super().__init__()
        self.options = options
        self.log_gain = nn.Parameter(torch.zeros(positions))

    def intensity_factor(self, indices):
        return torch.exp(self.log_gain[indices])

    def groups(self, config, model, priors):
        bound = self.options.bound
        return [ParameterGroup(self.name, [self.log_gain], self.options.lr, self.options.start,
                               optimizer=RowAdam([self.log_gain], self.options.lr),
                               after_step=lambda: clamp(self.log_gain, -bound, bound))]

    def saved(self, model):
        return {"log_gain": self.log_gain.detach().double().cpu().numpy()}

    def attributes(self, model):
        return {"pattern_gain_bound": self.options.bound}


def make_gain(config, model, context):
    return PatternGain(len(model.positions_px), config.quantities["pattern_gain"])


PLUGIN = QuantityPlugin(factory=make_gain, options=GainOptions)
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """The plug-in package in tmp_path/site, on this interpreter's path and on that of the processes it
    launches (PYTHONPATH), as an installed package would be."""
    site = tmp_path / "site"
    (site / "gain_plugin").mkdir(parents=True)
    (site / "gain_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN_SOURCE))
    info = site / "gain_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gain-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ptyacc.quantities]\n{PLUGIN} = gain_plugin:PLUGIN\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    yield site
    remove_plugin(PLUGIN)
    sys.modules.pop("gain_plugin", None)


def test_the_plugins_options_are_read_and_checked_as_a_section(installed_plugin, tmp_path):
    config = ptyacc.load_config(tiny_config(tmp_path), [f"quantities.{PLUGIN}.lr=0.2"])
    options = config.quantities[PLUGIN]
    assert (type(options).__name__, options.lr, options.start, options.bound) == ("GainOptions", 0.2, 1, 0.5)
    assert yaml.safe_load(config.to_yaml())["quantities"] == {PLUGIN: {"start": 1, "lr": 0.2, "bound": 0.5}}
    for setting, message in [
        (f"quantities.{PLUGIN}.lr=fast", f"quantities.{PLUGIN}.lr: expected a number, got 'fast'"),
        (f"quantities.{PLUGIN}.bonud=0.1", f"quantities.{PLUGIN}.bonud: unknown key (did you mean 'bound'?); "
                                           "allowed: start, lr, bound"),
        (f"quantities.{PLUGIN}.bound=-1", f"quantities.{PLUGIN}.bound: must be > 0, got -1.0"),
        ("quantities.pattern_gian={}", "quantities.pattern_gian: no quantity 'pattern_gian' is installed (did you "
                                       f"mean '{PLUGIN}'?)"),
    ]:
        with pytest.raises(ptyacc.ConfigError) as error:
            ptyacc.load_config(tiny_config(tmp_path), [setting])
        assert str(error.value).startswith(message), str(error.value)


def test_ptyacc_tune_searches_a_plugins_option(installed_plugin, tmp_path):
    from ptyacc.config import Config
    from ptyacc.config.tune import key_type

    assert key_type(f"quantities.{PLUGIN}.lr", "tune.params.x", Config) is float
    assert key_type(f"quantities.{PLUGIN}.start", "tune.params.x", Config) is int
    for key, message in [(f"quantities.{PLUGIN}.lrr", "unknown config key (did you mean 'lr'?)"),
                         (f"quantities.{PLUGIN}", f"quantities.{PLUGIN} is a section"),
                         ("quantities", "quantities is a section")]:
        with pytest.raises(ptyacc.ConfigError, match=re.escape(f"tune.params.x: {message}")):
            key_type(key, "tune.params.x", Config)


def test_a_config_without_the_plugin_does_not_import_it(installed_plugin, tmp_path):
    assert ptyacc.load_config(tiny_config(tmp_path)).quantities == {}
    assert "gain_plugin" not in sys.modules


def test_a_plugin_that_does_not_import_is_named_with_its_package(installed_plugin, tmp_path):
    (installed_plugin / "gain_plugin" / "__init__.py").write_text("raise ImportError('needs torch 9')\n")
    with pytest.raises(ptyacc.ConfigError, match=r"quantities\.pattern_gain: the quantity's plug-in gain_plugin:PLUGIN "
                                                 r"\(gain-plugin 0\.1\) did not import: ImportError: needs torch 9"):
        ptyacc.load_config(tiny_config(tmp_path), [f"quantities.{PLUGIN}={{}}"])


@pytest.mark.processes
@pytest.mark.slow
def test_an_installed_plugin_runs_on_one_and_two_launched_processes(installed_plugin, tmp_path):
    """``python -m ptyacc.run`` on 1 process and ``accelerate launch -m ptyacc.run`` on 2 find the plug-in
    through the entry point, take its options (a bound small enough that the gains reach it), and end at the
    same object and gains (to float rounding)."""
    from test_distributed import launch

    bound = 0.004
    found = {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}"
        raw = tiny_config(tmp_path, optim={"iterations": 4, "batch_size": 8},
                          output={"dir": str(out), "figures": False})
        raw["quantities"] = {PLUGIN: {"start": 1, "lr": 0.05, "bound": bound}}
        path = tmp_path / f"p{processes}.yaml"
        path.write_text(yaml.safe_dump(raw))
        launch(["-m", "ptyacc.run", str(path)], processes)
        with h5py.File(out / "results.h5") as f:
            found[processes] = (f["object"][()], f[f"{PLUGIN}/log_gain"][()], float(f.attrs["pattern_gain_bound"]))
    (object_one, gain_one, bound_one), (object_two, gain_two, bound_two) = found[1], found[2]
    assert bound_one == bound_two == bound
    # the option reached every process: Adam's first steps (0.05) took the gains to the bound, and no further
    assert np.abs(gain_one).max() == pytest.approx(bound, rel=1e-6) and (np.abs(gain_one) > bound / 2).mean() > 0.5
    np.testing.assert_allclose(gain_two, gain_one, atol=1e-5)
    assert np.abs(object_two - object_one).max() < 1e-4
