"""SMILES grammar as a sampling constraint: never write a string that cannot parse.

Most invalid samples of a SMILES generator fail before any chemistry: a ring
label opened and never closed, a ``)`` without its ``(``, a bond at the end.
:class:`SmilesGrammar` follows each row while it is sampled (a small state
machine per row) and, before every step, bans the tokens that would break the
syntax. It plugs into :func:`minitransformer.generate.sample` as
``constraint=SmilesGrammar(vocab)`` (see :mod:`minitransformer.generate.constraint`).

This is a feature of the sampler, switched off by default: the model's
distribution is renormalised over the allowed tokens at each step. Nothing is
filtered, resampled or repaired afterwards. The rules below are syntax only;
``SmilesGrammar(vocab, valence=True)`` adds the valence rules of
:mod:`minitransformer.chem.grammar.smiles_valence` (no atom gets more bonds than RDKit
allows it). Aromaticity is always left to the model, so a constrained sample
can still fail RDKit's sanitization (an aromatic ring that cannot be kekulized).

The rules
---------
Tokens come in classes: atoms (``C``, ``c``, ``Cl``, ``[nH]``, ``[C@@H]``, ``*``),
bonds (``- = # $ : / \\``), branch open ``(`` and close ``)``, ring labels
(``1``..``9``, ``0``, ``%10``..), the fragment dot ``.``, and EOS. Examples
below show a prefix and the next token (``C(`` + ``)`` means: after ``C(``,
``)`` is banned).

1. An atom is always allowed (``CC(=O)`` + ``N``).
2. A bond needs something to hang from: banned at the start, after a bond and
   after a dot (``C=`` + ``#``, ``=`` as the first token); allowed after an
   atom, a ring label, ``(`` or ``)`` (``C(=O)``, ``C(C)=O``).
3. ``(`` opens a branch off the last atom: banned at the start, right after
   ``(``, after a bond and after a dot (``C((``, ``C=(``); allowed after an
   atom, a ring label or ``)`` (``CC(C)(C)C``).
4. ``)`` needs an open branch with something in it: banned when no branch is
   open (``CC)``), right after ``(`` (``C()``) and right after a bond (``C(=)``).
5. A ring label follows an atom, a ring label, or a bond that follows one of
   these (``C1``, ``C12``, ``C=1CCCC1``, ``C1CCCC=1``); it is banned at the
   start, after ``(``, after ``)`` and after a bond that follows ``(`` or
   ``)`` (``C(1``, ``C(C)1``).
6. A label that is not open opens a ring, unless ``max_open_rings`` rings are
   open already (with 4: ``C1CC2CC3CC4CC`` + ``5``).
7. A label that is open closes its ring, unless the bond it makes exists
   already: banned on the atom that opened it (``C1`` + ``1``), on the atom
   bonded to that one by the chain (``C1C`` + ``1``), or on an atom that already
   closed a ring to the same atom (``C12CC1`` + ``2``). RDKit rejects all three.
8. EOS ends a complete molecule: banned at the start (an empty sample), while a
   branch or a ring is open (``C(C``, ``C1CC``), and right after a bond or
   ``(`` (``CC=``).
9. The dot starts a new fragment: allowed only where EOS would be
   (``CC(=O)[O-].[Na+]``), and it then acts as the start.
10. Specials other than EOS (PAD, BOS, UNK, ...) and tokens outside SMILES
    (a lone ``@`` or ``H``) are never written.
11. **Length budget.** A row must end with EOS within ``max_len`` tokens (BOS
    included). :meth:`Row.need` counts the tokens of one way to finish from
    the current state: at most two more atoms (when a ring cannot close on the
    current atom yet), one label per open ring, one ``)`` per open branch, and
    EOS. A token is banned when the state it leads to needs more tokens than
    are left after it. With ``max_len = 8``, after ``<bos>C1CC`` (5 tokens) two
    may follow the next one: ``C`` (then ``1``, EOS) and ``1`` (then EOS) are
    allowed, while ``(`` (then an atom, ``)``, ``1``, EOS) and a new ring
    ``2`` are banned. The count is of one way to finish, not always the
    shortest (``=`` is banned there too, though ``C1CC=1`` would fit), so the
    rule errs on the safe side.

    Why the row never gets stuck: the first token of that way to finish is
    always allowed by rules 1-10 and lowers the count by at least one, so a row
    that starts with enough room keeps enough room until its EOS. Only a
    ``max_len`` that leaves fewer than two tokens (an atom and EOS) after the
    prefix can leave a row with nothing allowed; the sampler then lets it end
    (:func:`~minitransformer.generate.constraint.apply_constraint`). With the
    valence rules on, the count is the length of a plan that obeys them too
    (:meth:`SmilesGrammar._finish_cost`), and the same argument holds for it.

A model whose closing ring labels are marked (``Vocab(rings="marked")``,
:mod:`~minitransformer.chem.datasets.ring_marks`) is read the same way, a closing ``1'`` as the
label ``1``; an opening label is then banned where its ring is open, a closing one where it is not.

Cost: per step, a few Python operations per unfinished row, plus one short
look-ahead per allowed token class when a row is within a few tokens of its
budget.
"""
from __future__ import annotations

import numpy as np

from minitransformer.chem.datasets.ring_marks import is_closing
from minitransformer.chem.datasets.tokenizer import is_ring_label
from minitransformer.chem.datasets.vocab import Vocab
from minitransformer.chem.grammar.smiles_row import (
    ATOM, BANNED, BOND, CLOSE, DOT, EOS, MAX_RISE, OPEN, RING0, Row, token_class,
)
from minitransformer.chem.grammar.smiles_valence import Valence, atom_capacity, bond_order

__all__ = ["SmilesGrammar", "token_class"]

class SmilesGrammar:
    """The SMILES syntax of rules 1-11 (module docstring) as a decoding constraint.

    Args:
        vocab: the generator's :class:`~minitransformer.chem.Vocab`.
        max_open_rings: how many rings may be open at once (rule 6). The
            default 4 is the most RDKit's 10,000 drug-like molecules ever have
            open at once, in aromatic or Kekule form.
        valence: also apply the valence rules V1-V5 of
            :mod:`minitransformer.chem.grammar.smiles_valence` (needs RDKit).

    Use: ``sample(model, batch_size=B, constraint=SmilesGrammar(vocab))``.
    """

    def __init__(self, vocab: Vocab, max_open_rings: int = 4, valence: bool = False):
        if isinstance(max_open_rings, bool) or not isinstance(max_open_rings, int) or max_open_rings < 1:
            raise ValueError(f"max_open_rings must be an int >= 1, got {max_open_rings!r}")
        if vocab.rings == "sizes":
            raise ValueError("the SMILES grammar reads ring labels in pairs, and this model writes rings by their "
                             "sizes; draw its samples without a grammar")
        self.vocab = vocab
        self.max_open_rings = max_open_rings
        self.valence = bool(valence)
        marked = vocab.rings == "marked"  # a closing label is its label, written with a mark
        tokens = [t[:-1] if marked and is_closing(t) else t for t in vocab.tokens]
        self.labels = list(dict.fromkeys(t for t in tokens[vocab.n_specials:] if is_ring_label(t)))  # vocab order
        label_index = {t: i for i, t in enumerate(self.labels)}
        classes = [BANNED] * len(tokens)
        classes[vocab.eos_id] = EOS
        for i in range(vocab.n_specials, len(tokens)):
            c = token_class(tokens[i])
            classes[i] = RING0 + label_index[tokens[i]] if c == RING0 else c
        self.token_classes = np.array(classes, dtype=np.int64)  # (V,)
        # marked labels: +1 a label that opens its ring, -1 one that closes it (0: no label, or paired labels)
        self._marks = np.array([(-1 if is_closing(t) else 1) if marked and c >= RING0 else 0
                                for t, c in zip(vocab.tokens, classes)], dtype=np.int64)  # (V,)
        self._mark_label = np.maximum(self.token_classes - RING0, 0)  # (V,) each label token's label (RING0 is last)
        self._n_classes = RING0 + len(self.labels)
        self._rows, self._length, self._max_len = [], 0, 0
        if self.valence:
            self._kinds, self._token_kinds = _valence_kinds(tokens, classes)
            self._kind_class = [_step_class(kind) for kind in self._kinds]  # the grammar class of each kind
            finite = [k for k in self._kinds if k[0] == "atom" and np.isfinite(k[1])]
            self._fresh = max(finite, key=lambda k: k[1]) if finite else None  # the plan's new atoms (C)
        self._valences = []

    # --------------------------------------------------------- the interface
    def start(self, prefix: np.ndarray, max_len: int) -> None:
        """New rows for the prefix (B, P); BOS is skipped, other prompt tokens must obey the rules."""
        prefix = np.asarray(prefix)
        self._rows = [Row() for _ in range(prefix.shape[0])]
        self._valences = [Valence() for _ in self._rows] if self.valence else []
        self._length, self._max_len = 0, int(max_len)
        for j in range(prefix.shape[1]):
            if (prefix[:, j] == self.vocab.bos_id).all():
                self._length += 1
                continue
            rules = "SMILES grammar" + (" or its valence rules" if self.valence else "")
            for b, banned in enumerate(self.banned()):
                if banned[prefix[b, j]]:
                    raise ValueError(f"prompt row {b} breaks the {rules} at position {j} "
                                     f"({self.vocab.id_to_token(prefix[b, j])!r})")
            self.advance(prefix[:, j])

    def banned(self) -> np.ndarray:
        """(B, V) bool: True for the tokens rules 1-11 forbid next (nothing for finished rows)."""
        left = self._max_len - self._length - 1  # tokens that may follow the next one
        ok = np.ones((len(self._rows), self._n_classes), dtype=bool)  # (B, C)
        for b, row in enumerate(self._rows):
            if row.last != "done":
                ok[b] = row.allowed(len(self.labels), self.max_open_rings) if self.valence else \
                    self._allowed(row, left)
        banned = ~ok[:, self.token_classes]  # (B, V)
        banned[:, self.token_classes == BANNED] = True
        # marked labels: one that opens only where its ring is not open, one that closes only where it is
        if self._marks.any():
            is_open = np.zeros((len(self._rows), len(self.labels)), dtype=bool)  # (B, L)
            for b, row in enumerate(self._rows):
                is_open[b, list(row.rings)] = True
            here = is_open[:, self._mark_label]  # (B, V): the ring of each label token is open
            live = np.array([row.last != "done" for row in self._rows])[:, None]  # (B, 1)
            banned |= live & ((self._marks == 1) & here | (self._marks == -1) & ~here)
        for b, valence in enumerate(self._valences):
            row = self._rows[b]
            if row.last != "done":
                kind_ok = self._valence_allowed(row, valence, ok[b], left)  # (K + 1,), the last for non-SMILES
                banned[b] |= ~kind_ok[self._token_kinds]
        return banned

    def advance(self, tokens: np.ndarray) -> None:
        """Write the tokens (B,) into every unfinished row."""
        valences = self._valences or [None] * len(self._rows)
        for row, valence, tok in zip(self._rows, valences, np.asarray(tokens).tolist()):
            if row.last != "done":
                cls = int(self.token_classes[tok])
                if valence is not None:
                    valence.advance(row, self._kinds[self._token_kinds[tok]])
                row.advance(min(cls, RING0), cls - RING0)
        self._length += 1

    # ------------------------------------------------------------- the rules
    def _valence_allowed(self, row: Row, valence: Valence, ok_class, left: int) -> np.ndarray:
        """Rules V1-V5 per kind, then the length budget as the cost of a plan to finish
        (:meth:`_finish_cost`) when the row is near its budget."""
        kind_ok = np.array([bool(ok_class[self._kind_class[i] + (kind[1] if kind[0] == "ring" else 0)]) and
                            valence.allowed(row, kind, _rings_open_after(row, kind))
                            for i, kind in enumerate(self._kinds)] + [True])
        # the plan costs at most 1 + 3 * rings + 2 * branches + 1 tokens; a token adds at most
        # one ring or branch, so far from the budget no token can matter
        if 3 * (len(row.rings) + 1) + 2 * (len(row.bases) + 1) + 3 <= left:
            return kind_ok
        for i, kind in enumerate(self._kinds):
            if kind_ok[i]:
                ahead, ahead_valence = row.clone(), valence.clone()
                self._step(ahead, ahead_valence, kind)
                kind_ok[i] = self._finish_cost(ahead, ahead_valence) <= left  # uses up the copies
        return kind_ok

    def _step(self, row: Row, valence: Valence, kind: tuple) -> None:
        """Write one token of ``kind`` into the row and its valence."""
        valence.advance(row, kind)
        row.advance(_step_class(kind), kind[1] if kind[0] == "ring" else -1)

    def _finish_cost(self, row: Row, valence: Valence) -> float:
        """Tokens of one way to finish under every rule (EOS included), inf if none is found.

        The plan, one token at a time: after a bond or ``(``, a new atom; while rings are
        open, the first ring (in label order) that may close on the current atom, else a
        new atom when the current one has room, else ``)``; then ``)`` for each open
        branch, and EOS. New atoms are the vocabulary's atom with the most room (``C``).
        The plan is a function of the state, so its first token leads to a state whose
        plan is the rest: a row whose plan fits its budget keeps a token that fits.
        ``row`` and ``valence`` are used up (the caller passes copies).
        """
        fresh, cost = self._fresh, 0
        while row.last != "done":
            step = None
            if row.last in ("bond", "open", "start"):
                step = fresh
            elif row.rings:
                if row.last in ("atom", "ring"):
                    syntax_ok = row.allowed(len(self.labels), self.max_open_rings)  # rule 7 among them
                    step = next((("ring", label) for label in sorted(row.rings) if syntax_ok[RING0 + label] and
                                 valence.allowed(row, ("ring", label), _rings_open_after(row, ("ring", label)))),
                                None)
                if step is None and fresh is not None and valence.allowed(row, fresh, True):
                    step = fresh
                if step is None and row.bases and valence.allowed(row, ("close",), True):
                    step = ("close",)
            else:
                step = ("close",) if row.bases else ("end",)
            if step is None or cost > 4 * self._max_len:
                return float("inf")
            self._step(row, valence, step)
            cost += 1
        return cost

    def _allowed(self, row: Row, left: int) -> list:
        """Rules 1-10, then rule 11 when the row is near its budget."""
        ok = row.allowed(len(self.labels), self.max_open_rings)
        # need <= 2 * rings + branches + 2; far from the budget no token can matter
        if 2 * len(row.rings) + len(row.bases) + 2 + MAX_RISE <= left:
            return ok
        for cls in range(self._n_classes):
            if ok[cls]:
                ahead = row.clone()
                ahead.advance(min(cls, RING0), cls - RING0)
                ok[cls] = ahead.need() <= left
        return ok


def _valence_kinds(tokens, classes) -> tuple:
    """The distinct valence kinds of the vocabulary (see :meth:`Valence.allowed`) and, per
    token, the index of its kind ((V,) ints; specials and non-SMILES tokens point one past
    the end, to a kind that is always allowed: the syntax rules ban those already)."""
    kinds, index, token_kinds = [], {}, []
    for token, cls in zip(tokens, classes):
        if cls == ATOM:
            kind = ("atom", atom_capacity(token))
        elif cls == BOND:
            kind = ("bond", bond_order(token))
        elif cls in (OPEN, CLOSE):
            kind = ("open",) if cls == OPEN else ("close",)
        elif cls >= RING0:
            kind = ("ring", cls - RING0)
        elif cls in (EOS, DOT):
            kind = ("end",) if cls == EOS else ("dot",)
        else:
            token_kinds.append(-1)
            continue
        if kind not in index:
            index[kind] = len(kinds)
            kinds.append(kind)
        token_kinds.append(index[kind])
    token_kinds = np.array([len(kinds) if k < 0 else k for k in token_kinds], dtype=np.int64)  # (V,)
    return kinds, token_kinds


_KIND_CLASS = {"atom": ATOM, "bond": BOND, "open": OPEN, "close": CLOSE, "end": EOS, "dot": DOT, "ring": RING0}


def _step_class(kind: tuple) -> int:
    """The grammar class a valence kind is written with (RING0 for any ring label)."""
    return _KIND_CLASS[kind[0]]


def _rings_open_after(row: Row, kind: tuple) -> bool:
    """Whether a ring is still open after a token of ``kind`` is written in ``row``."""
    if kind[0] == "ring":
        return kind[1] not in row.rings or len(row.rings) > 1
    return bool(row.rings)
