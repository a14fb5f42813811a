"""Aberration coefficients written the ways PtyRAD accepts them, made ptyacc's Krivanek Cartesian
names (``C10``, ``C12a``, ``C12b``, ...; Å).

PtyRAD takes Krivanek Cartesian (``C12a``, ``C12b``), Krivanek polar (``C12`` with ``phi12`` in
degrees: a = C cos(m phi), b = C sin(m phi)), Haider names (``C1``, ``A1``, ``B2``, ``A2``, ``C3``,
``S3``, ``A3``, ... with ``A1phi`` etc., and B2 = C21 / 3, S3 = C32 / 4, ...) and the aliases
``defocus`` (= -C10) and ``Cs`` (= C30). Its probe is aperture x exp(-i chi) with the same chi as
ptyacc's (``physics.probe.aberration_phase``: alpha^(n+1) / (n+1) (a cos(m phi) + b sin(m phi)),
phi from the column axis toward the row axis), so the coefficients carry over unchanged.
"""

from __future__ import annotations

import math
import re

# Haider name: (n, m, C_nm / Haider value)
HAIDER = {"C1": (1, 0, 1.0), "A1": (1, 2, 1.0), "B2": (2, 1, 3.0), "A2": (2, 3, 1.0), "C3": (3, 0, 1.0),
          "S3": (3, 2, 4.0), "A3": (3, 4, 1.0), "B4": (4, 1, 4.0), "D4": (4, 3, 4.0), "A4": (4, 5, 1.0),
          "C5": (5, 0, 1.0), "S5": (5, 2, 6.0), "R5": (5, 4, 6.0), "A5": (5, 6, 1.0)}
ALIASES = {"defocus": ("C10", -1.0), "Cs": ("C30", 1.0)}
_KRIVANEK = re.compile(r"^(C|phi)(\d)(\d)([ab]?)$")


def krivanek_cartesian(aberrations: dict[str, float]) -> dict[str, float]:
    """``aberrations`` in any of PtyRAD's notations as {C10, C12a, C12b, ...} in Å (zeros left out).
    Raises ValueError naming a key that is none of them, or a term given twice."""
    terms: dict[tuple[int, int], dict[str, float]] = {}
    for key, value in aberrations.items():
        (n, m), part, scale = _parse(key)
        slot = terms.setdefault((n, m), {})
        if part in slot:
            raise ValueError(f"aberration term C{n}{m} is given twice ({key})")
        slot[part] = float(value) * scale
    out: dict[str, float] = {}
    for (n, m), parts in sorted(terms.items()):
        polar, cartesian = {"mag", "angle"} & set(parts), {"a", "b"} & set(parts)
        if polar and cartesian:
            raise ValueError(f"aberration term C{n}{m} is given both as magnitude/angle and as a/b")
        if m == 0:
            a, b = parts.get("mag", parts.get("a", 0.0)), 0.0
        elif polar:
            angle = math.radians(parts.get("angle", 0.0))
            a, b = parts.get("mag", 0.0) * math.cos(m * angle), parts.get("mag", 0.0) * math.sin(m * angle)
        else:
            a, b = parts.get("a", 0.0), parts.get("b", 0.0)
        for name, coefficient in ((f"C{n}{m}" + ("a" if m else ""), a), (f"C{n}{m}b", b)):
            if coefficient != 0.0:
                out[name] = coefficient
    return out


def _parse(key: str) -> tuple[tuple[int, int], str, float]:
    """(n, m), which part ('mag', 'angle', 'a', 'b') and the factor to C_nm of one PtyRAD key."""
    if key in ALIASES:
        name, scale = ALIASES[key]
        return (int(name[1]), int(name[2])), "mag", scale
    if key in HAIDER:
        n, m, scale = HAIDER[key]
        return (n, m), "mag", scale
    if key.endswith("phi") and key[:-3] in HAIDER and HAIDER[key[:-3]][1] > 0:
        n, m, _ = HAIDER[key[:-3]]
        return (n, m), "angle", 1.0
    match = _KRIVANEK.match(key)
    if match is None:
        raise ValueError(f"unknown aberration name {key!r}")
    kind, n, m, part = match[1], int(match[2]), int(match[3]), match[4]
    if m > n + 1 or (n + 1 - m) % 2 or (m == 0 and (part or kind == "phi")) or (kind == "phi" and part):
        raise ValueError(f"aberration {key!r} does not exist in Krivanek notation")
    return (n, m), ("angle" if kind == "phi" else part or "mag"), 1.0
