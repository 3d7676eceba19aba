"""Judging a molecule generator: the bare model beside the constrained sampler, FCD beside its floor.

A generator can be judged two ways, and ``train lm`` reports both, labelled:

* **bare**: samples drawn from the model's own next-token distribution. Their
  validity, FCD, KL score, uniqueness and novelty say what the model learnt.
* **constrained**: samples drawn under a sampling rule that bans invalid tokens
  (``--grammar``, :mod:`minitransformer.chem.grammar.smiles_grammar`). Their validity
  says what the sampler can rescue; their FCD says whether the rescue costs
  faithfulness to the data (forcing a ring closure the model did not plan bends
  the molecule away from what the model would have drawn).

:func:`judge_samples` computes every metric of one sample set
(:func:`~minitransformer.chem.judge.evaluation.evaluate_samples`: against the training
molecules, held-out molecules, all the molecules seen, and FCD against each
reference of an :class:`~minitransformer.chem.frechet.fcd.FCDJudge`). :func:`side_by_side`
lays such results out as the rows of a summary table, one row per metric of the
registry whose input was given, with each FCD also written as a multiple of its
floor (the FCD of as many real molecules; see :mod:`minitransformer.chem.frechet.fcd`).
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["judge_samples", "side_by_side", "fcd_ratio"]


def judge_samples(samples: Sequence[str], train: Sequence[str], *, heldout: Sequence[str] | None = None,
                  all_training: Sequence[str] | None = None, fcd_judge=None, references: dict | None = None,
                  seed: int | None = None) -> dict:
    """Every metric of ``samples``: :func:`~minitransformer.chem.judge.evaluation.evaluate_samples`
    with these inputs (``seed`` None: GuacaMol's draw, 42), MOSES's alert files if they are here."""
    from minitransformer.chem.judge.evaluation import evaluate_samples
    from minitransformer.chem.judge.metrics import KL_SEED
    return evaluate_samples(samples, train, heldout=heldout, all_training=all_training, fcd_judge=fcd_judge,
                            references=references, seed=KL_SEED if seed is None else seed)


def fcd_ratio(value: float | None, floor: float | None) -> float | None:
    """An FCD as a multiple of its floor (None when either is missing or the floor is not positive)."""
    return value / floor if value is not None and floor else None


def _cell(value, metric, floor: float | None = None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, dict):  # counts by kind
        return ", ".join(f"{kind} {n}" for kind, n in value.items() if n) or "none"
    ratio = fcd_ratio(value, floor) if metric.key == "fcd" else None
    return f"{value:.3f}" + (f" ({ratio:.2f} x floor)" if ratio is not None else "")


def side_by_side(results: dict, fcd_floor: dict | None = None, fcd_labels: dict | None = None) -> list:
    """Rows ``(metric, "value | value ...")`` for a summary table, one value per labelled result
    (``results``: label -> :func:`judge_samples` dict, e.g. ``{"bare": ..., "valence grammar": ...}``):
    every metric of :data:`~minitransformer.chem.judge.evaluation.METRICS` whose input the first result
    was given, a per-set metric once per set. ``fcd_floor``: reference name -> the floor's FCD;
    ``fcd_labels``: set name -> how a row names it (e.g. ``{"heldout": "held-out Tox21"}``)."""
    from minitransformer.chem.judge.evaluation import METRICS
    floor = fcd_floor or {}
    first = next(iter(results.values()))
    rows = [("samples", " | ".join(f"{label} ({r['n_samples']})" for label, r in results.items()))]
    for metric in METRICS:
        if metric.needs not in first["inputs"]:
            continue
        if not metric.per_set:
            rows.append((metric.label,
                         " | ".join(_cell(r.get(metric.key), metric) for r in results.values())))
            continue
        for name in first[metric.key]:
            label = (fcd_labels or {}).get(name, name)
            heading = f"{metric.label} against {label}" + (
                f" (floor {floor[name]:.3f})" if metric.key == "fcd" and floor.get(name) is not None else "")
            rows.append((heading, " | ".join(_cell((r.get(metric.key) or {}).get(name), metric, floor.get(name))
                                             for r in results.values())))
    return rows
