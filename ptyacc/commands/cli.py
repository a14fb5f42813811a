"""The ``ptyacc`` command line. Thin: parse, load the config, call the engine, map errors to
one-line messages with exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ptyacc.command_line import friendly_errors, run_command, set_option
from ptyacc.errors import OutputError, PtyaccError
from ptyacc.tune.command import tune_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ptyacc")
def cli() -> None:
    """ptyacc: ptychographic reconstruction by automatic differentiation.

    The same YAML config runs on one CPU (`ptyacc run c.yaml`) or many GPUs and nodes
    (`accelerate launch -m ptyacc.run c.yaml`).
    """


@cli.command()
@click.argument("config_file", type=click.Path(dir_okay=False))
@set_option
@click.option("--quiet", is_flag=True, help="No progress bar or summary.")
@click.option("--resume", is_flag=True, help="Continue from the newest complete checkpoint in output.dir.")
@click.option("--overwrite", is_flag=True, help="Replace the results and checkpoints already in output.dir.")
@friendly_errors
def run(config_file: str, overrides: tuple[str, ...], quiet: bool, resume: bool, overwrite: bool) -> None:
    """Reconstruct the dataset that CONFIG_FILE describes; write results.h5, figures and
    run.log to output.dir (and checkpoints every output.checkpoint_minutes, and every
    output.checkpoint_every iterations). Ctrl-C or SIGTERM saves a checkpoint and results.h5,
    prints the --resume command and exits 130 / 143.
    Launch under `accelerate launch -m ptyacc.run` for several processes."""
    from ptyacc.config import load_config
    from ptyacc.reconstruction.distributed import end_process_group, exit_after_launch
    from ptyacc.reconstruction.engine import reconstruct

    config = load_config(config_file, overrides)
    if quiet:
        config.runtime.progress = False
    rec = reconstruct(config, resume=resume, overwrite=overwrite)
    import torch.distributed as dist

    is_main = not dist.is_initialized() or dist.get_rank() == 0
    if is_main and not quiet:
        deviance = f"; Poisson deviance {rec.poisson_deviance:.4g} per counted pixel" if rec.poisson_deviance else ""
        click.echo(f"ptyacc: {len(rec.loss)} iterations on {rec.world_size} process(es) in {rec.wall_time_s:.1f} s; "
                   f"final loss {rec.loss[-1]:.6g}{deviance}; results in {rec.output_dir / 'results.h5'}", err=True)
    end_process_group()
    exit_after_launch()


cli.add_command(tune_cmd)


@cli.command()
@click.option("--output-dir", "-o", type=click.Path(file_okay=False),
              help="Folder for results.h5, the figures and run.log (default: the demo config's output.dir, results/demo).")
@click.option("--iterations", "-k", type=click.IntRange(min=1), help="Iterations instead of the demo config's.")
@click.option("--resume", is_flag=True, help="Continue from the newest complete checkpoint in the output folder.")
@click.option("--overwrite", is_flag=True, help="Replace the results and checkpoints already in the output folder.")
@click.pass_context
@friendly_errors
def demo(ctx: click.Context, output_dir: str | None, iterations: int | None, resume: bool, overwrite: bool) -> None:
    """Reconstruct the demo that ships inside the package (a MoS2 monolayer simulated by abTEM,
    24 x 24 scan of 64 x 64 patterns) with its shipped config, from any folder: the check that
    an install works. The same as `ptyacc run` on ptyacc/demo/demo.yaml; prints where the
    results went."""
    from importlib.resources import as_file, files

    from ptyacc.config import load_config

    shipped = files("ptyacc") / "demo"
    # values as JSON strings: --set parses YAML, and a folder name may hold ': ' or '#'
    overrides = [f"output.dir={json.dumps(output_dir)}"] if output_dir else []
    overrides += [f"optim.iterations={iterations}"] if iterations else []
    with as_file(shipped / "demo.yaml") as config_file, as_file(shipped / "demo_mos2.h5") as data_file:
        overrides.append(f"data.path={json.dumps(str(data_file))}")  # as_file may extract the two apart
        ctx.invoke(run, config_file=str(config_file), overrides=tuple(overrides), quiet=False, resume=resume,
                   overwrite=overwrite)
        folder = Path(load_config(config_file, overrides).output.dir).resolve()
    click.echo(str(folder / "results.h5"))


@cli.command()
@click.argument("config_file", type=click.Path(dir_okay=False))
@set_option
@friendly_errors
def validate(config_file: str, overrides: tuple[str, ...]) -> None:
    """Check CONFIG_FILE (keys, types, values) and print it with all defaults filled in."""
    from ptyacc.config import load_config

    config = load_config(config_file, overrides)
    click.echo(config.to_yaml(), nl=False)
    click.echo(f"# {config_file}: valid", err=True)


README_MARKERS = ("<!-- config-reference:start -->\n", "<!-- config-reference:end -->")


@cli.command("config-reference")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to this file instead of stdout.")
@click.option("--readme", type=click.Path(exists=True, dir_okay=False),
              help="Replace the block between the config-reference markers of this Markdown file "
                   "(docs/reference/config.md).")
@friendly_errors
def config_reference_cmd(output: str | None, readme: str | None) -> None:
    """Print the reference of every config key, generated from ptyacc's config dataclasses."""
    from ptyacc.config import config_reference
    from ptyacc.results.outdir import write_text

    text = config_reference()
    if readme:
        start, end = README_MARKERS
        page = Path(readme).read_text()
        if start not in page or end not in page:
            raise click.ClickException(f"{readme}: no {start.strip()} ... {end} markers")
        head, rest = page.split(start, 1)
        write_text(Path(readme), head + start + text + end + rest.split(end, 1)[1])
    elif output:
        write_text(Path(output), text)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("results_file", type=click.Path(dir_okay=False))
@click.option("--output-dir", "-o", type=click.Path(file_okay=False), help="Folder for the PNGs (default: beside the file).")
@friendly_errors
def plot(results_file: str, output_dir: str | None) -> None:
    """Make the PNG figures (object phase, probe modes, loss, positions) from a results.h5."""
    from ptyacc.results.figures import save_figures
    from ptyacc.results.h5file import load_results

    results = load_results(results_file)
    folder = Path(output_dir) if output_dir else Path(results_file).parent
    for path in save_figures(folder, results):
        click.echo(str(path))


@cli.command()
@click.argument("data_file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--from-ptyrad", "ptyrad_params", type=click.Path(exists=True, dir_okay=False),
              help="Make the config from this PtyRAD 1.0 params file instead (docs/how-to/coming-from-other-packages.md).")
@click.option("--adam-steps", is_flag=True, help="With --from-ptyrad: carry PtyRAD's object and probe learning "
              "rates over as Adam steps (default: ptyacc's own steps for them).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Config to write (default: DATA_FILE's name, .yaml).")
@click.option("--force", is_flag=True, help="Replace an existing config.")
@click.option("--key", help="The HDF5 dataset that holds the patterns, when the file has several (data.key).")
@friendly_errors
def init(data_file: str | None, ptyrad_params: str | None, adam_steps: bool, output: str | None, force: bool,
         key: str | None) -> None:
    """Write a commented config for DATA_FILE, filled with what the file says (calibration,
    positions, shape, a suggested batch), or from a PtyRAD params file (--from-ptyrad), ending
    with what `ptyacc info` derives from it."""
    from ptyacc.commands.init_config import from_ptyrad, init_config, report, terminal_notes
    from ptyacc.results.outdir import write_text

    if (data_file is None) == (ptyrad_params is None):
        raise click.UsageError("give a DATA_FILE or --from-ptyrad PARAMS.yml (one of them)")
    source = Path(data_file or ptyrad_params)
    path = Path(output or (source.with_suffix(".yaml").name if data_file else source.stem + "_ptyacc.yaml"))
    if path.exists() and not force:
        raise OutputError(f"{path} exists; pass --force to replace it, or -o another file")
    text = init_config(source, path, key) if data_file else from_ptyrad(source, path, adam_steps)
    write_text(path, text)
    found = report(path)
    write_text(path, text + "\n# ptyacc info:\n" + "\n".join(found) + "\n")
    ready = not found[0].startswith("# not ready")
    for note in terminal_notes(text + "\n".join(found)):
        click.echo(f"{path}: {note}")
    click.echo(f"{path}: " + ("ready: ptyacc run " + str(path) if ready else found[0][2:] + "; fill in the NEEDED keys"))


@cli.command()
@click.argument("results_file", type=click.Path(dir_okay=False))
@click.option("--output-dir", "-o", type=click.Path(file_okay=False), help="Folder for the TIFFs (default: beside the file).")
@click.option("--format", "formats", type=click.Choice(["tiff", "hspy", "emd"]), multiple=True,
              help="Write only these formats (repeat the option; default: all three).")
@friendly_errors
def export(results_file: str, output_dir: str | None, formats: tuple[str, ...]) -> None:
    """Write the object phase (summed and per slice) and the probe (amplitude, phase) of a
    results.h5 as 32-bit float TIFF with the pixel size, and the object and probe as HyperSpy
    (.hspy) and EMD (.emd) files with calibrated axes (needs ptyacc[formats])."""
    from ptyacc.results.h5file import load_results
    from ptyacc.results.hyperspy import export_hyperspy
    from ptyacc.results.tiff import export_tiff

    folder = Path(output_dir) if output_dir else Path(results_file).parent
    results, formats = load_results(results_file), formats or ("tiff", "hspy", "emd")
    written = export_tiff(results, folder) if "tiff" in formats else []
    written += export_hyperspy(results, folder, tuple(name for name in formats if name != "tiff"))
    for path in written:
        click.echo(str(path))


@cli.command()
@click.argument("config_file", type=click.Path(dir_okay=False))
@set_option
@click.option("--iterations", "-k", default=5, show_default=True, help="Timed iterations.")
@click.option("--warmup", default=2, show_default=True, help="Untimed iterations first.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the figures as JSON here.")
@friendly_errors
def bench(config_file: str, overrides: tuple[str, ...], iterations: int, warmup: int, json_path: str | None) -> None:
    """Time reconstruction iterations of CONFIG_FILE on one process and compare them with the
    FFT bound: the time of exactly the FFTs one iteration must do, measured in the same
    process at the same batch shapes. Prints seconds per iteration, patterns/s, peak memory
    and ratio = iteration / bound."""
    from ptyacc.config import load_config
    from ptyacc.speed.bench import format_report, run_bench, write_json

    report = run_bench(load_config(config_file, overrides), iterations, warmup)
    click.echo(format_report(report))
    if json_path:
        write_json(report, Path(json_path))


SELFTEST_CHECKS = ("build", "devices", "mig", "backend", "reconstruct", "hold", "speed", "syncs", "compile", "two")


@cli.command()
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the whole report as JSON here.")
@click.option("--skip", multiple=True, type=click.Choice(SELFTEST_CHECKS), help="A check not to run (repeatable).")
@click.option("--keep", type=click.Path(file_okay=False), help="Run in this folder and keep it (default: a temporary one).")
@friendly_errors
def selftest(json_path: str | None, skip: tuple[str, ...], keep: str | None) -> None:
    """Check what this machine runs: devices (CUDA, MIG slices, MPS, CPU), backend, torch/CUDA
    build; a small reconstruction on each device against the CPU; data.hold host and disk
    against device; an iteration against the FFT bound; runtime.compile; with 2+ GPUs, two
    processes against one. One line per check (ok / failed / skipped, with why); exits 1 if
    a check failed."""
    from ptyacc.speed.selftest import run_selftest, write_report

    checks = run_selftest(skip, echo=click.echo, folder=Path(keep) if keep else None)
    failed = [c.name for c in checks if c.status == "failed"]
    if json_path:
        write_report(checks, Path(json_path))
    counts = {s: sum(c.status == s for c in checks) for s in ("ok", "failed", "skipped")}
    click.echo(f"ptyacc selftest: {counts['ok']} ok, {counts['failed']} failed"
               f"{' (' + ', '.join(failed) + ')' if failed else ''}, {counts['skipped']} skipped", err=True)
    if failed:
        sys.exit(1)


@cli.command()
@click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
@set_option
@click.option("--processes", default="1,2", show_default=True, help="Comma-separated process counts to compare.")
@click.option("--trials", default=2, show_default=True, help="Runs per process count.")
@click.option("--output-dir", "-o", default="speedtest", show_default=True, type=click.Path(file_okay=False),
              help="Where the runs, CSVs and PNG go.")
@click.option("--threads-per-process", type=int, help="OMP_NUM_THREADS of each process (default: cores / processes).")
@friendly_errors
def speedtest(config_file: str, overrides: tuple[str, ...], processes: str, trials: int, output_dir: str,
              threads_per_process: int | None) -> None:
    """Run CONFIG_FILE on each process count (real launches) TRIALS times; write
    speedtest.csv (per iteration), speedtest_summary.csv (speed-up, spread of final losses)
    and speedtest.png (loss against wall time), and print the summary table."""
    from ptyacc.config import load_config
    from ptyacc.speed.speedtest import format_summary, run_speedtest

    load_config(config_file, overrides)  # fail early on a bad config
    try:
        counts = [int(p) for p in processes.split(",") if p.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {processes!r}", param_hint="--processes") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter("process counts must be >= 1", param_hint="--processes")
    trials_done = run_speedtest(Path(config_file), counts, trials, Path(output_dir), list(overrides),
                                threads_per_process, echo=lambda line: click.echo(line, err=True))
    click.echo(format_summary(trials_done))
    written = [name for name in ("speedtest_summary.csv", "speedtest.png") if (Path(output_dir) / name).exists()]
    click.echo(f"written: {Path(output_dir) / 'speedtest.csv'}, {', '.join(written)}", err=True)


# the scaling model lives with the benchmarks of the repository, not in the installed package
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PREDICT_MOVED = ("ptyacc predict: the scaling model is one of the repository's benchmarks and is not installed; "
                 "in a clone of ptyacc (pip install -e .) run `ptyacc predict` or `python -m benchmarks.predict`")


@cli.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def predict(args: tuple[str, ...]) -> None:
    """Predicted seconds per iteration on N devices (the repository's benchmarks/predict.py, run
    with these arguments; `ptyacc predict --help` gives its options). Outside a clone of ptyacc
    it says where it is and exits with 1."""
    import os
    import subprocess

    if not (BENCHMARKS / "predict.py").is_file():
        click.echo(PREDICT_MOVED, err=True)
        sys.exit(1)
    path = os.pathsep.join(filter(None, [str(BENCHMARKS.parent), os.environ.get("PYTHONPATH")]))
    sys.exit(subprocess.run([sys.executable, "-m", "benchmarks.predict", *args],
                            env={**os.environ, "PYTHONPATH": path}).returncode)


CONFIG_SUFFIXES = (".yaml", ".yml")


@cli.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--config", "-c", "config_file", type=click.Path(dir_okay=False),
              help="Config whose data.transform and experiment apply to FILE (a data file).")
@click.option("--figure", "figure", type=click.Path(dir_okay=False),
              help="Also draw the bright-field parallax of the data (electrons) in this PNG.")
@click.option("--save", "save", type=click.Path(dir_okay=False),
              help="Also write what the calibration measured (detector arrays, calibration values and their "
                   "sources, the autos' values) to this HDF5 file.")
@set_option
@friendly_errors
def info(file: str | None, config_file: str | None, figure: str | None, save: str | None,
         overrides: tuple[str, ...]) -> None:
    """Versions, devices (MIG slices marked), the backend a multi-process run would use and the
    accelerate config found. With FILE, also the data's derived sampling (dx, dk, probe
    window and diameter, object size, scan extent, bright-field disk) and warnings where the
    probe or scan do not fit. FILE is a config (.yaml), or a data file read with the settings
    of --config (or only its own attributes): `ptyacc info data.h5 --config c.yaml`. With
    --figure PATH, the parallax that `experiment.defocus_A: auto` measures is drawn there: the
    tilt-corrected bright-field image and each pixel group's measured and fitted shift. With --save
    PATH, what the calibration measured is written there (HDF5: the group ``detector`` as in
    results.h5, ``calibration``, and the attribute ``auto_values``, the autos' values as YAML)."""
    from ptyacc.commands.info import data_report, environment_report, file_radiation, parallax_figure_report

    for line in environment_report():
        click.echo(line)
    if file is None and config_file is None:
        if figure is not None or save is not None:
            raise click.UsageError("--figure and --save measure a dataset: give a data file or a config")
        return
    from ptyacc.config import load_config

    if file is not None and file.lower().endswith(CONFIG_SUFFIXES):
        if config_file is not None:
            raise click.UsageError(f"{file} is a config; give a data file with --config {config_file}")
        config_file, file = file, None
    data_overrides = [f"data.path={Path(file).resolve()}", "data.simulate=null"] if file is not None else []
    if file is not None and config_file is None:
        data_overrides += file_radiation(Path(file))
    config = load_config(config_file or {}, [*data_overrides, *overrides])
    try:
        lines = data_report(config, save=None if save is None else Path(save))
    except PtyaccError as exc:
        if config_file is None and file is not None:  # only the file's own attributes were there to use
            exc.args = (f"{exc}; give the experiment's settings with --config c.yaml or --set experiment.KEY=VALUE, "
                        f"or write a config to fill in with `ptyacc init {file}`",)
        raise
    if figure is not None:
        lines += parallax_figure_report(config, Path(figure))[0]
    for line in lines:
        click.echo(line)


@cli.command()
@click.argument("config_file", type=click.Path(dir_okay=False))
@click.argument("output", type=click.Path(dir_okay=False))
@set_option
@friendly_errors
def simulate(config_file: str, output: str, overrides: tuple[str, ...]) -> None:
    """Simulate the dataset of CONFIG_FILE's `data.simulate` section and write it to OUTPUT
    (HDF5 in ptyacc's layout, with the ground truth), readable as `data.path` with no other keys."""
    from ptyacc.config import load_config
    from ptyacc.data import load_data
    from ptyacc.data.export import write_dataset
    from ptyacc.results.outdir import atomic_write

    config = load_config(config_file, overrides)
    if config.data.simulate is None:
        raise click.ClickException(f"{config_file}: no data.simulate section to simulate")
    data = load_data(config)
    with atomic_write(Path(output), advice="free space or choose another OUTPUT") as tmp:
        write_dataset(tmp, data)
    click.echo(output)


@cli.command()
@click.argument("input_file", type=click.Path(dir_okay=False))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--key", help="Dataset or variable holding the patterns (default: found from the format).")
@click.option("--scan-shape", nargs=2, type=int, metavar="SLOW FAST",
              help="Scan shape; needed for EMPAD .raw files, which do not store it.")
@click.option("--format", "file_format", metavar="FORMAT",
              help="Read INPUT_FILE as hdf5, cxi, npy, mat, empad or rsciio whatever its extension.")
@click.option("--detector-shape", nargs=2, type=int, default=(128, 128), show_default=True, metavar="KY KX",
              help="Pixels of an EMPAD frame.")
@click.option("--frame-rows", type=int, help="Rows stored per EMPAD frame, metadata included (default: KY + 2).")
@click.option("--streaming", is_flag=True, help="Chunks of one pattern, uncompressed: data.hold: disk then reads "
              "just the patterns of each step (default: compressed chunks of about 1 MiB).")
@friendly_errors
def convert(input_file: str, output: str, key: str | None, scan_shape: tuple[int, int] | None,
            file_format: str | None, detector_shape: tuple[int, int], frame_rows: int | None, streaming: bool) -> None:
    """Rewrite the patterns of INPUT_FILE (HDF5, CXI, .npy, .mat or EMPAD .raw) with its mask,
    background, probe positions and calibration as OUTPUT in ptyacc's HDF5 layout, readable as
    `data.path` with no other keys."""
    from ptyacc.data.convert import convert_patterns
    from ptyacc.results.outdir import writing

    # convert_patterns writes OUTPUT.partial and removes it on any error; a full disk becomes one line here
    with writing(Path(output), advice="free space or choose another OUTPUT"):
        info, written = convert_patterns(Path(input_file), Path(output), key, streaming, scan_shape=scan_shape or None,
                                         file_format=file_format, detector_shape=detector_shape, frame_rows=frame_rows)
    click.echo(f"ptyacc: {info.n_patterns} patterns {' x '.join(map(str, info.shape[-2:]))} from {info.format} "
               f"{info.key or ''}; wrote {', '.join(written)}", err=True)
    click.echo(output)


def main(argv: list[str] | None = None) -> int:
    """``ptyacc`` on ``argv`` (the process's arguments when None); its exit code."""
    return run_command(cli, argv, prog_name="ptyacc")


def entry_point() -> None:
    sys.exit(main())
