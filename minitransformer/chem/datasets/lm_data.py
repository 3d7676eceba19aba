"""SMILES data for language modelling: load, clean, split, tokenize, augment.

The pipeline of the molecules demo, reusable by the other chemistry demos:

1. :func:`load_source` reads raw SMILES (Tox21, RDKit's drug-like set, or a file);
2. :func:`clean_smiles` drops empty, over/under-length and unparsable rows (and says
   how many of each);
3. a split: in file order (6600 / 400 / rest, as the reference article) or random;
4. a :class:`~minitransformer.chem.datasets.vocab.Vocab` built on the training split;
5. encoding to ``[BOS, tokens..., EOS]`` id lists.

:class:`RandomizedEpochs` supplies fresh randomized SMILES every epoch (the same
molecules written from a random starting atom and atom order), deterministic in
``(seed, epoch)`` so a resumed run sees the same strings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minitransformer.chem.datasets.data import (
    canonical, clean_smiles, kekule, load_source, randomize_smiles, split_in_order, split_random,
)
from minitransformer.chem.datasets.moses import is_moses, load_moses, random_part, split_moses, spot_check
from minitransformer.chem.datasets.vocab import Vocab


@dataclass
class SmilesSplits:
    """Cleaned SMILES split three ways, the vocabulary, and where they came from."""

    train: list
    val: list
    test: list
    vocab: Vocab
    description: str
    clean_summary: str

    def encode(self, smiles):
        """[BOS, tokens..., EOS] id lists of ``smiles``."""
        return [self.vocab.encode(s) for s in smiles]


def load_and_clean(data=None, min_len: int | None = 10, max_len: int | None = 100, check_rdkit: bool = True,
                   limit: int | None = None, download: bool = True, log=print):
    """:func:`load_source` then :func:`clean_smiles`, logging where the data came from and
    what cleaning dropped; ``limit`` keeps the first cleaned SMILES (quick runs), or for
    MOSES, whose files are ordered, ``limit`` drawn at random (:func:`random_part`).

    Returns ``(kept SMILES, LoadedSmiles, CleanReport)``.
    """
    loaded = load_source(data, download=download, limit=limit)
    sample = check_rdkit and is_moses(data)  # 1.58M clean molecules: RDKit checks a sample only
    try:
        kept, report = clean_smiles(loaded.smiles, min_len=min_len, max_len=max_len,
                                    check_rdkit=check_rdkit and not sample,
                                    stop_after=None if is_moses(data) else limit)
    except ValueError as err:  # nothing usable: say which data it was
        raise ValueError(f"{loaded.description}: {err}") from None
    log(f"data: {loaded.description}")
    log(f"cleaning: {report.summary()}")
    if sample:
        log(spot_check(loaded.smiles))
    if is_moses(data):
        return random_part(kept, limit), loaded, report
    return (kept if limit is None else kept[:limit]), loaded, report


def rewrite_smiles(smiles, form: str, max_len: int | None = None) -> tuple[list, int]:
    """Write every molecule in ``form`` (``"canonical"`` or ``"kekule"``); returns the rewritten
    strings and how many were dropped (RDKit could not write them, or longer than ``max_len``)."""
    if form not in ("canonical", "kekule"):
        raise ValueError(f"form must be 'as-is', 'canonical' or 'kekule', got {form!r}")
    from minitransformer.chem.workers import map_chunks
    smiles = list(smiles)
    chunks = [(form, smiles[i:i + REWRITE_CHUNK]) for i in range(0, len(smiles), REWRITE_CHUNK)]
    written = [w for part in map_chunks(_rewrite_chunk, chunks, len(smiles)) for w in part]
    kept = [w for w in written if w is not None and (max_len is None or len(w) <= max_len)]
    return kept, len(written) - len(kept)


#: Molecules per chunk of :func:`rewrite_smiles` (the chunks go to worker processes for large sets).
REWRITE_CHUNK = 50_000


def _rewrite_chunk(chunk) -> list:
    """:func:`rewrite_smiles`' work on one chunk ``(form, smiles)`` (run in a worker for large sets)."""
    form, smiles = chunk
    rewrite = canonical if form == "canonical" else kekule
    return [rewrite(s) for s in smiles]


def standardized(smiles, min_len: int | None, max_len: int | None, log=print) -> list:
    """:func:`~minitransformer.chem.datasets.standardize.standardize_all`, then the length window again
    (a desalted molecule can become shorter than ``min_len``); logs one line."""
    from minitransformer.chem.datasets.standardize import standardize_all
    kept, report = standardize_all(smiles)
    fits = [s for s in kept if (min_len is None or len(s) >= min_len) and (max_len is None or len(s) <= max_len)]
    log(report.summary() + (f"; {len(kept) - len(fits)} now outside the length window" if len(fits) < len(kept)
                            else ""))
    return fits


#: Validation and test molecules each of the ``"recombined"`` set (its 300,000 are nearly all for training).
RECOMBINED_HELD_OUT = 10_000


def prepare_smiles(data=None, min_len: int = 10, max_len: int = 100, check_rdkit: bool = True,
                   split: str = "ordered", n_train: int = 6600, n_val: int = 400,
                   fractions=(0.8, 0.1, 0.1), seed: int = 0, limit: int | None = None,
                   download: bool = True, form: str = "as-is", standardize: bool = True,
                   test_limit: int | None = None, rings: str = "paired", log=print) -> SmilesSplits:
    """Load, clean and split SMILES; build the vocabulary on the training split.

    Args:
        data: ``"tox21"``, ``"druglike"``, ``"moses"``, a file path, or None (Tox21 if
            available, else the drug-like set). MOSES is not re-split: its own ``test``
            file is the test split (``limit`` of it drawn at random too), the last 10,000 of
            the training molecules kept (a tenth when fewer) the validation split, and ``split`` is ignored;
            RDKit checks a random sample of 1,000 molecules only (MOSES is clean already).
        min_len, max_len: character-length limits (the reference keeps 10..100).
        check_rdkit: drop strings RDKit cannot parse.
        split: ``"ordered"`` (first n_train, next n_val, rest) or ``"random"`` (fractions).
            The ``"recombined"`` set (made in random order) is split in order with
            :data:`RECOMBINED_HELD_OUT` molecules each for validation and test, the rest training.
        limit: keep only the first ``limit`` cleaned SMILES (quick runs).
        test_limit: MOSES only: at most this many of its test molecules (drawn at random), for
            the test NLL (176,074 molecules take minutes to score; the benchmark's own metrics
            compare samples with the whole test files).
        form: how each molecule is written: ``"as-is"`` (the file's string),
            ``"canonical"`` (RDKit canonical SMILES) or ``"kekule"`` (canonical Kekule form,
            no aromatic lowercase atoms). Rewriting needs the RDKit check.
        standardize: replace each molecule by its standardized parent (largest organic
            fragment, neutralised, metals handled; :mod:`minitransformer.chem.datasets.standardize`)
            and log what changed; a training molecule written twice (a salt and its parent,
            say) is then kept once, so that training does not weigh it double. On by default;
            it needs RDKit, so it is skipped when ``check_rdkit`` is False (a run that keeps
            the file's strings untouched).
        rings: the vocabulary's writing of ring bonds (:attr:`Vocab.RINGS`).
    """
    kept, loaded, report = load_and_clean(data, min_len, max_len, check_rdkit, limit, download, log)
    test = None
    if is_moses(data):  # MOSES brings its own test split (cleaned by the same length window)
        test = random_part(clean_smiles(load_moses("test", download=download), min_len, max_len,
                                        check_rdkit=False)[0], min((n for n in (limit, test_limit) if n), default=None))
    elif standardize and check_rdkit:  # (MOSES is standardized already)
        kept = standardized(kept, min_len, max_len, log)
    if form != "as-is":
        kept, dropped = rewrite_smiles(kept, form, max_len)
        log(f"molecules written in {form} form ({dropped} dropped: not kekulizable or now too long)")
        test = None if test is None else rewrite_smiles(test, form, max_len)[0]
    if test is not None:
        train, val = split_moses(kept)
        log(f"split: MOSES's test split as test, the last {len(val)} training molecules as validation")
    elif split == "ordered":
        if isinstance(data, str) and data.lower() == "recombined":  # made in random order: all but 20,000 train
            n_val = RECOMBINED_HELD_OUT
            n_train = max(len(kept) - 2 * n_val, 0)
        if len(kept) <= n_train + n_val:  # a small file: keep the 80/10/10 proportions instead
            n_train, n_val = int(0.8 * len(kept)), max(1, int(0.1 * len(kept)))
            why = (f"the first {limit} cleaned SMILES (a quick run)" if limit is not None and len(kept) == limit
                   else f"only {len(kept)} SMILES")
            log(f"split: {why}, so the ordered split is 80/10/10: {n_train} / {n_val} / rest")
        train, val, test = split_in_order(kept, n_train, n_val)
    elif split == "random":
        train, val, test = split_random(kept, fractions, seed)
    else:
        raise ValueError(f"split must be 'ordered' or 'random', got {split!r}")
    repeats = 0
    if standardize and check_rdkit and not is_moses(data):  # (as standardized above)
        distinct = list(dict.fromkeys(train))  # a salt and its parent are one molecule once standardized
        repeats, train = len(train) - len(distinct), distinct
    if not train or not val:
        from minitransformer.chem.datasets.data import min_split_size
        need = 2 if split == "ordered" else min_split_size(fractions)
        raise ValueError(f"{loaded.description}: not enough molecules to split: {len(kept)} usable SMILES after "
                         f"cleaning, and the {split} split needs at least {need}; add molecules to the data")
    vocab = Vocab.build(train, rings=rings)
    dropped = f" ({repeats} repeats of a training molecule dropped)" if repeats else ""
    log(f"split: {len(train)} train{dropped} / {len(val)} val / {len(test)} test; vocabulary of {len(vocab)} tokens")
    return SmilesSplits(train, val, test, vocab, loaded.description, report.summary())


class RandomizedEpochs:
    """Callable ``epoch -> list of id lists``: each epoch, every training molecule is
    written as a new random SMILES with probability ``p`` (otherwise as given).

    A randomized string that contains a token outside the vocabulary, or that is
    longer than ``max_tokens``, is replaced by the original string, so the model
    never trains on UNK or on sequences it cannot hold. ``encode`` holds keyword
    arguments for :meth:`Vocab.encode` (``dict(cls=True)`` for a classifier's input).
    ``kekule_form`` writes the random strings in Kekule form (for a model trained on
    that form). ``share``: the ranks of a data-parallel run (``rank``, ``size``, ``gather``),
    which each write every ``size``-th chunk and gather the rest: each chunk draws from its
    own stream, so they get what one process writes. ``keyed``: each molecule draws from a
    stream of its own, keyed by the seed, the epoch and its string, so its writing does not
    depend on the molecules beside it (the views of a prediction). ``graph`` > 0 (a model with a
    graph bias, ``encode`` with ``cls=True``): each id list carries its writing's graph, distances
    clipped at ``graph`` bonds (:class:`~minitransformer.chem.graph.GraphIds`), computed once per
    writing beside the writing, on the same workers and ranks.
    """

    def __init__(self, smiles, vocab: Vocab, seed: int = 0, p: float = 1.0, max_tokens: int | None = None,
                 encode: dict | None = None, kekule_form: bool = False, share=None, keyed: bool = False,
                 graph: int = 0):
        self.smiles, self.vocab, self.seed, self.p, self.max_tokens = list(smiles), vocab, seed, p, max_tokens
        self.kekule_form, self.share, self.keyed, self.graph = kekule_form, share, keyed, graph
        if graph and not (encode or {}).get("cls"):
            raise ValueError("RandomizedEpochs: graph relations are read with <cls> first; give encode=dict(cls=True)")
        self.encode = dict(encode or {})
        self._plain = [vocab.encode(s, **self.encode) for s in self.smiles]
        self._cache: tuple[int, list] | None = None

    def __call__(self, epoch: int):
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        from minitransformer.chem.workers import map_chunks
        size = RANDOM_CHUNK
        chunks = [(self.smiles[i:i + size], (self.seed, 7919, epoch, i // size), self.p, self.kekule_form,
                   self.keyed) for i in range(0, len(self.smiles), size)]
        from minitransformer.distributed import map_shared
        ranks = 1 if self.share is None else self.share.size
        parts = map_shared(self.share, lambda mine: map_chunks(_random_writings, mine, len(self.smiles) // ranks),
                           chunks)  # with ranks: each writes its chunks, then all gather
        written = [w for part in parts for w in part]
        out, used = [], []
        for s, given, plain in zip(written, self.smiles, self._plain):
            ids = None if s is None else self.vocab.encode(s, **self.encode)  # None: kept as given (1 - p)
            too_long = ids is not None and self.max_tokens is not None and len(ids) > self.max_tokens
            if ids is None or too_long or self.vocab.unk_id in ids:
                ids, s = plain, given
            out.append(ids)
            used.append(s)
        if self.graph:
            out = self._with_graphs(out, used, ranks)
        self._cache = (epoch, out)
        return out

    def _with_graphs(self, ids, writings, ranks: int) -> list:
        """Each id list as :class:`~minitransformer.chem.graph.GraphIds`, the graph of its writing."""
        from minitransformer.chem.graph import GraphIds
        from minitransformer.chem.workers import map_chunks
        from minitransformer.distributed import map_shared
        size = RANDOM_CHUNK
        chunks = [(writings[i:i + size], self.graph) for i in range(0, len(writings), size)]
        parts = map_shared(self.share, lambda mine: map_chunks(_writing_graphs, mine, len(writings) // ranks), chunks)
        graphs = [g for part in parts for g in part]
        return [GraphIds(x, g) for x, g in zip(ids, graphs)]


class LabelledEpochs:
    """Callable ``epoch -> [(ids, labels), ...]``: a classifier's training pairs, each molecule
    written as a fresh random SMILES each epoch (:class:`RandomizedEpochs`, with the ``<cls>``
    token first), its labels unchanged; with ``features`` (N, F), triples ``(ids, labels,
    features)``: a molecule's features do not depend on how it is written. ``graph`` > 0: the
    ids carry their writing's graph (as :class:`RandomizedEpochs`)."""

    def __init__(self, smiles, labels, vocab: Vocab, seed: int, p: float, max_tokens: int, features=None,
                 graph: int = 0):
        self.ids = RandomizedEpochs(smiles, vocab, seed=seed, p=p, max_tokens=max_tokens, encode=dict(cls=True),
                                    graph=graph)
        self.labels, self.features = labels, features

    def __call__(self, epoch: int):
        if self.features is None:
            return list(zip(self.ids(epoch), self.labels))
        return list(zip(self.ids(epoch), self.labels, self.features))


#: Molecules per chunk of random writings; each chunk draws from its own stream (seed, epoch, chunk).
RANDOM_CHUNK = 4096


def _random_writings(chunk) -> list:
    """One chunk of :class:`RandomizedEpochs`: a random SMILES of each molecule, or None where it is
    kept as given (probability ``1 - p``). A pure function of its arguments, so it gives the same
    strings in a worker process (:mod:`~minitransformer.chem.workers`) as here. ``keyed``: a
    stream per molecule, from the seed, the epoch and the molecule's string (not its chunk)."""
    import zlib
    smiles, entropy, p, kekule_form, keyed = chunk
    rng = np.random.default_rng(list(entropy))
    out = []
    for s in smiles:
        if keyed:
            rng = np.random.default_rng([*entropy[:3], zlib.crc32(s.encode("utf-8"))])
        out.append(None if (p < 1.0 and rng.random() >= p) else randomize_smiles(s, rng, kekule_form))
    return out


def _writing_graphs(chunk) -> list:
    """The :class:`~minitransformer.chem.graph.TokenGraph` of each writing of one chunk (``<cls>``
    first), distances clipped at the chunk's bound: a pure function, for the worker processes."""
    from minitransformer.chem.graph import token_graph
    writings, max_distance = chunk
    return [token_graph(s, max_distance, first=1) for s in writings]


def pretraining_or_fallback(data: str, user_chose: bool, instead: str, log=print, **kw) -> list | None:
    """:func:`pretraining_smiles` of ``data`` (``kw`` passed on), or
    None when that is the preset's MOSES and it cannot be had (no files, offline): then
    one line says so and that ``instead`` is used, and the caller falls back. A
    --pretrain-data the user named (``user_chose``) is never replaced: its error stands."""
    from minitransformer.chem.datasets.download import DownloadError
    try:
        return pretraining_smiles(data, **kw)
    except (DownloadError, FileNotFoundError) as e:
        if user_chose or data != "moses":
            raise
        log(f"MOSES is not available ({str(e).split('. ')[0]}); {instead}")
        return None


def pretraining_smiles(data, exclude=(), min_len: int = 10, max_len: int = 100, form: str = "as-is",
                       limit: int | None = None, log=print) -> list:
    """Extra molecules to pretrain a language model on, before it is fine-tuned on the main set.

    ``data`` is a source of :func:`load_source` (``"druglike"``: RDKit's 10,000
    drug-like SMILES; ``"moses"``: MOSES's 1.58M training molecules, compared with
    ``exclude`` as written, since they are RDKit canonical SMILES already). The same
    cleaning and ``form`` as the main set apply, and every molecule whose canonical
    SMILES is in ``exclude`` (the main set's validation and test molecules) is dropped,
    so the held-out splits stay unseen.
    ``limit`` keeps the first molecules left (for MOSES, whose files are ordered, ``limit``
    drawn at random, before rewriting: a quick run stays quick).
    """
    exclude = set(exclude)
    if is_moses(data):  # RDKit canonical SMILES already: compared as written (canonicalizing takes minutes)
        kept, _, _ = load_and_clean(data, min_len, max_len, log=lambda line: log(f"pretraining {line}"))
        out = [s for s in kept if s not in exclude]
        removed, out = len(kept) - len(out), random_part(out, limit)
        if form != "as-is":
            out, _ = rewrite_smiles(out, form, max_len)
    else:
        # Each step keeps or drops a molecule on its own, in file order, so the first `limit` left
        # from a long enough head of the file are the first `limit` left from all of it: a quick
        # run reads the head (and all of it, should too many be dropped after the cleaning).
        for read in ([None] if limit is None else [limit + len(exclude) + 100, None]):
            lines = []
            kept, _, report = load_and_clean(data, min_len, max_len, limit=read, log=lines.append)
            if form != "as-is":
                kept, _ = rewrite_smiles(kept, form, max_len)
            out = [s for s in kept if canonical(s) not in exclude]
            if limit is None or len(out) >= limit or not report.unread:
                break
        for line in lines:
            log(f"pretraining {line}")
        removed, out = len(kept) - len(out), out[:limit]
    log(f"pretraining: {removed} excluded molecules removed; {len(out)} left"
        + ((f" ({limit} drawn at random)" if is_moses(data) else f" (the first {limit} kept)")
           if limit is not None and len(out) == limit else ""))
    if not out:
        raise ValueError(f"no pretraining molecules left from {data!r}")
    return out
