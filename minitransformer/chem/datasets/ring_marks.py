r"""Ring closures marked: SMILES whose closing ring labels are tokens of their own.

SMILES writes a ring bond as the same label twice, after the atom that opens it and after the
atom that closes it, and reuses a label once its ring is closed. Whether a ``1`` opens or closes
a ring is therefore the parity of the ``1`` written before it, and whether a molecule may end
is whether every label's count is even. Parity is a thing attention finds hard to compute
(Hahn, 2020): most invalid samples of a small generator are rings it opened and never closed.

This writing keeps SMILES as it is, with one change: a label that *closes* a ring is written
with a mark, ``1'``, ``%12'``, a token of its own. A ring is then open when its label's opening
tokens outnumber its closing ones, a count, not a parity; the molecule may end when no ring is
open. Tokens, ring sizes, the order of atoms and the length stay as in the SMILES::

    C1CCCCC1          ->   C1CCCCC1'          (cyclohexane)
    c1ccc2ccccc2c1    ->   c1ccc2ccccc2'c1'   (naphthalene)
    C1CC1C1CC1        ->   C1CC1'C1CC1'       (a label used again once its ring is closed)

Reading back (:func:`read_ring_marks`) drops the marks. A model may write a mark that means
nothing: a closing label whose ring is not open, or an opening label whose ring is open (SMILES
would read it as the closing one the model did not write). The reader writes :data:`BAD_RING_MARK`
in its place, which RDKit cannot read, so the sample is invalid and says why
(:mod:`~minitransformer.chem.judge.failures` counts it as ``ring mark``). A ring left open reads
back as SMILES with an unclosed ring, as it is.

**What cannot be written** (:func:`ring_mark_tokens` raises ValueError): a label left open.
"""
from __future__ import annotations

from minitransformer.chem.datasets.tokenizer import is_ring_label, tokenize

__all__ = ["ring_mark_tokens", "write_ring_marks", "read_ring_marks", "is_closing", "BAD_RING_MARK", "MARK"]

#: What the reader writes for a mark that means nothing (never valid SMILES).
BAD_RING_MARK = "<ring mark>"
#: The mark a closing label carries.
MARK = "'"


def is_closing(token: str) -> bool:
    """A closing label of this writing: ``7'`` or ``%12'``."""
    return token.endswith(MARK) and is_ring_label(token[:-1])


def ring_mark_tokens(tokens: list[str]) -> list[str]:
    """The tokens of a SMILES (``tokenize(smiles)``) with each label that closes a ring marked.

    >>> ring_mark_tokens(tokenize("C1CC1"))
    ['C', '1', 'C', 'C', "1'"]
    """
    out, open_labels = [], set()
    for tok in tokens:
        if is_ring_label(tok):
            if tok in open_labels:
                open_labels.remove(tok)
                tok += MARK
            else:
                open_labels.add(tok)
        out.append(tok)
    if open_labels:
        raise ValueError(f"ring label {' '.join(sorted(open_labels))} is opened and never closed")
    return out


def write_ring_marks(smiles: str) -> str:
    """``smiles`` with each closing ring label marked (:func:`ring_mark_tokens`).

    >>> write_ring_marks("c1ccc2ccccc2c1")
    "c1ccc2ccccc2'c1'"
    """
    return "".join(ring_mark_tokens(tokenize(smiles)))


def read_ring_marks(tokens: list[str]) -> str:
    """The SMILES of a writing with marked closing labels, given as its tokens (a mark makes a
    token of its own, which :func:`tokenize` does not know). A mark that means nothing is written
    as :data:`BAD_RING_MARK`; anything else passes through as written, so a broken writing stays broken.

    >>> read_ring_marks(["c", "1", "c", "c", "c", "c", "c", "1'"])
    'c1ccccc1'
    """
    out, open_labels = [], set()
    for tok in tokens:
        if is_closing(tok):
            label = tok[:-1]
            if label not in open_labels:
                out.append(BAD_RING_MARK)
                continue
            open_labels.remove(label)
            tok = label
        elif is_ring_label(tok):
            if tok in open_labels:
                out.append(BAD_RING_MARK)
                continue
            open_labels.add(tok)
        out.append(tok)
    return "".join(out)
