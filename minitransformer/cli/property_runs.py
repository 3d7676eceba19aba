r"""``train property --seeds 0,1,2 --ensemble N``: a property model measured as the field measures one.

One run's mean test ROC-AUC moves with its seed: over 783 test molecules the bootstrap standard
deviation of a mean AUC is about 0.015, and two seeds of one recipe differ by about as much. So a
figure worth comparing is a mean over seeds, with its spread:

* ``--seeds S1,S2,...``: one run per seed, in ``OUT/seed-S``. On the random split the seed draws
  the split *and* the model (each seed a different split, as MoleculeNet reports); the scaffold
  split is the same for every seed, so there only the model and the order of its data change.
* ``--ensemble N``: each seed's model is N models (``OUT/seed-S/member-k``), trained on the same
  split from different draws (member k of seed S has model seed :math:`S + 1000k`), whose test
  probabilities are averaged: :math:`\hat p = \frac1N \sum_k \hat p^{(k)}`.

``OUT/metrics.json`` then holds every seed's mean test AUC, their mean and standard deviation
(:math:`n-1` in the denominator), each seed's bootstrap interval over the test molecules, and
the per-assay means; the summary prints the same. ``--resume`` skips the runs that finished
(their ``metrics.json`` is read back once their whole run record - data, labels, tasks, split,
vocabulary and settings - is compared with this command's, as a resume compares it) and
continues the one that stopped.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import numpy as np

#: Member k of seed S draws its model from seed S + MEMBER_STRIDE * k (member 0 is the plain run of S).
MEMBER_STRIDE = 1000
#: Each run's test probabilities at full precision (predictions.csv keeps 4 decimals), for the ensemble.
PROBABILITIES = "test_probabilities.npy"
VAL_PROBABILITIES = "val_probabilities.npy"  # the same on the validation molecules, with the test's writings


def run_seeds(command, recipe, asked) -> int:
    """Every run of ``recipe.seeds`` x ``recipe.ensemble``, then their summary (module notes);
    ``asked``: the command's :class:`~minitransformer.cli.training.Invocation`."""
    from minitransformer import cli
    from minitransformer.atomic import FileExistsRefusal
    from minitransformer.cli.training import run_training
    if not recipe.seeds and recipe.ensemble == 1:
        return run_training(command, recipe, asked)
    seeds, n = recipe.seeds or (recipe.seed,), recipe.ensemble
    check_seeds(seeds, n, asked.resume)
    out = asked.out
    earlier = [p.name for p in out.glob("seed-*")] + (["metrics.json"] if (out / "metrics.json").exists() else [])
    if earlier and asked.resume is None and not asked.force:
        raise FileExistsRefusal(f"{out} holds the runs of an earlier --seeds/--ensemble command ({earlier[0]}, ...); "
                              "continue it with --resume, or start afresh with --force")
    results = []
    for s in seeds:
        members = [_run(command, recipe, asked, s, k, out / f"seed-{s}" / (f"member-{k}" if n > 1 else ""))
                   for k in range(n)]
        results.append(_seed_result(s, members))
        if results[-1] is None:
            return 1  # a run ended without its results (its own message said why)
    summary = summarize(results, n, recipe.split)
    cli.write_json(out / "metrics.json", summary)
    _print(summary, out)
    return 0


def check_seeds(seeds, n: int, resume) -> None:
    """Refuse, before any work, what the runs could not honour: a checkpoint path for --resume (each run
    resumes from its own folder), a member seed past the largest seed, two runs with one model seed."""
    from minitransformer.cli.arguments import SEED_MAX
    from minitransformer.cli.arguments import Auto
    if resume is not None and not isinstance(resume, Auto):
        raise ValueError(f"--resume {resume}: with --seeds or --ensemble each run resumes from its own folder; "
                         "give --resume without a path")
    model_seeds = [s + MEMBER_STRIDE * k for s in seeds for k in range(n)]
    if max(model_seeds) > SEED_MAX:
        raise ValueError(f"--seeds {max(seeds)} with --ensemble {n}: member seeds reach {max(model_seeds)}, past "
                         f"{SEED_MAX}; choose smaller seeds")
    if len(set(model_seeds)) != len(model_seeds):
        raise ValueError(f"--seeds {','.join(map(str, seeds))} with --ensemble {n}: member k of seed S draws seed "
                         f"S + {MEMBER_STRIDE}k, so two runs would be one model; choose seeds that differ by less "
                         f"than {MEMBER_STRIDE}")


def _run(command, recipe, asked, seed: int, member: int, out: Path) -> Path | None:
    """One run (its folder comes back, None if it was stopped); a finished one is read back under --resume."""
    from minitransformer.cli.training import run_training
    name = f"seed {seed}" + (f", member {member}" if recipe.ensemble > 1 else "")
    recipe = dataclasses.replace(recipe, seed=seed + MEMBER_STRIDE * member, split_seed=seed,  # members: one split
                                 seeds=(), ensemble=1)
    asked = dataclasses.replace(asked, out=out)
    if asked.resume is not None and (out / "metrics.json").exists() and (out / PROBABILITIES).exists():
        run_training(command, recipe, asked, read_back=True)  # refused unless made of this data and settings
        print(f"{name}: finished earlier, read back from {out}")
        return out
    if asked.resume is not None and not (out / "last.npz").exists() and not (out / "pretrain" / "last.npz").exists():
        asked = dataclasses.replace(asked, resume=None)  # this run never started: start it
    print(f"--- {name} (model seed {recipe.seed}) -> {out}")
    return out if run_training(command, recipe, asked) == 0 else None


def read_json(path: Path) -> dict:
    from minitransformer.atomic import parse_json
    return parse_json(path.read_text(encoding="utf-8"))


def _seed_result(seed: int, folders) -> dict | None:
    """One seed's test AUC: its run's, or its members' averaged probabilities' (None: a run was stopped)."""
    from minitransformer.roc_auc import bootstrap_mean_auc, multilabel_roc_auc
    if None in folders:
        return None
    runs = [read_json(Path(f) / "metrics.json") for f in folders]
    labels = np.load(Path(folders[0]) / "test_labels.npy")  # (N, K), NaN = missing
    for f in folders[1:]:
        if not np.array_equal(np.load(Path(f) / "test_labels.npy"), labels, equal_nan=True):
            raise ValueError(f"{f} was tested on other molecules than {folders[0]}: members of one seed share its "
                             "split; start afresh with --force")
    probs = np.mean([np.load(Path(f) / PROBABILITIES) for f in folders], axis=0)  # (N, K)
    names = list(runs[0]["test_auc"])
    auc = multilabel_roc_auc(labels, probs, mask=~np.isnan(labels), names=names)
    val = None  # the validation AUC of the averaged probabilities: what chooses between recipes
    if all((Path(f) / VAL_PROBABILITIES).exists() for f in folders):
        val_labels = np.load(Path(folders[0]) / "val_labels.npy")  # (N_val, K)
        val_probs = np.mean([np.load(Path(f) / VAL_PROBABILITIES) for f in folders], axis=0)  # (N_val, K)
        val = multilabel_roc_auc(val_labels, val_probs, mask=~np.isnan(val_labels))["mean"]
    return {"seed": seed, "test_auc_mean": auc["mean"], "val_auc_mean": val,
            "test_auc": {k: None if np.isnan(v) else v for k, v in auc["per_label"].items()},
            "bootstrap": bootstrap_mean_auc(labels, probs, mask=~np.isnan(labels), seed=seed),
            "members_test_auc_mean": [m["test_auc_mean"] for m in runs],
            "val_auc_best": [m["val_auc_best"] for m in runs]}


def summarize(results: list, ensemble: int, split: str) -> dict:
    """Mean and standard deviation over seeds of the mean test AUC, and per assay."""
    means = [r["test_auc_mean"] for r in results]
    vals = [r["val_auc_mean"] for r in results]
    names = list(results[0]["test_auc"])
    per_task = {}
    for name in names:
        values = [r["test_auc"][name] for r in results if r["test_auc"][name] is not None]
        per_task[name] = float(np.mean(values)) if values else None
    return {"split": split, "seeds": [r["seed"] for r in results], "ensemble": ensemble,
            "test_auc_mean": float(np.mean(means)), "test_auc_std": statistics.stdev(means) if len(means) > 1 else None,
            "test_auc_per_seed": means, "test_auc_per_task": per_task,
            "val_auc_mean": float(np.mean(vals)) if None not in vals else None, "runs": results}


def _print(summary: dict, out: Path) -> None:
    from minitransformer import cli
    what = f"an ensemble of {summary['ensemble']} models" if summary["ensemble"] > 1 else "one model"
    def interval(b):
        return "" if b["low"] is None else f" (95 % interval {b['low']:.4f} - {b['high']:.4f})"
    rows = [(f"seed {r['seed']}", f"{r['test_auc_mean']:.4f}{interval(r['bootstrap'])}") for r in summary["runs"]]
    std = summary["test_auc_std"]
    rows.append((f"mean over {len(summary['runs'])} seeds", f"{summary['test_auc_mean']:.4f}"
                 + ("" if std is None else f" +- {std:.4f} (standard deviation over seeds)")))
    print(f"test ROC-AUC, {summary['split']} split, {what} per seed:")
    cli.print_table(rows, footer=f"summary: {out / 'metrics.json'}")


def seeds_list(text: str) -> list[int]:
    """``--seeds 0,1,2``: distinct seeds, each a valid ``--seed``."""
    from minitransformer.cli.arguments import seed
    try:
        values = [seed(part.strip()) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: {e}") from None
    if not values or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: give distinct seeds separated by commas, e.g. 0,1,2")
    return values
