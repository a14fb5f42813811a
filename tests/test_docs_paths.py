"""The README and docs/*.md name only files that ship and commands that exist: every repository
path they give (in code or as a link) is in the repository, every `ptyacc VERB` in code is a
command of the CLI. Paths into ../shared/ (the benchmark harnesses beside the repository, which
do not ship) are allowed only on a page that says so."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("configs/", "examples/", "benchmarks/", "docs/", "ptyacc/", "tests/", ".ci/", "../shared/")
CODE = re.compile(r"`([^`\n]+)`|```[^\n]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"(?<![\w./-])((?:\.\./shared/|\.ci/|configs/|examples/|benchmarks/|docs/|ptyacc/|tests/)[\w./*{}-]*[\w*}])")
VERB = re.compile(r"(?:^|[\s(`/])ptyacc ([a-z][a-z-]+)\b", re.M)
HARNESS_NOTE = "bench harness"  # a page citing ../shared/ must say it needs the harness, in these words
WRITTEN = {"docs/api", "docs/api/index.html"}  # what `python -m ptyacc.commands.apidoc docs/api` writes (docs/api.md)


def code_of(text: str) -> str:
    return "\n".join(a or b for a, b in CODE.findall(text))


def named_paths(page: Path) -> set[str]:
    """Repository paths in the page's code and links (links resolved against the page's folder)."""
    text = page.read_text()
    paths = set(PATH.findall(code_of(text)))
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (page.parent / target).resolve()
        try:
            paths.add(str(resolved.relative_to(ROOT)))
        except ValueError:
            paths.add(target if target.startswith("../shared/") else str(resolved))
    return paths


def exists(path: str) -> bool:
    if path in WRITTEN:
        return True
    if path.startswith("../shared/"):
        return True  # checked by the page's note instead
    if any(c in path for c in "*{"):
        return bool(list(ROOT.glob(path.replace("{", "").replace("}", ""))))
    return (ROOT / path).exists()


def cli_verbs() -> set[str]:
    from ptyacc.commands.cli import cli

    return set(cli.commands)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_names_ships(page):
    missing = sorted(p for p in named_paths(page) if not exists(p))
    assert not missing, f"{page.name} names paths that are not in the repository: {missing}"
    shared = sorted(p for p in named_paths(page) if p.startswith("../shared/"))
    assert not shared or HARNESS_NOTE in page.read_text(), f"{page.name} cites {shared}, not saying it needs the {HARNESS_NOTE}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_ptyacc_command_a_page_names_exists(page):
    verbs = set(VERB.findall(code_of(page.read_text())))
    assert not verbs - cli_verbs(), f"{page.name} names commands that do not exist: {sorted(verbs - cli_verbs())}"


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `ptyacc frobnicate configs/none.yaml`, see [here](../configs/demo.yaml) and `configs/demo.yaml`.\n")
    assert "configs/none.yaml" in named_paths(page) and not exists("configs/none.yaml")
    assert exists("configs/demo.yaml") and "frobnicate" in VERB.findall(code_of(page.read_text()))
