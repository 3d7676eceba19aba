"""New molecules from a trained generator: the sample sets ``sample`` and ``train lm`` draw.

:func:`sample_smiles` draws SMILES with the KV cache, a batch at a time, each batch from
its own stream of the seed; :func:`grammar_constraint` is the ``--grammar`` rule it can
sample under; :func:`draw_sample_sets` draws the bare model's samples and, with a
grammar, as many under it, labelled for the report
(:func:`~minitransformer.chem.judge.generator_report.judge_sample_sets`);
:func:`load_generator` reads a generator's checkpoint.
"""
from __future__ import annotations

import sys


def sample_smiles(model, vocab, n: int, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None, seed: int = 0, batch_size: int = 500, quiet: bool = True,
                  constraint=None, parallel=None) -> list:
    """Draw ``n`` SMILES with the KV cache, ``batch_size`` at a time; returns the strings
    (some may be invalid). The same seed gives the same molecules; each batch draws from
    its own stream of the seed (:class:`~minitransformer.backend.RNG` with stream = 1 + the
    batch's first index), so the batches of a seed, and two seeds, draw from separate streams.
    ``constraint``: None, or e.g.
    :class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar` (see ``sample``).
    ``parallel``: the ranks of a data-parallel command (:class:`~minitransformer.distributed.DataParallel`),
    which share the batches and each return all ``n``: a batch's molecules depend only on its
    stream, so the ranks draw what one process would."""
    from minitransformer.backend import RNG
    from minitransformer.distributed import map_shared
    from minitransformer.generate import sample

    def draw(starts):  # the batches beginning at ``starts``, each from its own stream
        bar = None
        if not quiet and sys.stderr.isatty() and n > batch_size:
            from tqdm.auto import tqdm
            bar = tqdm(total=sum(min(batch_size, n - s) for s in starts), desc="sampling", unit="mol", leave=False)
        out = []
        for start in starts:
            b = min(batch_size, n - start)
            ids = sample(model, batch_size=b, temperature=temperature, top_k=top_k, top_p=top_p,
                         rng=RNG(seed, stream=1 + start), constraint=constraint)
            out.append([vocab.decode(row) for row in ids])
            if bar is not None:
                bar.update(b)
        if bar is not None:
            bar.close()
        return out

    return [s for part in map_shared(parallel, draw, list(range(0, n, batch_size))) for s in part]


def grammar_constraint(vocab, level: str | None):
    """The ``--grammar`` constraint (None when off):
    :class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar`, with its valence rules for ``"valence"``."""
    if level in (None, "off"):
        return None
    from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
    return SmilesGrammar(vocab, valence=level == "valence")


def samples_file(label: str) -> str:
    """``samples.smi`` for the bare model's samples, ``samples_<grammar>.smi`` for a constrained sampler's."""
    return "samples.smi" if label == "bare" else f"samples_{label}.smi"


def draw_sample_sets(model, vocab, n: int, grammar: str | None, temperature: float = 1.0, seed: int = 0,
                     quiet: bool = True, parallel=None) -> dict:
    """The final samples of ``train lm``, labelled: ``"bare"`` (the model's own distribution) and,
    with a ``grammar``, as many drawn under it with the same seed (``"valence"`` or ``"syntax"``).
    ``parallel``: data-parallel ranks share the drawing (see :func:`sample_smiles`)."""
    draw = dict(n=n, temperature=temperature, seed=seed, quiet=quiet, parallel=parallel)
    sets = {"bare": sample_smiles(model, vocab, **draw)}
    if grammar:
        sets[grammar] = sample_smiles(model, vocab, constraint=grammar_constraint(vocab, grammar), **draw)
    return sets


def load_generator(path):
    """(model, vocabulary) of a generator's checkpoint (a DecoderLM or an LSTMLM) with a
    vocabulary, or a one-line ValueError."""
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    from minitransformer.chem import Vocab
    ckpt = load_checkpoint(path)
    generator = ckpt.model_type in ("DecoderLM", "LSTMLM")
    if not generator or ckpt.vocab is None:
        what = "no vocabulary" if generator else f"a {ckpt.model_type} model"
        raise ValueError(f"{path} holds {what}; sampling needs a generator's checkpoint (DecoderLM or LSTMLM) "
                         "with a vocabulary, "
                         "as written by `minitransformer train lm` (best.npz or last.npz)")
    model, _ = model_from_checkpoint(ckpt)
    return model, Vocab.from_json(ckpt.vocab)
