"""The grid's Markdown table and summary, from the cached JSON of run_grid.py (no reconstruction)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

PTYACC_COLUMNS = ("defaults", "poisson", "recenter")
# what each summary compares ptyacc's defaults with: (label, package, variants whose best counts)
ANCHORS = (("PtyRAD tuned", "ptyrad", None), ("Pty-chi LSQML", "ptychi", ("lsqml",)),
           ("Pty-chi Autodiff", "ptychi", ("autodiff",)))


def load(cache: Path, names: list[str]) -> dict[str, dict[tuple[str, str], dict]]:
    """{point name: {(package, variant): result}} for the points that have any result."""
    found = {}
    for name in names:
        folder = cache / name
        if folder.is_dir():
            found[name] = {tuple(path.stem.split("__")): json.loads(path.read_text())
                           for path in sorted(folder.glob("*.json"))}
    return found


def zero_shift(result: dict) -> float:
    """The zero-shift NCC, -1 for a reconstruction that diverged (NaN): ranked below any other."""
    value = result["ncc_zero_shift"]
    return -1.0 if np.isnan(value) else value


def best_of(results: dict, package: str, variants) -> dict | None:
    """The result of ``package`` with the highest zero-shift NCC among ``variants`` (all if None)."""
    runs = [r for (p, v), r in results.items() if p == package and (variants is None or v in variants)]
    return max(runs, key=zero_shift) if runs else None


def cell(result: dict | None) -> str:
    if result is None:
        return "–"
    if np.isnan(result["ncc_zero_shift"]):
        return "NaN (diverged)"
    return f"{result['ncc_zero_shift']:.4f} / {result['ncc_best_shift']:.4f}"


def markdown(cache: Path, names: list[str]) -> str:
    """The main table (ptyacc's three settings and the anchors), the candidates' table, the
    summary, the breakdown by dose and slices, and the timing table."""
    table = load(cache, names)
    tried = {}  # candidate -> when its first result came: the columns in the order they were tried
    for results in table.values():
        for (package, variant), result in results.items():
            if package == "ptyacc" and variant not in PTYACC_COLUMNS:
                tried[variant] = min(tried.get(variant, result["finished"]), result["finished"])
    extra = sorted(tried, key=tried.get)
    anchors = {"PtyRAD tuned (setting)": lambda r: best_of(r, "ptyrad", None),
               "Pty-chi LSQML": lambda r: r.get(("ptychi", "lsqml")),
               "Pty-chi Autodiff": lambda r: r.get(("ptychi", "autodiff"))}
    parts = [grid(table, list(PTYACC_COLUMNS), anchors)]
    if extra:
        parts.append(grid(table, ["defaults", *extra], {}))
    return "\n\n".join([*parts, summary(table, [*PTYACC_COLUMNS, *extra]), breakdown(table), timing(table)])


def chosen(cache: Path, names: list[str], columns: list[str]) -> str:
    """The table of the named ptyacc ``columns`` beside PtyRAD tuned and Pty-chi LSQML, and their
    summary, on the points ``names`` (a section that compares a few candidates, e.g. --slices 4)."""
    table = load(cache, names)
    anchors = {"PtyRAD tuned (setting)": lambda r: best_of(r, "ptyrad", None),
               "Pty-chi LSQML": lambda r: r.get(("ptychi", "lsqml"))}
    return "\n\n".join([grid(table, columns, anchors), summary(table, columns)])


def grid(table: dict, ptyacc_columns: list[str], anchors: dict) -> str:
    """One row per point: its coordinates, then a cell per ptyacc setting and per anchor."""
    head = ["dose", "defocus Å", "edge mrad", "slices", "counts/px", *(f"ptyacc {c}" for c in ptyacc_columns),
            *anchors]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for results in table.values():
        first = next(iter(results.values()))
        point = first["point"]
        cells = [f"{point['dose']:g}", f"{point['defocus_A']:+g}", f"{point['edge_mrad']:g}", str(point["slices"]),
                 f"{first['counts_per_px']:.1f}", *(cell(results.get(("ptyacc", c))) for c in ptyacc_columns)]
        for pick in anchors.values():
            found = pick(results)
            named = found is not None and found["package"] == "ptyrad"
            cells.append(cell(found) + (f" ({found['variant']})" if named else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(table: dict, ptyacc_columns: list[str]) -> str:
    """How often each ptyacc variant is at or above each anchor's zero-shift NCC, on the points where both ran."""
    lines = []
    for column in ptyacc_columns:
        for label, package, variants in ANCHORS:
            pairs = [(r[("ptyacc", column)], best_of(r, package, variants)) for r in table.values()
                     if ("ptyacc", column) in r and best_of(r, package, variants) is not None]
            if not pairs:
                continue
            wins = sum(zero_shift(mine) >= zero_shift(theirs) for mine, theirs in pairs)
            gap = np.array([mine["ncc_zero_shift"] - theirs["ncc_zero_shift"] for mine, theirs in pairs])
            diverged = int(np.isnan(gap).sum())
            gap = gap[np.isfinite(gap)]
            lines.append(f"- ptyacc {column} at or above {label}'s zero-shift NCC on {wins} of {len(pairs)} points "
                         f"(difference where both are finite: median {np.median(gap):+.4f}, worst {gap.min():+.4f}, "
                         f"best {gap.max():+.4f}" + (f"; {diverged} NaN" if diverged else "") + ")")
    return "\n".join(lines)


def breakdown(table: dict, column: str = "defaults") -> str:
    """Points where ptyacc's ``column`` is at or above each anchor, by dose and slice count."""
    groups: dict[tuple, list] = {}
    for results in table.values():
        point = next(iter(results.values()))["point"]
        groups.setdefault((point["dose"], point["slices"]), []).append(results)
    lines = [f"| dose | slices | ptyacc {column} at or above: " + " | ".join(label for label, _, _ in ANCHORS) + " |",
             "|---|---|" + "---|" * len(ANCHORS)]
    for (dose, slices), members in groups.items():
        cells = []
        for _, package, variants in ANCHORS:
            pairs = [(r[("ptyacc", column)], best_of(r, package, variants)) for r in members
                     if ("ptyacc", column) in r and best_of(r, package, variants) is not None]
            cells.append(f"{sum(zero_shift(a) >= zero_shift(b) for a, b in pairs)} of {len(pairs)}")
        lines.append(f"| {dose:g} | {slices} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing(table: dict) -> str:
    """Median seconds per iteration per (package, variant) and slices, with the median load average."""
    rows = {}
    for results in table.values():
        for (package, variant), r in results.items():
            rows.setdefault((package, variant, r["point"]["slices"]), []).append((r["s_per_iter"], r["loadavg"][0]))
    lines = ["| package / variant | slices | s/iteration, median (min-max) | load average, median | runs |",
             "|---|---|---|---|---|"]
    for (package, variant, slices), values in sorted(rows.items()):
        seconds, load = np.array(values).T
        lines.append(f"| {package} {variant} | {slices} | {np.median(seconds):.3f} ({seconds.min():.3f}-"
                     f"{seconds.max():.3f}) | {np.median(load):.1f} | {len(values)} |")
    return "\n".join(lines)
