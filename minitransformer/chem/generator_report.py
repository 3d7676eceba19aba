"""Judging a molecule generator: the bare model beside the constrained sampler, FCD beside its floor.

A generator can be judged two ways, and ``train lm`` reports both, labelled:

* **bare**: samples drawn from the model's own next-token distribution. Their
  validity, FCD, KL score, uniqueness and novelty say what the model learnt.
* **constrained**: samples drawn under a sampling rule that bans invalid tokens
  (``--grammar``, :mod:`minitransformer.chem.smiles_grammar`). Their validity
  says what the sampler can rescue; their FCD says whether the rescue costs
  faithfulness to the data (forcing a ring closure the model did not plan bends
  the molecule away from what the model would have drawn).

:func:`judge_samples` computes every metric of one sample set
(:func:`~minitransformer.chem.metrics.evaluate_samples`, the KL score against
held-out molecules, the kinds of failures, novelty against all the training
molecules, and FCD against each reference of an
:class:`~minitransformer.chem.fcd.FCDJudge`). :func:`side_by_side` lays two
such results out as the rows of a summary table, with each FCD also written as
a multiple of its floor (the FCD of as many real molecules; see
:mod:`minitransformer.chem.fcd`).
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["judge_samples", "side_by_side", "fcd_ratio"]


def judge_samples(samples: Sequence[str], train: Sequence[str], *, heldout: Sequence[str] | None = None,
                  all_training: Sequence[str] | None = None, fcd_judge=None, seed: int | None = None) -> dict:
    """Every metric of ``samples`` (a JSON-ready dict).

    ``train``: the training molecules (novelty, the KL score); ``heldout``:
    molecules never trained on (``kl_score_heldout``); ``all_training``: every
    molecule seen, phase 1 included (``novelty_vs_all_training``); ``fcd_judge``:
    an :class:`~minitransformer.chem.fcd.FCDJudge` (``fcd``: its reference name ->
    FCD). ``seed``: the KL score's draw of reference molecules (default: GuacaMol's, 42).
    Keys are those of :func:`~minitransformer.chem.metrics.evaluate_samples`, plus
    ``invalid_kinds`` and the ones above (absent when their argument is None).
    """
    from minitransformer.chem.failures import failure_counts
    from minitransformer.chem.metrics import KL_SEED, evaluate_samples, kl_against, novelty
    seed = KL_SEED if seed is None else seed
    result = evaluate_samples(samples, train, seed=seed)
    result["invalid_kinds"] = failure_counts(samples)
    if heldout is not None:
        result["kl_score_heldout"] = kl_against(samples, heldout, seed=seed)
    if all_training is not None:
        result["novelty_vs_all_training"] = novelty(samples, all_training)
    if fcd_judge is not None:
        result["fcd"] = fcd_judge(samples)
    return result


def fcd_ratio(value: float | None, floor: float | None) -> float | None:
    """An FCD as a multiple of its floor (None when either is missing or the floor is not positive)."""
    return value / floor if value is not None and floor else None


def _fcd_cell(result: dict, name: str, floor: dict) -> str:
    value = (result.get("fcd") or {}).get(name)
    if value is None:
        return "n/a"
    ratio = fcd_ratio(value, floor.get(name))
    return f"{value:.3f}" + (f" ({ratio:.2f} x floor)" if ratio is not None else "")


def side_by_side(results: dict, fcd_floor: dict | None = None, fcd_labels: dict | None = None) -> list:
    """Rows ``(metric, "value | value ...")`` for a summary table, one value per labelled result
    (``results``: label -> :func:`judge_samples` dict, e.g. ``{"bare": ..., "valence grammar": ...}``).
    ``fcd_floor``: reference name -> the floor's FCD; ``fcd_labels``: reference name -> how a row
    names it (e.g. ``{"heldout": "held-out Tox21"}``)."""
    floor = fcd_floor or {}
    labels = fcd_labels or {name: name for name in floor}

    def row(label, cell):
        return label, " | ".join(cell(r) for r in results.values())

    def frac(key, fmt=".3f"):
        return lambda r: "n/a" if r.get(key) is None else format(r[key], fmt)

    rows = [("samples", " | ".join(results)),
            row("validity (RDKit parses the sample)", lambda r: f"{r['validity']:.3f} of {r['n_samples']}"),
            row("uniqueness (distinct among the valid)", frac("uniqueness")),
            row("novelty (valid, distinct, not in training)", frac("novelty"))]
    for name, label in labels.items():
        rows.append(row(f"FCD against {label} (floor {floor[name]:.3f})" if floor.get(name) is not None
                        else f"FCD against {label}", lambda r, n=name: _fcd_cell(r, n, floor)))
    rows += [row("KL score against training / held-out", lambda r: frac("kl_score")(r) + (
                 f" / {r['kl_score_heldout']:.3f}" if r.get("kl_score_heldout") is not None else "")),
             row("IntDiv1 / IntDiv2", lambda r: f"{r['intdiv1']:.3f} / {r['intdiv2']:.3f}"),
             row("Filters (MOSES: MCF, PAINS, atom rules)", frac("filters")),
             row("invalid samples, by kind",
                 lambda r: ", ".join(f"{k} {n}" for k, n in r["invalid_kinds"].items() if n) or "none")]
    return rows
