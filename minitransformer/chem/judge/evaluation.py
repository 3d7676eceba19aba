r"""Every generation metric of a set of samples, into one dict, by one rule.

A metric is one function of a :class:`SampleSet` (the samples, parsed once, and
what they are compared with) and one entry of :data:`METRICS` (its key, label,
one-line definition, what it needs, and its MOSES column if it has one).
:func:`evaluate_samples` computes them all. The formulas are defined in
:mod:`minitransformer.chem.judge.metrics` (validity, uniqueness, unique@k, novelty,
IntDiv, KL score), :mod:`minitransformer.chem.judge.filters`,
:mod:`minitransformer.chem.judge.fragments` (SNN, Frag, Scaf) and
:mod:`minitransformer.chem.frechet.fcd`.

**One rule for a value that cannot be had:** it is ``None``, and
``notes[key]`` says why: no sample, no valid sample, no training set given, no
alert files, fewer than two molecules for the KL score. A fraction of an empty
set is never reported as 0.0 (0.0 is a real, bad, score).

**Comparison sets.** SNN, Frag, Scaf and the molecular-weight distance compare
the samples with named ``references`` (MOSES: ``test`` and ``test_scaffolds``;
``score``: its one reference); FCD is measured by an
:class:`~minitransformer.chem.frechet.fcd.FCDJudge` against its own named sets. Such a
metric's value is ``{name: value or None}``, and its notes are keyed
``"<key>/<name>"``.

**Who formats it.** The ``score`` table (:mod:`minitransformer.chem.judge.scoring`),
the MOSES table (:mod:`minitransformer.chem.judge.moses_report`) and the ``train lm``
summary (:mod:`minitransformer.chem.judge.generator_report`) each walk :data:`METRICS`
and only format: a new metric is one function and one entry here, and shows up
in all three.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

from minitransformer.chem._rdkit import has_radicals, parse_valid
from minitransformer.chem.judge.metrics import (KL_SEED, UNIQUE_AT, filters_fraction, intdiv_values, kl_of, training_set,
                                                kl_against,
                                          novelty as novelty_against, unique_at_k)

__all__ = ["evaluate_samples", "SampleSet", "Metric", "METRICS", "Undefined", "INPUTS"]

#: What a metric can need: the names of :func:`evaluate_samples`'s arguments, and the note of a
#: metric whose input was not given.
INPUTS = {"samples": "no sample given", "train": "no training set given", "references": "no comparison set given",
          "fcd_judge": "no FCD judge given", "heldout": "no held-out molecules given",
          "all_training": "no list of every training molecule given"}


class Undefined(Exception):
    """Raised by a metric whose value cannot be had; the message (why) becomes its note."""


#: Samples parsed at a time (the parsing's progress moves by this much).
PARSE_CHUNK = 2_000


class SampleSet:
    """The samples parsed once (``mols``, ``canon``: the valid ones and their canonical SMILES,
    in sample order, repeats kept; ``distinct``: the canonical SMILES without repeats), and what
    they are compared with. Every argument but ``samples`` is optional (see :func:`evaluate_samples`)."""

    def __init__(self, samples: Sequence[str], train=None, references=None, fcd_judge=None, heldout=None,
                 all_training=None, seed: int = KL_SEED, filters="moses"):
        from minitransformer.chem.progress import size_warning, tracked
        self.samples = [s.strip() if isinstance(s, str) else "" for s in samples]
        size_warning(len(self.samples))
        self.mols, self.canon = [], []
        chunks = range(0, len(self.samples), PARSE_CHUNK)
        for start in tracked(f"parsing {len(self.samples):,} samples", chunks, unit="chunks", every=1):
            mols, canon = parse_valid(self.samples[start:start + PARSE_CHUNK])
            self.mols += mols
            self.canon += canon
        self.distinct = list(dict.fromkeys(self.canon))
        self.training = training_set(tuple(train)) if train is not None and len(train) else None
        self.references = {name: list(mols) for name, mols in (references or {}).items()}
        self.fcd_judge, self.heldout, self.all_training = fcd_judge, heldout, all_training
        self.seed, self.filters = seed, filters
        given = {"samples": True, "train": self.training is not None, "references": bool(self.references),
                 "fcd_judge": fcd_judge is not None, "heldout": heldout is not None,
                 "all_training": all_training is not None}
        self.inputs = [name for name in INPUTS if given[name]]

    def need_samples(self) -> None:
        if not self.samples:
            raise Undefined("no sample")

    def need_valid(self) -> None:
        if not self.mols:
            raise Undefined("no valid sample")

    def need_training(self):
        if self.training is None:
            raise Undefined("no training set given")
        return self.training

    @functools.cached_property
    def n_radicals(self) -> int:
        return sum(has_radicals(m) for m in self.mols)

    @functools.cached_property
    def novel(self) -> list[str]:
        """The distinct valid samples that are not in the training set."""
        index = self.need_training().index
        return [s for s in self.distinct if s not in index]

    @functools.cached_property
    def fingerprints(self):
        """Morgan bits of the valid samples (repeats kept; each distinct molecule computed once)."""
        from minitransformer.chem.judge.fragments import distinct_fingerprints
        return distinct_fingerprints(self.mols, self.canon, label=f"fingerprints of {len(self.mols):,} valid samples")

    @functools.cached_property
    def intdiv(self) -> tuple[float, float]:
        self.need_valid()
        n = len(self.fingerprints)
        return tuple(map(float, intdiv_values(self.fingerprints, (1, 2), f"IntDiv over all {n * n:,} pairs")))

    @functools.cached_property
    def kl(self) -> tuple:
        """(KL score or None, the ten KL values, generated size, reference size)."""
        return kl_of(self.samples, self.need_training(), self.seed)

    @functools.cached_property
    def fcd(self) -> dict:
        """The judge's answer: ``{reference name: FCD or None}``."""
        return self.fcd_judge(self.samples)

    def reference_features(self, name: str):
        from minitransformer.chem.judge.fragments import reference_features
        features = reference_features(tuple(self.references[name]))
        if not features.n_valid:
            raise Undefined("no valid reference molecule")
        return features

    def counts(self) -> dict:
        """The counts behind the fractions (None where their input was not given)."""
        out = {"n_samples": len(self.samples), "n_valid": len(self.mols), "n_radicals": self.n_radicals,
               "n_unique": len(self.distinct), "n_novel": len(self.novel) if self.training else None}
        for k in UNIQUE_AT:
            out[f"unique@{k}_n"] = min(k, len(self.canon))
        _, kls, n_gen, n_ref = self.kl if self.training else (None, None, None, None)
        out.update(n_kl_generated=n_gen, n_kl_reference=n_ref, kl_divergences=kls)
        return out


# --------------------------------------------------------------------------- the metrics
def validity(s: SampleSet) -> float:
    s.need_samples()
    return len(s.mols) / len(s.samples)


def radical_fraction(s: SampleSet) -> float:
    s.need_valid()
    return s.n_radicals / len(s.mols)


def uniqueness(s: SampleSet) -> float:
    s.need_valid()
    return len(s.distinct) / len(s.mols)


def unique_at(k: int) -> Callable[[SampleSet], float]:
    def unique_at_k_of(s: SampleSet) -> float:
        s.need_valid()
        return unique_at_k(s.canon, k)[0]
    return unique_at_k_of


def fcd(s: SampleSet, name: str) -> float:
    value = s.fcd[name]
    if value is None:
        raise Undefined("fewer than two valid samples")
    return value


def snn(s: SampleSet, name: str) -> float:
    from minitransformer.chem.judge.fragments import snn as nearest_neighbour_similarity
    s.need_valid()
    reference = s.reference_features(name).fps
    return nearest_neighbour_similarity(s.fingerprints, reference,
                                        f"SNN: {len(s.mols):,} samples against {len(reference):,} of {name}")


def _cosine_with_reference(s: SampleSet, name: str, counts_of, feature: str, missing: str) -> float:
    """The cosine of the samples' counts (``counts_of(mols, canon)``) and the reference's ``feature``."""
    from minitransformer.chem.judge.fragments import cosine_of_counts
    s.need_valid()
    value = cosine_of_counts(counts_of(s.mols, s.canon, label=f"{feature} of {len(s.mols):,} valid samples"),
                             getattr(s.reference_features(name), feature))
    if value is None:
        raise Undefined(missing)
    return value


def frag(s: SampleSet, name: str) -> float:
    from minitransformer.chem.judge.fragments import fragment_counts
    return _cosine_with_reference(s, name, fragment_counts, "fragments", "no BRICS fragment in one set")


def scaf(s: SampleSet, name: str) -> float:
    from minitransformer.chem.judge.fragments import scaffold_counts
    return _cosine_with_reference(s, name, scaffold_counts, "scaffolds", "no ring scaffold in one set")


def intdiv1(s: SampleSet) -> float:
    return s.intdiv[0]


def intdiv2(s: SampleSet) -> float:
    return s.intdiv[1]


def filters(s: SampleSet) -> float:
    value, why = filters_fraction(s.mols, s.canon, s.filters)
    if value is None:
        raise Undefined(why)
    return value


def novelty(s: SampleSet) -> float:
    s.need_training()
    s.need_valid()
    return len(s.novel) / len(s.distinct)


def kl_score(s: SampleSet) -> float:
    value = s.kl[0]
    if value is None:
        raise Undefined("the KL score needs two distinct valid molecules on each side")
    return value


def kl_score_heldout(s: SampleSet) -> float:
    value = kl_against(s.samples, s.heldout, seed=s.seed)
    if value is None:
        raise Undefined("the KL score needs two distinct valid molecules on each side")
    return value


def novelty_vs_all_training(s: SampleSet) -> float:
    s.need_valid()
    return novelty_against(s.samples, s.all_training)


@functools.lru_cache(maxsize=4)
def _molecular_weights(smiles: tuple[str, ...]) -> tuple[float, ...]:
    """RDKit's average molecular weight (``Descriptors.MolWt``) of each valid molecule of ``smiles``."""
    from rdkit.Chem import Descriptors
    return tuple(Descriptors.MolWt(m) for m in parse_valid(smiles)[0])


def weight(s: SampleSet, name: str) -> float:
    """MOSES's ``weight``: the Wasserstein-1 distance between the molecular weights of the valid
    samples (repeats kept) and those of the reference set's molecules, in daltons."""
    from scipy.stats import wasserstein_distance
    s.need_valid()
    reference = s.reference_features(name).weights  # (n_valid,), cached with the other reference features
    return float(wasserstein_distance(_molecular_weights(tuple(s.canon)), reference))


def invalid_kinds(s: SampleSet) -> dict:
    from minitransformer.chem.judge.failures import failure_counts
    return failure_counts(s.samples)


@dataclass(frozen=True)
class Metric:
    """One generation metric: ``compute(sample_set)`` (or ``compute(sample_set, name)`` for each
    comparison set when ``needs`` is ``"references"`` or ``"fcd_judge"``) returns its value or
    raises :class:`Undefined`. ``moses``: its column in the MOSES table, ``(row key, heading)``
    (a per-set metric gets one column per MOSES test set), or None."""
    key: str
    label: str
    definition: str
    compute: Callable
    needs: str = "samples"
    moses: tuple[str, str] | None = None
    lower_is_better: bool = False

    @property
    def per_set(self) -> bool:
        return self.needs in ("references", "fcd_judge")


#: Every generation metric, in the MOSES table's column order (those without a column after).
METRICS = (
    Metric("validity", "validity", "fraction of samples RDKit parses and sanitizes (MOSES valid)",
           validity, moses=("valid", "Valid")),
    Metric("radical_fraction", "radicals", "valid samples with an unpaired electron / valid (counted as valid)",
           radical_fraction),
    Metric("uniqueness", "uniqueness", "distinct canonical SMILES among all valid / valid", uniqueness),
    Metric("unique@1000", "unique@1k", "distinct among the first 1,000 valid / those used (MOSES)",
           unique_at(1000), moses=("unique_1k", "Unique@1k")),
    Metric("unique@10000", "unique@10k", "distinct among the first 10,000 valid / those used (MOSES)",
           unique_at(10_000), moses=("unique_10k", "Unique@10k")),
    Metric("fcd", "FCD", "Frechet ChemNet Distance of the valid samples to a reference set (lower is better)",
           fcd, needs="fcd_judge", moses=("fcd", "FCD"), lower_is_better=True),
    Metric("snn", "SNN", "mean over valid samples of the largest Tanimoto to a reference molecule (MOSES)",
           snn, needs="references", moses=("snn", "SNN")),
    Metric("frag", "Frag", "cosine of BRICS-fragment counts, samples vs reference (MOSES)",
           frag, needs="references", moses=("frag", "Frag")),
    Metric("scaf", "Scaf", "cosine of counts of Bemis-Murcko scaffolds with >= 2 rings (MOSES)",
           scaf, needs="references", moses=("scaf", "Scaf")),
    Metric("intdiv1", "IntDiv1", "1 - mean_j mean_i T_ij over valid samples (Morgan r=2, 1024 bits; MOSES)",
           intdiv1, moses=("intdiv1", "IntDiv")),
    Metric("intdiv2", "IntDiv2", "1 - mean_j (mean_i T_ij^2)^(1/2) (MOSES)", intdiv2, moses=("intdiv2", "IntDiv2")),
    Metric("filters", "Filters", "valid samples passing MOSES's MCF + PAINS alerts, atoms, charge, ring rules",
           filters, moses=("filters", "Filters")),
    Metric("novelty", "novelty", "distinct valid samples not in the training set / distinct valid (MOSES)",
           novelty, needs="train", moses=("novelty", "Novelty")),
    Metric("kl_score", "KL score", "mean of exp(-KL(train||gen)) over 10 descriptor distributions (GuacaMol)",
           kl_score, needs="train", moses=("kl_score", "KL (GuacaMol)")),
    Metric("kl_score_heldout", "KL score, held-out", "the KL score against molecules never trained on",
           kl_score_heldout, needs="heldout"),
    Metric("novelty_vs_all_training", "novelty, all training", "novelty against every molecule seen, "
           "pretraining included", novelty_vs_all_training, needs="all_training"),
    Metric("weight", "weight", "Wasserstein-1 distance of molecular weights (Da), valid samples vs reference "
           "(MOSES; lower is better)", weight, needs="references", moses=("weight", "Weight"), lower_is_better=True),
    Metric("invalid_kinds", "invalid, by kind", "the invalid samples, by the first thing wrong with each",
           invalid_kinds),
)


def evaluate_samples(samples: Sequence[str], train: Sequence[str] | None = None, *, references: dict | None = None,
                     fcd_judge=None, heldout: Sequence[str] | None = None, all_training: Sequence[str] | None = None,
                     seed: int = KL_SEED, filters="moses") -> dict:
    """Every metric of :data:`METRICS` for ``samples``, and the counts behind them (a JSON-ready dict).

    ``train``: the training molecules (novelty, the KL score); ``references``: name ->
    molecules to compare with (SNN, Frag, Scaf); ``fcd_judge``: an
    :class:`~minitransformer.chem.frechet.fcd.FCDJudge` (FCD against each of its sets);
    ``heldout``: molecules never trained on (``kl_score_heldout``); ``all_training``:
    every molecule seen (``novelty_vs_all_training``). ``seed`` fixes the KL score's
    draw of training molecules (GuacaMol's 42 by default). ``filters``: ``"moses"``
    (MOSES's alerts if they are on this machine; nothing is downloaded), a list from
    :func:`~minitransformer.chem.judge.filters.load_filters`, or None to skip.

    Besides each metric's key: ``n_samples``, ``n_valid``, ``n_radicals``, ``n_unique``,
    ``n_novel``, ``unique@1000_n`` and ``unique@10000_n`` (how many valid samples
    unique@k used), ``n_kl_generated`` and ``n_kl_reference`` (the two KL sets),
    ``kl_divergences`` (the ten KL values), ``notes`` (key -> why its value is None)
    and ``inputs`` (which of :data:`INPUTS` were given). Samples are stripped; an
    empty or unparsable sample is an invalid sample, never an error.
    """
    s = SampleSet(samples, train, references, fcd_judge, heldout, all_training, seed, filters)
    result, notes = s.counts(), {}
    for metric in METRICS:
        if metric.needs not in s.inputs:
            result[metric.key] = None
            notes[metric.key] = INPUTS[metric.needs]
        elif metric.per_set:
            names = s.fcd if metric.needs == "fcd_judge" else s.references
            result[metric.key] = {name: _value(metric.compute, (s, name), notes, f"{metric.key}/{name}")
                                  for name in names}
        else:
            result[metric.key] = _value(metric.compute, (s,), notes, metric.key)
    result.update(notes=notes, inputs=s.inputs)
    return result


def _value(compute, args, notes: dict, key: str):
    try:
        return compute(*args)
    except Undefined as why:
        notes[key] = str(why)
        return None
