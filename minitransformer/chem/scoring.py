r"""Scoring any set of generated SMILES: every generation metric in one report.

:func:`score_smiles` takes samples (ours or another generator's, see
:func:`~minitransformer.chem.user_files.read_user_smiles`) and, optionally, a
reference set (:func:`load_reference`: the training molecules, RDKit's drug-like
set, or a file). It reports the metrics of
:func:`~minitransformer.chem.metrics.evaluate_samples` (valid, radicals,
unique@k, novelty, IntDiv, Filters, KL score; their definitions are in
:mod:`minitransformer.chem.metrics`) and MOSES's three comparisons with the
reference, SNN, Frag and Scaf (:mod:`minitransformer.chem.fragments`). The
reference plays both MOSES roles: the training set for novelty and the KL
score, and the test set for SNN, Frag and Scaf.

FCD (:mod:`minitransformer.chem.fcd`) is measured against a fixed half of the
reference, drawn with the seed; its floor is the FCD of as many real molecules,
drawn from the other half, against the same half, so the two numbers are
measured the same way and differ only in where the molecules came from.
A metric whose denominator is empty (no sample, no valid sample, no scaffold in
one set, no reference, no alert files for Filters) is ``None`` rather than a
made-up number.
"""
from __future__ import annotations

import os
from typing import Sequence

from minitransformer.chem.fragments import (cosine_of_counts, distinct_fingerprints, fragment_counts,
                                            reference_features, scaffold_counts, snn)
from minitransformer.chem._rdkit import parse_valid
from minitransformer.chem.metrics import KL_SEED, UNIQUE_AT, evaluate_samples

__all__ = ["score_smiles", "format_score", "load_reference", "read_samples", "reference_halves",
           "snn", "fragment_counts", "scaffold_counts", "cosine_of_counts", "DEFINITIONS"]

# One line per metric, shown by :func:`format_score` (key -> (label, definition)).
DEFINITIONS = {
    "n_samples": ("samples", "lines read: every line a sample, an empty one too (a header line is skipped)"),
    "validity": ("validity", "fraction of samples RDKit parses and sanitizes (MOSES valid)"),
    "radical_fraction": ("radicals", "valid samples with an unpaired electron / valid (counted as valid)"),
    "uniqueness": ("uniqueness", "distinct canonical SMILES among all valid / valid"),
    "unique@1000": ("unique@1k", "distinct among the first 1,000 valid / those used (MOSES)"),
    "unique@10000": ("unique@10k", "distinct among the first 10,000 valid / those used (MOSES)"),
    "novelty": ("novelty", "distinct valid samples not in the reference / distinct valid (MOSES)"),
    "intdiv1": ("IntDiv1", "1 - mean_j mean_i T_ij over valid samples (Morgan r=2, 1024 bits; MOSES)"),
    "intdiv2": ("IntDiv2", "1 - mean_j (mean_i T_ij^2)^(1/2) (MOSES)"),
    "filters": ("Filters", "valid samples passing MOSES's MCF + PAINS alerts, atoms, charge, ring rules"),
    "kl_score": ("KL score", "mean of exp(-KL(ref||gen)) over 10 descriptor distributions (GuacaMol)"),
    "snn": ("SNN", "mean over valid samples of the largest Tanimoto to a reference molecule (MOSES)"),
    "frag": ("Frag", "cosine of BRICS-fragment counts, samples vs reference (MOSES)"),
    "scaf": ("Scaf", "cosine of counts of Bemis-Murcko scaffolds with >= 2 rings (MOSES)"),
    "fcd": ("FCD", "Frechet ChemNet Distance of the valid samples to half the reference (lower is better)"),
    "fcd_floor": ("FCD floor", "the same for as many real molecules from the other half (the best to expect)"),
}


# --------------------------------------------------------------------------- inputs
def load_reference(name_or_path: str | os.PathLike) -> list[str]:
    """The SMILES of a reference set: ``"tox21"`` (the training molecules, found as
    :func:`~minitransformer.chem.data.find_tox21` finds them: ``../shared/data``,
    ``$MINITRANSFORMER_DATA``, the cache, or a download), ``"druglike"`` (RDKit's
    bundled 10,000 drug-like molecules) or the path of a SMILES file."""
    from minitransformer.chem.data import load_source
    if name_or_path is None:
        raise ValueError("no reference given; name a file, or 'tox21' or 'druglike'")
    return load_source(name_or_path).smiles


def read_samples(path_or_dash: str | os.PathLike) -> list[str]:
    """The SMILES of a samples file (CSV, ``.smi``/``.txt``, gzipped or not, ``-`` for stdin)."""
    from minitransformer.chem.user_files import read_user_smiles
    return read_user_smiles(path_or_dash)[1]


# --------------------------------------------------------------------------- the report
def reference_halves(reference: Sequence[str], seed: int = KL_SEED) -> tuple[list, list]:
    """The reference split in two at random (``seed``), each half in reference order: the first
    half is FCD's reference, the second gives the floor's real molecules."""
    import numpy as np
    order = np.random.default_rng([seed, 24]).permutation(len(reference))
    half = len(reference) - len(reference) // 2
    return [reference[i] for i in np.sort(order[:half])], [reference[i] for i in np.sort(order[half:])]


def score_smiles(samples: Sequence[str], reference: Sequence[str] | None, seed: int = KL_SEED,
                 filters="moses", fcd: bool = True) -> dict:
    """All generation metrics of ``samples``, against ``reference`` when one is given.

    Returns a JSON-ready dict: the fractions ``validity``, ``radical_fraction``,
    ``uniqueness``, ``unique@1000``, ``unique@10000``, ``novelty``, ``intdiv1``,
    ``intdiv2``, ``filters``, ``kl_score``, ``snn``, ``frag``, ``scaf`` (floats in
    [0, 1], or None when undefined: no sample, no valid sample, no reference,
    fewer than two KL molecules, no alert files), ``notes`` (why a value is None
    where that is not obvious, and the FCD note), and the counts ``n_samples``,
    ``n_valid``, ``n_radicals``, ``n_unique``, ``unique@1000_n``,
    ``unique@10000_n``, ``n_novel`` (None without a reference), ``n_reference``
    (all reference strings), ``n_reference_valid``, ``n_kl_generated`` and
    ``n_kl_reference`` (the two KL sets, the reference drawn with ``seed``).
    ``filters``: ``"moses"`` (MOSES's alert files, downloaded if needed), a list
    of compiled alerts, or None to skip. With ``fcd`` and a reference, ``fcd`` and
    ``fcd_floor`` (FCD against half the reference and its floor, see the module
    docstring; None with the reason in ``notes["fcd"]`` when ChemNet's weights cannot
    be had or a set is too small), ``fcd_reference_n`` and ``fcd_floor_n``.
    Strings are stripped; empty strings and bad SMILES count as invalid samples,
    never as errors.
    """
    from minitransformer.chem.filters import default_filters
    samples = [s.strip() if isinstance(s, str) else "" for s in samples]
    has_ref = reference is not None and len(reference) > 0
    reference = [s.strip() for s in reference] if has_ref else []
    notes = {}
    if isinstance(filters, str) and filters == "moses":
        filters, why = default_filters(download=True)
        if filters is None:
            notes["filters"] = why
    base = evaluate_samples(samples, reference, seed=seed, filters=filters)
    n, n_valid = base["n_samples"], base["n_valid"]
    kl_ok = has_ref and base["n_reference"] >= 2 and base["n_kl_generated"] >= 2
    result = {key: base[key] for key in ("n_samples", "n_valid", "n_radicals", "n_unique")}
    result.update({
        "n_novel": base["n_novel"] if has_ref else None,
        "n_reference": len(reference) if has_ref else None,
        "n_reference_valid": None,
        "n_kl_generated": base["n_kl_generated"] if has_ref else None,
        "n_kl_reference": base["n_reference"] if has_ref else None,
        "validity": base["validity"] if n else None,
        "radical_fraction": base["radical_fraction"] if n_valid else None,
        "uniqueness": base["uniqueness"] if n_valid else None,
    })
    for k in UNIQUE_AT:
        result[f"unique@{k}"] = base[f"unique@{k}"] if n_valid else None
        result[f"unique@{k}_n"] = base[f"unique@{k}_n"]
    result.update({
        "novelty": base["novelty"] if (has_ref and n_valid) else None,
        "intdiv1": base["intdiv1"] if n_valid else None,
        "intdiv2": base["intdiv2"] if n_valid else None,
        "filters": base["filters"],
        "kl_score": base["kl_score"] if kl_ok else None,
        "kl_divergences": base["kl_divergences"] if kl_ok else None,
        "snn": None,
        "frag": None,
        "scaf": None,
        "seed": seed,
    })
    if base["filters"] is None and "filters" not in notes:
        notes["filters"] = base["filters_note"]
    if has_ref:
        result.update(compare_with_reference(samples, reference))
    result.update(fcd=None, fcd_floor=None, fcd_reference_n=None, fcd_floor_n=None)
    if has_ref and fcd:
        from minitransformer.chem.fcd import fcd_judge_or_note
        half, other = reference_halves(reference, seed)
        judge, why = fcd_judge_or_note({"reference": half}, other, len(samples), seed=seed)
        if judge is not None:
            result.update(fcd=judge(samples)["reference"], fcd_floor=judge.floor["reference"],
                          fcd_reference_n=len(half), fcd_floor_n=judge.floor_n)
        notes["fcd"] = why or (f"FCD against {len(half)} reference molecules drawn with seed {seed}; the floor: "
                               f"{judge.floor_n} real molecules from the other {len(other)}")
    elif not fcd:
        notes["fcd"] = "not computed"
    result["notes"] = notes
    return result


def compare_with_reference(samples: Sequence[str], reference: Sequence[str]) -> dict:
    """MOSES's three comparisons of the valid ``samples`` with ``reference``:
    ``{"snn", "frag", "scaf", "n_reference_valid"}`` (None where undefined; see
    :mod:`minitransformer.chem.fragments`)."""
    ref = reference_features(tuple(reference))
    out = {"snn": None, "frag": None, "scaf": None, "n_reference_valid": ref.n_valid}
    mols, canon = parse_valid(samples)
    if mols and ref.n_valid:
        out["snn"] = snn(distinct_fingerprints(mols, canon), ref.fps)
        out["frag"] = cosine_of_counts(fragment_counts(mols, canon), ref.fragments)
        out["scaf"] = cosine_of_counts(scaffold_counts(mols, canon), ref.scaffolds)
    return out


def _value(result: dict, key: str) -> str:
    value = result.get(key)
    if value is None:
        return "n/a"
    if key == "n_samples":
        return str(value)
    return f"{value:.4f}"


def _note(result: dict, key: str) -> str:
    """Counts behind a fraction, e.g. ``(812 of 1000)``, or why it is n/a."""
    r = result
    if key == "validity" and r["n_samples"]:
        return f"{r['n_valid']} of {r['n_samples']}"
    if key == "radical_fraction" and r["n_valid"]:
        return f"{r['n_radicals']} of {r['n_valid']}"
    if key == "uniqueness" and r["n_valid"]:
        return f"{r['n_unique']} of {r['n_valid']}"
    if key.startswith("unique@") and r.get(key) is not None:
        k = int(key.split("@")[1])
        used = r[f"{key}_n"]
        return f"first {used} valid" + ("" if used >= k else f" (fewer than {k})")
    if key == "kl_score" and r.get(key) is not None:
        return f"{r['n_kl_generated']} vs {r['n_kl_reference']}"
    if key == "novelty" and r.get("n_novel") is not None and r["n_unique"]:
        return f"{r['n_novel']} of {r['n_unique']}"
    if key == "fcd" and r.get(key) is not None and r.get("fcd_floor"):
        return f"{r['fcd'] / r['fcd_floor']:.2f} x floor"
    if key == "fcd_floor" and r.get(key) is not None:
        return f"{r['fcd_floor_n']} real molecules"
    if r.get(key) is not None:
        return ""
    if key in ("novelty", "kl_score", "snn", "frag", "scaf", "fcd", "fcd_floor") and r.get("n_reference") is None:
        return "no reference"
    if key in ("fcd", "fcd_floor") and r.get("notes", {}).get("fcd"):
        return "see below" if key == "fcd" else ""
    if key == "filters" and r.get("notes", {}).get("filters"):
        return r["notes"]["filters"]
    if key == "kl_score":
        return "needs 2 distinct valid samples"
    if key == "scaf":
        return "no ring scaffold in one set"
    return "no valid sample"


def format_score(result: dict) -> str:
    """A text table of :func:`score_smiles` output: metric, value, counts, one-line definition."""
    rows = [(label, _value(result, key), _note(result, key), definition)
            for key, (label, definition) in DEFINITIONS.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    if result.get("notes", {}).get("fcd"):
        lines.append(result["notes"]["fcd"])
    if result.get("n_reference") is not None:
        lines.append(f"reference: {result['n_reference']} SMILES, {result['n_reference_valid']} valid; "
                     f"KL score: {result['n_kl_generated']} distinct samples vs {result['n_kl_reference']} "
                     f"reference molecules drawn with seed {result['seed']}")
    return "\n".join(lines)
