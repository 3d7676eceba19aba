r"""Scoring any set of generated SMILES: every generation metric in one report.

:func:`score_smiles` takes samples (ours or another generator's, see
:func:`~minitransformer.chem.datasets.user_files.read_user_smiles`) and, optionally, a
reference set (:func:`load_reference`: the training molecules, RDKit's drug-like
set, or a file). It reports the metrics of
:func:`~minitransformer.chem.judge.metrics.evaluate_samples` (valid, radicals,
unique@k, novelty, IntDiv, Filters, KL score; their definitions are in
:mod:`minitransformer.chem.judge.metrics`) and MOSES's three comparisons with the
reference, SNN, Frag and Scaf (:mod:`minitransformer.chem.judge.fragments`). The
reference plays both MOSES roles: the training set for novelty and the KL
score, and the test set for SNN, Frag and Scaf.

FCD (:mod:`minitransformer.chem.frechet.fcd`) is FCD(samples, the whole reference), the number
MOSES and ``fcd_torch`` report for the same two files. Beside it, the **floor**: the FCD
that samples drawn from the reference's own distribution get. It needs real molecules
that are not in the reference, so it is measured on a split: the reference is cut in
two at random (the seed), and as many molecules as there are valid samples (at most half)
are drawn from one half and compared with the other half. Its reference is half as
large as the headline's, which raises an FCD a little, so the floor errs high; the
report says how it was measured.
A metric whose denominator is empty (no sample, no valid sample, no scaffold in
one set, no reference, no alert files for Filters) is ``None`` rather than a
made-up number.
"""
from __future__ import annotations

import os
from typing import Sequence

from minitransformer.chem.judge.evaluation import METRICS, evaluate_samples
from minitransformer.chem.judge.fragments import cosine_of_counts, fragment_counts, scaffold_counts, snn
from minitransformer.chem.judge.metrics import KL_SEED

__all__ = ["score_smiles", "format_score", "load_reference", "read_samples", "reference_halves",
           "snn", "fragment_counts", "scaffold_counts", "cosine_of_counts", "DEFINITIONS"]

#: The inputs ``score`` can give (a reference plays the training set, the comparison set and FCD's).
SCORED = ("samples", "train", "references", "fcd_judge")


def _definitions() -> dict:
    """One line per row of :func:`format_score` (key -> (label, definition)), from the registry."""
    rows = {"n_samples": ("samples", "lines read: every line a sample, an empty one too (a header line is skipped)")}
    for metric in METRICS:
        if metric.needs in SCORED:
            rows[metric.key] = (metric.label, metric.definition)
        if metric.key == "fcd":
            rows["fcd_floor"] = ("FCD floor", "the FCD of as many real molecules as valid samples, from one half of "
                                              "the reference against the other (the best to expect; see below)")
    return rows


DEFINITIONS = _definitions()


# --------------------------------------------------------------------------- inputs
def load_reference(name_or_path: str | os.PathLike) -> list[str]:
    """The SMILES of a reference set: ``"tox21"`` (the training molecules, found as
    :func:`~minitransformer.chem.datasets.download.find_tox21` finds them: ``$MINITRANSFORMER_DATA``,
    the user cache, or a download), ``"druglike"`` (RDKit's
    bundled 10,000 drug-like molecules) or the path of a SMILES file."""
    from minitransformer.chem.datasets.data import load_source
    if name_or_path is None:
        raise ValueError("no reference given; name a file, or 'tox21' or 'druglike'")
    return load_source(name_or_path).smiles


def read_samples(path_or_dash: str | os.PathLike) -> list[str]:
    """The SMILES of a samples file (CSV, ``.smi``/``.txt``, gzipped or not, ``-`` for stdin)."""
    from minitransformer.chem.datasets.user_files import read_user_smiles
    return read_user_smiles(path_or_dash)[1]


# --------------------------------------------------------------------------- the report
def reference_halves(reference: Sequence[str], seed: int = KL_SEED) -> tuple[list, list]:
    """The reference split in two at random (``seed``), each half in reference order: the first
    half is the FCD floor's reference, the second gives the floor's real molecules."""
    import numpy as np
    order = np.random.default_rng([seed, 24]).permutation(len(reference))
    half = len(reference) - len(reference) // 2
    return [reference[i] for i in np.sort(order[:half])], [reference[i] for i in np.sort(order[half:])]


def score_smiles(samples: Sequence[str], reference: Sequence[str] | None, seed: int = KL_SEED,
                 filters="moses", fcd: bool = True) -> dict:
    """All generation metrics of ``samples`` (:func:`~minitransformer.chem.judge.evaluation.evaluate_samples`),
    against ``reference`` when one is given, which plays the training set (novelty, the KL
    score) and the comparison set (SNN, Frag, Scaf, and FCD against all of it).

    The dict is ``evaluate_samples``'s with each per-set metric's one value in place of its
    ``{name: value}`` (and ``notes`` keyed alike), plus ``n_reference`` (all reference
    strings), ``n_reference_valid``, ``seed`` and, with ``fcd``, ``fcd_floor`` (see the module
    docstring), ``fcd_reference_n``, ``fcd_floor_n``, ``fcd_floor_reference_n`` and ``notes["fcd"]``. ``filters``:
    ``"moses"`` (MOSES's alert files, downloaded if needed), a list of compiled alerts, or
    None to skip.
    """
    from minitransformer.chem.judge.filters import default_filters
    has_ref = reference is not None and len(reference) > 0
    reference = [s.strip() for s in reference] if has_ref else []
    why_no_filters = ""
    if isinstance(filters, str) and filters == "moses":
        filters, why_no_filters = default_filters(download=True)
    judge, fcd_note, floor, half, other, why = None, "not computed", None, [], [], ""
    if has_ref and fcd:
        from minitransformer.chem.frechet.fcd import fcd_judge_or_note
        judge, fcd_note = fcd_judge_or_note({"reference": reference}, None, seed=seed)
        half, other = reference_halves(reference, seed)
        floor, why = fcd_judge_or_note({"half": half}, other, seed=seed) if judge else (None, "")
    elif not has_ref:
        fcd_note = ""
    result = evaluate_samples(samples, reference if has_ref else None,
                              references={"reference": reference} if has_ref else None,
                              fcd_judge=judge, seed=seed, filters=filters)
    notes = result["notes"]
    for metric in METRICS:
        if metric.per_set and result[metric.key] is not None:
            result[metric.key] = result[metric.key]["reference"]
            if f"{metric.key}/reference" in notes:
                notes[metric.key] = notes.pop(f"{metric.key}/reference")
    if why_no_filters:
        notes["filters"] = why_no_filters
    if has_ref:
        from minitransformer.chem.judge.fragments import reference_features
        result.update(n_reference=len(reference), n_reference_valid=reference_features(tuple(reference)).n_valid)
    else:
        result.update(n_reference=None, n_reference_valid=None)
    result.update(seed=seed, fcd_floor=None, fcd_reference_n=None, fcd_floor_n=None, fcd_floor_reference_n=None)
    if judge is not None and result["fcd"] is None:  # the samples' fault (fewer than two valid): say so, no floor
        floor, fcd_note = None, f"FCD not computed: {notes.get('fcd', 'fewer than two valid samples')}"
    elif judge is not None:
        result.update(fcd_reference_n=result["n_reference_valid"])
        fcd_note = (f"FCD against the {result['n_reference_valid']} valid molecules of the reference (as MOSES and "
                    "fcd_torch compute it)" + (f"; no floor: {why}" if why else ""))
    floor_fcd, floor_n = floor.floor(result["n_valid"]) if floor is not None else ({}, 0)
    if floor is not None and not floor_fcd:
        fcd_note += "; no floor: the other half of the reference has fewer than two valid molecules"
    if floor_fcd:
        result.update(fcd_floor=floor_fcd["half"], fcd_floor_n=floor_n, fcd_floor_reference_n=len(half))
        counted = ("as many as the valid samples" if floor_n == result["n_valid"] else
                   f"all the valid ones the half holds, fewer than the {result['n_valid']} valid samples")
        fcd_note += (f"; the floor: FCD of {floor_n} reference molecules ({counted}) from one "
                     f"half of the reference against the other {len(half)} (split with seed {seed}), the FCD of a "
                     "generator that draws from the reference's distribution (against a reference half as large: "
                     "it errs high)")
    if fcd_note:
        notes["fcd"] = fcd_note
    return result


def _value(result: dict, key: str) -> str:
    value = result.get(key)
    if value is None:
        return "n/a"
    if isinstance(value, dict):  # counts by kind: their sum here, the kinds in the note
        return str(sum(value.values()))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.4f}"


def _note(result: dict, key: str) -> str:
    """Counts behind a fraction, e.g. ``(812 of 1000)``, or why it is n/a."""
    r = result
    if r.get(key) is None:
        if key in ("fcd", "fcd_floor") and r.get("n_reference") is not None:
            return "see below" if key == "fcd" else ""
        why = r.get("notes", {}).get(key, "")
        return "no reference" if why.endswith(" given") else why
    if isinstance(r[key], dict):
        return ", ".join(f"{kind} {n}" for kind, n in r[key].items() if n)
    if key == "validity":
        return f"{r['n_valid']} of {r['n_samples']}"
    if key == "radical_fraction":
        return f"{r['n_radicals']} of {r['n_valid']}"
    if key == "uniqueness":
        return f"{r['n_unique']} of {r['n_valid']}"
    if key.startswith("unique@"):
        k = int(key.split("@")[1])
        used = r[f"{key}_n"]
        return f"first {used} valid" + ("" if used >= k else f" (fewer than {k})")
    if key == "kl_score":
        return f"{r['n_kl_generated']} vs {r['n_kl_reference']}"
    if key == "novelty" and r.get("n_novel") is not None:
        return f"{r['n_novel']} of {r['n_unique']}"
    if key == "fcd":
        return f"against the {r['fcd_reference_n']} valid reference molecules"
    if key == "fcd_floor":
        return f"{r['fcd_floor_n']} real molecules against {r['fcd_floor_reference_n']} (split halves)"
    return ""


def format_score(result: dict) -> str:
    """A text table of :func:`score_smiles` output: metric, value, counts, one-line definition."""
    rows = [(label, _value(result, key), _note(result, key), definition)
            for key, (label, definition) in _definitions().items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    if result.get("notes", {}).get("fcd") and result.get("n_reference") is not None:
        lines.append(result["notes"]["fcd"])
    if result.get("n_reference") is not None:
        lines.append(f"reference: {result['n_reference']} SMILES, {result['n_reference_valid']} valid; "
                     f"KL score: {result['n_kl_generated']} distinct samples vs {result['n_kl_reference']} "
                     f"reference molecules drawn with seed {result['seed']}")
    return "\n".join(lines) + "\n"
