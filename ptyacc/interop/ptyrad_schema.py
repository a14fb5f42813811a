"""What ``ptyrad_params`` needs around the mapping itself: PtyRAD 1.0's params files read, the
defaults PtyRAD fills in for the keys a file leaves out (those that have a ptyacc counterpart), why
a setting has none, a reader of the params that remembers which settings were carried over, and
the written config."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ptyacc.errors import ConfigError, DataError

_OFF = {"start_iter": None}
DEFAULTS: dict[str, Any] = {
    "init_params": {
        "probe_illum_type": "electron", "probe_aberrations": {}, "meas_calibration": {"mode": "fitRBF"},
        "probe_pmode_max": 4, "probe_pmode_init_pows": [0.02], "obj_omode_max": 1, "meas_flipT": None,
        "meas_crop": None, "meas_pad": None, "meas_resample": None, "pos_scan_flipT": None, "pos_scan_affine": None,
        "pos_scan_rand_std": 0.15, "meas_source": "file", "probe_source": "simu", "probe_params": None,
        "pos_source": "simu", "pos_params": None, "obj_source": "simu", "obj_params": None, "tilt_source": "simu",
        "tilt_params": {"tilt_type": "all", "init_tilts": [[0.0, 0.0]]}, "random_seed": None,
        "meas_remove_neg_values": {"mode": "clip_neg", "force": False}, "meas_reshape": None,
        "obj_omode_init_occu": {"occu_type": "uniform"},
    },
    "model_params": {
        "optimizer_params": {"name": "Adam"},
        "update_params": {"obja": {"start_iter": 1, "lr": 5e-4}, "objp": {"start_iter": 1, "lr": 5e-4},
                          "obj_tilts": {"start_iter": None, "lr": 0.0}, "slice_thickness": {"start_iter": None, "lr": 0.0},
                          "probe": {"start_iter": 1, "lr": 1e-4}, "probe_pos_shifts": {"start_iter": 1, "lr": 5e-4}},
    },
    "loss_params": {"loss_single": {"state": True, "weight": 1.0, "dp_pow": 0.5}, "loss_poissn": {"state": False},
                    "loss_pacbed": {"state": False}, "loss_sparse": {"state": False}, "loss_simlar": {"state": False}},
    "constraint_params": {
        "ortho_pmode": {"start_iter": 1}, "fix_probe_int": {"start_iter": 1}, "pos_recenter": {"start_iter": 1},
        "obj_rblur": {"start_iter": 1, "step": 1, "end_iter": None, "obj_type": "both", "kernel_size": 5, "std": 0.4},
        "obj_zblur": {"start_iter": 1, "step": 1, "end_iter": None, "obj_type": "both", "kernel_size": 5, "std": 1.0},
        **{name: dict(_OFF) for name in ("probe_mask_k", "probe_mask_r", "kr_filter", "kz_filter", "kr_thresh",
                                         "complex_ratio", "mirrored_amp", "obj_z_recenter", "obja_thresh",
                                         "objp_postiv", "tilt_smooth")},
    },
    "recon_params": {"NITER": 200, "BATCH_SIZE": {"size": 32, "grad_accumulation": 1}, "GROUP_MODE": "random",
                     "INDICES_MODE": {"mode": "full"}, "SAVE_ITERS": 10, "output_dir": "output/",
                     "compiler_configs": {"enable": False}},
}

_OUTPUT = "ptyacc writes results.h5, run.log and figures into output.dir (`ptyacc export` for TIFF/EMD)"
REASONS: dict[str, str] = {
    "meas_params": "ptyacc reads the file's patterns whole (data.path, data.key)",
    "meas_remove_neg_values": "ptyacc clips negative values to 0 (data.negative)",
    "init_params.meas_normalization": "ptyacc fits the patterns as stored, in counts (no normalisation)",
    "init_params.probe_normalization": "ptyacc scales the initial probe to the patterns' mean total intensity",
    "init_params.meas_permute": "ptyacc reads (N, K, K) or (slow, fast, K, K) patterns",
    "init_params.meas_export": "ptyacc writes prepared patterns with `ptyacc convert`",
    "pos_scan_rand_std": "ptyacc starts from the positions as given (no random jitter)",
    "scan_crop": "ptyacc reconstructs every scan position of the file",
    "sources": "ptyacc starts from a file's object, probe and positions together (model.init_from); "
               "positions alone: experiment.positions",
    "adam_lr": "PtyRAD's Adam step on its normalised patterns and probe; ptyacc keeps its own step here "
               "(`ptyacc init --from-ptyrad --adam-steps` carries it over)",
    "fix_probe_int": "ptyacc lets the probe's intensity be fitted",
    "pos_recenter": "ptyacc keeps the mean position correction at zero with optim.start.scan_affine",
    "tilt_smooth": "ptyacc smooths per-position tilts over model.tilt_smoothing_A (Å)",
    "probe_mask_r": "no ptyacc counterpart (model.recenter.probe_mask_mrad masks in k)",
    "model_params.preload_data": "data.hold chooses where the patterns live",
    "model_params.scheduler_params": "ptyacc's learning rates fall along a cosine to optim.lr_final_fraction",
    "hypertune_params": "`ptyacc tune` has its own search (the tune: section)",
    **{f"recon_params.{name}": _OUTPUT for name in ("prefix_time", "prefix", "postfix", "recon_dir_affixes",
                                                    "copy_params", "selected_figs", "result_modes", "save_result")},
}


@dataclass
class Conversion:
    """A ptyacc config (nested dict), how some of its values were derived, and PtyRAD's settings
    that have no counterpart: (key path, value, why)."""

    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    unmapped: list[tuple[str, Any, str]] = field(default_factory=list)

    def set(self, dotted: str, value: Any) -> None:
        section = self.config
        *parents, last = dotted.split(".")
        for name in parents:
            section = section.setdefault(name, {})
        section[last] = value

    def get(self, dotted: str, default: Any = None) -> Any:
        section: Any = self.config
        for name in dotted.split("."):
            if not isinstance(section, dict) or name not in section:
                return default
            section = section[name]
        return section


def load_ptyrad_params(path: Path) -> dict[str, Any]:
    """The params file as a dict, checked to be one of PtyRAD's (an ``init_params`` section)."""
    try:
        params = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise DataError(f"{path}: not a YAML file ({exc})") from None
    if not isinstance(params, dict) or not isinstance(params.get("init_params"), dict):
        raise DataError(f"{path}: not a PtyRAD params file (no init_params section)")
    return params


def reason(dotted: str) -> str:
    """Why PtyRAD's setting ``dotted`` has no ptyacc counterpart: its own reason or its section's."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in REASONS:
            return REASONS[".".join(parts[:end])]
    return "no ptyacc counterpart"


def config_text(conversion: Conversion, params_path: Path) -> str:
    """The config as YAML: a header naming the params file, how values were derived, the config,
    then PtyRAD's settings without a counterpart, each with its value and why."""
    lines = [f"# ptyacc config from the PtyRAD params file {params_path}, written by `ptyacc init --from-ptyrad`;",
             "# every key: docs/reference/config.md; the mapping: docs/how-to/coming-from-other-packages.md"]
    lines += [f"# {note}" for note in conversion.notes]
    lines.append(yaml.safe_dump(conversion.config, sort_keys=False, default_flow_style=None, width=120).rstrip())
    if conversion.unmapped:
        lines.append("# PtyRAD settings with no ptyacc counterpart (not carried over):")
        for path, value, why in conversion.unmapped:
            shown = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
            lines.append(f"#   {path}: {shown}   # {why}")
    return "\n".join(lines) + "\n"


def merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with ``defaults`` filled in where it has no key (nested dicts merged)."""
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Params:
    """PtyRAD's params (``values``, defaults filled in) read by dotted key path; ``unused`` gives the
    settings of the file as written (``given``) that no ``take`` consumed."""

    def __init__(self, values: dict[str, Any], given: dict[str, Any]):
        self.values, self.given, self.used = values, given, set()

    def get(self, dotted: str) -> Any:
        node: Any = self.values
        for name in dotted.split("."):
            node = node.get(name) if isinstance(node, dict) else None
        return node

    def take(self, dotted: str) -> Any:
        self.used.add(dotted)
        return self.get(dotted)

    def need(self, dotted: str) -> Any:
        """``take`` of a setting PtyRAD requires (no default); a ConfigError naming it if absent."""
        value = self.take(dotted)
        if value is None:
            raise ConfigError(f"{dotted}: missing; PtyRAD needs it too (no default)")
        return value

    def unused(self) -> Iterator[tuple[str, Any]]:
        yield from (leaf for leaf in _leaves(self.given, "") if not self._consumed(leaf[0]) and leaf[1] is not None)

    def _consumed(self, dotted: str) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[:i]) in self.used for i in range(1, len(parts) + 1))


def _leaves(node: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _leaves(value, path + ".")
        else:
            yield path, value
