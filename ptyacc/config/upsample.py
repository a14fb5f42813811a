"""``data.transform.upsample: auto``: the object's pixel for a run, decided from its config alone (the padding
is set as the patterns are read, before any data statistic exists)."""

from __future__ import annotations

from ptyacc.config.schema import Config

# data.transform.upsample's auto where a tilt acts on several slices: on abTEM's tilted SrTiO3 (40 Å, 10 x 10
# positions, depth blur 2) a refined tilt ended 1.4 mrad from the truth at 1, 0.26 at 1.5, 0.13 at 2 and 0.21 at
# 3 (benchmarks/records/2026-11-27-thick-crystals.md); on 43 Å and 20 x 20 positions with the tilt given, the
# opposite tilt fitted best at 1 (benchmarks/records/2026-12-02-tilt-sampling.md). 2: the smallest whole factor
# that was right on both
TILT_UPSAMPLE = 2


def resolved_upsample(config: Config) -> tuple[int, str]:
    """``data.transform.upsample`` for ``config`` with its auto resolved, and why (empty where a number was
    given). Decided from the config alone, as it sets the patterns' padding before they are read: a tilt acts
    where the model has several slices and ``experiment.tilt_mrad`` is not zero, ``optim.start.tilt`` refines it
    or ``model.tilt`` is per position; there, on a far-field dataset without ``pad``, ``TILT_UPSAMPLE``, else 1."""
    upsample = config.data.transform.upsample
    if upsample != "auto":
        return int(upsample), ""
    model, experiment = config.model, config.experiment
    tilted = model.slices > 1 and (any(t != 0 for t in experiment.tilt_mrad) or config.optim.start.tilt is not None
                                   or model.tilt == "per_position")
    if not tilted:
        return 1, "no tilt in a multislice model"
    plain = {"pad given": config.data.transform.pad is not None, "near field": experiment.geometry != "far_field",
             "a data.simulate dataset": config.data.simulate is not None}
    if any(plain.values()):
        return 1, f"a tilt, but {next(why for why, found in plain.items() if found)}"
    how = ("refined" if config.optim.start.tilt is not None else
           "per position" if model.tilt == "per_position" else f"{list(experiment.tilt_mrad)} mrad")
    return TILT_UPSAMPLE, (f"a tilt ({how}) on {model.slices} slices: waves scattered beyond the detector need "
                           "room in the window")
