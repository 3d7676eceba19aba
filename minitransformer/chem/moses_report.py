"""The MOSES benchmark table: our generator's metrics beside the published models.

MOSES (Polykovskiy et al. 2020, Front. Pharmacol. 11:565644) judges a
generator by 30,000 molecules sampled from it, against its own data: novelty
against ``train``, and SNN, Frag and Scaf against ``test`` (*Test*) and again
against ``test_scaffolds`` (*TestSF*, molecules whose scaffolds never occur in
``train``). :func:`moses_benchmark` computes every MOSES metric we report, with
the definitions of :mod:`minitransformer.chem.metrics`,
:mod:`minitransformer.chem.filters` and :mod:`minitransformer.chem.fragments`;
:func:`markdown_table` writes our row under the published ones.

FCD/Test and FCD/TestSF (the Fréchet ChemNet Distance of the valid samples to
``test`` and ``test_scaffolds``, :mod:`minitransformer.chem.fcd`) come from the
caller, who computes them once for all sets. GuacaMol's KL score (against
``train``) is reported in its own column, as MOSES does not report it.
"""
from __future__ import annotations

from typing import Sequence

#: The table's columns: (key, heading).
COLUMNS = (("valid", "Valid"), ("unique_1k", "Unique@1k"), ("unique_10k", "Unique@10k"), ("fcd_test", "FCD/Test"),
           ("fcd_testsf", "FCD/TestSF"), ("snn_test", "SNN/Test"), ("snn_testsf", "SNN/TestSF"),
           ("frag_test", "Frag/Test"), ("frag_testsf", "Frag/TestSF"), ("scaf_test", "Scaf/Test"),
           ("scaf_testsf", "Scaf/TestSF"), ("intdiv1", "IntDiv"), ("intdiv2", "IntDiv2"), ("filters", "Filters"),
           ("novelty", "Novelty"), ("kl_score", "KL (GuacaMol)"))
#: The published rows, from the table of the MOSES repository's README
#: (github.com/molecularsets/moses, commit dd7ed6a, 2023-06-22), the numbers of
#: Polykovskiy et al. 2020, Table 2 (means over three runs); *Train* is MOSES's training set itself.
PUBLISHED = {model: dict(zip([key for key, _ in COLUMNS[:-1]], map(float, row.split()))) for model, row in {
    # columns in the order of COLUMNS, without KL (which MOSES does not report)
    "Train": "1.0 1.0 1.0 0.008 0.4755 0.6419 0.5859 1.0 0.9986 0.9907 0.0 0.8567 0.8508 1.0 1.0",
    "CharRNN": "0.9748 1.0 0.9994 0.0732 0.5204 0.6015 0.5649 0.9998 0.9983 0.9242 0.1101 0.8562 0.8503 0.9943 0.8419",
    "AAE": "0.9368 1.0 0.9973 0.5555 1.0572 0.6081 0.5677 0.991 0.9905 0.9022 0.0789 0.8557 0.8499 0.996 0.7931",
    "VAE": "0.9767 1.0 0.9984 0.099 0.567 0.6257 0.5783 0.9994 0.9984 0.9386 0.0588 0.8558 0.8498 0.997 0.6949",
    "JTN-VAE": "1.0 1.0 0.9996 0.3954 0.9382 0.5477 0.5194 0.9965 0.9947 0.8964 0.1009 0.8551 0.8493 0.976 0.9143",
    "LatentGAN": "0.8966 1.0 0.9968 0.2968 0.8281 0.5371 0.5132 0.9986 0.9972 0.8867 0.1072 0.8565 0.8505 0.9735 0.9498",
}.items()}


def moses_benchmark(samples: Sequence[str], seed: int = 42, download: bool = True, base: dict | None = None,
                    fcd: dict | None = None, compare: bool = True) -> dict:
    """Every column of :data:`COLUMNS` for ``samples`` (None where undefined), plus the counts.

    ``base``: the result of :func:`~minitransformer.chem.metrics.evaluate_samples` of
    these samples against MOSES's ``train``, when the caller has it already (it takes
    minutes: the 1.58M training molecules are canonicalized for novelty). ``fcd``:
    ``{"test": FCD/Test, "test_scaffolds": FCD/TestSF}`` (an
    :class:`~minitransformer.chem.fcd.FCDJudge`'s answer), or None for n/a.
    ``compare=False`` leaves SNN, Frag and Scaf out (None): they compare the samples
    with 352,000 test molecules, the slowest part, and say nothing a second sample
    set of the same model needs.
    """
    from minitransformer.chem.filters import default_filters
    from minitransformer.chem.metrics import evaluate_samples
    from minitransformer.chem.moses import load_moses
    from minitransformer.chem.scoring import compare_with_reference
    filters, why = default_filters(download=download)
    if base is None:
        base = evaluate_samples(samples, load_moses("train", download=download), seed=seed, filters=filters)
    row = {"valid": base["validity"], "unique_1k": base["unique@1000"], "unique_10k": base["unique@10000"],
           "intdiv1": base["intdiv1"], "intdiv2": base["intdiv2"], "filters": base["filters"],
           "novelty": base["novelty"], "kl_score": base["kl_score"], "n_samples": base["n_samples"],
           "n_valid": base["n_valid"], "unique_10k_n": base["unique@10000_n"],
           "filters_note": why or base.get("filters_note") or "",
           "fcd_test": (fcd or {}).get("test"), "fcd_testsf": (fcd or {}).get("test_scaffolds")}
    for split, suffix in (("test", "test"), ("test_scaffolds", "testsf")):
        compared = compare_with_reference(samples, load_moses(split, download=download)) if compare else {}
        for metric in ("snn", "frag", "scaf"):
            row[f"{metric}_{suffix}"] = compared.get(metric)
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
