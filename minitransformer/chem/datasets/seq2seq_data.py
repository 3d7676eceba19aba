"""Paired SMILES for translation: a randomized SMILES in, the canonical SMILES out.

Used by ``demos/canonicalize.py``; built from the same pieces as the molecules
demo's pipeline (:mod:`~minitransformer.chem.datasets.data`, :mod:`~minitransformer.chem.datasets.lm_data`):

1. load and clean the raw SMILES (:func:`~minitransformer.chem.datasets.lm_data.load_and_clean`:
   10..100 characters, RDKit parses);
2. write every molecule as its RDKit canonical SMILES and **drop repeats**: two rows
   of the file with the same canonical SMILES are one molecule, so the split below
   can never put a test molecule into training under another spelling;
3. a seeded random 80/10/10 split of the unique molecules
   (:func:`~minitransformer.chem.datasets.data.split_random`);
4. one shared vocabulary for both sides, built from the training molecules'
   canonical SMILES **and** ``vocab_draws`` randomized writings of each (randomized
   strings use tokens canonical ones rarely do, e.g. ring-closure labels ``%10``,
   or ``[C@H]`` where the canonical string has ``[C@@H]``);
5. the pairs ``(randomized SMILES ids, canonical SMILES ids)``, both framed as
   ``[BOS, tokens..., EOS]``:

   * training: :class:`PairEpochs` writes every training molecule afresh each epoch
     (a :class:`~minitransformer.chem.datasets.lm_data.RandomizedEpochs` draw), deterministic
     in ``(seed, epoch)`` so a resumed run sees the same pairs;
   * validation and test: one fixed, seeded randomized writing per molecule.

A randomized writing that contains a token outside the vocabulary, or that is
longer than ``max_tokens``, is replaced by the canonical SMILES itself (the rule
of ``RandomizedEpochs``): the model never trains on ``<unk>`` and never sees a
source it cannot hold. That happens to very few strings. :attr:`PairSplits.test_copies`
counts the test sources identical to their target (a fallback, or a small molecule
whose random writing happens to be the canonical one): translating those is a copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitransformer.chem.datasets.data import canonical, randomize_smiles, split_random
from minitransformer.chem.datasets.lm_data import RandomizedEpochs, load_and_clean
from minitransformer.chem.datasets.moses import is_moses
from minitransformer.chem.datasets.tokenizer import tokenize
from minitransformer.chem.datasets.vocab import Vocab

__all__ = ["PairSplits", "PairEpochs", "prepare_pairs", "VAL_DRAW", "TEST_DRAW"]

#: The "epochs" of :class:`RandomizedEpochs` whose draws are the fixed validation and
#: test sources. Training never runs that many epochs, so they are never reused.
VAL_DRAW = 1_000_000
TEST_DRAW = 1_000_001


@dataclass
class PairSplits:
    """Unique molecules split three ways, their fixed sources, and the shared vocabulary.

    ``train``, ``val``, ``test`` hold canonical SMILES (the targets). ``val_src`` and
    ``test_src`` hold the fixed randomized SMILES (the sources), aligned with them.
    """

    train: list
    val: list
    test: list
    val_src: list
    test_src: list
    vocab: Vocab
    description: str
    clean_summary: str
    duplicates: int
    test_copies: int
    max_tokens: int
    available: int = 0  # training molecules the data offers before ``limit`` (MOSES: its training file less validation)

    def pairs(self, split: str) -> list:
        """``(src_ids, tgt_ids)`` pairs of the fixed ``"val"`` or ``"test"`` sources."""
        targets, sources = (self.val, self.val_src) if split == "val" else (self.test, self.test_src)
        return [(self.vocab.encode(s), self.vocab.encode(t)) for s, t in zip(sources, targets)]


class PairEpochs:
    """Callable ``epoch -> list of (src_ids, tgt_ids)``: every training molecule
    written as a fresh randomized SMILES (the source) next to its canonical SMILES
    (the target). The same ``(seed, epoch)`` always gives the same pairs.
    ``fresh=False`` turns the augmentation off: every epoch reuses epoch 0's
    writings, one random source per molecule for the whole run. ``share``: the ranks of
    a data-parallel run, which share the writing (``RandomizedEpochs``)."""

    def __init__(self, smiles, vocab: Vocab, seed: int = 0, max_tokens: int | None = None, fresh: bool = True,
                 share=None):
        self.sources = RandomizedEpochs(smiles, vocab, seed=seed, p=1.0, max_tokens=max_tokens, share=share)
        self.targets = [vocab.encode(s) for s in smiles]
        self.fresh = fresh

    def __call__(self, epoch: int) -> list:
        return list(zip(self.sources(epoch if self.fresh else 0), self.targets))


def fixed_sources(smiles, vocab: Vocab, seed: int, draw: int, max_tokens: int | None) -> list:
    """One randomized SMILES per molecule, fixed by ``(seed, draw)`` (see :data:`VAL_DRAW`).

    Where the draw fell back to the canonical string, that string is returned as it
    is (any token outside the vocabulary stays in the text and encodes as ``<unk>``).
    """
    ids = RandomizedEpochs(smiles, vocab, seed=seed, p=1.0, max_tokens=max_tokens)(draw)
    return [s if row == vocab.encode(s) else vocab.decode(row) for s, row in zip(smiles, ids)]


def prepare_pairs(data=None, seed: int = 0, fractions=(0.8, 0.1, 0.1), min_len: int = 10, max_len: int = 100,
                  max_tokens: int = 128, vocab_draws: int = 5, limit: int | None = None,
                  download: bool = True, standardize: bool = True, log=print) -> PairSplits:
    """Load, clean, canonicalize, de-duplicate and split molecules; build the shared
    vocabulary and the fixed validation/test sources (see the module docstring).

    Args:
        data: ``"tox21"``, ``"druglike"``, ``"moses"``, a file path, or None (Tox21 if
            available). MOSES is not re-split (:func:`_moses_splits`): its training
            file gives train and validation, its own ``test`` file the test molecules.
        seed: seeds the split, the vocabulary's randomized writings and the fixed sources.
        min_len, max_len: character-length window of the cleaning step (on the file's strings).
        max_tokens: the longest source or target, in ids with BOS and EOS (the model's
            ``max_len``); longer randomized writings fall back to the canonical string.
        vocab_draws: randomized writings per training molecule that feed the vocabulary.
        limit: keep only the first ``limit`` cleaned SMILES (quick runs); for MOSES, ``limit``
            of its training molecules drawn at random and at most ``limit`` of its test molecules.
        standardize: replace each molecule by its standardized parent before
            canonicalizing (:func:`minitransformer.chem.datasets.lm_data.standardized`); on by default.
    """
    kept, loaded, report = load_and_clean(data, min_len, max_len, True, limit, download, log)
    if is_moses(data):
        train, val, test = _moses_splits(kept, min_len, max_len, max_tokens, limit, download, log)
        return _pairs(train, val, test, loaded, report, 0, seed, max_tokens, vocab_draws, log,
                      available=report.kept - len(val) if limit is not None else len(train))
    if standardize:
        from minitransformer.chem.datasets.lm_data import standardized
        kept = standardized(kept, min_len, max_len, log)
    written = [canonical(s) for s in kept]
    unique = list(dict.fromkeys(w for w in written if w is not None))  # first occurrence, file order
    duplicates = len(written) - len(unique)
    fits = [len(tokenize(s)) + 2 <= max_tokens for s in unique]  # tokens + BOS + EOS
    too_long = len(fits) - sum(fits)
    unique = [s for s, ok in zip(unique, fits) if ok]
    log(f"molecules: {len(unique)} unique canonical SMILES ({duplicates} repeats of a molecule dropped"
        + (f", {too_long} longer than {max_tokens} tokens" if too_long else "") + ")")
    train, val, test = split_random(unique, fractions, seed)
    if not train or not val or not test:
        from minitransformer.chem.datasets.data import min_split_size
        raise ValueError(f"{loaded.description}: not enough molecules to split: {len(unique)} unique molecules "
                         f"after cleaning, and the split needs at least {min_split_size(fractions, need_test=True)}; "
                         "add molecules to the data")

    return _pairs(train, val, test, loaded, report, duplicates, seed, max_tokens, vocab_draws, log)


#: Randomized writings for the vocabulary come from at most this many training molecules
#: (MOSES has 1.58M; every token of a random writing shows up long before that: from 5,000,
#: 10,000 or 50,000 of 400,000 MOSES molecules the vocabulary has the same 28 tokens, and
#: the 50,000's 250,000 writings took 68 s of a run's start, 2026-12-07). Tox21's and the
#: drug-like set's training molecules are all fewer.
VOCAB_SAMPLE = 10_000
#: At most this many MOSES test molecules are decoded (greedy and beam search take
#: about a second per 50 molecules on 2 CPU cores).
MOSES_TEST = 2_000


def _moses_splits(kept, min_len, max_len, max_tokens, limit, download, log):
    """MOSES's molecules are canonical, unique and standardized already: train and validation
    from its training file (:func:`~minitransformer.chem.datasets.moses.split_moses`), test from
    :data:`MOSES_TEST` molecules of its own test file (no more than ``limit``, in a quick run),
    drawn at random once for every run (the file is ordered: its first molecules are one region of
    its chemistry), so runs of any seed are judged on the same molecules."""
    from minitransformer.chem.datasets.data import clean_smiles
    from minitransformer.chem.datasets.moses import load_moses, random_part, split_moses
    fits = lambda smiles: [s for s in smiles if len(tokenize(s)) + 2 <= max_tokens]  # noqa: E731
    train, val = split_moses(fits(kept))
    n_test = MOSES_TEST if limit is None else min(MOSES_TEST, limit)
    test = fits(random_part(clean_smiles(load_moses("test", download=download), min_len, max_len,
                                         check_rdkit=False)[0], n_test, seed=TEST_PICK))
    log(f"split: MOSES's training file as train / validation (its last {len(val)}), {len(test)} molecules of "
        "its test file, drawn at random, as test")
    return train, val, test


#: The seed of the draw of MOSES's test molecules: one draw for every run, whatever its seed.
TEST_PICK = 0


def _pairs(train, val, test, loaded, report, duplicates, seed, max_tokens, vocab_draws, log,
           available: int | None = None) -> PairSplits:
    """The shared vocabulary and the fixed validation and test sources of three splits
    (``available``: the training molecules the data offers, when more than ``train``)."""
    rng = np.random.default_rng([seed, 104729])  # the vocabulary's writings, independent of the epochs
    some = train[:VOCAB_SAMPLE]
    writings = list(train) + [randomize_smiles(s, rng) for _ in range(vocab_draws) for s in some]
    vocab = Vocab.build(writings)
    val_src = fixed_sources(val, vocab, seed, VAL_DRAW, max_tokens)
    test_src = fixed_sources(test, vocab, seed, TEST_DRAW, max_tokens)
    copies = sum(s == t for s, t in zip(test_src, test))
    log(f"split: {len(train)} train / {len(val)} val / {len(test)} test molecules; shared vocabulary of "
        f"{len(vocab)} tokens (canonical + {vocab_draws} randomized writings of each of the first {len(some)} "
        "training molecules)")
    return PairSplits(train, val, test, val_src, test_src, vocab, loaded.description, report.summary(),
                      duplicates, copies, max_tokens, len(train) if available is None else available)
