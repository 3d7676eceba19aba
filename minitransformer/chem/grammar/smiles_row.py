"""The syntax state of one SMILES row while it is sampled: the token classes and :class:`Row`.

:class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar` keeps one
:class:`Row` per sampled row and asks it which token classes rules 1-10 allow next
(:meth:`Row.allowed`), moves it on by the token written (:meth:`Row.advance`), and
counts the tokens it still needs to finish (:meth:`Row.need`, rule 11). The rules
are numbered in :mod:`~minitransformer.chem.grammar.smiles_grammar`.
"""
from __future__ import annotations

from collections import Counter

from minitransformer.chem.datasets.tokenizer import is_ring_label

# Token classes; ring label i of the vocabulary has class RING0 + i.
BANNED, EOS, ATOM, BOND, OPEN, CLOSE, DOT, RING0 = range(8)
_ORGANIC = {"B", "C", "N", "O", "S", "P", "F", "I", "Cl", "Br", "b", "c", "n", "o", "s", "p", "*"}
_BONDS = {"-", "=", "#", "$", ":", "/", "\\"}
_SIMPLE = {"(": OPEN, ")": CLOSE, ".": DOT}
# How much one allowed token can raise Row.need: opening a ring on an atom that
# opened none adds the label and two atoms (``C`` + ``1`` needs ``CC1``), so 3.
MAX_RISE = 3


def token_class(token: str) -> int:
    """The class of a non-special token: ATOM, BOND, OPEN, CLOSE, DOT, RING0 (any ring
    label), or BANNED for anything outside SMILES."""
    if token in _ORGANIC or (len(token) > 2 and token[0] == "[" and token[-1] == "]"):
        return ATOM
    if token in _BONDS:
        return BOND
    if is_ring_label(token):
        return RING0
    return _SIMPLE.get(token, BANNED)


class Row:
    """The grammar state of one row.

    last: the class of the last token, as a word: "start" (nothing yet, or a
    dot), "atom", "bond", "open", "close", "ring" (a ring label) or "done".
    Atoms are numbered as written; ``cur`` is the atom the next bond, branch or
    ring label attaches to (-1 at the start), ``par`` the atom ``cur`` is
    bonded to by the chain, ``partners`` the atoms ``cur`` has closed rings to.
    ``bases`` holds the atom each open branch hangs from, ``rings`` maps each
    open ring label to the atom that opened it.
    """

    __slots__ = ("last", "bond_after_atom", "bases", "rings", "cur", "par", "partners", "n_atoms")

    def __init__(self):
        self.last, self.bond_after_atom = "start", False
        self.bases, self.rings, self.partners = [], {}, set()
        self.cur = self.par = -1
        self.n_atoms = 0

    def clone(self) -> "Row":
        new = Row.__new__(Row)
        new.last, new.bond_after_atom, new.cur, new.par, new.n_atoms = (
            self.last, self.bond_after_atom, self.cur, self.par, self.n_atoms)
        new.bases, new.rings, new.partners = list(self.bases), dict(self.rings), set(self.partners)
        return new

    def allowed(self, n_labels: int, max_open: int) -> list:
        """Rules 1-10: one bool per class (RING0 + n_labels of them)."""
        ok = [False] * (RING0 + n_labels)
        last = self.last
        after_atom = last in ("atom", "ring")
        complete = after_atom or last == "close"  # a part of the molecule just ended
        ok[ATOM] = True
        ok[BOND] = complete or last == "open"
        ok[OPEN] = complete
        ok[CLOSE] = complete and bool(self.bases)
        ok[DOT] = ok[EOS] = complete and not self.bases and not self.rings
        if after_atom or (last == "bond" and self.bond_after_atom):
            for i in range(n_labels):
                opener = self.rings.get(i)
                if opener is None:
                    ok[RING0 + i] = len(self.rings) < max_open
                else:
                    ok[RING0 + i] = opener != self.cur and opener != self.par and opener not in self.partners
        return ok

    def advance(self, cls: int, label: int = -1) -> None:
        """Write one token of class ``cls`` (``label``: the ring label's index)."""
        if cls == ATOM:
            self.par, self.cur, self.partners = self.cur, self.n_atoms, set()
            self.n_atoms += 1
            self.last = "atom"
        elif cls == BOND:
            self.bond_after_atom = self.last in ("atom", "ring")
            self.last = "bond"
        elif cls == OPEN:
            self.bases.append(self.cur)
            self.last = "open"
        elif cls == CLOSE:
            self.cur = self.bases.pop()  # back to the atom the branch hangs from
            self.last = "close"
        elif cls == DOT:
            self.cur = self.par = -1
            self.last = "start"
        elif cls == EOS:
            self.last = "done"
        elif cls >= RING0:
            if label in self.rings:
                self.partners.add(self.rings.pop(label))
            else:
                self.rings[label] = self.cur
            self.last = "ring"
        else:
            raise ValueError("SmilesGrammar: a special or non-SMILES token was written to an unfinished row")

    def need(self) -> int:
        """Tokens of one way to finish, EOS included (rule 11): extra atoms, then
        one label per open ring, one ``)`` per open branch, EOS.

        At most one ring per opening atom closes on each atom, and not on the
        opening atom, its chain neighbour, or a partner. On the current atom
        (after an atom or label) a ring opened by an atom ``o`` with ``c`` open
        rings needs ``c + 1`` new atoms if ``o`` is the current atom, ``c`` if ``o``
        is its neighbour or partner, else ``c - 1``. Elsewhere (start, bond,
        ``(``, ``)``) the next atom attaches to ``cur``: ``c + 1`` if ``o`` is
        ``cur``, else ``c``, and at least one atom unless after ``)``.
        """
        if self.last == "done":
            return 0
        extra = 0 if self.last in ("atom", "ring", "close") else 1
        for opener, count in Counter(self.rings.values()).items():
            if self.last in ("atom", "ring"):
                if opener == self.cur:
                    count += 1
                elif opener != self.par and opener not in self.partners:
                    count -= 1
            elif opener == self.cur:
                count += 1
            extra = max(extra, count)
        return extra + len(self.rings) + len(self.bases) + 1
