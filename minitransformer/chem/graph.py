r"""The molecule's graph as relations between the tokens of one SMILES writing.

A SMILES transformer reads a molecule as a string: the atoms in one of many orders,
with ring-closure digits and parentheses that say, indirectly, which atoms are
bonded. A message-passing network is handed the bonds. This module hands them to
the transformer too, as one relation per pair of tokens, which a learned bias per
attention head and relation (:mod:`minitransformer.nn.graph_bias`) adds to the
attention logits, as relative positions do (Shaw et al., 2018) with the distance
along the string. For a molecule the natural distance between two atoms is the
number of bonds between them (Graphormer's spatial encoding, Ying et al., 2021;
MAT's distance and adjacency terms, Maziarka et al., 2020).

**The token-to-atom map.** RDKit numbers the atoms of a SMILES in the order they are
written, so the :math:`k`-th atom token of a writing (a bracket atom ``[nH]``, an
organic-subset atom ``C``, ``Cl``, ``c`` or the wildcard ``*``) is atom :math:`k` of
RDKit's parse of that same string. Explicit hydrogens (``[H]``) are atoms of the
string, so they are kept (RDKit's default parse would remove them and shift every
later index). :func:`molecule_of` parses so, and checks that the counts agree (the
attention drawn on a molecule, :mod:`minitransformer.viz.attention_drawing`, reads
tokens as atoms the same way).

**The relations** of a query token :math:`i` and a key token :math:`j` of one framed
writing (``<cls>``, the tokens, ``<eos>``, then padding):

=========================  ==============================================================
relation                   when
=========================  ==============================================================
``PAD``                    either token is padding (masked anyway)
``SELF``                   :math:`i = j`
``FROM_CLS`` / ``TO_CLS``  the query / the key is ``<cls>`` (the other is not)
``ATOM_TO_MARK``           query an atom, key a non-atom token: a ring-closure digit,
                           a parenthesis, a bond symbol, ``.``, ``<eos>``
``MARK_TO_ATOM``           the reverse
``MARK_TO_MARK``           two different non-atom tokens
``OTHER_FRAGMENT``         two atoms with no path between them (a salt's ions)
``BOND_SINGLE`` ...        two bonded atoms, by the bond's type: single, double,
                           triple, aromatic, any other (dative, quadruple ...)
``DISTANCE + d``           two atoms :math:`d \ge 2` bonds apart on the shortest path,
                           :math:`d` clipped at ``max_distance``
=========================  ==============================================================

so there are :func:`n_relations` (``max_distance``) of them. The relations of two atoms
do not depend on the writing; those of the marks do not depend on the molecule. The
non-atom tokens get classes of their own rather than the relations of a nearby atom:
a ring digit closes a bond between two atoms that may be far apart in the string, and
which of them it "belongs" to is a convention. The order along the string stays
available to a model through its positions (absolute or relative).

A writing's graph is kept small (:class:`TokenGraph`: the atoms' token positions and
their (n, n) relations, not the (T, T) matrix): :func:`relation_batch` spreads a
batch of them into the (B, T, T) codes a model reads.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from minitransformer.chem._rdkit import MAX_SMILES_CHARS, mol_from_smiles, quiet_rdkit, require_rdkit, smiles_problem
from minitransformer.chem.datasets.tokenizer import is_atom_token, tokenize

PAD, SELF, FROM_CLS, TO_CLS, ATOM_TO_MARK, MARK_TO_ATOM, MARK_TO_MARK, OTHER_FRAGMENT = range(8)
#: The first bond relation: single, double, triple, aromatic, other follow in that order.
BOND_SINGLE = 8
BONDS = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")  # RDKit's names; any other type is BOND_SINGLE + 4
BOND_ORDERS = (1.0, 2.0, 3.0, 1.5)  # their orders, as RDKit's adjacency matrix gives them
#: Atoms d >= 2 bonds apart: relation DISTANCE + min(d, max_distance).
DISTANCE = BOND_SINGLE + len(BONDS) + 1 - 2
#: The clipping distance unless a model says otherwise.
MAX_DISTANCE = 8


def n_relations(max_distance: int = MAX_DISTANCE) -> int:
    """How many relations there are with distances clipped at ``max_distance`` (>= 2)."""
    if int(max_distance) != max_distance or max_distance < 2:
        raise ValueError(f"graph relations: max_distance must be an integer >= 2, got {max_distance!r}")
    return DISTANCE + int(max_distance) + 1


def molecule_of(smiles: str):
    """RDKit's parse of ``smiles`` with its explicit hydrogens kept, so that atom k is its k-th atom
    token. Raises ValueError (one line) when RDKit cannot parse it, or when the atom count differs
    from the number of atom tokens."""
    Chem = require_rdkit()
    problem = smiles_problem(smiles)
    if problem is not None:
        raise ValueError(f"cannot read that SMILES: {problem}; give one molecule of at most {MAX_SMILES_CHARS:,} "
                         "characters")
    params = Chem.SmilesParserParams()
    params.removeHs = False  # "[H]" stays an atom: the token order and the atom order agree
    with quiet_rdkit():
        mol = mol_from_smiles(smiles, params=params)
    if mol is None:
        raise ValueError(f"RDKit cannot parse the SMILES {smiles!r}; give a valid molecule")
    n_tokens = sum(map(is_atom_token, tokenize(smiles)))
    if n_tokens != mol.GetNumAtoms():
        raise ValueError(f"{smiles!r} has {n_tokens} atom tokens but RDKit reads {mol.GetNumAtoms()} atoms; "
                         "cannot match tokens to atoms (please report this SMILES)")
    return mol


class TokenGraph(NamedTuple):
    """The graph of one writing. ``atoms``: (n,) int16, the position of each atom's token among the
    framed ids (``<cls>`` is position 0, so the first token is at 1); ``relations``: (n, n) uint8,
    the relation of every pair of atoms (``SELF`` on the diagonal)."""

    atoms: np.ndarray  # (n,) token positions of the atoms, in RDKit's atom order
    relations: np.ndarray  # (n, n) relation codes between atoms


def token_graph(smiles: str, max_distance: int = MAX_DISTANCE, first: int = 1) -> TokenGraph:
    """The :class:`TokenGraph` of ``smiles`` as written, its first token at position ``first``.
    Raises ValueError (:func:`molecule_of`) when RDKit cannot parse the string, or when its atoms
    are not the string's atom tokens one for one."""
    n_relations(max_distance)  # checks it
    Chem = require_rdkit()
    mol = molecule_of(smiles)
    tokens = tokenize(smiles)
    atoms = np.array([first + i for i, t in enumerate(tokens) if is_atom_token(t)], dtype=np.int16)  # (n,)
    n = len(atoms)
    dist = Chem.GetDistanceMatrix(mol) if n else np.zeros((0, 0))  # (n, n) bonds apart; 1e8 between fragments
    # distance 1 reads DISTANCE + 1 = BOND_SINGLE + 4, "any other bond", until the bond's order says which
    rel = np.where(dist > n, OTHER_FRAGMENT, DISTANCE + np.minimum(dist, max_distance)).astype(np.uint8)  # (n, n)
    order = Chem.GetAdjacencyMatrix(mol, useBO=True) if n else np.zeros((0, 0))  # (n, n) bond orders, 1.5 aromatic
    order = np.maximum(order, order.T)  # (n, n): a dative bond is entered one way only
    for k, value in enumerate(BOND_ORDERS):  # single, double, triple, aromatic
        rel[order == value] = BOND_SINGLE + k
    if "->" in smiles or "<-" in smiles:  # a dative bond's order reads as single: it is "any other bond"
        for bond in mol.GetBonds():
            if str(bond.GetBondType()) not in BONDS:
                i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
                rel[i, j] = rel[j, i] = BOND_SINGLE + len(BONDS)
    np.fill_diagonal(rel, SELF)
    return TokenGraph(atoms, rel)


def relation_batch(graphs, lengths, T: int):
    """The (B, T, T) relation codes (uint8) of a batch: ``graphs`` a :class:`TokenGraph` per row,
    ``lengths`` (B,) the framed length of each row (``<cls>`` ... ``<eos>``), ``T`` >= every length.
    Position 0 is ``<cls>``; the other unpadded positions that are not atoms are marks."""
    B = len(graphs)
    lengths = np.asarray(lengths)
    pos = np.arange(T)  # (T,)
    real = pos[None, :] < lengths[:, None]  # (B, T) not padding
    atom = np.zeros((B, T), dtype=bool)  # (B, T) the atom tokens
    for b, g in enumerate(graphs):
        atom[b, g.atoms] = True
    mark = real & ~atom  # (B, T)
    mark[:, 0] = False  # <cls> has relations of its own
    rel = np.full((B, T, T), PAD, dtype=np.uint8)  # (B, T, T)
    rel[atom[:, :, None] & mark[:, None, :]] = ATOM_TO_MARK
    rel[mark[:, :, None] & atom[:, None, :]] = MARK_TO_ATOM
    rel[mark[:, :, None] & mark[:, None, :]] = MARK_TO_MARK
    rel[:, 0, :][real] = FROM_CLS
    rel[:, :, 0][real] = TO_CLS
    for b, g in enumerate(graphs):
        rel[b, g.atoms[:, None], g.atoms[None, :]] = g.relations  # (n, n) the atoms' own
    diagonal = np.arange(T)  # (T,)
    rel[:, diagonal, diagonal] = np.where(real, SELF, PAD)  # (B, T)
    return rel


def relation_names(max_distance: int = MAX_DISTANCE) -> list[str]:
    """A name per relation code, for pictures and tables: ``"bond double"``, ``"3 bonds"`` ..."""
    names = ["pad", "self", "from <cls>", "to <cls>", "atom to mark", "mark to atom", "mark to mark",
             "other fragment"] + [f"bond {b.lower()}" for b in BONDS] + ["bond other"]
    names += [f"{d} bonds" if d < max_distance else f"{d}+ bonds" for d in range(2, max_distance + 1)]
    assert len(names) == n_relations(max_distance)
    return names



class GraphIds(list):
    """The token ids of one framed writing (a list, as :meth:`Vocab.encode` gives them) that carry
    that writing's :class:`TokenGraph` as ``graph``: an example of a model with a graph bias. Every
    consumer that reads ids reads these; a batch's relations come from :func:`batch_relations`."""

    def __init__(self, ids, graph: TokenGraph):
        super().__init__(ids)
        self.graph = graph


def graph_ids(ids, smiles: str, max_distance: int = MAX_DISTANCE):
    """``ids`` (``<cls>`` first) of the writing ``smiles``, with its graph (:func:`token_graph`) when
    ``max_distance`` > 0; with 0 (a model without a graph bias), ``ids`` as they are."""
    return GraphIds(ids, token_graph(smiles, max_distance, first=1)) if max_distance else ids


def batch_relations(seqs, T: int, where: str = "batch"):
    """The (B, T, T) relations (uint8) of a batch of id lists padded to ``T``, or None when no
    list carries a graph; a batch that mixes the two is refused (``where`` names it)."""
    graphs = [getattr(s, "graph", None) for s in seqs]
    if all(g is None for g in graphs):
        return None
    if any(g is None for g in graphs):
        i = next(i for i, g in enumerate(graphs) if g is None)
        raise ValueError(f"{where}: example {i} has no graph relations but others do; give every example its "
                         "graph (minitransformer.chem.graph.graph_ids) or none")
    return relation_batch(graphs, [len(s) for s in seqs], T)
