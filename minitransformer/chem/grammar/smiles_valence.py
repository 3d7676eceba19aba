"""Valence as a sampling constraint: never give an atom more bonds than RDKit allows.

:class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar` keeps samples
parseable; with ``valence=True`` it also follows, for every atom written so far,
how much bond order it can still take (its *spare* valence), and bans the
tokens that would overload an atom. This is the second failure kind of our
generators: once syntax is enforced, forced ring closures and extra branches
come back as "valence" failures (docs/RESULTS.md).

Capacities come from RDKit itself (:func:`atom_capacity`): the most single
bonds an atom token can take and still sanitize (``C`` 4, ``N`` 3, ``O`` 2,
``Cl`` 1, ``[N+]`` 4, ``[O-]`` 1, ``[C@@H]`` 3, ``S`` 6), so charges and
explicit hydrogens count exactly as RDKit counts them. Aromatic atoms (``c``,
``[nH]``) and atoms RDKit does not limit (``*``, metals) are left unconstrained:
their bonds are aromatic, and whether a ring of them can be kekulized is not a
question a left-to-right rule can answer. So the rule is complete for Kekulé
SMILES and partial for aromatic ones.

The rules (``spare(a)``: what atom ``a`` can still take; ``b``: the order of
the bond a token makes, 1 when no bond symbol is written; ``cur``: the atom the
next bond attaches to, as in the grammar):

V1. An atom needs ``capacity >= b``, and ``spare(cur) >= b`` when it bonds to
    ``cur`` (``CC(F)(F)(F)`` + ``F`` is banned; ``C=`` + ``Cl`` is banned).
V2. A bond symbol of order ``o`` needs ``spare(cur) >= o`` (``CC(C)(C)`` + ``=``).
V3. ``(`` needs ``spare(cur) >= 1``.
V4. Opening a ring reserves ``b`` on ``cur``. The ring bond's order ``o`` is the
    symbol written at either end (1 when neither writes one); closing needs
    ``spare(cur) >= o``, and when only the closing end writes a symbol
    (``C1CC=1``), the opening atom must take the ``o - 1`` it did not reserve.
    Two different orders on the two ends are banned (OpenSMILES calls it an
    error; RDKit silently keeps the opening one: ``C=1CC#1`` + ``1``).
V5. **No dead end while a ring is open.** After an atom, a ring label or ``)``,
    some atom the molecule can still grow from (``cur``, or the base of an
    open branch, reached by closing branches) needs ``spare >= 1``; a token
    after which none has is banned (``C1CC(C)(C)(C`` + ``)``: back on a full
    atom with ring 1 open). After a bond or ``(`` the next token is a new atom,
    which V1 checks. A fresh ``C`` on a single bond has 3 to spare, so from any
    atom with 1 to spare every open ring can be closed (the rule assumes ``C``,
    or another atom taking 4 bonds, is in the vocabulary).

Length. Near ``max_len`` the grammar's budget (its rule 11) is replaced by the
cost of a plan to finish that obeys these rules too
(:meth:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar._finish_cost`):
``C=1CC`` + ``O`` is banned when only two tokens would be left, because ``O``
cannot take the double ring bond and a closing atom must come first.

Limits. ``:`` (aromatic bond) and ``/``, ``\\`` count as order 1, so strings of
``:`` between upper-case atoms are not fully checked (RDKit counts 1.5). A
quadruple bond ``$``, or two open rings of order 3, can still leave a row with
nothing allowed (the sampler then ends it); neither occurs in our data.
"""
from __future__ import annotations

import math
from functools import lru_cache

__all__ = ["atom_capacity", "bond_order", "Valence"]

_ORDERS = {"-": 1, "=": 2, "#": 3, "$": 4, ":": 1, "/": 1, "\\": 1}
_AROMATIC = {"b", "c", "n", "o", "s", "p", "se", "te", "as"}


def bond_order(token: str) -> int:
    """The bond order of a bond symbol (``:`` aromatic, ``/`` and ``\\`` count as 1)."""
    return _ORDERS[token]


def _element(token: str) -> str:
    """The element symbol of an atom token (``[C@@H]`` -> ``C``, ``[nH]`` -> ``n``)."""
    if not token.startswith("["):
        return token
    body = token[1:-1].lstrip("0123456789")  # isotope
    return body[:2] if len(body) > 1 and body[1].islower() else body[:1]


@lru_cache(maxsize=None)
def atom_capacity(token: str) -> float:
    """The largest total bond order RDKit lets the atom ``token`` take (inf when unlimited).

    Measured, not tabulated: ``token`` bonded to k methyl groups by single bonds
    is parsed and sanitized for k = 0, 1, ... 8; the capacity is the largest k
    that passes. Aromatic atoms, ``*`` and tokens taking 8 bonds are unlimited.
    """
    from rdkit import Chem, RDLogger
    RDLogger.DisableLog("rdApp.*")
    if token == "*" or _element(token) in _AROMATIC:
        return math.inf
    best = -1
    for k in range(9):
        smiles = token + "(C)" * max(k - 1, 0) + ("C" if k else "")
        if Chem.MolFromSmiles(smiles) is not None:
            best = k
    return math.inf if best >= 8 else float(max(best, 0))


class Valence:
    """The spare valence of the atoms of one row (rules V1-V5 of the module docstring).

    It reads the syntax state (``row``: the grammar's ``Row``, *before* the token
    is written) for ``cur``, the open branches and rings, and keeps its own:
    ``spare`` (one float per atom, in writing order), ``pending`` (the order of
    a bond symbol just written, 0 when none) and ``ring_bond`` (label -> the
    bond symbol's order written where the ring opened, 0 when none: such a ring
    reserved 1 on its opener, hence the ``opened or 1`` below).
    """

    __slots__ = ("spare", "pending", "ring_bond")

    def __init__(self):
        self.spare, self.pending, self.ring_bond = [], 0, {}

    def _bond(self, row) -> int:
        """The order of the bond the next atom or ring label makes."""
        return self.pending or (1 if row.last in ("atom", "ring", "close", "open", "bond") else 0)

    def _goes_on(self, cur_spare: float, bases, change: dict) -> bool:
        """Rule V5 after a token: the new ``cur`` has ``cur_spare``, ``bases`` are the
        open branches' base atoms, ``change`` maps atoms to what the token took from them."""
        return cur_spare >= 1 or any(self.spare[a] - change.get(a, 0) >= 1 for a in bases)

    def allowed(self, row, kind: tuple, rings_open_after: bool) -> bool:
        """Whether the token of ``kind`` may come next: ``("atom", capacity)``,
        ``("bond", order)``, ``("open",)``, ``("close",)``, ``("ring", label)``, or
        anything else (EOS, dot: always, as far as valence goes). Tokens the syntax
        rules ban may get any answer. ``rings_open_after``: whether a ring is still open after the token (rule V5)."""
        what, cur = kind[0], row.cur
        spare = self.spare[cur] if cur >= 0 else math.inf
        if what == "atom":  # V1
            b = self._bond(row)
            if kind[1] < b or (cur >= 0 and spare < b):
                return False
            return not rings_open_after or self._goes_on(kind[1] - b, row.bases, {cur: b})
        if what == "bond":  # V2
            return spare >= kind[1]
        if what == "open":  # V3
            return spare >= 1
        if what == "close":  # (with no branch open, the syntax rules ban it)
            return not row.bases or not rings_open_after or self._goes_on(self.spare[row.bases[-1]], row.bases[:-1], {})
        if what == "ring":  # V4
            label = kind[1]
            if label not in row.rings:  # opening: reserve the bond on cur
                b = self._bond(row)
                return spare >= b and self._goes_on(spare - b, row.bases, {})
            opened, here = self.ring_bond.get(label, 0), self.pending
            if opened and here and opened != here:
                return False
            order = opened or here or 1
            opener, extra = row.rings[label], order - (opened or 1)  # more than the opener reserved
            if spare < order or self.spare[opener] < extra:
                return False
            return not rings_open_after or self._goes_on(spare - order, row.bases, {opener: extra})
        return True

    def advance(self, row, kind: tuple) -> None:
        """Write the token of ``kind``; ``row`` is the syntax state before it."""
        what = kind[0]
        if what == "atom":
            b = self._bond(row)
            if row.cur >= 0 and b:
                self.spare[row.cur] -= b
            self.spare.append(kind[1] - b)
        elif what == "bond":
            self.pending = kind[1]
            return
        elif what == "ring":
            label = kind[1]
            if label not in row.rings:
                self.spare[row.cur] -= self._bond(row)
                self.ring_bond[label] = self.pending
            else:
                opened = self.ring_bond.pop(label, 0)
                order = opened or self.pending or 1
                self.spare[row.cur] -= order
                self.spare[row.rings[label]] -= order - (opened or 1)
        self.pending = 0

    def clone(self) -> "Valence":
        new = Valence.__new__(Valence)
        new.spare, new.pending, new.ring_bond = list(self.spare), self.pending, dict(self.ring_bond)
        return new

