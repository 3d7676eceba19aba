"""Why a generated SMILES is not a molecule: one kind per invalid sample.

Validity says how many samples fail; to raise it one must know how they fail.
RDKit reads a SMILES in two stages, and each stage has its own ways to fail:

1. **Parsing** (the string as a graph; ``MolFromSmiles(s, sanitize=False)``).
   A string that does not parse is sorted by what the tokens show:
   ``unclosed ring`` (a ring-bond label opened and never closed),
   ``parentheses`` (a ``)`` with no open branch, or a branch left open),
   ``syntax`` (anything else: a bond at the end, two bonds in a row ...).
2. **Sanitization** (chemistry: ``Chem.DetectChemistryProblems``). A graph that
   parses can still be impossible: ``valence`` (an atom with more bonds than it
   can have, e.g. a five-bonded carbon) or ``aromaticity`` (lower-case aromatic
   atoms that admit no alternating single/double bond pattern), or another
   ``sanitization`` problem.

A sample of a model that writes rings by their size
(:mod:`~minitransformer.chem.datasets.ring_sizes`) whose size named no atom of its path is
``ring size``; one of a model that marks its closing ring labels
(:mod:`~minitransformer.chem.datasets.ring_marks`) with a mark that meant nothing is ``ring mark``. An empty sample (the model wrote EOS first) is ``empty``; a string the guard of
:func:`~minitransformer.chem._rdkit.smiles_problem` keeps from RDKit (over 2,000
characters, or characters that never occur in SMILES) is ``unreadable``. A valid SMILES gives
None. :func:`failure_counts` counts the kinds over many samples, the table in
``docs/RESULTS.md`` reports them.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from minitransformer.chem._rdkit import quiet_rdkit, require_rdkit, smiles_problem
from minitransformer.chem.datasets.ring_marks import BAD_RING_MARK
from minitransformer.chem.datasets.ring_sizes import BAD_RING_SIZE
from minitransformer.chem.datasets.tokenizer import tokenize

KINDS = ("empty", "ring size", "ring mark", "unclosed ring", "parentheses", "syntax", "valence", "aromaticity",
         "sanitization", "unreadable")


def _syntax_kind(smiles: str) -> str:
    """The parse failure's kind, read from the tokens (``Cl``, ``[nH]``, ``%12`` are one token each)."""
    depth, open_rings = 0, set()
    for token in tokenize(smiles) if smiles else []:
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
            if depth < 0:
                return "parentheses"
        elif token.isdigit() or token.startswith("%"):  # a ring-bond label opens or closes a ring
            open_rings ^= {token}
    if depth != 0:
        return "parentheses"
    if open_rings:
        return "unclosed ring"
    return "syntax"


def failure_kind(smiles: str) -> str | None:
    """The kind of failure of one SMILES (one of :data:`KINDS`), or None when RDKit reads
    and sanitizes it into a molecule with at least one atom."""
    Chem = require_rdkit()
    if not isinstance(smiles, str) or not smiles.strip():
        return "empty"
    if BAD_RING_SIZE in smiles:
        return "ring size"
    if BAD_RING_MARK in smiles:
        return "ring mark"
    if smiles_problem(smiles) is not None:
        return "unreadable"
    with quiet_rdkit():
        mol = Chem.MolFromSmiles(smiles, sanitize=False)
        if mol is None:
            return _syntax_kind(smiles)
        if mol.GetNumAtoms() == 0:
            return "empty"
        problems = [p.GetType() for p in Chem.DetectChemistryProblems(mol)]
        if not problems:  # what the detector misses, sanitizing itself finds (a valence broken by kekulizing)
            try:
                Chem.SanitizeMol(mol)
            except Chem.AtomValenceException:
                return "valence"
            except Chem.KekulizeException:
                return "aromaticity"
            except Exception:  # noqa: BLE001 (any other step of sanitizing)
                return "sanitization"
            return None
    if any("Valence" in p for p in problems):
        return "valence"
    if any("Kekulize" in p for p in problems):
        return "aromaticity"
    return "sanitization"


def failure_counts(samples: Sequence[str]) -> dict:
    """``{kind: count}`` over the invalid samples, every kind of :data:`KINDS` present (0 or more)."""
    counts = Counter(k for k in map(failure_kind, samples) if k is not None)
    return {kind: counts.get(kind, 0) for kind in KINDS}
