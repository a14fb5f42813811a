"""``ptyacc predict`` (run from a clone) or ``python -m benchmarks.predict`` in the repository's root:
predicted seconds per iteration on N devices, from the scaling model (``scaling.py``, ``scaling_tiles.py``)
with the GPU cases (``gpu_cases.py``), or the model checked against launches on this machine
(``scaling_check.py``, the link measured by ``link_check.py``). An instrument for whoever sizes a
machine for ptyacc, kept out of the installed package."""

from __future__ import annotations

from pathlib import Path

import click

from benchmarks.scaling_check import run_predict
from ptyacc.command_line import friendly_errors, run_command, set_option


@click.command()
@click.argument("config_file", required=False, type=click.Path(exists=True, dir_okay=False))
@set_option
@click.option("--processes", default="1,2,4", show_default=True, help="Process counts to launch and predict.")
@click.option("--batch-sizes", default="32,128", show_default=True, help="Global batch sizes (at least two).")
@click.option("--trials", default=3, show_default=True, help="Launches per process count and batch size.")
@click.option("--output-dir", "-o", default="scaling_check", show_default=True, type=click.Path(file_okay=False),
              help="Where the launches write their runs.")
@click.option("--link", "link_only", is_flag=True, help="Only measure this machine's gloo all-reduce latency and bandwidth.")
@friendly_errors
def predict(config_file: str | None, overrides: tuple[str, ...], processes: str, batch_sizes: str, trials: int,
            output_dir: str, link_only: bool) -> None:
    """Predicted seconds per iteration on N devices. Without CONFIG_FILE: the
    predicted GPU speed-up tables. With it: calibrate the model here (gloo link; compute time
    from 1-process runs), launch CONFIG_FILE on each process count and batch size (one thread
    per process) and print predicted against measured. --link: measure the link only."""
    try:
        counts, batches = ([int(v) for v in text.split(",") if v.strip()] for text in (processes, batch_sizes))
    except ValueError:
        raise click.BadParameter("expected comma-separated integers", param_hint="--processes/--batch-sizes") from None
    click.echo(run_predict(Path(config_file) if config_file else None, list(overrides), counts, batches, trials,
                           Path(output_dir), link_only, echo=lambda line: click.echo(line, err=True)))


if __name__ == "__main__":
    raise SystemExit(run_command(predict, None, prog_name="ptyacc predict"))
