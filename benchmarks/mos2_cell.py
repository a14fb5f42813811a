"""The 2H-MoS2 monolayer that the abTEM benchmarks simulate (varying_probe_mos2.py, two_scans_mos2.py): never
imports ptyacc. Needs abtem and ase."""


def square_mos2():
    """(atoms, side_A): 14 x 8 orthogonal MoS2 cells (a = 3.19 Å) made square, y stretched to x's length
    (about 44.7 Å), the layer in the middle of its 7 Å height."""
    import abtem
    from ase.build import mx2

    atoms = abtem.orthogonalize_cell(mx2(formula="MoS2", kind="2H", a=3.19, thickness=3.19, vacuum=2.0))
    atoms = atoms * (14, 8, 1)
    lengths = atoms.cell.lengths()
    side = float(lengths[0])
    atoms.set_cell([side, side, lengths[2]], scale_atoms=True)  # square: y stretched by side / cell[1]
    atoms.center(axis=2)
    return atoms, side
