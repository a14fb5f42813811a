"""The README, the docs site's pages (docs/**/*.md) and the benchmark records name only files that
ship and commands that exist: every repository path they give (in code, as a link, or as a docs page
in the text) is in the repository, every `ptyacc VERB` in code is a command of the CLI. Paths into
../shared/ (the benchmark harnesses beside the repository, which do not ship) are allowed only in a
benchmark record that says so. The user pages (the README and the site) carry no dates, machine
loads or history: those belong in the dated records of benchmarks/records/."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [*USER_PAGES, *sorted((ROOT / "benchmarks").rglob("*.md"))]
CODE = re.compile(r"`([^`\n]+)`|```[^\n]*\n(.*?)```", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"(?<![\w./-])((?:\.\./shared/|\.ci/|configs/|examples/|docs/|ptyacc/|tests/|benchmarks/)[\w./*{}-]*[\w*}])")
PAGE_IN_TEXT = re.compile(r"(?<![\w./-])((?:docs|benchmarks)/[\w./-]+\.md)\b")
FENCE = re.compile(r"```.*?```", re.S)
RECORD_NAME = re.compile(r"benchmarks/records/[\w.-]+")
# what a user page must not carry: dates, machine loads, "interleaved"/"quiet machine" timing notes, history, and
# the design notes and harness beside the repository, which do not ship
HISTORY = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bload(?: average)? (?:of )?\d|1-minute load|"
                     r"\bloaded (?:\d-core |shared )?(?:machine|CPU)|\binterleaved\b|"
                     r"\b(?:quiet|busy) (?:\d-core )?(?:machine|core|CPU)|"
                     r"\b(?:until|since|before) 20\d\d|"
                     r"\bbefore the (?:ramp|Fourier step|change|fix)\b|\(before[:)]|\bthe default since\b|\bearlier run\b|"
                     r"\bissue #?\d+|\bformerly\b|\.\./shared|\bshared/|DESIGN\.md", re.I)
VERB = re.compile(r"(?:^|[\s(`/])ptyacc ([a-z][a-z-]+)\b", re.M)
HARNESS_NOTE = "bench harness"  # a page citing ../shared/ must say it needs the harness, in these words
WRITTEN = {"docs/api", "docs/api/index.html"}  # what `python -m ptyacc.commands.apidoc docs/api` writes (docs/api.md)


def code_of(text: str) -> str:
    return "\n".join(a or b for a, b in CODE.findall(text))


def named_paths(page: Path) -> set[str]:
    """Repository paths in the page's code and links (links resolved against the page's folder)."""
    text = page.read_text()
    paths = set(PATH.findall(code_of(text))) | set(PAGE_IN_TEXT.findall(text))
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_ships(page):
    missing = sorted(p for p in named_paths(page) if not exists(p))
    assert not missing, f"{page.name} names paths that are not in the repository: {missing}"
    shared = sorted(p for p in named_paths(page) if p.startswith("../shared/"))
    assert not shared or HARNESS_NOTE in page.read_text(), f"{page.name} cites {shared}, not saying it needs the {HARNESS_NOTE}"
    assert not shared or page not in USER_PAGES, f"{page.name} cites {shared}, which does not ship"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_ptyacc_command_a_page_names_exists(page):
    verbs = set(VERB.findall(code_of(page.read_text())))
    assert not verbs - cli_verbs(), f"{page.name} names commands that do not exist: {sorted(verbs - cli_verbs())}"


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `ptyacc frobnicate configs/none.yaml`, see [here](../configs/demo.yaml) and `configs/demo.yaml`;\n"
                    "the guide (docs/user-guide.md, 'Descan') said so on 2026-11-27 at load 4 on a quiet machine.\n")
    assert "configs/none.yaml" in named_paths(page) and not exists("configs/none.yaml")
    assert "docs/user-guide.md" in named_paths(page) and not exists("docs/user-guide.md")
    assert exists("configs/demo.yaml") and "frobnicate" in VERB.findall(code_of(page.read_text()))
    assert history_of(page) == ["2026-11-27", "load 4", "quiet machine"]
    page.write_text("See `benchmarks/records/2026-11-27-scaling.md` and ```\nrun.log: load average 4.50\n```\n")
    assert history_of(page) == []


def history_of(page: Path) -> list[str]:
    """The dates, loads and history words of ``page``'s prose (code blocks, which show program output, left out)."""
    prose = RECORD_NAME.sub("", FENCE.sub("", page.read_text()))  # a record's file name carries its date
    return [m.group(0) for m in HISTORY.finditer(prose)]


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_page_carries_dates_loads_or_history(page):
    found = history_of(page)
    assert not found, f"{page.relative_to(ROOT)} carries {found}: measurements and their history go to benchmarks/records/"


def test_every_page_of_the_site_is_in_its_nav_or_left_out_on_purpose():
    """mkdocs.yml's nav lists every page under docs/ but those that other work adds (not_in_nav)."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    listed = set()

    def walk(items):
        for item in items:
            for value in item.values():
                walk(value) if isinstance(value, list) else listed.add(value)

    walk(config["nav"])
    pending = {line.strip().lstrip("/") for line in config.get("not_in_nav", "").splitlines() if line.strip()}
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*") if p.suffix in (".md", ".ipynb")}
    assert pages - pending <= listed, f"pages in no nav: {sorted(pages - pending - listed)}"
    assert listed <= pages, f"the nav names pages that do not exist: {sorted(listed - pages)}"


RECORDS = sorted((ROOT / "benchmarks" / "records").glob("*.md"))
RECORD_FILE = re.compile(r"20\d\d-\d\d-\d\d-[a-z0-9-]+\.md")


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_every_benchmark_record_is_dated_and_says_how_it_was_measured(record):
    """benchmarks/records/<yyyy-mm-dd>-<topic>.md, its head naming the date, commit, machine, load and command."""
    assert RECORD_FILE.fullmatch(record.name), f"{record.name}: name it <yyyy-mm-dd>-<topic>.md"
    head = "\n".join(record.read_text().splitlines()[:30]).lower()
    missing = [word for word in ("date", "commit", "machine", "load", "command") if word not in head]
    assert not missing, f"{record.name} does not say its {missing} in its first 30 lines"
