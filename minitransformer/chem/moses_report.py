"""The MOSES benchmark table: our generator's metrics beside the published models.

MOSES (Polykovskiy et al. 2020, Front. Pharmacol. 11:565644) judges a
generator by 30,000 molecules sampled from it, against its own data: novelty
against ``train``, and SNN, Frag and Scaf against ``test`` (*Test*) and again
against ``test_scaffolds`` (*TestSF*, molecules whose scaffolds never occur in
``train``). :func:`moses_benchmark` computes every MOSES metric we report, with
the definitions of :mod:`minitransformer.chem.metrics`,
:mod:`minitransformer.chem.filters` and :mod:`minitransformer.chem.fragments`;
:func:`markdown_table` writes our row under the published ones.

FCD (Fréchet ChemNet Distance) is left out: it needs the pretrained ChemNet
network, which we cannot ship. GuacaMol's KL score (against ``train``) is
reported in its own column, as MOSES does not report it.
"""
from __future__ import annotations

from typing import Sequence

#: The published rows, from the table of the MOSES repository's README
#: (github.com/molecularsets/moses, commit dd7ed6a, 2023-06-22), the numbers of
#: Polykovskiy et al. 2020, Table 2 (means over three runs; FCD left out).
PUBLISHED = {
    "CharRNN": dict(valid=0.9748, unique_1k=1.0, unique_10k=0.9994, snn_test=0.6015, snn_testsf=0.5649,
                    frag_test=0.9998, frag_testsf=0.9983, scaf_test=0.9242, scaf_testsf=0.1101, intdiv1=0.8562,
                    intdiv2=0.8503, filters=0.9943, novelty=0.8419),
    "AAE": dict(valid=0.9368, unique_1k=1.0, unique_10k=0.9973, snn_test=0.6081, snn_testsf=0.5677,
                frag_test=0.991, frag_testsf=0.9905, scaf_test=0.9022, scaf_testsf=0.0789, intdiv1=0.8557,
                intdiv2=0.8499, filters=0.996, novelty=0.7931),
    "VAE": dict(valid=0.9767, unique_1k=1.0, unique_10k=0.9984, snn_test=0.6257, snn_testsf=0.5783,
                frag_test=0.9994, frag_testsf=0.9984, scaf_test=0.9386, scaf_testsf=0.0588, intdiv1=0.8558,
                intdiv2=0.8498, filters=0.997, novelty=0.6949),
    "JTN-VAE": dict(valid=1.0, unique_1k=1.0, unique_10k=0.9996, snn_test=0.5477, snn_testsf=0.5194,
                    frag_test=0.9965, frag_testsf=0.9947, scaf_test=0.8964, scaf_testsf=0.1009, intdiv1=0.8551,
                    intdiv2=0.8493, filters=0.976, novelty=0.9143),
    "LatentGAN": dict(valid=0.8966, unique_1k=1.0, unique_10k=0.9968, snn_test=0.5371, snn_testsf=0.5132,
                      frag_test=0.9986, frag_testsf=0.9972, scaf_test=0.8867, scaf_testsf=0.1072, intdiv1=0.8565,
                      intdiv2=0.8505, filters=0.9735, novelty=0.9498),
}
COLUMNS = (("valid", "Valid"), ("unique_1k", "Unique@1k"), ("unique_10k", "Unique@10k"),
           ("snn_test", "SNN/Test"), ("snn_testsf", "SNN/TestSF"), ("frag_test", "Frag/Test"),
           ("frag_testsf", "Frag/TestSF"), ("scaf_test", "Scaf/Test"), ("scaf_testsf", "Scaf/TestSF"),
           ("intdiv1", "IntDiv"), ("intdiv2", "IntDiv2"), ("filters", "Filters"), ("novelty", "Novelty"),
           ("kl_score", "KL (GuacaMol)"))


def moses_benchmark(samples: Sequence[str], seed: int = 0, download: bool = True, base: dict | None = None) -> dict:
    """Every column of :data:`COLUMNS` for ``samples`` (None where undefined), plus the counts.

    ``base``: the result of :func:`~minitransformer.chem.metrics.evaluate_samples` of
    these samples against MOSES's ``train``, when the caller has it already (it takes
    minutes: the 1.58M training molecules are canonicalized for novelty).
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
           "filters_note": why or base.get("filters_note") or ""}
    for split, suffix in (("test", "test"), ("test_scaffolds", "testsf")):
        compared = compare_with_reference(samples, load_moses(split, download=download))
        for metric in ("snn", "frag", "scaf"):
            row[f"{metric}_{suffix}"] = compared[metric]
    return row


def markdown_table(ours: dict, label: str = "minitransformer (ours)") -> str:
    """A Markdown table: the published rows (:data:`PUBLISHED`), then ``ours``."""
    def cell(v):
        return "n/a" if v is None else f"{v:.4f}"
    lines = ["| model | " + " | ".join(name for _, name in COLUMNS) + " |",
             "| --- |" + " ---: |" * len(COLUMNS)]
    for model, row in PUBLISHED.items():
        lines.append(f"| {model} | " + " | ".join(cell(row.get(key)) for key, _ in COLUMNS) + " |")
    lines.append(f"| **{label}** | " + " | ".join(cell(ours.get(key)) for key, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
