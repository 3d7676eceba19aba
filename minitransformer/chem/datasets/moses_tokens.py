"""Token ids of a whole MOSES split, computed once and cached on disk.

Tokenizing 1.58 million SMILES one string at a time and keeping a Python list
of ids per molecule costs tens of seconds and gigabytes. Here a split becomes
two flat NumPy arrays, a *ragged array*:

* ``ids``: the token ids of every molecule, one after another, shape ``(N_tokens,)``,
  ``int16`` (``int32`` for a vocabulary of more than 32,767 tokens);
* ``offsets``: shape ``(N_molecules + 1,)``, ``int64``; molecule ``i`` is
  ``ids[offsets[i]:offsets[i + 1]]``.

The ids are the SMILES tokens only, **without** ``<bos>``/``<eos>``: the caller
frames them (:func:`id_lists` does it the way :meth:`Vocab.encode` does). A token
the vocabulary lacks becomes ``<unk>``, as in :meth:`Vocab.encode`; nothing is
dropped, so molecule ``i`` is always line ``i`` of the file. :func:`has_unknown`
marks the molecules holding one, and :func:`moses_token_arrays` logs how many there are.

Speed
-----
:func:`tokenize_many` runs the tokenizer's regular expression over the text of
100,000 molecules at once (joined by newlines) instead of once per molecule,
and maps tokens to ids with one dictionary look-up each. The newline is its own
token and marks where a molecule ends. The bracket-atom pattern is told not to
cross a newline; inside a single line the expression is the tokenizer's, so the
tokens are exactly those of :func:`~minitransformer.chem.datasets.tokenizer.tokenize`.

Cache
-----
:func:`moses_token_arrays` saves both arrays as ``.npy`` files under
``cache_dir()/moses/tokens/``, named by the split, the SHA-256 of the data file
and a hash of the vocabulary's token list (:meth:`Vocab.to_json`): another
vocabulary or another file gets its own entry. A hit opens them with
``mmap_mode="r"``, which takes milliseconds and reads pages only when used.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, Sequence

import numpy as np

from minitransformer.atomic import atomic_write
from minitransformer.chem.datasets import moses
from minitransformer.chem.datasets.tokenizer import SMILES_TOKEN_PATTERN
from minitransformer.chem.datasets.vocab import Vocab

__all__ = ["tokenize_many", "moses_token_arrays", "token_cache_paths", "id_lists", "has_unknown"]

_FORMAT = 1  # bump when the tokenizer or the layout changes: old cache entries are then ignored
_END = -1    # the id a newline gets while tokenizing: the end of a molecule
_CHUNK = 100_000
# The tokenizer's pattern, its bracket atom kept inside one line; then the newline; then any
# other single character (as tokenize's catch-all does).
_BULK = re.compile("(?:" + SMILES_TOKEN_PATTERN.replace(r"\[[^\]]+\]", r"\[[^\]\n]+\]") + ")|\n|.", re.DOTALL)


def _dtype(vocab: Vocab):
    return np.int16 if len(vocab) <= np.iinfo(np.int16).max else np.int32


def tokenize_many(smiles: Sequence[str], vocab: Vocab) -> tuple[np.ndarray, np.ndarray, int]:
    """Token ids of many SMILES as a ragged array (see the module docstring).

    Returns ``(ids, offsets, n_unknown)``; ``n_unknown`` counts the molecules
    holding a token that is not in ``vocab`` (encoded as ``<unk>``). A SMILES
    must not contain a newline. The vocabulary writes ring labels in pairs (the
    fast scan reads SMILES tokens as they stand).
    """
    if vocab.rings != "paired":
        raise ValueError(f"tokenize_many reads SMILES tokens as they stand; a vocabulary of ring {vocab.rings} "
                         "encodes each molecule with Vocab.encode")
    dtype = _dtype(vocab)
    ids_parts, lengths = [], []
    lookup = {tok: i for i, tok in enumerate(vocab.tokens)}
    lookup["\n"] = _END
    any_unknown = False
    for start in range(0, len(smiles), _CHUNK):
        part = smiles[start:start + _CHUNK]
        tokens = _BULK.findall("\n".join(part) + "\n")
        unknown = set(tokens).difference(lookup)
        if unknown:  # from now on they map to <unk>
            lookup.update(dict.fromkeys(unknown, vocab.unk_id))
            any_unknown = True
        ids = np.fromiter(map(lookup.__getitem__, tokens), dtype=np.int32, count=len(tokens))
        ends = np.flatnonzero(ids == _END)
        if len(ends) != len(part):
            raise ValueError("a SMILES contains a newline; tokenize it with Vocab.encode instead")
        lengths.append(np.diff(ends, prepend=-1) - 1)
        ids_parts.append(ids[ids != _END].astype(dtype))
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype)
    offsets = np.zeros(len(smiles) + 1, np.int64)
    if lengths:
        np.cumsum(np.concatenate(lengths), out=offsets[1:])
    n_unknown = int(has_unknown(ids, offsets, vocab.unk_id).sum()) if any_unknown else 0
    return ids, offsets, n_unknown


def has_unknown(ids: np.ndarray, offsets: np.ndarray, unk_id: int) -> np.ndarray:
    """Boolean mask of shape ``(N_molecules,)``: which molecules hold an ``<unk>`` token."""
    per_token = np.concatenate([(np.asarray(ids) == unk_id).astype(np.int64), [0]])
    counts = np.add.reduceat(per_token, np.asarray(offsets[:-1])) if len(offsets) > 1 else np.zeros(0, np.int64)
    return (counts > 0) & (np.diff(offsets) > 0)


def id_lists(ids: np.ndarray, offsets: np.ndarray, vocab: Vocab,
             indices: Iterable[int] | None = None) -> list[list[int]]:
    """``[<bos>, tokens..., <eos>]`` id lists of the molecules ``indices`` (all by default),
    equal to ``vocab.encode(smiles)``: the form :class:`~minitransformer.train.tasks.LMTask` trains on."""
    indices = range(len(offsets) - 1) if indices is None else indices
    bos, eos = [vocab.bos_id], [vocab.eos_id]
    return [bos + ids[offsets[i]:offsets[i + 1]].tolist() + eos for i in indices]


def _vocab_hash(vocab: Vocab) -> str:
    text = json.dumps({"format": _FORMAT, "vocab": vocab.to_json()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def arrays_whole(ids: np.ndarray, offsets: np.ndarray, vocab_size: int) -> bool:
    """Whether ``(ids, offsets)`` read from the cache, ids (L,) and offsets (M + 1,) for M molecules of
    L tokens in all, can be the tokens of a split: offsets rising from
    0 to ``len(ids)`` over at least one molecule, every id within the vocabulary (a truncated, edited or
    foreign file under the cache's name fails)."""
    if ids.ndim != 1 or offsets.ndim != 1 or len(offsets) < 2 or not np.issubdtype(ids.dtype, np.integer) \
            or not np.issubdtype(offsets.dtype, np.integer):
        return False
    if offsets[0] != 0 or offsets[-1] != len(ids) or np.any(np.diff(offsets) < 0):
        return False
    return len(ids) == 0 or (int(ids.min()) >= 0 and int(ids.max()) < vocab_size)


def token_cache_paths(split: str, vocab: Vocab):
    """The two ``.npy`` files ``(ids, offsets)`` that cache ``split`` under ``vocab``."""
    stem = f"{split}-{moses.SHA256[f'{split}.csv.gz'][:16]}-{_vocab_hash(vocab)[:16]}"
    folder = moses.cache_dir() / "moses" / "tokens"
    return folder / f"{stem}.ids.npy", folder / f"{stem}.offsets.npy"


def moses_token_arrays(split: str, vocab: Vocab, data_dir=None, download: bool = True,
                       log=print) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, offsets)`` of a MOSES split under ``vocab``, from the cache or built once and cached.

    A hit returns read-only memory-mapped arrays. A miss reads the verified file
    (:func:`~minitransformer.chem.datasets.moses.find_moses`), tokenizes it with
    :func:`tokenize_many` (about 15 s for the training split) and writes both arrays
    atomically; when the cache cannot be written the arrays are returned all the same.
    """
    ids_path, offsets_path = token_cache_paths(split, vocab)
    if ids_path.is_file() and offsets_path.is_file():
        try:
            ids, offsets = np.load(ids_path, mmap_mode="r"), np.load(offsets_path, mmap_mode="r")
            if arrays_whole(ids, offsets, len(vocab)):
                return ids, offsets
            log(f"MOSES {split}: the token cache {ids_path.name} does not hold whole arrays; building it again")
        except (OSError, ValueError):  # damaged by hand: build it again
            pass
    path = moses.find_moses(split, data_dir=data_dir, download=download)
    ids, offsets, n_unknown = tokenize_many(moses.read_moses_file(path), vocab)
    log(f"MOSES {split}: {len(offsets) - 1} molecules, {len(ids)} tokens"
        + (f"; {n_unknown} hold a token outside the vocabulary (written as <unk>)" if n_unknown else ""))
    try:  # offsets first: a cache entry counts only when both files exist
        atomic_write(offsets_path, lambda f: np.save(f, offsets))
        atomic_write(ids_path, lambda f: np.save(f, ids))
    except OSError as exc:
        log(f"MOSES {split}: token cache not written ({exc}); it will be rebuilt next time")
    return ids, offsets
