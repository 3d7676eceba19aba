r"""Ring closures written by ring size: a writing of SMILES in which no ring can be left open.

SMILES writes a ring bond twice: a label (``1``, ``%12``) after the atom that opens it, and
the same label after the atom that closes it. A language model that writes the first half
has to remember to write the second, and most invalid samples of a small generator are rings
it opened and never closed. O'Boyle and Dalke's DeepSMILES (2018) writes the bond once, at the
closing atom, as the size of the ring it closes. This module is that ring writing (not
DeepSMILES' writing of branches: the parentheses stay as they are), to SMILES and back::

    C1CCCCC1           ->   CCCCCC6          (cyclohexane)
    c1ccc2ccccc2c1     ->   ccccccccc6c%10   (naphthalene: a ring of 6, then one of 10 along the path)
    CC(=O)N1CCOCC1     ->   CC(=O)NCCOCC6

**The path.** Reading a SMILES left to right, the *path* is the chain of atoms from the first
atom of the current fragment to the current atom: an atom joins it, a ``(`` remembers its length
and the matching ``)`` cuts it back to that (the branch's atoms leave it), a ``.`` empties it. RDKit
writes a molecule as a depth-first walk, whose ring bonds always join an atom to one of its
ancestors, so the atom :math:`a` a ring label pairs with the closing atom :math:`b` is on the path.
The writing puts the number of path atoms from :math:`a` to :math:`b` (both counted), the size of
the ring along the path, after :math:`b`; the reader finds :math:`a` again as the
:math:`n`-th atom from the end of its own path, which is the same path.

Sizes 2 to 9 are written as one digit, 10 to 99 as ``%10`` ... ``%99``: tokens SMILES already
has, so the tokenizer stays as it is (:mod:`~minitransformer.chem.datasets.tokenizer`).

**Bond symbols.** A ring bond's symbol (``=``, ``#``, ``/`` ...) may stand at either end in SMILES;
the writing puts it at the closing atom, before the size. A directional bond moved from the
opening atom to the closing one turns round (``/`` becomes ``\``), because it is read from the
atom it follows.

**Chirality.** ``@`` and ``@@`` name the order of an atom's neighbours, its ring bonds in the
order of their labels after it. The reader writes an atom's labels as the rings it closes (in
written order), then the rings it opens (in the order they close). Where a SMILES had them in an
order an odd permutation away, the writer turns ``@`` into ``@@`` (or back), so that the string
read back is the same stereoisomer.

**What cannot be written** (:func:`ring_size_tokens` raises ValueError): a label that pairs two
atoms not on one path (hand-written SMILES can, RDKit's never do), a label left open or standing
before any atom, a ring of more than 99 path atoms, a ring bond with two different symbols at its
ends (``/`` at both, say, which RDKit reads and never writes), and a chirality class other than
``@``/``@@`` on an atom whose ring labels change order.

**What a model may write that means nothing:** a size below 2, beyond the path's length, or
after something other than an atom (a parenthesis, the start). The
reader writes :data:`BAD_RING_SIZE` in its place, which RDKit cannot read, so the sample is
invalid and says why (:mod:`~minitransformer.chem.judge.failures` counts it as ``ring size``).
"""
from __future__ import annotations

import re

from minitransformer.chem.datasets.tokenizer import is_atom_token, is_ring_label, tokenize

__all__ = ["ring_size_tokens", "write_ring_sizes", "read_ring_sizes", "BAD_RING_SIZE", "MAX_RING_SIZE"]

#: What the reader writes for a ring size that names no atom of the path (never valid SMILES).
BAD_RING_SIZE = "<ring size>"
#: The largest ring (in path atoms) a single token can write: ``%99``.
MAX_RING_SIZE = 99
_BONDS = frozenset("-=#$:~/\\")
_TURNED = {"/": "\\", "\\": "/"}
_CHIRAL = re.compile(r"@(?:@|(?:TH|AL|SP|TB|OH)\d+)?")  # @, @@ or a named class: @TH1, @SP2 ...


def _size_token(size: int) -> str:
    return str(size) if size < 10 else f"%{size}"


def _odd(order: list[int], target: list[int]) -> bool:
    """True when ``order`` is an odd permutation of ``target`` (two lists of the same distinct ids)."""
    where = {item: k for k, item in enumerate(target)}
    perm, odd, seen = [where[item] for item in order], False, set()
    for start in range(len(perm)):  # a cycle of length L is L - 1 swaps
        k, length = start, 0
        while k not in seen:
            seen.add(k)
            k, length = perm[k], length + 1
        odd ^= length > 0 and (length - 1) % 2 == 1
    return odd


def _bonded(tokens: list[str]):
    """``(bond, token)`` for each token that is no bond symbol: the bond written just before it, or None.
    A bond followed by another bond, or ending the string, comes as ``(bond, None)``."""
    bond = None
    for tok in tokens:
        if tok in _BONDS:
            if bond is not None:
                yield bond, None
            bond = tok
        else:
            yield bond, tok
            bond = None
    if bond is not None:
        yield bond, None


def _move_path(tok: str, path: list[int], branches: list[int]) -> None:
    """Move the path past a token that is no atom, bond or ring label: a ``(`` remembers the path's
    length (in ``branches``), its ``)`` cuts the path back to it, a ``.`` empties both."""
    if tok == "(":
        branches.append(len(path))
    elif tok == ")" and branches:
        del path[branches.pop():]
    elif tok == ".":
        path.clear()
        branches.clear()


def ring_size_tokens(tokens: list[str]) -> list[str]:
    """The tokens of a SMILES (``tokenize(smiles)``) with every ring written once, by its size.

    >>> "".join(ring_size_tokens(tokenize("C1CC=CC=C1")))
    'CCC=CC=C6'
    """
    out: list[str] = []
    path: list[int] = []        # atom numbers from the fragment's first atom to the current one
    branches: list[int] = []    # the path's length at each open '('
    at: list[int] = []          # atom number -> its token's index in out
    events: list[list[int]] = []  # atom number -> its ring bonds (ids) in the order the SMILES writes them
    opened: dict[str, tuple[int, str | None, int]] = {}  # label -> (opening atom, its bond symbol, ring id)
    closings: list[tuple[int, int]] = []  # ring id -> (opening atom, closing atom), in closing order
    ring_ids, after_atom = 0, False  # after_atom: the last token an atom or a ring label
    for bond, tok in _bonded(tokens):
        if tok is None:  # a bond before another bond, or at the end
            out.append(bond)
            continue
        if is_ring_label(tok):
            if not after_atom:
                raise ValueError(f"ring label {tok} does not follow an atom")
            b = path[-1]
            if tok not in opened:
                opened[tok] = (b, bond, ring_ids)
                events[b].append(ring_ids)
                ring_ids += 1
                continue
            a, first, ring = opened.pop(tok)
            if a not in path:
                raise ValueError(f"ring label {tok} joins two atoms that are not on one path (not a depth-first "
                                 f"writing); let RDKit write the molecule first")
            size = len(path) - path.index(a)
            if size > MAX_RING_SIZE:
                raise ValueError(f"a ring of {size} atoms along the path; at most {MAX_RING_SIZE} can be written")
            turned = _TURNED.get(first, first)
            if bond is not None and first is not None and bond != turned:
                raise ValueError(f"ring label {tok} has bond {first} at one end and {bond} at the other")
            out.extend(([bond or turned] if (bond or turned) else []) + [_size_token(size)])
            events[b].append(ring)
            closings.append((a, ring))
            continue
        if bond is not None:
            out.append(bond)
        after_atom = is_atom_token(tok)
        if after_atom:
            at.append(len(out))
            events.append([])
            path.append(len(at) - 1)
        else:
            _move_path(tok, path, branches)
        out.append(tok)
    if opened:
        raise ValueError(f"ring label {' '.join(sorted(opened))} is opened and never closed")
    _keep_chirality(out, at, events, closings)
    return out


def _keep_chirality(out: list[str], at: list[int], events: list[list[int]], closings: list) -> None:
    """Turn ``@``/``@@`` in ``out`` where the reader will write an atom's ring labels in an odd permutation of
    the order the SMILES had (closings in written order first, then openings in closing order)."""
    order = {ring: k for k, (_, ring) in enumerate(closings)}
    opened_by = {ring: a for a, ring in closings}
    for atom, rings in enumerate(events):
        if len(rings) < 2:
            continue
        read_back = sorted(rings, key=lambda r: (opened_by[r] == atom, order[r]))
        if not _odd(rings, read_back):
            continue
        token = out[at[atom]]
        if "@" not in token:
            continue
        match = _CHIRAL.search(token)
        if match is None or match.group() not in ("@", "@@"):
            raise ValueError(f"chirality class of {token} cannot be kept when its ring labels change order")
        turned = "@" if match.group() == "@@" else "@@"
        out[at[atom]] = token[:match.start()] + turned + token[match.end():]


def write_ring_sizes(smiles: str) -> str:
    """``smiles`` with every ring written once, by its size (:func:`ring_size_tokens`).

    >>> write_ring_sizes("c1ccc2ccccc2c1")
    'ccccccccc6c%10'
    """
    return "".join(ring_size_tokens(tokenize(smiles)))


def read_ring_sizes(tokens: list[str] | str) -> str:
    """The SMILES of a writing with ring sizes (its tokens, or the string). A size that names no
    atom of the path is written as :data:`BAD_RING_SIZE`; anything else passes through as written,
    so a broken writing stays broken.

    >>> read_ring_sizes("ccccccccc6c%10")
    'c1ccc2ccccc2c1'
    """
    tokens = tokenize(tokens) if isinstance(tokens, str) else list(tokens)
    out: list[str] = []          # the SMILES's tokens, atoms' ring labels added at the end
    path: list[int] = []
    branches: list[int] = []
    labels: list[list[int]] = []  # atom number -> its ring bonds (ids): closings as read, then openings
    rings: list[tuple[int, int, str | None]] = []  # ring id -> (opening atom, closing atom, bond symbol)
    for bond, tok in _bonded(tokens):
        if tok is None:  # a bond before another bond, or at the end
            out.append(bond)
            continue
        if is_ring_label(tok):
            size = int(tok.lstrip("%"))
            if not (out and isinstance(out[-1], int)) or not 2 <= size <= len(path):  # after no atom, or too far
                out.extend(([bond] if bond else []) + [BAD_RING_SIZE])
                continue
            a, b = path[-size], path[-1]
            labels[b].append(len(rings))
            labels[a].append(len(rings))
            rings.append((a, b, bond))
            continue
        if bond is not None:
            out.append(bond)
        if is_atom_token(tok):
            out.extend([tok, len(labels)])  # the int marks where the atom's labels go
            path.append(len(labels))
            labels.append([])
            continue
        _move_path(tok, path, branches)
        out.append(tok)
    names = _ring_labels(rings)
    text = []
    for item in out:
        if isinstance(item, int):
            for ring in labels[item]:
                a, b, symbol = rings[ring]
                text.append((symbol or "") + names[ring] if b == item else names[ring])
        else:
            text.append(item)
    return "".join(text)


def _ring_labels(rings: list[tuple[int, int, str | None]]) -> list[str]:
    """A SMILES label for each ring, the lowest one that no ring overlapping it (atoms ``a`` to ``b``,
    ends included) already has, taken in the order of the opening atoms: ``1`` ... ``9``, then ``%10`` ... ``%99``."""
    names: dict[int, str] = {}
    for ring in sorted(range(len(rings)), key=lambda r: rings[r][:2]):  # by opening atom, as a writer numbers them
        a, b, _ = rings[ring]
        taken = {names[r] for r in names if rings[r][0] <= b and a <= rings[r][1]}
        label = next((n for n in range(1, 100) if _size_token(n) not in taken), None)
        names[ring] = BAD_RING_SIZE if label is None else _size_token(label)  # 99 rings open at once
    return [names[r] for r in range(len(rings))]
