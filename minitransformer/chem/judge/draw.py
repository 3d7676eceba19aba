"""Draw molecules with RDKit: a PNG grid of structures with their canonical SMILES as legends."""
from __future__ import annotations

from minitransformer.atomic import write_bytes
from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit


class DrawingUnavailable(RuntimeError):
    """RDKit is installed but its drawing module cannot load: a system library it links to
    (libXrender, libXext, Cairo's) is missing, as on minimal server and GPU images. A run
    that draws at its end catches this, says so in one line and keeps everything else."""


def drawing_module():
    """RDKit's 2D drawing module, or :class:`DrawingUnavailable` naming what is missing."""
    try:
        from rdkit.Chem.Draw import rdMolDraw2D
    except ImportError as exc:  # the C library behind it failed to load
        raise DrawingUnavailable(f"RDKit cannot draw here ({exc}); install the missing system library "
                                 "(on Debian/Ubuntu: apt install libxrender1 libxext6)") from None
    return rdMolDraw2D


def molecule_grid_png(smiles, n: int = 24, per_row: int = 6, size: int = 250) -> tuple[bytes | None, int]:
    """Draw up to ``n`` parsable SMILES in a grid; returns ``(PNG bytes, number drawn)``,
    ``(None, 0)`` when none parses. Uses RDKit's Cairo drawer (no Pillow needed);
    :class:`DrawingUnavailable` when that cannot load."""
    Chem = require_rdkit()
    rdMolDraw2D = drawing_module()

    mols, legends = [], []
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s)
            if mol is not None and mol.GetNumAtoms() > 0:
                mols.append(mol)
                label = Chem.MolToSmiles(mol)  # canonical, aromatic form: how chemists read it
                legends.append(label if len(label) <= 40 else label[:37] + "...")
            if len(mols) == n:
                break
    if not mols:
        return None, 0
    rows = (len(mols) + per_row - 1) // per_row
    cols = min(per_row, len(mols))
    with quiet_rdkit():  # drawing logs too (e.g. "unsupported number of radical electrons")
        drawer = rdMolDraw2D.MolDraw2DCairo(cols * size, rows * size, size, size)
        drawer.drawOptions().legendFontSize = 14
        drawer.DrawMolecules(mols, legends=legends)
        drawer.FinishDrawing()
        return drawer.GetDrawingText(), len(mols)


def molecule_grid(smiles, path, n: int = 24, per_row: int = 6, size: int = 250) -> int:
    """Draw up to ``n`` parsable SMILES in a grid and write a PNG to ``path`` (atomically:
    see :mod:`minitransformer.atomic`). Returns the number drawn; nothing is written when 0."""
    png, drawn = molecule_grid_png(smiles, n, per_row, size)
    if drawn:
        write_bytes(path, png)
    return drawn
