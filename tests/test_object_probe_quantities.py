"""The object and the probe are quantities (``ptyacc/quantities/object.py``, ``probe.py``): every run has
them first, their tensors are the model's ``object`` and ``probe``, their state lives under
``quantities.object.`` and ``quantities.probe.``, and the forward calls no hook that a quantity's class
does not define itself (``PtychoModel.quantities_with``)."""

import numpy as np
import pytest
import torch
from conftest import tiny_config

import ptyacc
from ptyacc.physics.geometry import ObjectGeometry
from ptyacc.quantities import Quantity
from ptyacc.quantities.model import HOOKS, PtychoModel
from ptyacc.quantities.object import ObjectTransmission
from ptyacc.quantities.probe import Probe

K = 8


def _model() -> PtychoModel:
    positions_px = np.array([[6.0, 6.0], [9.5, 7.25], [11.0, 12.0]])
    geometry = ObjectGeometry(1.0, (0.0, 0.0), (24, 24), positions_px)
    rng = np.random.default_rng(3)
    probe = torch.as_tensor(rng.normal(size=(2, K, K)) + 1j * rng.normal(size=(2, K, K)), dtype=torch.complex64)
    model = PtychoModel(ObjectTransmission(geometry.shape, modes=2, seed=5), Probe(probe), geometry)
    with torch.no_grad():  # an object that is not flat, so that a wrong window shows
        model.object.mul_(torch.as_tensor(rng.uniform(0.5, 1.0, size=(2, 1, 24, 24, 1)), dtype=torch.float32))
    return model


class Gain(Quantity):
    """A factor of every predicted pattern: the one hook it defines."""

    name = "gain"

    def __init__(self) -> None:
        super().__init__()
        self.factor = torch.nn.Parameter(torch.tensor(3.0))

    def intensity_factor(self, indices: torch.Tensor) -> torch.Tensor:
        return self.factor.expand(len(indices))


def test_a_runs_quantities_begin_with_the_object_and_the_probe(tmp_path):
    rec = ptyacc.reconstruct(ptyacc.load_config(tiny_config(tmp_path, optim={"iterations": 1})), write=False)
    model = rec.model
    assert list(model.quantities)[:2] == ["object", "probe"]
    assert model.object is model.quantities["object"].transmission
    assert model.probe is model.quantities["probe"].modes and model.probe_scale is model.quantities["probe"].scale
    state = model.state_dict()
    assert {"quantities.object.transmission", "quantities.probe.modes", "quantities.probe.scale"} <= set(state)
    assert not {"object", "probe", "probe_scale"} & set(state)
    # results.h5's /object and /probe are the quantities' tensors, as complex numbers
    np.testing.assert_array_equal(rec.results.object, torch.view_as_complex(model.object.detach()).numpy())
    probe = (torch.view_as_complex(model.probe.detach()) * model.probe_scale).numpy()
    np.testing.assert_array_equal(rec.results.probe, probe)
    assert "object" not in (rec.results.quantities or {}) and "probe" not in (rec.results.quantities or {})


def test_the_probe_is_stored_over_its_scale_and_the_object_starts_flat():
    model = _model()
    initial = ObjectTransmission((24, 24), modes=2, seed=5).transmission.detach()
    amplitude = torch.linalg.vector_norm(initial, dim=-1)
    torch.testing.assert_close(amplitude, torch.ones_like(amplitude))
    assert torch.equal(torch.atan2(initial[0, ..., 1], initial[0, ..., 0]), torch.zeros(1, 24, 24))
    assert torch.atan2(initial[1, ..., 1], initial[1, ..., 0]).abs().max() > 0  # a further mode: seeded noise
    # a held region starts from the whole object's pixels
    region = ObjectTransmission((24, 24), modes=2, region=(4, 20, 2, 18), seed=5).transmission.detach()
    assert torch.equal(region, initial[:, :, 4:20, 2:18])
    assert float(torch.view_as_complex(model.probe.detach()).abs().max()) == pytest.approx(1.0)


def test_the_forward_calls_no_hook_a_quantity_does_not_define(monkeypatch):
    """The default hooks of ``Quantity`` are never called, not even for the object and the probe; a quantity
    added after a forward is found (the lists are made anew), and its own hook acts."""
    model = _model()
    indices = torch.tensor([0, 2, 1])
    before = model(indices).detach()
    called = []
    for hook in HOOKS:
        monkeypatch.setattr(Quantity, hook, lambda self, *args, hook=hook: called.append(hook))
    assert torch.equal(model(indices).detach(), before)
    model.detector(), model.positions()
    measured = before * 1.5
    model(indices, measured, "amplitude").backward()
    assert called == []
    model.quantities["gain"] = Gain()
    assert torch.equal(model(indices).detach(), 3.0 * before)
    assert called == [] and model.quantities_with()["intensity_factor"] == [model.quantities["gain"]]
    hooked = model.quantities_with()
    assert all(not hooked[hook] for hook in ("probes", "centres", "added_background", "detection"))
    assert hooked["saved"] == [model.quantities["object"], model.quantities["probe"]]  # their results.h5 entries
    assert hooked["attributes"] == [model.quantities["object"]]  # where its depth blur eased


@pytest.mark.parametrize("key", ["quantities.object.transmission", "object"])
def test_a_split_objects_process_takes_its_region_of_a_checkpoint_of_either_layout(key):
    """``runtime.shard_object``: a resumed process cuts its region out of the whole object, saved under today's
    key or, in a checkpoint of before the object was a quantity, under 'object' (renamed by ``restore`` after)."""
    from ptyacc.reconstruction.tiles import ObjectTiles, Tiling

    tiling = Tiling((8, 8), 4, ((0, 8, 0, 8),), ((2, 6, 1, 7),), (np.arange(1),))
    whole = torch.arange(8 * 8 * 2, dtype=torch.float32).reshape(1, 1, 8, 8, 2)
    state = {"model": {key: whole, "positions_px": torch.zeros(1, 2)}, "iterations_done": 3}
    local = ObjectTiles(tiling, 0, 1).localize(state)
    assert torch.equal(local["model"][key], whole[..., 2:6, 1:7, :]) and local["iterations_done"] == 3
    assert torch.equal(state["model"][key], whole)  # the checkpoint itself is left whole
