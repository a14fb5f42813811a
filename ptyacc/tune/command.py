"""The ``tune`` verb as a click command: ``ptyacc tune`` (``commands/cli.py`` adds it to the
command line) and ``python -m ptyacc.tune`` (``__main__.py``) run this one command."""

from __future__ import annotations

import click

from ptyacc.command_line import friendly_errors, run_command, set_option


@click.command("tune")
@click.argument("config_file", type=click.Path(dir_okay=False))
@set_option
@friendly_errors
def tune_cmd(config_file: str, overrides: tuple[str, ...]) -> None:
    """Search the keys of CONFIG_FILE's tune section for the lowest validation error, one short
    reconstruction per trial; the study, trials.csv, best.yaml and figures go to output.dir/tune.
    Under `accelerate launch -m ptyacc.tune` each process runs its own trials on its own device."""
    from ptyacc.tune.processes import detach_from_launcher

    process = detach_from_launcher()  # before anything else reads the launcher's variables
    from ptyacc.config import load_config
    from ptyacc.tune.study import tune

    tune(load_config(config_file, overrides), process)


def main(argv: list[str] | None = None) -> int:
    """``ptyacc tune`` on ``argv`` (the process's arguments when None); its exit code."""
    return run_command(tune_cmd, argv, prog_name="ptyacc tune")
