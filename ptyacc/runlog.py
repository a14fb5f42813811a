"""run.log in the output folder: config, versions, processes and devices, one line per
iteration, the end summary. Main process only; other processes contribute their device line.
A line that cannot be written (a full disk) ends the log with one warning; the run goes on."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import yaml

from ptyacc.outdir import write_failure


class RunLog:
    """Appends lines to ``path``; with ``path`` None (other processes, or no output) it only
    takes part in the collective that gathers the device of every process."""

    def __init__(self, path: Path | None, append: bool = False) -> None:
        """A new log replaces an old one, unless ``append`` (a resumed run continues its log)."""
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not append:
                path.unlink(missing_ok=True)

    def line(self, text: str) -> None:
        """Append a line. One that cannot be written (a full disk) stops the log with one warning
        on the terminal: the log is a record, the run goes on."""
        if self.path is None:
            return
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        try:
            with open(self.path, "a") as f:
                f.write(f"{stamp} {text}\n")
        except OSError as exc:
            print(f"ptyacc: warning: {write_failure(self.path, exc, advice='run.log ends here, the run goes on')}",
                  file=sys.stderr)
            self.path = None

    def header(self, config, accelerator) -> None:
        from ptyacc.output import versions

        device = accelerator.device
        name = device.type
        if device.type == "cuda":
            import torch

            name = f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
        mine = f"rank {accelerator.process_index}: {name}"
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            devices = gather_object([mine])
        else:
            devices = [mine]
        self.line("ptyacc run: " + " ".join(sys.argv))
        self.line("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
        backend = getattr(accelerator.state, "backend", None) or "none (one process)"
        self.line(f"processes: {accelerator.num_processes}, backend: {backend}")
        for line in devices:
            self.line(f"device {line}")
        for text in ("config:", *("  " + row for row in yaml.safe_dump(config.to_dict(), sort_keys=False).splitlines())):
            self.line(text)
