"""The MOSES benchmark table: our generator's metrics beside the published models.

MOSES (Polykovskiy et al. 2020, Front. Pharmacol. 11:565644) judges a
generator by 30,000 molecules sampled from it, against its own data: novelty
against ``train``, and SNN, Frag and Scaf against ``test`` (*Test*) and again
against ``test_scaffolds`` (*TestSF*, molecules whose scaffolds never occur in
``train``). The metrics are those of
:func:`~minitransformer.chem.judge.evaluation.evaluate_samples` with MOSES's data;
this module only lays them out: :func:`moses_row` picks the columns (every metric
of the registry with a MOSES column), :func:`markdown_table` writes our row
under the published ones.

FCD/Test and FCD/TestSF (the Fréchet ChemNet Distance of the valid samples to
``test`` and ``test_scaffolds``, :mod:`minitransformer.chem.frechet.fcd`) are measured
by a judge the caller builds once for all sample sets. GuacaMol's KL score
(against ``train``) has its own column, as MOSES does not report it.
"""
from __future__ import annotations

from typing import Sequence

from minitransformer.chem.judge.evaluation import METRICS, evaluate_samples

#: MOSES's two comparison sets and the suffix of their columns: SNN/Test, SNN/TestSF ...
MOSES_SETS = (("test", "test", "Test"), ("test_scaffolds", "testsf", "TestSF"))


def _columns() -> tuple:
    """(row key, heading) of every metric with a MOSES column, a per-set one once per MOSES test set."""
    columns = []
    for metric in METRICS:
        if metric.moses:
            key, heading = metric.moses
            columns += ([(f"{key}_{suffix}", f"{heading}/{name}") for _, suffix, name in MOSES_SETS]
                        if metric.per_set else [(key, heading)])
    return tuple(columns)


#: The table's columns: (key, heading), in the order of :data:`~minitransformer.chem.judge.evaluation.METRICS`.
COLUMNS = _columns()
#: The published rows, from the table of the MOSES repository's README
#: (github.com/molecularsets/moses, commit dd7ed6a, 2023-06-22), the numbers of
#: Polykovskiy et al. 2020, Table 2 (means over three runs); *Train* is MOSES's training set itself.
PUBLISHED_COLUMNS = ("valid", "unique_1k", "unique_10k", "fcd_test", "fcd_testsf", "snn_test", "snn_testsf",
                     "frag_test", "frag_testsf", "scaf_test", "scaf_testsf", "intdiv1", "intdiv2", "filters",
                     "novelty")
PUBLISHED = {model: dict(zip(PUBLISHED_COLUMNS, map(float, row.split()))) for model, row in {
    "Train": "1.0 1.0 1.0 0.008 0.4755 0.6419 0.5859 1.0 0.9986 0.9907 0.0 0.8567 0.8508 1.0 1.0",
    "CharRNN": "0.9748 1.0 0.9994 0.0732 0.5204 0.6015 0.5649 0.9998 0.9983 0.9242 0.1101 0.8562 0.8503 0.9943 0.8419",
    "AAE": "0.9368 1.0 0.9973 0.5555 1.0572 0.6081 0.5677 0.991 0.9905 0.9022 0.0789 0.8557 0.8499 0.996 0.7931",
    "VAE": "0.9767 1.0 0.9984 0.099 0.567 0.6257 0.5783 0.9994 0.9984 0.9386 0.0588 0.8558 0.8498 0.997 0.6949",
    "JTN-VAE": "1.0 1.0 0.9996 0.3954 0.9382 0.5477 0.5194 0.9965 0.9947 0.8964 0.1009 0.8551 0.8493 0.976 0.9143",
    "LatentGAN": "0.8966 1.0 0.9968 0.2968 0.8281 0.5371 0.5132 0.9986 0.9972 0.8867 0.1072 0.8565 0.8505 0.9735 0.9498",
}.items()}


def moses_references(download: bool = True) -> dict:
    """MOSES's two test sets by name, the comparison sets of SNN, Frag, Scaf and FCD, with the
    statistics MOSES ships for them in the caches those metrics read
    (:func:`~minitransformer.chem.judge.moses_stats.seed_caches`: seconds, not minutes, on first use)."""
    from minitransformer.chem.datasets.moses import load_moses
    from minitransformer.chem.judge.moses_stats import seed_caches
    sets = {name: load_moses(name, download=download) for name, _, _ in MOSES_SETS}
    for molecules in sets.values():
        seed_caches(molecules, download=download)
    return sets


def moses_benchmark(samples: Sequence[str], seed: int = 42, download: bool = True, fcd_judge=None,
                    compare: bool = True) -> dict:
    """The MOSES row of ``samples`` (:func:`moses_row` of
    :func:`~minitransformer.chem.judge.evaluation.evaluate_samples` against MOSES's ``train``, and
    its test sets unless ``compare=False``: they compare the samples with 352,000 test
    molecules, the slowest part). ``fcd_judge``: an :class:`~minitransformer.chem.frechet.fcd.FCDJudge`
    with references ``test`` and ``test_scaffolds`` (None: FCD n/a)."""
    from minitransformer.chem.judge.filters import default_filters
    from minitransformer.chem.datasets.moses import load_moses
    filters, why = default_filters(download=download)
    result = evaluate_samples(samples, load_moses("train", download=download), seed=seed, filters=filters,
                              references=moses_references(download) if compare else None, fcd_judge=fcd_judge)
    if why:
        result["notes"]["filters"] = why
    return moses_row(result)


def moses_row(result: dict) -> dict:
    """The MOSES table's row of an :func:`~minitransformer.chem.judge.evaluation.evaluate_samples` result:
    every column of :data:`COLUMNS` (None where undefined), the counts, and ``filters_note``."""
    row = {}
    for metric in METRICS:
        if metric.moses:
            key = metric.moses[0]
            if metric.per_set:
                for name, suffix, _ in MOSES_SETS:
                    row[f"{key}_{suffix}"] = (result.get(metric.key) or {}).get(name)
            else:
                row[key] = result.get(metric.key)
    row.update(n_samples=result["n_samples"], n_valid=result["n_valid"],
               unique_10k_n=result["unique@10000_n"], filters_note=result["notes"].get("filters", ""))
    return row


def markdown_table(ours: dict, label: str = "minitransformer (ours)", floor: dict | None = None,
                   others: dict | None = None) -> str:
    """A Markdown table: the published rows (:data:`PUBLISHED`), then ``ours`` (bold), then
    ``others`` (label -> row, e.g. the same model under a constrained sampler), then (``floor``:
    a row of the same columns, e.g. the FCD of as many real training molecules) the floor."""
    def cell(v):
        return "n/a" if v is None else f"{v:.4f}"
    lines = ["| model | " + " | ".join(name for _, name in COLUMNS) + " |",
             "| --- |" + " ---: |" * len(COLUMNS)]
    for model, row in PUBLISHED.items():
        lines.append(f"| {model} | " + " | ".join(cell(row.get(key)) for key, _ in COLUMNS) + " |")
    lines.append(f"| **{label}** | " + " | ".join(cell(ours.get(key)) for key, _ in COLUMNS) + " |")
    for other, row in (others or {}).items():
        lines.append(f"| {other} | " + " | ".join(cell(row.get(key)) for key, _ in COLUMNS) + " |")
    if floor:
        lines.append(f"| *{floor.get('label', 'floor')}* | " + " | ".join(cell(floor.get(key)) for key, _ in COLUMNS)
                     + " |")
    return "\n".join(lines) + "\n"
