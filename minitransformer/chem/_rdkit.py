"""Lazy access to RDKit, and a switch that keeps its logger quiet.

RDKit is an optional dependency: the tokenizer and the vocabulary are plain
Python and must import without it. Every function that needs RDKit calls
:func:`require_rdkit` at run time instead of importing RDKit at module level,
so a missing installation surfaces as one clear :class:`ImportError` that says
how to fix it, at the moment RDKit is actually needed.

Every string reaches RDKit through :func:`mol_from_smiles`, which first asks
:func:`smiles_problem` whether it may: RDKit's canonical writer recurses once per
atom, so a SMILES of some 20,000 characters crashes the whole process (a
segmentation fault, no message) and a 1 MB one runs for many minutes without
answering Ctrl-C. No molecule a user judges or trains on comes near
:data:`MAX_SMILES_CHARS`; longer strings, and strings with characters that never
occur in SMILES, are treated as unparsable and never handed to RDKit.

RDKit reports every SMILES it cannot parse on stderr. When thousands of
strings are screened (data cleaning, validity of generated samples) those
messages are expected and useless, so :func:`quiet_rdkit` silences them for
the duration of a ``with`` block.
"""
from __future__ import annotations

import contextlib

INSTALL_HINT = "pip install rdkit"
#: The longest string handed to RDKit (characters). The longest Tox21 SMILES has 342.
MAX_SMILES_CHARS = 2_000


def smiles_problem(smiles) -> str | None:
    """Why ``smiles`` must not reach RDKit (too long, not printable ASCII, not a string), or
    None when it may. The one guard every parse goes through (module docstring)."""
    if not isinstance(smiles, str):
        return f"not a string ({type(smiles).__name__})"
    if len(smiles) > MAX_SMILES_CHARS:
        return f"longer than {MAX_SMILES_CHARS:,} characters ({len(smiles):,})"
    if not (smiles.isascii() and smiles.isprintable()):
        return "characters that never occur in SMILES (not printable ASCII)"
    return None


def require_rdkit():
    """Import and return ``rdkit.Chem``, or raise an ImportError with an install hint."""
    try:
        from rdkit import Chem
    except ImportError as exc:
        raise ImportError(
            "this part of minitransformer.chem needs RDKit, which is not installed. "
            f"Install it with: {INSTALL_HINT}"
        ) from exc
    return Chem


@contextlib.contextmanager
def quiet_rdkit():
    """Silence RDKit's log messages (parse errors, sanitization warnings) inside the block.

    Uses ``rdBase.BlockLogs``, which restores the previous log state when it is
    released, so an outer caller's logging configuration is left as it was.
    """
    require_rdkit()
    from rdkit import rdBase

    blocker = rdBase.BlockLogs()
    try:
        yield
    finally:
        del blocker


def mol_from_smiles(smiles: str, sanitize: bool = True, params=None):
    """Parse and sanitize one SMILES; return the RDKit molecule, or None (MOSES's ``get_mol``).

    None is returned for anything that is not a usable molecule: a string RDKit
    cannot parse or sanitize, a string :func:`smiles_problem` keeps from RDKit,
    and also the empty string (RDKit parses ``""`` as a molecule with zero atoms,
    which no metric should count as valid). ``sanitize=False`` parses only;
    ``params`` (RDKit's ``SmilesParserParams``) replaces both. Call it inside
    :func:`quiet_rdkit` to keep the parse errors off stderr.
    """
    Chem = require_rdkit()
    if not smiles or smiles_problem(smiles) is not None:
        return None
    mol = Chem.MolFromSmiles(smiles, params) if params is not None else Chem.MolFromSmiles(smiles, sanitize=sanitize)
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def has_radicals(mol) -> bool:
    """True when some atom of ``mol`` has an unpaired electron (e.g. ``[CH3]``, ``C[O]``).

    MOSES counts such molecules as valid; we count them too, and report them apart.
    """
    return any(atom.GetNumRadicalElectrons() for atom in mol.GetAtoms())


def parse_valid(smiles) -> tuple[list, list[str]]:
    """The valid molecules among ``smiles`` (see :func:`mol_from_smiles`) and their
    canonical SMILES, same order, duplicates kept; RDKit's log is quiet meanwhile."""
    Chem = require_rdkit()
    mols, canon = [], []
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s)
            if mol is not None:
                mols.append(mol)
                canon.append(Chem.MolToSmiles(mol))
    return mols, canon
