"""Resumable checkpoints: model, optimizers, iteration and loss history, written atomically.

A checkpoint is ``output.dir/checkpoints/ckpt_<iterations done>.pt``. It is written to a
temporary file in the same folder and renamed, so a run killed during a save leaves at worst a
stray temporary file, never a damaged checkpoint under a final name; ``latest_checkpoint``
also skips a final-named file that does not load (a copy cut short). A disk that fills up
during a save removes the temporary file and stops the run with one line giving the space needed;
the previous checkpoint is untouched and ``--resume`` continues from it. All processes hold
identical state, so the main process alone writes.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import torch

from ptyacc.errors import ConfigError
from ptyacc.quantities.model import PtychoModel
from ptyacc.results.outdir import atomic_write

FOLDER = "checkpoints"
NAME = re.compile(r"^ckpt_(\d{6,})\.pt$")
FORMAT = 1


def checkpoint_folder(out_dir: Path) -> Path:
    return out_dir / FOLDER


def save_checkpoint(out_dir: Path, state: dict, keep: int) -> Path:
    """Write ``state`` (with 'iterations_done') atomically; delete all but the ``keep`` newest."""
    folder = checkpoint_folder(out_dir)
    path = folder / f"ckpt_{state['iterations_done']:06d}.pt"
    previous = _listed(folder)
    advice = (f"the run stops; {previous[0].name} is untouched: free space, then continue with --resume" if previous
              else "the run stops, with no checkpoint saved yet: free space and run again")
    with atomic_write(path, _tensor_bytes(state), advice) as tmp:
        write_checkpoint_file(tmp, {"format": FORMAT, **state})
    for old in _listed(folder)[keep:]:
        old.unlink(missing_ok=True)
    return path


def write_checkpoint_file(path: Path, state: dict) -> None:
    """The one place that writes checkpoint bytes (tests interrupt it to simulate a kill)."""
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def latest_checkpoint(out_dir: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint that loads completely, or None."""
    for path in _listed(checkpoint_folder(out_dir)):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a damaged file of any kind: fall back to the previous one
            warnings.warn(f"{path}: skipped, it does not load ({type(exc).__name__})", stacklevel=2)
            continue
        if isinstance(state, dict) and state.get("format") == FORMAT:
            return path, state
    return None


def restore(model: PtychoModel, named: list[tuple[str, torch.optim.Optimizer]], state: dict, path: Path) -> None:
    """Load a checkpoint into the bare model and the optimizers of its groups (``named``: (group name,
    optimizer) pairs), with a clear error when the config has changed the shapes (other modes, slices,
    data) or the refined quantities. Each optimizer takes the state saved under its group's name
    (``optimizer_names``); a checkpoint written before names were saved gives them in order."""
    own = model.state_dict()
    state = dict(state, model=model.upgraded_state(state["model"]))  # names of earlier versions made today's
    pairs = _paired(named, state, path)  # first: other refined quantities are named as such, not as missing tensors
    for name, tensor in state["model"].items():
        if name in own and own[name].shape != tensor.shape:
            raise ConfigError(f"{path}: {name} has shape {tuple(tensor.shape)} but this config builds "
                              f"{tuple(own[name].shape)}; resume with the config that wrote the checkpoint")
    missing = sorted(set(own) - set(state["model"]))
    if missing:
        raise ConfigError(f"{path}: no {', '.join(missing)} in the checkpoint; resume with the config that wrote it")
    model.load_state_dict(state["model"])
    for name, optimizer, saved in pairs:
        mine, theirs = _kind(optimizer.param_groups[0]), _kind((saved.get("param_groups") or [{}])[0])
        if None not in (mine, theirs) and mine != theirs:
            key = {"object": "optim.object_optimizer", "probe": "optim.probe_optimizer"}.get(name, f"the {name} group")
            raise ConfigError(f"{path}: written with {theirs} for {key}, this config steps it with {mine}; resume "
                              f"with {key} set as when it was written (that run's run.log says what auto chose)")
        _check_moments(name, optimizer, saved, path)
        optimizer.load_state_dict(saved)


def _paired(named: list[tuple[str, torch.optim.Optimizer]], state: dict, path: Path) -> list[tuple[str, object, dict]]:
    """(name, optimizer, saved state) of every group: by name, or in order in a checkpoint without names."""
    saved, names = state["optimizers"], state.get("optimizer_names")
    mine = [name for name, _ in named]
    if names is None:
        if len(named) != len(saved):
            raise ConfigError(f"{path}: written with {len(saved)} optimizers, this config has "
                              f"{len(named)} (position refinement switched on or off?)")
        in_order = sorted(named, key=lambda pair: _legacy_rank(pair[0]))
        return [(name, optimizer, s) for (name, optimizer), s in zip(in_order, saved, strict=True)]
    if sorted(mine) != sorted(names):
        added, gone = sorted(set(mine) - set(names)), sorted(set(names) - set(mine))
        what = "; ".join(part for part in (f"this config also refines {', '.join(added)}" if added else "",
                                           f"it refined {', '.join(gone)}, this config does not" if gone else "") if part)
        raise ConfigError(f"{path}: the refined quantities differ: {what}; resume with the config that wrote it")
    by_name = dict(zip(names, saved, strict=True))
    return [(name, optimizer, by_name[name]) for name, optimizer in named]


LEGACY_FIRST = ("object", "probe", "positions", "scan_affine")  # the groups' order before names were saved
LEGACY_LAST = ("detector_blur", "detector")


def _legacy_rank(name: str) -> int:
    """Where a group came in a checkpoint written before optimizers were saved by name: the object, the probe, the
    positions and the scan affine first, the detector's blur and fit last, the others in today's order between."""
    if name in LEGACY_FIRST:
        return LEGACY_FIRST.index(name) - len(LEGACY_FIRST)
    return LEGACY_LAST.index(name) + 1 if name in LEGACY_LAST else 0


def _check_moments(name: str, optimizer: torch.optim.Optimizer, saved: dict, path: Path) -> None:
    """A clear error, not a crash in the next step, where a saved Adam moment's shape is not its parameter's. The
    object's is left alone: a split object's checkpoint holds the whole object's moments, which its tile takes its
    part of (``tiles.py``)."""
    if name == "object":
        return
    params = [param for group in optimizer.param_groups for param in group["params"]]
    ids = [i for group in saved.get("param_groups", []) for i in group["params"]]
    for param, i in zip(params, ids):
        for key in ("exp_avg", "exp_avg_sq"):
            moment = saved.get("state", {}).get(i, {}).get(key)
            if isinstance(moment, torch.Tensor) and moment.shape != param.shape:
                raise ConfigError(f"{path}: the {name} group's saved {key} has shape {tuple(moment.shape)}, its "
                                  f"parameter {tuple(param.shape)}; resume with the config that wrote the checkpoint")


def _kind(group: dict) -> str | None:
    """The optimizer an optimizer param group (or a saved one) belongs to: adam or preconditioned
    (``groups.PreconditionedDescent`` keeps a floor, ``ProbeDescent`` a factor); None: not known."""
    if "floor" in group or "factor" in group:
        return "preconditioned"
    return "adam" if "betas" in group else None


def _tensor_bytes(value) -> int:
    """Bytes of the tensors in a (nested) state: about the size of its checkpoint file."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _listed(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    found = [(int(m[1]), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]
