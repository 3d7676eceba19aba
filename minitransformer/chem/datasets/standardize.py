"""Standardizing molecules before training: one clean, neutral, organic molecule per row.

Data sets such as Tox21 record what was tested, not one molecule: salts
(``[Na+].[O-]C(=O)...``), charged forms, metal complexes. A language model
trained on them learns to write counter-ions and metals. :func:`standardize`
turns each row into its parent molecule with RDKit's ``MolStandardize``, in
this order:

1. **metals**: ``MetalDisconnector`` breaks covalent bonds between a metal and
   N, O or F (and a few others) into ions, so a metal salt written with bonds
   becomes separate fragments (change ``"metal disconnected"``);
2. **fragment**: ``LargestFragmentChooser(preferOrganic=True)`` keeps the
   largest fragment that contains carbon (``"desalted"`` when others were
   dropped);
3. **charge**: ``Uncharger`` neutralises acids and bases by adding or removing
   protons where a neutral form exists (``"neutralised"``); a quaternary
   ammonium stays charged, since it has no neutral form;
4. **metals again**: if the kept fragment still holds a metal atom (an
   organometallic compound, e.g. a tin-carbon bond, which the disconnector
   leaves alone), the molecule is **dropped** with the reason ``"metal in
   organic fragment"``. We drop rather than keep them because no rule can
   make them organic, they are outside what MOSES's filters allow, and they
   are rare (about 1% of Tox21).

A molecule whose kept fragment has no carbon at all (cisplatin leaves only
ammonia) is dropped as ``"no organic fragment"``. A string RDKit cannot read is
dropped (``"unparseable"``). The result is the
canonical SMILES of the kept molecule (stereo kept).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit

__all__ = ["standardize", "standardize_all", "StandardizeReport", "NON_METALS", "has_metal"]

# Elements that are not metals (the noble gases included); every other element counts as a metal.
NON_METALS = frozenset({"H", "He", "B", "C", "N", "O", "F", "Ne", "Si", "P", "S", "Cl", "Ar", "As", "Se",
                        "Br", "Kr", "Te", "I", "Xe", "At", "Rn", "*"})


def has_metal(mol) -> bool:
    """True when some atom of ``mol`` is a metal (an element outside :data:`NON_METALS`)."""
    return any(atom.GetSymbol() not in NON_METALS for atom in mol.GetAtoms())


_TOOLS = {}


def _tools():
    if not _TOOLS:
        require_rdkit()
        from rdkit.Chem.MolStandardize import rdMolStandardize as rd
        _TOOLS.update(metal=rd.MetalDisconnector(), largest=rd.LargestFragmentChooser(preferOrganic=True),
                      uncharge=rd.Uncharger())
    return _TOOLS


def _charge_pattern(mol) -> tuple:
    return tuple(atom.GetFormalCharge() for atom in mol.GetAtoms())


def standardize(smiles: str) -> tuple[str | None, set[str]]:
    """The standardized canonical SMILES of one molecule and the set of changes made
    (``"metal disconnected"``, ``"desalted"``, ``"neutralised"``); ``(None, {reason})``
    when it is dropped (``"unparseable"``, ``"metal in organic fragment"``)."""
    Chem = require_rdkit()
    tools = _tools()
    changes: set[str] = set()
    with quiet_rdkit():
        mol = mol_from_smiles(smiles)
        if mol is None:
            return None, {"unparseable"}
        before = Chem.MolToSmiles(mol)
        disconnected = tools["metal"].Disconnect(mol)
        if Chem.MolToSmiles(disconnected) != before:
            changes.add("metal disconnected")
        n_fragments = len(Chem.GetMolFrags(disconnected))
        kept = tools["largest"].choose(disconnected)
        if n_fragments > 1:
            changes.add("desalted")
        neutral = tools["uncharge"].uncharge(kept)
        if _charge_pattern(neutral) != _charge_pattern(kept) or \
                Chem.MolToSmiles(neutral) != Chem.MolToSmiles(kept):
            changes.add("neutralised")
        if has_metal(neutral):
            return None, {"metal in organic fragment"}
        if not any(atom.GetAtomicNum() == 6 for atom in neutral.GetAtoms()):
            return None, {"no organic fragment"}
        out = Chem.MolToSmiles(neutral)
        if not out or mol_from_smiles(out) is None:
            return None, {"unparseable after standardizing"}
    return out, changes


class StandardizeReport:
    """What :func:`standardize_all` did: counts of each change and of each reason to drop."""

    def __init__(self):
        self.n_in = 0
        self.n_changed = 0
        self.changes: Counter = Counter()
        self.dropped: Counter = Counter()

    def summary(self) -> str:
        """One line, e.g. ``standardized 7831 molecules: 191 desalted, 12 neutralised, ...``."""
        parts = [f"{self.changes[c]} {c}" for c in ("desalted", "neutralised", "metal disconnected")]
        dropped = sum(self.dropped.values())
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.dropped.items()))
        return (f"standardized {self.n_in} molecules: {self.n_changed} changed ({', '.join(parts)}); "
                f"{dropped} dropped" + (f" ({why})" if why else ""))

    def as_dict(self) -> dict:
        return {"n_in": self.n_in, "n_changed": self.n_changed, "changes": dict(self.changes),
                "dropped": dict(self.dropped)}


def standardize_all(smiles: Sequence[str]) -> tuple[list[str], StandardizeReport]:
    """Standardize every string; returns the kept SMILES (input order) and the report.

    A molecule that needed no change keeps its string as written (so a data set's
    own writing, e.g. Kekule or non-canonical, is not silently rewritten); a changed
    one is replaced by its standardized canonical SMILES.
    """
    report = StandardizeReport()
    kept = []
    for s in smiles:
        report.n_in += 1
        out, changes = standardize(s)
        if out is None:
            report.dropped.update(changes)
            continue
        if changes:
            report.n_changed += 1
            report.changes.update(changes)
        kept.append(out if changes else s)
    return kept, report
