"""Chemprop (D-MPNN) on exactly the Tox21 molecules, labels and splits of ``minitransformer train property``:
the mean test ROC-AUC over the 12 assays per seed, computed by our metric, and its mean and spread over seeds.

Run from the repository root, with the Python of a separate environment that has Chemprop 2.x
(Chemprop and torch are never dependencies of the package or of its tests)::

    python -m venv ../chemprop-venv && ../chemprop-venv/bin/pip install chemprop==2.3.1
    python benchmarks/chemprop_tox21.py --chemprop-python ../chemprop-venv/bin/python
    python benchmarks/chemprop_tox21.py --chemprop-python ... --split scaffold --sides rdkit --seeds 0,1,2,3,4
    python benchmarks/chemprop_tox21.py --chemprop-python ... --quick   # smoke test: 1 epoch, 600 molecules, seed 0

(or set ``MINITRANSFORMER_CHEMPROP_PYTHON`` instead of ``--chemprop-python``). The full run (2 sides x
2 splits x 3 seeds, 50 epochs each) takes hours on 2 cores.

**Data and splits.** As ``TrainProperty.load`` does: ``load_labelled(--data)`` (Tox21 by default, found
by ``find_tox21``: ``$MINITRANSFORMER_DATA``, then the user cache; its checksum is verified), with
``--limit M`` the first M molecules only (as ``--quick`` takes the first 400 there), then
``split_rows(smiles, split, seed)``: 80/10/10. With ``--split random`` the seed is both the split's
seed and Chemprop's; the scaffold split is the same for every seed (``split_rows`` ignores it), so
there only Chemprop's seed varies. Each part is written as a CSV (smiles, then the 12 assays, an
empty cell where a label is missing; Chemprop masks those in its loss) into a temporary folder.

**Chemprop.** ``chemprop train --data-path train.csv val.csv test.csv --task-type classification
--epochs 50 --pytorch-seed S --data-seed S`` (Chemprop 2.x takes the three parts as three data paths),
otherwise Chemprop's defaults: depth 3, hidden size 300, batch 64, learning rate 1e-4 -> 1e-3 over 2
warm-up epochs -> 1e-4, the epoch of lowest validation loss kept. (Chemprop refuses as many warm-up
epochs as epochs, so with ``--epochs 1`` or ``2`` the warm-up is shortened to ``epochs - 1``.) Then
``chemprop predict`` on the test CSV with the kept model; its probabilities are read back here. Sides:

``default``
    Chemprop's defaults.
``rdkit``
    plus RDKit's 2D descriptors as extra molecule features: ``--molecule-featurizers
    v1_rdkit_2d_normalized --no-descriptor-scaling``. That featurizer is descriptastorus'
    ``RDKit2DNormalized``, the ``rdkit_2d_normalized`` features generator of Chemprop 1 (200
    descriptors, each mapped through a fitted cumulative distribution), and Chemprop 1's users ran it
    with ``--no_features_scaling``, whose Chemprop 2 name is ``--no-descriptor-scaling``. (The plain
    ``rdkit_2d`` of Chemprop 2 is RDKit's raw ``descList``, which Chemprop itself warns is far from
    normal.)

**Metric.** ``minitransformer.roc_auc.multilabel_roc_auc`` on the test molecules' present labels: an
assay whose test labels hold one class is skipped and left out of the mean (possible with
``--limit``, not on the full splits). Every run's probabilities also go to scikit-learn's
``roc_auc_score`` in the Chemprop environment (same skipping rule); both are recorded with their
largest difference. The JSON also keeps the ``test/roc`` that Chemprop's own training log reports
(its mean over all 12 assays, a one-class assay included), as a third opinion.

Each Chemprop command is a fresh process with ``--threads`` threads (default 2: OMP, MKL and OpenBLAS
variables, and ``torch.set_num_threads``) on the CPU (``--accelerator``). Wall time is training plus
prediction, process start and featurization included. A Markdown table goes to stdout; the JSON
(``--json``, default a new file in ``benchmarks/results/``) holds the command, date, CPU, threads, the
Chemprop environment's versions, the split sizes and a hash of each test set, the Chemprop command lines
(paths relative to the work folder), and every run's per-assay AUCs from both metrics.
"""
from __future__ import annotations

import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

import argparse  # noqa: E402
import csv  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402

SIDES = {"default": [], "rdkit": ["--molecule-featurizers", "v1_rdkit_2d_normalized", "--no-descriptor-scaling"]}
SPLITS = ("random", "scaffold")
CHEMPROP_WARMUP_EPOCHS = 2  # Chemprop's default --warmup-epochs
# The chemprop command, with torch's threads set first: python -c CLI THREADS train|predict ...
CLI = ("import sys, torch; n = int(sys.argv.pop(1)); torch.set_num_threads(n); torch.set_num_interop_threads(n); "
       "sys.argv[0] = 'chemprop'; from chemprop.cli.main import main; sys.exit(main())")
VERSIONS = """import importlib.metadata as m, json, platform
v = {"python": platform.python_version()}
for name in ("chemprop", "torch", "lightning", "rdkit", "descriptastorus", "scikit-learn", "numpy"):
    try:
        v[name] = m.version(name)
    except m.PackageNotFoundError:
        v[name] = None
print(json.dumps(v))"""
SKLEARN = """import json, sys
import numpy as np
from sklearn.metrics import roc_auc_score
d = json.load(sys.stdin)
y, s = np.array(d["labels"], dtype=float), np.array(d["scores"], dtype=float)
out = []
for k in range(y.shape[1]):
    present = ~np.isnan(y[:, k])
    two = len(np.unique(y[present, k])) == 2
    out.append(float(roc_auc_score(y[present, k], s[present, k])) if two else None)
print(json.dumps(out))"""


def child_env(threads: int) -> dict:
    """The Chemprop processes' environment: ``threads`` OpenMP, MKL and OpenBLAS threads."""
    env = dict(os.environ)  # the BLAS pins are already dropped (configure_from_argv)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    return env


def environment(args) -> dict:
    """The versions in the Chemprop environment; stops with a hint when Chemprop 2 is not there."""
    done = subprocess.run([args.chemprop_python, "-c", VERSIONS], capture_output=True, text=True, env=args.env)
    if done.returncode != 0:
        raise SystemExit(f"error: --chemprop-python did not run: {done.stderr.strip()[-500:]}")
    versions = json.loads(done.stdout)
    if not (versions["chemprop"] or "").startswith("2."):
        raise SystemExit(f"error: the --chemprop-python environment has chemprop {versions['chemprop']}, not 2.x: "
                         "pip install chemprop==2.3.1 there")
    if "rdkit" in args.sides and not versions["descriptastorus"]:
        raise SystemExit("error: the rdkit side needs descriptastorus in the Chemprop environment "
                         "(pip install descriptastorus there)")
    return versions


def write_parts(folder: Path, table, rows) -> tuple:
    """train.csv, val.csv, test.csv in ``folder``: smiles, then one column per task (empty = missing)."""
    folder.mkdir(parents=True)
    parts = tuple(table.take(r) for r in rows)
    for name, part in zip(("train", "val", "test"), parts):
        with open(folder / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["smiles", *part.tasks])
            for smiles, y in zip(part.smiles, part.labels):
                w.writerow([smiles] + ["" if np.isnan(v) else int(v) for v in y])
    return parts


def chemprop(args, cli: list, work: Path, log: str) -> float:
    """Run ``chemprop CLI...`` in ``work`` (its output in ``log`` there); the wall seconds."""
    t0 = time.perf_counter()
    with open(work / log, "w") as f:
        done = subprocess.run([args.chemprop_python, "-c", CLI, str(args.threads), *cli], cwd=work, env=args.env,
                              stdout=f, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        tail = (work / log).read_text(errors="replace")[-3000:]
        raise SystemExit(f"error: chemprop {cli[0]} failed (exit status {done.returncode}): chemprop "
                         f"{' '.join(cli)}\n{tail}")
    return seconds


def read_predictions(path: Path, test, tasks: list) -> np.ndarray:
    """(N, K) probabilities of ``chemprop predict``, checked to be the test molecules in order."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if rows[0] != ["smiles", *tasks]:
        raise SystemExit(f"error: chemprop's predictions have the columns {rows[0]}, not smiles + the tasks")
    if [r[0] for r in rows[1:]] != list(test.smiles):
        raise SystemExit(f"error: chemprop predicted {len(rows) - 1} molecules, not the {len(test.smiles)} test "
                         "molecules in order")
    return np.array([[float(v) for v in r[1:]] for r in rows[1:]])


def sklearn_aucs(args, labels: np.ndarray, scores: np.ndarray) -> list:
    """scikit-learn's roc_auc_score per task in the Chemprop environment (None: one class)."""
    payload = json.dumps({"labels": [[None if np.isnan(v) else float(v) for v in row] for row in labels],
                          "scores": scores.tolist()})
    done = subprocess.run([args.chemprop_python, "-c", SKLEARN], input=payload, capture_output=True, text=True,
                          env=args.env)
    if done.returncode != 0:
        raise SystemExit(f"error: scikit-learn's check failed: {done.stderr.strip()[-1000:]}")
    return json.loads(done.stdout)


def run_one(args, work: Path, key: str, test, tasks: list, side: str, split: str, seed: int) -> dict:
    """Train and predict one (side, split, seed) with Chemprop; score its test predictions."""
    from minitransformer.roc_auc import multilabel_roc_auc
    out = f"{key}-{side}-seed{seed}"
    warmup = [] if args.epochs > CHEMPROP_WARMUP_EPOCHS else ["--warmup-epochs", str(args.epochs - 1)]
    device = ["--accelerator", args.accelerator, "--devices", "1"]
    train = ["train", "--data-path", f"{key}/train.csv", f"{key}/val.csv", f"{key}/test.csv",
             "--smiles-columns", "smiles", "--target-columns", *tasks, "--task-type", "classification",
             "--epochs", str(args.epochs), *warmup, "--pytorch-seed", str(seed), "--data-seed", str(seed),
             *device, "--output-dir", out, *SIDES[side]]
    predict = ["predict", "--test-path", f"{key}/test.csv", "--smiles-columns", "smiles",
               "--model-paths", f"{out}/model_0/best.pt", "--preds-path", f"{out}/predictions.csv",
               "--drop-extra-columns", *device, *SIDES[side]]
    train_s = chemprop(args, train, work, f"{out}.train.log")
    predict_s = chemprop(args, predict, work, f"{out}.predict.log")
    scores = read_predictions(work / out / "predictions.csv", test, tasks)
    present = ~np.isnan(test.labels)
    ours = multilabel_roc_auc(test.labels, scores, mask=present, names=tasks)
    theirs = sklearn_aucs(args, test.labels, scores)
    per_task = {t: None if np.isnan(v) else v for t, v in ours["per_label"].items()}
    if [v is None for v in per_task.values()] != [v is None for v in theirs]:
        raise SystemExit(f"error: our metric and scikit-learn skip different tasks: {per_task} / {theirs}")
    scored = [v for v in theirs if v is not None]
    reported = re.findall(r"test/roc: ([0-9.eE+-]+)", (work / f"{out}.train.log").read_text(errors="replace"))
    best = sorted((work / out / "model_0" / "checkpoints").glob("best-epoch=*.ckpt"))
    return {"side": side, "split": split, "seed": seed, "split_seed": seed if split == "random" else None,
            "test_auc_mean": ours["mean"], "test_auc": per_task, "skipped": ours["skipped"],
            "n_scored": ours["n_scored"],
            "sklearn_test_auc_mean": float(np.mean(scored)) if scored else None,
            "sklearn_test_auc": dict(zip(tasks, theirs)),
            "max_abs_difference_to_sklearn": max((abs(a - b) for a, b in zip(per_task.values(), theirs)
                                                  if b is not None), default=None),
            "chemprop_reported_test_roc": float(reported[-1]) if reported else None,
            "best_epoch": int(best[0].name.split("=")[1].split("-")[0]) if best else None,
            "train_s": train_s, "predict_s": predict_s, "wall_s": train_s + predict_s,
            "chemprop_train": "chemprop " + " ".join(train), "chemprop_predict": "chemprop " + " ".join(predict)}


def summarise(runs: list) -> list:
    """Per (side, split): the seeds' mean test AUCs, their mean and sample standard deviation."""
    rows = []
    for side, split in dict.fromkeys((r["side"], r["split"]) for r in runs):
        means = [r["test_auc_mean"] for r in runs if (r["side"], r["split"]) == (side, split)]
        rows.append({"side": side, "split": split, "seeds": [r["seed"] for r in runs if
                                                              (r["side"], r["split"]) == (side, split)],
                     "test_auc_means": means, "mean": statistics.fmean(means),
                     "std": statistics.stdev(means) if len(means) > 1 else None})
    return rows


def shown_command(argv: list) -> str:
    """This command line with no path of this machine (``common.shown_command``); an absolute
    --chemprop-python shows as CHEMPROP_PYTHON."""
    def python(value: str) -> str:
        return "CHEMPROP_PYTHON" if os.path.isabs(value) else value
    return common.shown_command("chemprop_tox21", argv, {"--chemprop-python": python})


def comma_list(choices):
    def parse(text: str) -> list:
        items = text.split(",")
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}, got {text!r}")
        return items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chemprop-python", default=os.environ.get("MINITRANSFORMER_CHEMPROP_PYTHON"),
                   help="Python of an environment with chemprop 2.x (or $MINITRANSFORMER_CHEMPROP_PYTHON)")
    p.add_argument("--data", default="tox21", help="tox21 (default) or a CSV with a smiles column and 0/1 labels")
    p.add_argument("--split", type=comma_list(SPLITS), default=list(SPLITS),
                   help="random, scaffold or random,scaffold (default both)")
    p.add_argument("--sides", type=comma_list(tuple(SIDES)), default=list(SIDES),
                   help="default, rdkit or default,rdkit (default both)")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated (default 0,1,2; --quick: 0)")
    p.add_argument("--epochs", type=int, default=None, help="Chemprop's epochs (default 50, Chemprop's; --quick: 1)")
    p.add_argument("--limit", type=int, default=None,
                   help="only the table's first M molecules (default all; --quick: 600)")
    p.add_argument("--threads", type=int, default=2, help="threads of each Chemprop process (default 2)")
    p.add_argument("--accelerator", default="cpu", help="Chemprop's --accelerator (default cpu)")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="write the splits, models and logs here and keep them (default: a temporary folder)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 epoch, 600 molecules, seed 0")
    p.add_argument("--json", type=Path, default=None, help="results file (default: a new file in benchmarks/results/)")
    args = p.parse_args(argv)
    if not args.chemprop_python:
        p.error("no Chemprop Python: pass --chemprop-python PATH (a venv with chemprop 2.x) or set "
                "MINITRANSFORMER_CHEMPROP_PYTHON")
    if not Path(args.chemprop_python).exists():
        p.error(f"--chemprop-python {args.chemprop_python} does not exist: give the python of a venv with chemprop")
    args.chemprop_python = os.path.abspath(args.chemprop_python)  # the children run in the work folder
    args.seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.epochs = args.epochs or (1 if args.quick else 50)
    args.limit = args.limit or (600 if args.quick else None)
    if args.epochs < 1 or (args.limit is not None and args.limit < 10) or args.threads < 1 or not args.seeds:
        p.error("need --epochs >= 1, --limit >= 10, --threads >= 1 and at least one seed")
    if args.work_dir is not None and args.work_dir.exists() and any(args.work_dir.iterdir()):
        p.error(f"--work-dir {args.work_dir} is not empty")
    return args


def data_record(args, table) -> dict:
    """The data set without this machine's paths: its name or file name, and a checksum."""
    from minitransformer.chem.datasets.download import TOX21_CSV_SHA256
    if args.data.lower() == "tox21":
        return {"data": "tox21", "csv_sha256": TOX21_CSV_SHA256, "molecules": len(table.smiles)}
    return {"data": Path(args.data).name, "file_sha256": hashlib.sha256(Path(args.data).read_bytes()).hexdigest(),
            "molecules": len(table.smiles)}


def main(argv=None):
    args = parse_args(argv)
    from minitransformer.atomic import write_json
    from minitransformer.chem.datasets.properties import load_labelled, split_rows
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load0 = os.getloadavg()
    args.env = child_env(args.threads)
    versions = environment(args)
    print(f"chemprop {versions['chemprop']} (torch {versions['torch']}, rdkit {versions['rdkit']}), "
          f"{args.threads} threads, {args.epochs} epochs, {common.cpu_model()}, load average {load0[0]:.1f}",
          flush=True)
    table = load_labelled(args.data)
    if args.limit:
        table = table.take(range(min(args.limit, len(table.smiles))))
    tasks = list(table.tasks)
    temporary = None if args.work_dir else tempfile.TemporaryDirectory(prefix="chemprop_tox21-")
    work = args.work_dir or Path(temporary.name)
    work.mkdir(parents=True, exist_ok=True)
    parts, runs = {}, []
    for split in args.split:
        for seed in args.seeds:
            key = f"{split}-{seed}" if split == "random" else split
            if key not in parts:
                train, val, test = write_parts(work / key, table, split_rows(table.smiles, split, seed))
                parts[key] = {"test": test, "sizes": [len(train.smiles), len(val.smiles), len(test.smiles)],
                              "test_smiles_sha256": hashlib.sha256("\n".join(test.smiles).encode()).hexdigest()}
                print(f"split {key}: {' / '.join(map(str, parts[key]['sizes']))} molecules", flush=True)
            for side in args.sides:
                r = run_one(args, work, key, parts[key]["test"], tasks, side, split, seed)
                runs.append(r)
                print(f"{side} {split} seed {seed}: mean test ROC-AUC {r['test_auc_mean']:.4f} "
                      f"(scikit-learn {r['sklearn_test_auc_mean']:.4f}, {r['n_scored']} assays), "
                      f"{r['wall_s']:.0f} s", flush=True)
    if temporary is not None:
        temporary.cleanup()
    summary = summarise(runs)
    per_run = common.format_table(
        ("side", "split", "seed", "mean test ROC-AUC", "scikit-learn", "assays", "best epoch", "wall s"),
        [[r["side"], r["split"], str(r["seed"]), f"{r['test_auc_mean']:.4f}", f"{r['sklearn_test_auc_mean']:.4f}",
          str(r["n_scored"]), str(r["best_epoch"]), f"{r['wall_s']:.0f}"] for r in runs])
    over_seeds = common.format_table(
        ("side", "split", "seeds", "mean test ROC-AUC", "std over seeds"),
        [[s["side"], s["split"], ",".join(map(str, s["seeds"])), f"{s['mean']:.4f}",
          "-" if s["std"] is None else f"{s['std']:.4f}"] for s in summary])
    print(f"\n{per_run}\n\n{over_seeds}")
    path = args.json or common.default_path("chemprop_tox21")
    argv = sys.argv[1:] if argv is None else argv
    given = any(a == "--chemprop-python" or a.startswith("--chemprop-python=") for a in argv)
    write_json(path, {
        "benchmark": "chemprop_tox21", "command": shown_command(argv),
        "started_utc": started, "load_average_start": load0, "load_average_end": os.getloadavg(),
        "cpu": common.cpu_model(), "cpus": os.cpu_count(), "threads": args.threads,
        "accelerator": args.accelerator, "chemprop_environment": versions,
        "chemprop_python": "--chemprop-python" if given else "$MINITRANSFORMER_CHEMPROP_PYTHON",
        "epochs": args.epochs, "warmup_epochs": min(CHEMPROP_WARMUP_EPOCHS, args.epochs - 1), "limit": args.limit,
        "sides": {s: SIDES[s] for s in args.sides}, "tasks": tasks, **data_record(args, table),
        "splits": {k: {"sizes": v["sizes"], "test_smiles_sha256": v["test_smiles_sha256"]} for k, v in parts.items()},
        "metric": "minitransformer.roc_auc.multilabel_roc_auc (a one-class assay skipped); scikit-learn's "
                  "roc_auc_score beside it", "summary": summary, "runs": runs,
        "table": f"{per_run}\n\n{over_seeds}"})
    shown = path.relative_to(Path.cwd()) if path.is_absolute() and path.is_relative_to(Path.cwd()) else path
    print(f"wrote {shown}")


if __name__ == "__main__":
    main()
