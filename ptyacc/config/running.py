"""The ``output`` and ``runtime`` sections: what a run writes and where, and where and how it
computes (their own module so that schema.py stays one screenful per section)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ptyacc.config.fields import _f, _require


@dataclass
class OutputConfig:
    """What is written, and where."""

    dir: str = _f("results", "Output directory (relative to the working directory).")
    save_every: int = _f(0, "Write results.h5 every this many iterations; 0 = only at the end.")
    figures: bool = _f(True, "Write PNG figures with each save.")
    checkpoint_every: int = _f(0, "Write a resumable checkpoint (model, optimizers, iteration) every this many "
                                  "iterations into dir/checkpoints; 0 = never. Resume with `--resume`.")
    checkpoint_minutes: float = _f(10.0, "Also write a resumable checkpoint whenever this many minutes of wall time "
                                          "have passed since the last one, so that a killed run loses at most that "
                                          "much; 0 = never. SIGINT (Ctrl-C) and SIGTERM always save before stopping.")
    keep_checkpoints: int = _f(2, "How many of the newest checkpoints to keep.")
    trackers: list[Literal["tensorboard", "wandb", "mlflow", "aim", "comet_ml", "clearml", "dvclive", "swanlab",
                           "trackio"]] = _f(
        factory=list, doc="Experiment trackers that follow the run live, through Accelerate's `log_with` (main process "
                          "only): each needs its extra, e.g. `pip install 'ptyacc[tensorboard]'`. TensorBoard writes to "
                          "dir/project, MLflow to dir/mlruns unless MLFLOW_TRACKING_URI is set. Empty: none, and "
                          "nothing of them is imported. Not with the Python API's write=False.")
    project: str = _f("ptyacc", "The trackers' project: TensorBoard's sub-folder of dir, the W&B project, the MLflow "
                                "experiment.")
    log_every: int = _f(1, "Send the scalars (loss, learning rates, timing, exchange, position correction, probe mode "
                           "powers, Poisson deviance) to the trackers every this many iterations, and after the last.")
    image_every: int = _f(10, "Send pictures (object phase and amplitude, probe modes, positions, mean patterns) to the "
                              "trackers every this many iterations, and after the last; 0 = after the last only.")

    def _check(self, path: str) -> None:
        _require(self.save_every >= 0, f"{path}.save_every", f"must be >= 0, got {self.save_every}")
        _require(self.log_every >= 1, f"{path}.log_every", f"must be >= 1, got {self.log_every}")
        _require(self.image_every >= 0, f"{path}.image_every", f"must be >= 0, got {self.image_every}")
        _require(self.checkpoint_every >= 0, f"{path}.checkpoint_every", f"must be >= 0, got {self.checkpoint_every}")
        _require(self.checkpoint_minutes >= 0, f"{path}.checkpoint_minutes",
                 f"must be >= 0, got {self.checkpoint_minutes}")
        _require(self.keep_checkpoints >= 1, f"{path}.keep_checkpoints", f"must be >= 1, got {self.keep_checkpoints}")


@dataclass
class RuntimeConfig:
    """Where and how the computation runs."""

    device: Literal["auto", "cpu", "cuda", "mps"] = _f("auto", "auto: CUDA, else MPS, else CPU.")
    seed: int = _f(0, "Seed of batch order and random initialisation (identical on all processes).")
    backend: Literal["auto", "nccl", "gloo"] = _f("auto", "Process-group backend; auto: NCCL with CUDA on Linux, else gloo.")
    timeout_s: float = _f(600.0, "Seconds a collective may wait before the run stops.")
    threads: int | Literal["auto"] | None = _f(
        "auto", "torch CPU threads per process; auto: the process's usable cores less the machine's load average, "
                "or the cores busy now where fewer (at least 1; OMP_NUM_THREADS, when set, is kept); null = torch's "
                "default (one per core).")
    check_sync_every: int = _f(0, "Check every K iterations that all processes hold identical parameters; 0 = only at the end.")
    progress: bool = _f(True, "Show a progress bar (main process, terminals only).")
    shard_data: bool = _f(False, "Each process holds only the patterns of its own spatial region (memory ~N/W); "
                                 "batches are drawn inside each region, so results differ slightly from replicated runs.")
    shard_object: bool = _f(False, "Several processes: each holds only its tile of the object plus a halo as wide as "
                                   "the probe window (and the Adam state of the pixels it owns); implies shard_data. "
                                   "Same iterates as shard_data alone. One process: the whole object, as usual.")
    object_exchange: Literal["footprint", "dense"] = _f(
        "footprint", "Several processes: sum each step's object gradient over the processes only where the step's "
                     "windows lie (footprint), or over the whole object (dense; for comparison, same result).")
    compile: bool | Literal["auto"] = _f(
        False, "Compile the data term's element-wise passes between the detector's transforms (intensity, loss terms, "
               "gradient field) with torch.compile, once per chunk shape; run.log says each compile's time. "
               "auto: on CUDA devices only. Falls back to eager with a message when compiling fails.")

    def _check(self, path: str) -> None:
        _require(self.timeout_s > 0, f"{path}.timeout_s", f"must be > 0, got {self.timeout_s}")
        _require(self.threads in (None, "auto") or self.threads >= 1, f"{path}.threads",
                 f"must be >= 1, auto or null, got {self.threads}")
        _require(self.compile in (True, False, "auto"), f"{path}.compile", f"must be true, false or auto, got "
                 f"{self.compile!r}")
        _require(self.check_sync_every >= 0, f"{path}.check_sync_every", f"must be >= 0, got {self.check_sync_every}")
        _require(self.backend != "nccl" or self.device in ("auto", "cuda"), f"{path}.backend",
                 f"nccl needs CUDA GPUs, got {path}.device: {self.device}; use gloo or auto")
