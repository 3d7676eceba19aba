"""``minitransformer train property``: predict the 12 Tox21 toxicity assays with a transformer encoder.

The flow, top to bottom: load Tox21 (12 binary labels per molecule, many
missing) -> split by molecule (random or by scaffold) -> build a vocabulary with
<cls> and <mask> -> (optionally) pretrain the encoder as a masked language model
on the training SMILES -> fine-tune it to predict all 12 labels from the final
state of the <cls> token, with a masked sigmoid cross-entropy that skips missing
labels -> keep the epoch with the best validation ROC-AUC (the area under the
ROC curve: the chance that a random active molecule scores above a random
inactive one; 0.5 is guessing) -> report the test ROC-AUC of every assay and
their mean.

Molecules are written as a fresh random SMILES each epoch (the same molecule,
atoms visited in a random order), which multiplies the small training set; at
test time the predictions of several writings of each molecule are averaged.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from minitransformer.cli import recipes

PRESET = dict(
    model=recipes.model(n_layers=4, pos="learned", tie_embeddings=True, emb_dropout=0.1, attn_dropout=0.1,
                        resid_dropout=0.1),
    max_len=256,  # <cls> + tokens + <eos>; Tox21's longest molecule has 240 tokens
    **recipes.ADAMW, lr=5e-4, warmup=200, batch_size=32, epochs=30, patience=8,
    augment=1.0, tta=8, pos_weight=True, max_time=11 * 60,  # max_time: the fine-tuning's share
    pretrain_lr=1e-3,
)
# --pretrain: a masked language model first, on MOSES by default: one pass over 250,000
# molecules in at most 15 minutes (measured, docs/RESULTS.md: random split 0.832 -> 0.846).
# On the training split's own molecules (--pretrain-data train, or when MOSES cannot be had)
# 12 epochs in at most 5 minutes. The pretraining budget comes on top of the 11 minutes.
PRETRAIN = {"moses": dict(pretrain_epochs=1, pretrain_limit=250_000, pretrain_max_time=15 * 60),
            "other": dict(pretrain_epochs=12, pretrain_limit=None, pretrain_max_time=5 * 60)}
QUICK = dict(model=recipes.quick_model(n_layers=2, tie_embeddings=True),
             epochs=2, pretrain_epochs=1, pretrain_limit=300, batch_size=32, warmup=5, patience=None,
             max_time=None, pretrain_max_time=None, tta=2)


def add_parser(kinds):
    from minitransformer import cli
    p = cli.add_command(kinds, "property", help="a property model: the 12 Tox21 assays (encoder + classifier)",
                        example="minitransformer train property --quick\n"
                                "minitransformer train property --pretrain --split scaffold --out runs/scaffold")
    cli.add_common_arguments(p, out="runs/property", data_names=("tox21",), data_suffixes=(".csv", ".csv.gz"),
                             data_refused={"druglike": "the drug-like set has no property labels; use --data tox21 "
                                                       "or a CSV with a smiles column and 0/1 label columns",
                                           "moses": "MOSES has no property labels; use --data tox21 or a CSV with "
                                                    "a smiles column and 0/1 label columns"},
                             data_default="tox21")
    p.add_argument("--split", default="random", choices=["random", "scaffold"],
                   help="random 80/10/10 (seeded) or Bemis-Murcko scaffold split")
    p.add_argument("--pretrain", action="store_true",
                   help="pretrain as a masked language model before fine-tuning (on MOSES: 15 more minutes)")
    p.add_argument("--pretrain-epochs", type=cli.int_at_least(0), default=None)
    p.add_argument("--pretrain-data", default=None, type=cli.data_source(("train", "moses", "druglike")),
                   help="molecules for --pretrain: moses (the default; the training split's when MOSES cannot be "
                        "had), train (the training split's), druglike or a file (the validation and test "
                        "molecules are removed from it)")
    p.add_argument("--pretrain-limit", type=cli.int_at_least(1), default=None,
                   help="pretrain on at most this many molecules of --pretrain-data")
    p.add_argument("--pretrain-minutes", type=cli.number(0), default=None,
                   help="time budget of the pretraining (default: 15 minutes on MOSES, else 5; 0 = none); it "
                        "counts against --max-minutes, whose default grows by it")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=None,
                   help="override the fine-tuning peak learning rate")
    p.add_argument("--batch-size", type=cli.int_at_least(1), default=None)
    p.add_argument("--augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a training molecule as a random SMILES each epoch")
    p.add_argument("--tta", type=cli.int_at_least(1, 256, "each is a full pass of the model"), default=None,
                   help="random SMILES averaged per test molecule (1 = the SMILES as written in the file)")
    p.set_defaults(run=run)
    return p


def resolve_settings(args) -> dict:
    s = dict(PRESET)
    s["pretrain_data"] = args.pretrain_data or ("train" if args.quick else "moses")  # a quick run fetches nothing
    s.update(PRETRAIN["moses" if s["pretrain_data"] == "moses" else "other"])
    if args.quick:
        s.update(QUICK)
    recipes.apply_overrides(s, args, ("epochs", "pretrain_epochs", "lr", "batch_size", "augment", "tta",
                                      "pretrain_limit"))
    return recipes.set_budgets(s, args, pretraining=args.pretrain, pretraining_adds_time=args.pretrain)


# ----------------------------------------------------------------------------- data
def split_indices(table, how: str, seed: int):
    """Row indices of train / validation / test (80/10/10)."""
    from minitransformer.chem.datasets.data import split_random
    from minitransformer.chem.datasets.properties import scaffold_split
    if how == "scaffold":
        return scaffold_split(table.smiles)
    return split_random(list(range(len(table.smiles))), (0.8, 0.1, 0.1), seed)


class LabelledEpochs:
    """Callable ``epoch -> [(ids, labels), ...]``: fresh random SMILES each epoch, same labels."""

    def __init__(self, smiles, labels, vocab, seed, p, max_tokens):
        from minitransformer.chem.datasets.lm_data import RandomizedEpochs
        self.ids = RandomizedEpochs(smiles, vocab, seed=seed, p=p, max_tokens=max_tokens, encode=dict(cls=True))
        self.labels = labels

    def __call__(self, epoch):
        return list(zip(self.ids(epoch), self.labels))


# ----------------------------------------------------------------------------- training
def pretraining_molecules(s, held_out, user_chose: bool) -> list:
    """The molecules of ``s["pretrain_data"]`` without the ``held_out`` ones. When the
    default MOSES cannot be had (no files, offline), the training split's own molecules
    take its place (``[]`` is returned and ``s`` updated), said in one line; a
    --pretrain-data the user named is never replaced."""
    from minitransformer.chem import canonical
    from minitransformer.chem.datasets.lm_data import pretraining_or_fallback
    extra = pretraining_or_fallback(s, user_chose, "pretraining on the training split's molecules instead",
                                    exclude={canonical(x) for x in held_out}, limit=s.get("pretrain_limit"))
    if extra is not None:
        return extra
    s.update(pretrain_data="train", **PRETRAIN["other"])
    if "fine_tune_time" in s:  # the default budget follows the shorter pretraining
        s["max_time"] = s["fine_tune_time"] + s["pretrain_max_time"]
    return []


def pretrain(model, vocab, train_smiles, s, args, out):
    """Masked-language-model pretraining on ``train_smiles`` (the training split's, or
    --pretrain-data's), written at random each epoch."""
    from minitransformer.cli import run_fit
    from minitransformer.chem.datasets.lm_data import RandomizedEpochs
    from minitransformer.train.tasks import MLMTask
    from minitransformer.train import TrainConfig
    data = RandomizedEpochs(train_smiles, vocab, seed=args.seed + 1, p=1.0, max_tokens=s["max_len"],
                            encode=dict(cls=True))
    steps = max(2, -(-len(train_smiles) // s["batch_size"]) * s["pretrain_epochs"])
    optimizer = recipes.make_optimizer(s, model, steps, lr=s["pretrain_lr"])
    task = MLMTask(vocab.mask_id, len(vocab), pad_id=vocab.pad_id, special_ids=vocab.special_ids)
    config = TrainConfig(epochs=s["pretrain_epochs"], batch_size=s["batch_size"], clip=1.0, seed=args.seed,
                         max_time=s["pretrain_max_time"], out_dir=str(out / "pretrain"), quiet=args.quiet)
    print(f"pretraining: masked language model on {len(train_smiles)} molecules, {s['pretrain_epochs']} epochs "
          "at most")
    return run_fit("pretrain", model, task, optimizer, data, config=config, vocab=vocab)


def run(args) -> int:
    from minitransformer.chem import Vocab
    from minitransformer import cli
    from minitransformer.molecules.predicting import view_probabilities
    from minitransformer.chem.datasets.properties import load_labelled
    from minitransformer.checkpoint import model_from_checkpoint
    from minitransformer.metrics import multilabel_roc_auc
    from minitransformer.models import Encoder, EncoderConfig
    from minitransformer.train.tasks import PropertyTask
    from minitransformer.train import TrainConfig
    from minitransformer.train.history import tagged

    t0 = time.perf_counter()
    s = resolve_settings(args)
    out = Path(args.out)
    # The folder belongs to one run: reusing it needs --force (this demo cannot resume).
    cli.claim_run_folder(out, None, args.force, resume_places=None)
    table = load_labelled(args.data)
    if args.quick:
        table = table.take(range(min(400, len(table.smiles))))
    train_i, val_i, test_i = split_indices(table, args.split, args.seed)
    train, val, test = table.take(train_i), table.take(val_i), table.take(test_i)
    if not train.smiles or not val.smiles or not test.smiles:
        raise ValueError(f"{table.description}: not enough molecules to split three ways: {len(table.smiles)} "
                         "usable; the split needs at least 10 labelled molecules (more for --split scaffold); "
                         "add molecules to the data")
    extra = []  # other molecules to pretrain on (--pretrain-data), never the held-out ones
    if args.pretrain and s["pretrain_data"] != "train":
        extra = pretraining_molecules(s, val.smiles + test.smiles, user_chose=args.pretrain_data is not None)
    vocab = Vocab.build(train.smiles + extra, extras=(Vocab.CLS, Vocab.MASK))
    too_long = [s_ for s_ in table.smiles if len(vocab.encode(s_, cls=True)) > s["max_len"]]
    if too_long:
        raise ValueError(f"{len(too_long)} molecules need more than max_len={s['max_len']} tokens, "
                         f"e.g. {too_long[0][:60]}...; shorten them or raise max_len")
    K = len(table.tasks)
    print(f"split ({args.split}): {len(train.smiles)} train / {len(val.smiles)} val / {len(test.smiles)} test; "
          f"{K} tasks; vocabulary of {len(vocab)} tokens")

    # Positives are rare (2-16% per assay); weighting them by #neg/#pos balances each task.
    present = ~np.isnan(train.labels)  # (N, K)
    pos = np.nansum(train.labels, axis=0)  # (K,)
    neg = present.sum(axis=0) - pos  # (K,)
    pos_weight = np.sqrt(neg / np.maximum(pos, 1)) if s["pos_weight"] else None  # (K,)

    config = EncoderConfig(vocab_size=len(vocab), max_len=s["max_len"], pad_id=vocab.pad_id, seed=args.seed,
                           mlm_head=args.pretrain, n_outputs=K, **s["model"])
    model = Encoder(config)
    print(f"model: {model.num_parameters():,} weights; pretraining {'on' if args.pretrain else 'off'}")
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, args.argv, args.seed, args.data,
                         cli.data_fingerprint(train.smiles, val.smiles, test.smiles))
    pre_history = []
    if args.pretrain:
        pre = pretrain(model, vocab, extra or train.smiles, s, args, out)
        pre_history = tagged(pre.history, "pretrain")
    t_pre = time.perf_counter() - t0

    task = PropertyTask(vocab.pad_id, pos_weight=pos_weight)
    train_data = LabelledEpochs(train.smiles, train.labels, vocab, args.seed, s["augment"], s["max_len"])
    val_data = list(zip([vocab.encode(x, cls=True) for x in val.smiles], val.labels))
    steps = max(2, -(-len(train.smiles) // s["batch_size"]) * s["epochs"])
    optimizer = recipes.make_optimizer(s, model, steps)
    train_config = TrainConfig(epochs=s["epochs"], batch_size=s["batch_size"], clip=1.0, patience=s["patience"],
                               metric="val_auc", mode="max", seed=args.seed, eval_batch_size=128,
                               max_time=None if s["max_time"] is None else max(60.0, s["max_time"] - t_pre),
                               out_dir=str(out), quiet=args.quiet)
    run_info = {"split": args.split, "pretrain": args.pretrain, "pretrain_data": s["pretrain_data"],
                "pretrain_molecules": len(extra) or (len(train.smiles) if args.pretrain else 0),
                "quick": args.quick, "seed": args.seed, "settings": s,
                "data": table.description, "cleaning": table.clean_summary, "tasks": table.tasks,
                "sizes": [len(train.smiles), len(val.smiles), len(test.smiles)]}
    cli.write_json(out / "config.json", {"model": config.to_dict(), "train": train_config.__dict__, "run": run_info})
    trainer = cli.run_fit("train", model, task, optimizer, train_data, val_data, config=train_config, vocab=vocab,
                          extra_meta={"run": run_info}, earlier_history=pre_history)
    t_train = time.perf_counter() - t0

    # Test: the best epoch's weights, predictions averaged over several writings of each molecule.
    model, _ = model_from_checkpoint(out / "best.npz")
    model.eval()
    per_view = view_probabilities(model, vocab, test.smiles, s["tta"], args.seed, s["max_len"])  # tta x (N, K)
    probs = np.mean(per_view, axis=0)  # (N, K): the average over the writings
    auc = multilabel_roc_auc(test.labels, probs, mask=~np.isnan(test.labels), names=table.tasks)
    single = multilabel_roc_auc(test.labels, per_view[0], mask=~np.isnan(test.labels))
    write_predictions(out / "predictions.csv", test, probs)
    cli.save_curves(pre_history + tagged(trainer.history, "train"), out / "curves.png",
                    panels=(("loss (MLM cross-entropy, then BCE)", ("train_loss", "val_loss")),
                            ("validation ROC-AUC", ("val_auc",))))
    if args.plot_attention:
        from minitransformer.cli.attention import plot_attention_example
        plot_attention_example(model, vocab, test.smiles, out)

    per_task = {name: None if np.isnan(v) else v for name, v in auc["per_label"].items()}  # JSON: no NaN
    metrics = {"test_auc_mean": auc["mean"], "test_auc_mean_single_view": single["mean"],
               "test_auc": per_task, "test_skipped": auc["skipped"], "val_auc_best": trainer.best,
               "split": args.split,
               "pretrain": args.pretrain, "epochs": len(trainer.history), "best_epoch": trainer.best_epoch,
               "stop_reason": trainer.stop_reason, "pretrain_epochs": len(pre_history),
               "pretrain_time_s": t_pre, "train_time_s": t_train, "wall_time_s": time.perf_counter() - t0,
               "parameters": model.num_parameters(), "tta": s["tta"], "quick": args.quick,
               "augmentation": augmentation(s)}
    cli.write_json(out / "metrics.json", metrics)
    pretrained = f"pretraining {cli.format_duration(t_pre)}, {len(pre_history)} epochs; " if pre_history else ""
    rows = [("wall time", f"{cli.format_duration(metrics['wall_time_s'])} ({pretrained}fine-tuning "
                          f"{metrics['epochs']} epochs, best {metrics['best_epoch']}, stopped: {metrics['stop_reason']})"),
            ("split", f"{args.split}: {len(train.smiles)} / {len(val.smiles)} / {len(test.smiles)}"),
            ("augmentation", metrics["augmentation"]),
            ("best validation ROC-AUC", f"{trainer.best:.4f}")]
    rows += [(f"  test ROC-AUC {name}", "n/a (one class)" if value is None else f"{value:.4f}")
             for name, value in per_task.items()]
    rows += [("test ROC-AUC, mean", f"{auc['mean']:.4f} ({s['tta']} SMILES per molecule; "
                                    f"{single['mean']:.4f} with one)")]
    cli.print_table(rows, footer=cli.outputs_line(out))
    return 0


def augmentation(s: dict) -> str:
    """The random-writing augmentation of a run, in words (metrics.json and the summary)."""
    train = ("none (each molecule as written in the file)" if s["augment"] == 0 else
             f"a fresh random SMILES of each training molecule every epoch (probability {s['augment']:g})")
    return f"training: {train}; test: the predictions of {s['tta']} random SMILES averaged per molecule" \
        if s["tta"] > 1 else f"training: {train}; test: the file's SMILES"


def write_predictions(path, test, probs) -> None:
    """CSV: smiles, then predicted probability and true label (empty if missing) per task (written atomically)."""
    import csv
    import io
    from minitransformer.cli import write_text
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["smiles"] + [f"p_{t}" for t in test.tasks] + list(test.tasks))
    for smiles, p, y in zip(test.smiles, probs, test.labels):
        w.writerow([smiles] + [f"{v:.4f}" for v in p] + ["" if np.isnan(v) else int(v) for v in y])
    write_text(path, f.getvalue())
