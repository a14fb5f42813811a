"""Host-device synchronisations per step, counted on the CPU by following which tensors would live
on the device (ptyacc/speed/syncs.py): the counter's rules on known cases, and a step of the
single-slice and multislice defaults waits for the GPU at most once (benchmarks/records/2026-11-27-performance.md)."""

import collections

import numpy as np
import torch
from conftest import tiny_config

import ptyacc
from ptyacc.speed import syncs

MULTISLICE = {"model": {"slices": 3, "slice_thickness_A": 2.0},
              "data": {"simulate": {"scan_shape": [8, 8], "detector_px": 16, "atoms": 6}}}
# on a CPU the batch floor adds the batch's windows one by one (descent.window_sum, loop=True, from a
# host list): on a GPU it takes one index_add_ and reads nothing back
CPU_ONLY_SITE = "tolist ptyacc/optim/descent.py"


def _count(body, seeds):
    on_device, sites, calls = syncs.TensorSet(), collections.Counter(), collections.Counter()
    for t in seeds:
        on_device.add(t)
    with syncs.DeviceCalls(on_device, sites, calls):
        body()
    return sum(sites.values()), sites


def test_the_counter_follows_device_tensors():
    device_tensor, host = torch.ones(4), torch.from_numpy(np.arange(4.0))
    cases = {
        "value of a device tensor": (lambda: (device_tensor * 2).sum().item(), 1),
        "bool and int of device tensors": (lambda: (bool(device_tensor.any()), int(device_tensor[0])), 2),
        "device tensor to host": (lambda: device_tensor.cpu().numpy(), 1),
        "host value": (lambda: (host * 2).sum().item(), 0),
        "host copied to the device, blocking": (lambda: host.to("cpu"), 1),
        "host copied to the device, queued": (lambda: host.to("cpu", non_blocking=True), 0),
        "made on the device, then read": (lambda: torch.zeros(3, device="cpu").tolist(), 1),
        "data-sized operator on the device": (lambda: torch.nonzero(device_tensor), 1),
        "dtype change on the host": (lambda: host.to(torch.float32).tolist(), 0),
    }
    for name, (body, expected) in cases.items():
        count, sites = _count(body, [device_tensor])
        assert count == expected, (name, dict(sites))
        assert all("test_syncs" not in site for site in sites)  # places are ptyacc's or accelerate's, else '?'


def test_a_single_slice_step_never_waits_for_the_gpu(tmp_path):
    summary = syncs.count_steps(ptyacc.load_config(tiny_config(tmp_path)), iterations=2)
    assert summary["syncs_per_step"] == 0, summary["sync_sites"]
    assert summary["operators_per_step"] > 20 and summary["calls_per_step"] > 20  # the step was watched


def test_a_multislice_step_with_the_batch_floor_waits_at_most_on_the_cpu_path(tmp_path):
    summary = syncs.count_steps(ptyacc.load_config(tiny_config(tmp_path, **MULTISLICE)), iterations=2)
    assert summary["syncs_per_step"] <= 1, summary["sync_sites"]
    assert all(site.startswith(CPU_ONLY_SITE) for site in summary["sync_sites"]), summary["sync_sites"]


def test_a_blocking_copy_of_the_step_indices_is_counted(tmp_path, monkeypatch):
    """The count can fail: with the step's indices copied as Accelerate's loader would (blocking),
    each step waits for the GPU again."""
    monkeypatch.setattr("ptyacc.data.store.queued_copy", lambda values, device: values.to(device))
    summary = syncs.count_steps(ptyacc.load_config(tiny_config(tmp_path)), iterations=2)
    assert summary["syncs_per_step"] >= 2, summary["sync_sites"]
    assert any("ptyacc/data/store.py" in site for site in summary["sync_sites"])
