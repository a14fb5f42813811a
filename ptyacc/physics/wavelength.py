"""Wavelength of the illumination from its energy."""

import math

PLANCK_EV_S = 4.135667696e-15  # h in eV s
SPEED_OF_LIGHT_A_S = 2.99792458e18  # c in Å / s
ELECTRON_REST_ENERGY_EV = 510998.95  # m_e c^2 in eV


def electron_wavelength_A(energy_eV: float) -> float:
    """Relativistic electron wavelength in Å: lambda = h c / sqrt(E (E + 2 m c^2))."""
    if energy_eV <= 0:
        raise ValueError(f"energy_eV must be > 0, got {energy_eV}")
    hc = PLANCK_EV_S * SPEED_OF_LIGHT_A_S
    return hc / math.sqrt(energy_eV * (energy_eV + 2.0 * ELECTRON_REST_ENERGY_EV))


def xray_wavelength_A(energy_eV: float) -> float:
    """Photon wavelength in Å: lambda = h c / E."""
    if energy_eV <= 0:
        raise ValueError(f"energy_eV must be > 0, got {energy_eV}")
    return PLANCK_EV_S * SPEED_OF_LIGHT_A_S / energy_eV


def wavelength_A(energy_eV: float, radiation: str = "electron") -> float:
    """Wavelength in Å for ``radiation`` 'electron' or 'xray'."""
    if radiation == "electron":
        return electron_wavelength_A(energy_eV)
    if radiation == "xray":
        return xray_wavelength_A(energy_eV)
    raise ValueError(f"radiation must be 'electron' or 'xray', got {radiation!r}")
