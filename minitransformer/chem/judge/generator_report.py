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
floor (the FCD of as many real molecules as the set has valid samples, which are what
the FCD reads; see :mod:`minitransformer.chem.frechet.fcd`).
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["judge_samples", "judge_sample_sets", "side_by_side", "fcd_ratio"]


def judge_samples(samples: Sequence[str], train: Sequence[str], *, heldout: Sequence[str] | None = None,
                  all_training: Sequence[str] | None = None, fcd_judge=None, references: dict | None = None,
                  seed: int | None = None) -> dict:
    """Every metric of ``samples``: :func:`~minitransformer.chem.judge.evaluation.evaluate_samples`
    with these inputs (``seed`` None: GuacaMol's draw, 42), MOSES's alert files if they are here;
    with an FCD judge, also ``fcd_floor`` (``{reference: FCD}``, None without real molecules) and
    ``fcd_floor_n``: the floor of as many real molecules as the samples have valid ones."""
    from minitransformer.chem.judge.evaluation import evaluate_samples
    from minitransformer.chem.judge.metrics import KL_SEED
    result = evaluate_samples(samples, train, heldout=heldout, all_training=all_training, fcd_judge=fcd_judge,
                              references=references, seed=KL_SEED if seed is None else seed)
    if fcd_judge is not None:
        floor, n = fcd_judge.floor(result["n_valid"])
        result.update(fcd_floor=floor or None, fcd_floor_n=n or None)
    return result


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


def side_by_side(results: dict, fcd_labels: dict | None = None) -> list:
    """Rows ``(metric, "value | value ...")`` for a summary table, one value per labelled result
    (``results``: label -> :func:`judge_samples` dict, e.g. ``{"bare": ..., "valence grammar": ...}``):
    every metric of :data:`~minitransformer.chem.judge.evaluation.METRICS` whose input the first result
    was given, a per-set metric once per set; each FCD beside its own floor (the result's
    ``fcd_floor``, of as many real molecules as it has valid samples). ``fcd_labels``: set name ->
    how a row names it (e.g. ``{"heldout": "held-out Tox21"}``)."""
    from minitransformer.chem.judge.evaluation import METRICS
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
            floors = [(r.get("fcd_floor") or {}).get(name) for r in results.values()]
            rows.append((f"{metric.label} against {label}",
                         " | ".join(_cell((r.get(metric.key) or {}).get(name), metric, floor)
                                    for r, floor in zip(results.values(), floors))))
            if metric.key == "fcd" and any(f is not None for f in floors):
                rows.append((f"FCD floor against {label}",
                             " | ".join("n/a" if f is None else f"{f:.3f} ({r['fcd_floor_n']:,} real molecules)"
                                        for r, f in zip(results.values(), floors))))
    return rows


def judge_sample_sets(sets: dict, train: Sequence[str], heldout: Sequence[str], extra: Sequence[str] = (),
                      moses: bool = False, seed: int = 0) -> tuple[dict, str | None]:
    """Every metric of each labelled sample set (``{"bare": [...], "valence": [...]}``) by
    :func:`judge_samples`, FCD beside its floor, and for MOSES its benchmark table.

    Returns ``(report, table)``: ``report`` maps each label to its metrics, plus the FCD
    floor and what the FCD was measured against; ``table`` is the MOSES markdown table
    (the bare model beside the published models, then each constrained set), None
    unless ``moses``. Outside MOSES, novelty counts against ``train`` (and against
    ``train`` + ``extra``, the pretraining molecules, when there are any), FCD against
    the ``heldout`` molecules, its floor from training ones; for MOSES, novelty counts
    against all of MOSES's training set and FCD against its two test sets, as MOSES does.
    """
    from minitransformer.chem.datasets.moses import load_moses
    from minitransformer.chem.frechet.fcd import fcd_judge_or_note
    from minitransformer.chem.judge.moses_report import markdown_table, moses_references, moses_row
    n = len(sets["bare"])
    if moses:
        novelty_set = load_moses("train")
        references = moses_references()
        described = {"test": "MOSES test", "test_scaffolds": "MOSES scaffold test"}
    else:
        novelty_set, references = list(train), {"heldout": list(heldout)}
        described = {"heldout": f"held-out molecules ({len(heldout)}, validation + test)"}
    judge, note = fcd_judge_or_note(references, novelty_set, seed=seed)
    if note:
        print(note)
    compare = references if moses else None  # SNN, Frag, Scaf against the test sets: the bare samples only
    report = {label: judge_samples(smiles, novelty_set, heldout=None if moses else list(heldout),
                                   all_training=list(train) + list(extra) if extra else None, fcd_judge=judge,
                                   references=compare if label == "bare" else None)
              for label, smiles in sets.items()}
    report.update(fcd_floor=report["bare"].get("fcd_floor"), fcd_floor_n=report["bare"].get("fcd_floor_n"),
                  fcd_reference=described, fcd_note=note or None)  # the floor of the bare samples
    if not moses:
        return report, None
    rows = {label: moses_row(report[label]) for label in sets}
    for label, row in rows.items():
        report[label]["moses"] = row
    bare_floor = report["bare"].get("fcd_floor")
    floor = bare_floor and {"label": f"{report['bare']['fcd_floor_n']:,} MOSES training molecules (the FCD floor)",
                            "fcd_test": bare_floor["test"], "fcd_testsf": bare_floor["test_scaffolds"]}
    table = markdown_table(rows["bare"], label=f"minitransformer, bare model ({n:,} samples)", floor=floor,
                           others={f"minitransformer, {label} grammar": row for label, row in rows.items()
                                   if label != "bare"})
    return report, table
