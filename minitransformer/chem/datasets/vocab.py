"""A token vocabulary: the map between SMILES tokens and the integer ids a model sees.

Layout
------
Four special tokens occupy the first ids, always in this order:

====  =========  =================================================================
id    token      role
====  =========  =================================================================
0     ``<pad>``  fills the tail of shorter sequences in a batch; ignored by the loss
1     ``<bos>``  beginning of sequence: the first input of every sequence, so the
                 model can predict the first real token
2     ``<eos>``  end of sequence: the model emits it to stop generation
3     ``<unk>``  stands for any token that was not in the training data
====  =========  =================================================================

Models that need more special tokens ask for them with ``extras``: the encoder
demos use ``Vocab.build(smiles, extras=(Vocab.CLS, Vocab.MASK))``, which puts
``<cls>`` (the first input of a sequence classifier, whose final state is pooled)
and ``<mask>`` (the masked-language-model placeholder) at ids 4 and 5, right after
the four above. A plain vocabulary has neither, so the molecules demo's model
never has to learn to avoid emitting them.

The remaining ids are the SMILES tokens of the training set, ordered by
descending frequency, ties broken by first appearance. The order therefore
depends only on the data, never on hash seeds or dictionary iteration, and the
same data always yields the same ids.

Decoding
--------
:meth:`Vocab.decode` turns ids back into a SMILES string: ``<bos>`` and
``<pad>`` (and ``<cls>``) are skipped, the first ``<eos>`` ends the string, and ``<unk>``
(and ``<mask>``) is written as ``<unk>`` by default. A generated row that holds an unknown
token therefore never parses: it is judged invalid by the validity check, and shows why.
Dropping the token instead would turn ``C<unk>O`` into ``CO``, a valid molecule the model
did not write.

Ring closures
-------------
``rings="sizes"`` makes a vocabulary of the ring-size writing
(:mod:`~minitransformer.chem.datasets.ring_sizes`): :meth:`Vocab.encode` writes each ring once,
by its size, at the atom that closes it, and :meth:`Vocab.decode` reads the ids back into ordinary
SMILES, so a model of that writing takes and gives SMILES like any other. :meth:`Vocab.tokens_of`
gives the tokens a model sees. A SMILES the writing cannot hold (a ring label left open, two atoms
not on one path) encodes as a single ``<unk>``. ``rings="marked"`` is SMILES with each label that closes
a ring marked as a token of its own (:mod:`~minitransformer.chem.datasets.ring_marks`), read back the same
way. The default, ``rings="paired"``, is SMILES as written.

Serialization
-------------
:meth:`Vocab.to_json` returns a small dict of plain lists and strings that
``json.dumps`` accepts as is, so a vocabulary travels inside a model
checkpoint; :meth:`Vocab.from_json` rebuilds it.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, Sequence

from minitransformer.atomic import parse_json
import numpy as np

from minitransformer.chem.datasets.ring_marks import read_ring_marks, ring_mark_tokens
from minitransformer.chem.datasets.ring_sizes import read_ring_sizes, ring_size_tokens
from minitransformer.chem.datasets.tokenizer import tokenize

__all__ = ["Vocab"]

_FORMAT = "minitransformer.chem.Vocab"
_VERSION = 3  # version 1 had no extra special tokens, version 2 no ring writing; both still load


class Vocab:
    """Token <-> id map with special tokens PAD=0, BOS=1, EOS=2, UNK=3.

    Build one from training SMILES with :meth:`build`, or pass the ordinary
    (non-special) tokens directly: ``Vocab(["C", "c", "("])``.
    """

    PAD = "<pad>"
    BOS = "<bos>"
    EOS = "<eos>"
    UNK = "<unk>"
    SPECIALS = (PAD, BOS, EOS, UNK)
    CLS = "<cls>"
    MASK = "<mask>"
    EXTRAS = (CLS, MASK)  # optional specials, asked for with ``extras=``

    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3

    #: The ways of writing a ring bond: ``paired`` labels (SMILES), its ``sizes`` at the closing atom, or
    #: paired labels whose closing one is ``marked``.
    RINGS = ("paired", "sizes", "marked")
    _WRITERS = {"paired": None, "sizes": ring_size_tokens, "marked": ring_mark_tokens}
    _READERS = {"paired": "".join, "sizes": read_ring_sizes, "marked": read_ring_marks}

    def __init__(self, tokens: Iterable[str], extras: Sequence[str] = (), rings: str = "paired"):
        if rings not in self.RINGS:
            raise ValueError(f"unknown ring writing {rings!r}; choose from {self.RINGS}")
        self.rings = rings
        extras = tuple(extras)
        for tok in extras:
            if tok not in self.EXTRAS:
                raise ValueError(f"unknown extra special token {tok!r}; choose from {self.EXTRAS}")
        if len(set(extras)) != len(extras):
            raise ValueError(f"extra special tokens repeat: {extras}")
        self.extras = extras
        ordinary = list(tokens)
        seen = set(self.SPECIALS) | set(self.EXTRAS)
        for tok in ordinary:
            if not isinstance(tok, str) or not tok:
                raise ValueError(f"vocabulary tokens must be non-empty strings, got {tok!r}")
            if tok in seen:
                raise ValueError(f"token {tok!r} appears twice (or clashes with a special token)")
            seen.add(tok)
        self._tokens = list(self.SPECIALS) + list(extras) + ordinary
        self._ids = {tok: i for i, tok in enumerate(self._tokens)}

    @property
    def n_specials(self) -> int:
        """How many ids the special tokens take (4, plus the extras)."""
        return len(self.SPECIALS) + len(self.extras)

    @property
    def special_ids(self) -> list[int]:
        """Ids of every special token: never masked, never scored as chemistry."""
        return list(range(self.n_specials))

    def _extra_id(self, tok: str) -> int:
        if tok not in self.extras:
            raise ValueError(f"this vocabulary has no {tok} token; build it with "
                             f"Vocab.build(smiles, extras=(Vocab.CLS, Vocab.MASK))")
        return self._ids[tok]

    @property
    def cls_id(self) -> int:
        """Id of ``<cls>`` (ValueError when the vocabulary was built without it)."""
        return self._extra_id(self.CLS)

    @property
    def mask_id(self) -> int:
        """Id of ``<mask>`` (ValueError when the vocabulary was built without it)."""
        return self._extra_id(self.MASK)

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, smiles_list: Iterable[str], min_count: int = 1, extras: Sequence[str] = (),
              rings: str = "paired") -> "Vocab":
        """Collect the tokens of ``smiles_list`` that occur at least ``min_count`` times.

        Tokens are ordered by descending count; equal counts keep the order in
        which the tokens first appear in the data. Tokens seen fewer than
        ``min_count`` times are left out and will encode as ``<unk>``.
        ``extras`` adds optional special tokens (``<cls>``, ``<mask>``) after ``<unk>``;
        ``rings`` is the writing of ring bonds (:attr:`RINGS`), a string it cannot hold is left out.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        counts: Counter[str] = Counter()
        first_seen: dict[str, int] = {}
        writer = cls([], rings=rings)
        for smiles in smiles_list:
            try:
                tokens = writer.tokens_of(smiles)
            except ValueError:
                continue
            for tok in tokens:
                counts[tok] += 1
                first_seen.setdefault(tok, len(first_seen))
        kept = [tok for tok in first_seen if counts[tok] >= min_count]
        kept.sort(key=lambda tok: (-counts[tok], first_seen[tok]))
        return cls(kept, extras=extras, rings=rings)

    # ------------------------------------------------------------ inspection
    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, specials first (a copy)."""
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocab) and self._tokens == other._tokens and self.extras == other.extras
                and self.rings == other.rings)

    def __repr__(self) -> str:
        n = self.n_specials
        preview = " ".join(self._tokens[n:n + 10])
        more = " ..." if len(self._tokens) > n + 10 else ""
        rings = "" if self.rings == "paired" else f", rings={self.rings}"
        return f"Vocab(size={len(self)}{rings}, tokens: {preview}{more})"

    def token_to_id(self, token: str) -> int:
        """The id of ``token``, or ``unk_id`` when it is not in the vocabulary."""
        return self._ids.get(token, self.unk_id)

    def id_to_token(self, index: int) -> str:
        """The token with id ``index``; IndexError when the id is out of range."""
        index = int(index)
        if not 0 <= index < len(self._tokens):
            raise IndexError(f"token id {index} is outside the vocabulary (size {len(self)})")
        return self._tokens[index]

    # -------------------------------------------------------------- encoding
    def tokens_of(self, smiles: str) -> list[str]:
        """The tokens a model of this vocabulary reads for ``smiles``: :func:`tokenize` of it, its
        rings written by size with ``rings="sizes"``, its closing labels marked with ``rings="marked"``
        (ValueError where the writing cannot hold it)."""
        tokens, writer = tokenize(smiles), self._WRITERS[self.rings]
        return tokens if writer is None else writer(tokens)

    def encode(self, smiles: str, bos: bool = True, eos: bool = True, cls: bool = False) -> list[int]:
        """Token ids of ``smiles``, optionally framed by ``<bos>`` ... ``<eos>``.

        ``cls=True`` puts ``<cls>`` first instead of ``<bos>`` (sequence classifiers). A string the
        ring writing cannot hold is one ``<unk>``.
        """
        try:
            ids = [self.token_to_id(tok) for tok in self.tokens_of(smiles)]
        except ValueError:
            ids = [self.unk_id]
        if cls:
            ids.insert(0, self.cls_id)
        elif bos:
            ids.insert(0, self.bos_id)
        if eos:
            ids.append(self.eos_id)
        return ids

    def unreadable_reason(self, smiles: str, max_len: int, cls: bool = False) -> str | None:
        """Why a model with this vocabulary and ``max_len`` cannot read ``smiles``, or None:
        empty, RDKit cannot parse it, a token it never saw, or more than ``max_len`` ids
        once framed (``cls`` as in :meth:`encode`)."""
        from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit
        if not smiles:
            return "empty SMILES"
        if any(c.isspace() for c in smiles):  # RDKit reads up to the space and takes the rest as a name
            return "it holds white space; give the SMILES alone (in a file, a name may follow it)"
        with quiet_rdkit():
            if mol_from_smiles(smiles) is None:
                return "RDKit cannot read it"
        try:
            tokens = self.tokens_of(smiles)
        except ValueError as error:
            how = "by size" if self.rings == "sizes" else "with their closing labels marked"
            return f"its rings cannot be written {how}: {error}"
        unknown = sorted({t for t in tokens if t not in self._ids})
        if unknown:
            return f"not in the model's vocabulary; it never saw: {' '.join(unknown)}"
        n = len(self.encode(smiles, cls=cls))
        if n > max_len:
            return f"{n} tokens, more than the model's max_len {max_len}"
        return None

    def encode_batch(self, smiles_list: Sequence[str], bos: bool = True, eos: bool = True,
                     pad_to: int | None = None, cls: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Encode several SMILES into one padded matrix.

        Returns ``(ids, lengths)``: ``ids`` is an ``int64`` array of shape
        ``(B, T)`` whose row ``i`` holds the encoding of ``smiles_list[i]``
        followed by ``<pad>``; ``lengths[i]`` (``int64``, shape ``(B,)``) is the
        unpadded length of row ``i``. ``T`` is the longest encoding, or
        ``pad_to`` when given (a longer encoding then raises ValueError).
        """
        encoded = [self.encode(s, bos=bos, eos=eos, cls=cls) for s in smiles_list]
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        width = int(lengths.max()) if len(encoded) else 0
        if pad_to is not None:
            if width > pad_to:
                worst = int(lengths.argmax())
                raise ValueError(f"encoding of item {worst} has {width} ids, more than "
                                 f"pad_to={pad_to}: {smiles_list[worst]!r}")
            width = pad_to
        ids = np.full((len(encoded), width), self.pad_id, dtype=np.int64)
        for row, e in enumerate(encoded):
            ids[row, :len(e)] = e
        return ids, lengths

    def decode(self, ids: Iterable[int], unk: str = UNK) -> str:
        """Turn ids back into a SMILES string.

        ``<bos>`` and ``<pad>`` are skipped, the first ``<eos>`` ends the
        string, and ``<unk>`` is written as ``unk`` (``<unk>``, which no SMILES
        parser reads, by default: the string is then invalid, not another molecule).
        Accepts any iterable of integers, including a 1-D NumPy array. With ``rings="sizes"`` or
        ``"marked"`` the ids are read back into SMILES
        (:func:`~minitransformer.chem.datasets.ring_sizes.read_ring_sizes`,
        :func:`~minitransformer.chem.datasets.ring_marks.read_ring_marks`).
        """
        pieces = []
        skip = {self.bos_id, self.pad_id} | ({self._ids[self.CLS]} if self.CLS in self.extras else set())
        unknown = {self.unk_id} | ({self._ids[self.MASK]} if self.MASK in self.extras else set())
        for index in ids:
            index = int(index)
            if index == self.eos_id:
                break
            if index in skip:
                continue
            pieces.append(unk if index in unknown else self.id_to_token(index))
        return self._READERS[self.rings](pieces)

    # --------------------------------------------------------- serialization
    def to_json(self) -> dict:
        """A JSON-ready dict describing the vocabulary (all tokens in id order)."""
        if self.rings == "paired":  # as version 2 wrote it: a run's fingerprint (its vocabulary's JSON) stays
            return {"format": _FORMAT, "version": 2, "tokens": list(self._tokens), "extras": list(self.extras)}
        return {"format": _FORMAT, "version": _VERSION, "tokens": list(self._tokens), "extras": list(self.extras),
                "rings": self.rings}

    @classmethod
    def from_json(cls, data: dict | str) -> "Vocab":
        """Rebuild a vocabulary from :meth:`to_json` output (the dict, or its JSON text)."""
        if isinstance(data, str):
            data = parse_json(data)
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"not a serialized Vocab (expected a dict with format={_FORMAT!r})")
        if data.get("version") not in (1, 2, _VERSION):
            raise ValueError(f"unsupported Vocab version {data.get('version')!r}; "
                             f"this code reads versions 1 to {_VERSION}")
        tokens = list(data["tokens"])
        extras = tuple(data.get("extras", ()))
        head = cls.SPECIALS + extras
        if tuple(tokens[:len(head)]) != head:
            raise ValueError(f"serialized Vocab must start with the special tokens {head}, "
                             f"got {tokens[:len(head)]}")
        return cls(tokens[len(head):], extras=extras, rings=data.get("rings", "paired"))
