"""Split a SMILES string into chemically meaningful tokens.

A SMILES string writes a molecular graph as text: atoms, bonds, branches in
parentheses, and ring closures as digits. Reading it one character at a time
would cut atoms apart (``Cl`` is chlorine, not carbon followed by ``l``;
``[nH]`` is one aromatic nitrogen carrying a hydrogen), so language models on
SMILES usually tokenize with one regular expression. This module uses the same
token classes as the widely used regex of Schwaller et al. (2019), the one
DeepChem ships as ``BasicSmilesTokenizer``:

=====================  ===========================================================
token                  meaning
=====================  ===========================================================
``[...]``              a bracket atom, kept whole: isotope, element, chirality,
                       hydrogens, charge and atom class, e.g. ``[nH]``, ``[C@@H]``,
                       ``[NH4+]``, ``[13CH3]``
``Br``, ``Cl``         the two-letter atoms of the organic subset
``B C N O S P F I``    one-letter atoms of the organic subset
``b c n o s p``        aromatic atoms of the organic subset
``%nn``                a two-digit ring-closure label, e.g. ``%12``
``0``-``9``            a one-digit ring-closure label
``( )``                branch open / close
``- = # $ : ~``        bonds: single, double, triple, quadruple, aromatic, any
``/ \\``               directional single bonds (double-bond geometry)
``.``                  separates disconnected fragments (salts, mixtures)
``@ + * > ?``          chirality, charge, wildcard atom, reaction arrow, unknown
=====================  ===========================================================

Losslessness
------------
:func:`tokenize` never drops input. A character that none of the patterns above
covers (a letter outside the organic subset such as ``A`` or ``H``, a stray
``]``, a ``[`` without its ``]``, a ``%`` not followed by two digits, white
space ...) becomes a token of its own. Therefore, for every string ``s``::

    "".join(tokenize(s)) == s

Such characters do not occur in valid SMILES, so a model trained on clean data
never sees them; :func:`uncovered_characters` finds them for inspection.
"""
from __future__ import annotations

import re

__all__ = ["tokenize", "uncovered_characters", "is_atom_token", "is_ring_label", "SMILES_TOKEN_PATTERN"]

# One alternative per token class, tried left to right at every position.
# Order matters: the bracket atom comes first so that its contents are not
# split, and "Br"/"Cl" come before the single letters "B"/"C".
_TOKEN_CLASSES = (
    r"\[[^\]]+\]",         # bracket atom: '[' up to the next ']'
    r"Br|Cl",              # two-letter organic-subset atoms
    r"[BCNOSPFI]",         # one-letter organic-subset atoms
    r"[bcnops]",           # aromatic organic-subset atoms
    r"%[0-9]{2}",          # two-digit ring closure
    r"[0-9]",              # one-digit ring closure
    r"[()\-=#$:~./\\@+*>?]",  # branches, bonds, dot, chirality/charge signs, '*', '>', '?'
)

#: The SMILES token regex (without the catch-all used for losslessness).
SMILES_TOKEN_PATTERN = "|".join(_TOKEN_CLASSES)

# The full scanner: a SMILES token, or else any single character (DOTALL makes
# '.' match newlines too). Because every position matches something, the
# matches tile the whole input and tokenization is lossless.
_SCANNER = re.compile(f"(?P<token>{SMILES_TOKEN_PATTERN})|(?P<other>.)", re.DOTALL)


def tokenize(smiles: str) -> list[str]:
    """Split ``smiles`` into tokens; ``"".join(tokenize(s)) == s`` for every string.

    >>> tokenize("Cc1c[nH]c2ccc(Cl)cc12")
    ['C', 'c', '1', 'c', '[nH]', 'c', '2', 'c', 'c', 'c', '(', 'Cl', ')', 'c', 'c', '1', '2']
    >>> tokenize("C%12CC%12")
    ['C', '%12', 'C', 'C', '%12']
    """
    if not isinstance(smiles, str):
        raise TypeError(f"tokenize expects a str, got {type(smiles).__name__}")
    return [m.group() for m in _SCANNER.finditer(smiles)]


def uncovered_characters(smiles: str) -> list[tuple[int, str]]:
    """Return ``(position, character)`` for every character outside the SMILES token classes.

    These are the single-character tokens :func:`tokenize` emits only to stay
    lossless. An empty list means the string is made of SMILES tokens only
    (which does not yet mean it is a valid molecule).

    >>> uncovered_characters("CCX")
    [(2, 'X')]
    """
    return [(m.start(), m.group()) for m in _SCANNER.finditer(smiles) if m.lastgroup == "other"]


_ATOM = re.compile(r"\[[^\]]+\]|Br|Cl|[BCNOSPFI]|[bcnops]|\*")  # one whole token that is an atom


def is_atom_token(token: str) -> bool:
    """True for a token that writes one atom: ``[...]``, ``Cl``, ``Br``, ``C``, ``c``, ``*`` ..."""
    return _ATOM.fullmatch(str(token)) is not None


_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() also takes "²", a token of its own


def is_ring_label(token: str) -> bool:
    """True for a ring-bond label: ``0``..``9``, or ``%`` and two digits (``%12``)."""
    return len(token) == 1 and token in _DIGITS or len(token) == 3 and token[0] == "%" and set(token[1:]) <= _DIGITS
