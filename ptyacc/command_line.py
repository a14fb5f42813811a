"""What every ptyacc command line shares, below the verbs that use it (``commands/cli.py`` and the
tuning verb of ``tune/command.py``): the ``--set`` option, errors as one line with exit code 2
(handed to the launcher too), and running a click command on an argument list."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path

import click
import yaml

from ptyacc.errors import PtyaccError

EXIT_USAGE = 2

set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                          help="Override a config key, e.g. --set optim.iterations=5 (repeatable).")


def tell_launcher(message: str) -> None:
    """Hand ``message`` (the one-line error a process stops with) to torch's elastic launcher
    (``accelerate launch``, ``torchrun``) through its error file, so that the launcher's closing
    report shows it as this process's cause instead of "To enable traceback see ...". Nothing
    to do outside such a launcher."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    with contextlib.suppress(OSError):  # the launcher's report is a convenience: the line is printed already
        Path(path).write_text(json.dumps({"message": message, "timestamp": str(int(time.time()))}))


def friendly_errors(func):
    """Print ptyacc errors as one line on stderr and exit with code 2, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except PtyaccError as exc:
            code = getattr(exc, "exit_code", EXIT_USAGE)  # 128 + signal for an interrupted run
            line = f"ptyacc: {'error: ' if code == EXIT_USAGE else ''}{exc}"
            click.echo(line, err=True)
            tell_launcher(line)
            sys.exit(code)

    return wrapper


def set_without_equals(argv: list[str]) -> str | None:
    """The message for a ``--set KEY VALUE`` (a space where ``=`` belongs), which click would
    report only as an unexpected extra argument; None when every --set has its ``=``."""
    for word, item, value in zip(argv, argv[1:], argv[2:]):
        if word == "--set" and "=" not in item and not value.startswith("-"):
            return f"--set {item} {value}: write --set {item}={value} (KEY=VALUE as one word, no spaces around =)"
    return None


def set_values_joined(argv: list[str]) -> list[str]:
    """``argv`` with each ``--set KEY=VALUE`` whose VALUE opens a YAML flow list or mapping that the
    shell split at its spaces (``--set data.transform.flip_about_zero=[true, false]`` typed without
    quotes: ``...=[true,`` and ``false]``) joined again with one space, up to the word that closes it;
    a word that starts with ``--`` is never taken, and a value that no following word closes is left
    as it was."""
    joined, i = [], 0
    while i < len(argv):
        word, i = argv[i], i + 1
        if joined[-1:] == ["--set"] and _unclosed_flow(word):
            for end in range(i, len(argv)):
                if argv[end].startswith("--"):
                    break
                if not _unclosed_flow(candidate := " ".join([word, *argv[i:end + 1]])):
                    word, i = candidate, end + 1
                    break
        joined.append(word)
    return joined


def _unclosed_flow(item: str) -> bool:
    """Whether the value of ``KEY=VALUE`` starts a YAML flow list or mapping and is no valid YAML."""
    value = item.partition("=")[2].lstrip()
    if not value.startswith(("[", "{")):
        return False
    try:
        yaml.safe_load(value)
    except yaml.YAMLError:
        return True
    return False


def run_command(command: click.Command, argv: list[str] | None, prog_name: str) -> int:
    """Run ``command`` on ``argv`` (the process's arguments when None); its exit code: 2 for a
    usage error, 1 for an abort (Ctrl-C at a prompt)."""
    argv = set_values_joined(sys.argv[1:] if argv is None else argv)
    unjoined = set_without_equals(argv)
    if unjoined:
        click.echo(f"ptyacc: error: {unjoined}", err=True)
        return EXIT_USAGE
    try:
        command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.ClickException as exc:
        exc.show()
        return EXIT_USAGE
    except click.exceptions.Abort:
        return 1
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
