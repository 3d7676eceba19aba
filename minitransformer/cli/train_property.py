"""``minitransformer train property``: predict the 12 Tox21 toxicity assays with a transformer encoder.

The flow, top to bottom (the skeleton is
:func:`~minitransformer.cli.training.run_training`): load Tox21 (12 binary labels per
molecule, many missing) -> split by molecule (random or by scaffold) -> build a
vocabulary with <cls> and <mask> -> (optionally) pretrain the encoder as a masked
language model on the training SMILES -> fine-tune it to predict all 12 labels from the
final state of the <cls> token, with a masked sigmoid cross-entropy that skips missing
labels -> keep the epoch with the best validation ROC-AUC (the area under the ROC curve:
the chance that a random active molecule scores above a random inactive one; 0.5 is
guessing) -> report the test ROC-AUC of every assay and their mean.

Molecules are written as a fresh random SMILES each epoch (the same molecule, atoms
visited in a random order), which multiplies the small training set; at test time the
predictions of several writings of each molecule are averaged. Beside the <cls> state the
head reads RDKit's 2D descriptors of the molecule (:mod:`minitransformer.chem.descriptors`;
``--descriptors off`` drops them). ``--encoder`` starts from an encoder pretrained once
(:mod:`.pretrained_encoder`); ``--seeds`` and ``--ensemble`` measure over several runs
(:mod:`.property_runs`).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from minitransformer.cli.property_runs import PROBABILITIES, VAL_PROBABILITIES
from minitransformer.cli.training import (Data, Phase, TrainingCommand, apply_overrides, invocation, preset,
                                          set_budgets)
from minitransformer.models import EncoderConfig
from minitransformer.train.recipe import PropertyRecipe, model, quick_model, sized

PRESET = PropertyRecipe(
    model=model(EncoderConfig, n_layers=4, pos="learned", tie_embeddings=True, emb_dropout=0.1,
                attn_dropout=0.1, resid_dropout=0.1),  # the encoder; the head is the recipe's own (head_hidden)
    max_len=256,  # <cls> + tokens + <eos>; Tox21's longest molecule has 240 tokens
    lr=5e-4, warmup=200, batch_size=32, epochs=30, patience=8,
    augment=1.0, tta=8, pos_weight=True, max_time=11 * 60,  # max_time: the fine-tuning's share
    pretrain_lr=1e-3,
    descriptors=True,  # validation ROC-AUC 0.840 -> 0.847 (random split), 0.750 -> 0.761 (scaffold): docs/RESULTS.md
)
# --pretrain: a masked language model first, on MOSES by default: one pass over 250,000
# molecules in at most 15 minutes (measured, docs/RESULTS.md: random split 0.832 -> 0.846).
# On the training split's own molecules (--pretrain-data train, or when MOSES cannot be had)
# 12 epochs in at most 5 minutes. The pretraining budget comes on top of the 11 minutes.
PRETRAIN = {"moses": dict(pretrain_epochs=1, pretrain_limit=250_000, pretrain_max_time=15 * 60),
            "other": dict(pretrain_epochs=12, pretrain_limit=None, pretrain_max_time=5 * 60)}
QUICK = dict(model=quick_model(EncoderConfig, n_layers=2, tie_embeddings=True),
             epochs=2, pretrain_epochs=1, pretrain_limit=300, batch_size=32, warmup=5, patience=None,
             max_time=None, pretrain_max_time=None, tta=2)
#: --quick: the first molecules of the table only
QUICK_MOLECULES = 400


def add_parser(kinds):
    from minitransformer import cli
    from minitransformer.cli.property_runs import seeds_list
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
    p.add_argument("--pretrain-epochs", type=cli.int_at_least(0, cli.MAX_EPOCHS), default=None)
    p.add_argument("--pretrain-data", default=None, type=cli.data_source(("train", "moses", "druglike")),
                   help="molecules for --pretrain: moses (the default; the training split's when MOSES cannot be "
                        "had), train (the training split's), druglike or a file (every molecule of the labelled "
                        "table is removed from it)")
    p.add_argument("--pretrain-limit", type=count_or_all, default=None,
                   help="pretrain on at most this many molecules of --pretrain-data, or all (on MOSES: 1.58 million; "
                        "give --pretrain-minutes 0 too for the whole pass, about 55 minutes on one thread)")
    p.add_argument("--pretrain-minutes", type=cli.number(0, cli.MAX_MINUTES), default=None,
                   help="time budget of the pretraining (default: 15 minutes on MOSES, else 5; 0 = none); it "
                        "counts against --max-minutes, whose default grows by it")
    p.add_argument("--augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a training molecule as a random SMILES each epoch")
    p.add_argument("--tta", type=cli.int_at_least(1, 256, "each is a full pass of the model"), default=None,
                   help="writings averaged per test molecule: the file's SMILES and N-1 random ones (1 = the "
                        "file's SMILES only)")
    p.add_argument("--encoder", default=None, type=cli.existing_file("encoder checkpoint"),
                   help="fine-tune this pretrained encoder instead of pretraining (the pretrain/last.npz of an earlier "
                        "train property --pretrain run on the same --data): its pretraining cost is paid once")
    p.add_argument("--seeds", type=seeds_list, default=None,
                   help="one run per seed (e.g. 0,1,2; on the random split each seed also draws the split), then "
                        "their mean test ROC-AUC and its standard deviation over seeds (OUT/seed-S, OUT/metrics.json)")
    p.add_argument("--ensemble", type=cli.int_at_least(1, 32, "each is a whole training run"), default=1,
                   help="train N models per seed on the same split and average their test probabilities")
    p.add_argument("--head-hidden", type=cli.int_at_least(0, cli.MAX_WIDTH), default=None,
                   help="a hidden layer of this many units in the classifier head (0: one linear layer, the preset)")
    p.add_argument("--graph", type=graph_distance, default=None, metavar="on|off|N",
                   help="attention knows the molecule's bonds: a learned bias per head on every pair of tokens by "
                        "their relation in the molecule (bonds apart, clipped at N; on: 8), read from RDKit's parse "
                        "of each writing (default: off)")
    p.add_argument("--descriptors", choices=("on", "off"), default=None,
                   help="the head also reads RDKit's 2D descriptors of each molecule, scaled on the training split "
                        "(default: on)")
    p.set_defaults(run=run)
    return p


def count_or_all(text: str) -> int | str:
    """``type=`` for --pretrain-limit: a count >= 1, or ``all``."""
    import argparse

    from minitransformer import cli
    if text.strip().lower() == "all":
        return "all"
    try:
        return cli.int_at_least(1, cli.MAX_MOLECULES, "they are held in memory")(text)
    except argparse.ArgumentTypeError as err:
        raise argparse.ArgumentTypeError(f"must be all or a count: {err}") from None


def graph_distance(text: str) -> int:
    """``type=`` for --graph: ``off`` (0), ``on`` (the relations' default clipping distance) or a distance >= 2."""
    import argparse

    from minitransformer.chem.graph import MAX_DISTANCE
    word = text.strip().lower()
    if word in ("on", "off"):
        return MAX_DISTANCE if word == "on" else 0
    try:
        value = int(word)
    except ValueError:
        value = 0
    if not 2 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be on, off or a distance in bonds from 2 to 64, got {text!r}")
    return value


def resolve_recipe(args) -> PropertyRecipe:
    """The preset, with --pretrain's phase, --quick and the overrides of the command line applied."""
    data = args.pretrain_data or ("train" if args.quick else "moses")  # a quick run fetches nothing
    r = dataclasses.replace(preset({"default": PRESET}, args, {}), data=args.data, pretrain_data=data,
                            split=args.split, pretrain=args.pretrain, fallback=args.pretrain_data is None,
                            encoder=args.encoder, seeds=tuple(args.seeds or ()), ensemble=args.ensemble,
                            **PRETRAIN["moses" if data == "moses" else "other"])
    if args.quick:
        r = dataclasses.replace(r, **QUICK)
    r = apply_overrides(r, args, ("epochs", "pretrain_epochs", "lr", "batch_size", "augment", "tta",
                                  "head_hidden"))
    if args.pretrain_limit is not None:
        r = dataclasses.replace(r, pretrain_limit=None if args.pretrain_limit == "all" else args.pretrain_limit)
    if args.descriptors is not None:
        r = dataclasses.replace(r, descriptors=args.descriptors == "on")
    if args.graph is not None:
        if args.encoder:
            raise ValueError("--graph and --encoder: the pretrained encoder was built with or without the graph "
                             "bias, and keeps it; drop --graph")
        r = dataclasses.replace(r, model=dataclasses.replace(r.model, graph_max_distance=args.graph))
    if args.encoder and args.pretrain:
        raise ValueError("--encoder and --pretrain: the encoder given is pretrained already; drop one of them")
    if args.encoder:  # refused before the run folder is claimed (the table's own check comes with the data)
        from minitransformer.cli.pretrained_encoder import check_encoder
        check_encoder(args.encoder)
    if not args.pretrain:  # no first phase (whatever its options say)
        r = dataclasses.replace(r, pretrain_epochs=0)
    return set_budgets(r, args, pretraining=args.pretrain, pretraining_adds_time=args.pretrain)


def pretraining_molecules(recipe: PropertyRecipe, held_out) -> tuple[PropertyRecipe, list]:
    """The molecules of ``recipe.pretrain_data`` without the ``held_out`` ones (every molecule of
    the labelled table, so that the encoder serves every split: :mod:`.pretrained_encoder`). When the
    default MOSES cannot be had (no files, offline), the training split's own molecules
    take its place (``[]`` comes back, with the recipe of that shorter pretraining), said
    in one line; a --pretrain-data the user named (``recipe.fallback`` False) is never replaced."""
    from minitransformer.chem import canonical
    from minitransformer.chem.datasets.lm_data import pretraining_or_fallback
    extra = pretraining_or_fallback(recipe.pretrain_data, not recipe.fallback, "pretraining on the training split's "
                                    "molecules instead", exclude={canonical(x) for x in held_out},
                                    limit=recipe.pretrain_limit)
    if extra is not None:
        return recipe, extra
    recipe = dataclasses.replace(recipe, pretrain_data="train", **PRETRAIN["other"])
    if recipe.fine_tune_time is not None:  # the default budget follows the shorter pretraining
        recipe = dataclasses.replace(recipe, max_time=recipe.fine_tune_time + recipe.pretrain_max_time)
    return recipe, []


class TrainProperty(TrainingCommand):
    """``train property``: what differs from the other training commands."""

    kind = "property"
    panels = (("loss (MLM cross-entropy [+ descriptors' squared error], then BCE)", ("train_loss", "val_loss")),
              ("validation ROC-AUC", ("val_auc",)))

    def settings(self, args):
        return resolve_recipe(args), invocation(args, args.pretrain_data, args.encoder)

    def load(self, recipe, resume=None):
        """Tox21 (or the user's table), split by molecule, the pretraining molecules (or a pretrained
        encoder), the vocabulary."""
        from minitransformer.chem import Vocab
        from minitransformer.chem.datasets.properties import load_labelled, split_rows
        from minitransformer.chem.descriptors import split_descriptors
        from minitransformer.cli.pretrained_encoder import load_encoder
        table = load_labelled(recipe.data)
        if recipe.quick:
            table = table.take(range(min(QUICK_MOLECULES, len(table.smiles))))
        split_seed = recipe.seed if recipe.split_seed is None else recipe.split_seed
        train, val, test = (table.take(rows) for rows in split_rows(table.smiles, recipe.split, split_seed))
        if not train.smiles or not val.smiles or not test.smiles:
            raise ValueError(f"{table.description}: not enough molecules to split three ways: {len(table.smiles)} "
                             "usable; the split needs at least 10 labelled molecules (more for --split scaffold); "
                             "add molecules to the data")
        for name, part in (("validation", val), ("test", test)):  # ROC-AUC needs a task with both classes
            if not any(set(np.unique(column[~np.isnan(column)])) == {0.0, 1.0} for column in part.labels.T):
                raise ValueError(f"{table.description}: the {name} split ({len(part.smiles)} molecules) has no task "
                                 "with both a 0 and a 1 label, so its ROC-AUC cannot be measured; add molecules "
                                 "(positives above all), or try another --seed or --split")
        extra = []  # other molecules to pretrain on (--pretrain-data), none of the table's
        if recipe.pretrain and recipe.pretrain_data != "train":
            recipe, extra = pretraining_molecules(recipe, table.smiles)
        encoder = load_encoder(recipe.encoder, table.smiles) if recipe.encoder else None
        if encoder is not None:  # its vocabulary and length
            vocab, recipe = encoder.vocab, dataclasses.replace(recipe, max_len=encoder.config["max_len"])
        else:  # pretraining elsewhere: tokens of the whole table, so that the encoder serves any split
            vocab = Vocab.build((table.smiles if extra else train.smiles) + extra, extras=(Vocab.CLS, Vocab.MASK))
        too_long = [x for x in table.smiles if len(vocab.encode(x, cls=True)) > recipe.max_len]
        if too_long:
            raise ValueError(f"{len(too_long)} molecules need more than max_len={recipe.max_len} tokens, "
                             f"e.g. {too_long[0][:60]}...; shorten them or raise max_len")
        print(f"split ({recipe.split}): {len(train.smiles)} train / {len(val.smiles)} val / {len(test.smiles)} test; "
              f"{len(table.tasks)} tasks; vocabulary of {len(vocab)} tokens")
        features = split_descriptors(train, val, test) if recipe.descriptors else None
        return recipe, Data(vocab, train.smiles, val.smiles, test.smiles, extra, table.description,
                            table.clean_summary, own=PropertyData(table, train, val, test, features, encoder))

    def describe(self, run):
        if run.data.own.encoder is not None:
            return f"fine-tuning the pretrained encoder {run.data.own.encoder.path}"
        return f"pretraining {'on' if run.recipe.pretrain_epochs else 'off'}"

    def build_model(self, recipe, data):
        """A property model with one output per assay (when it pretrains, its encoder is trained first
        under a masked-token head: :meth:`pretraining`), or one around the pretrained encoder given."""
        from minitransformer.models import PropertyModel, PropertyModelConfig, fine_tuning_model
        vocab, own = data.vocab, data.own
        n_features = 0 if own.features is None else own.features.train.shape[1]
        head = dict(n_outputs=len(own.table.tasks), n_features=n_features, head_hidden=recipe.head_hidden)
        if own.encoder is not None:  # its architecture and weights; this run's head and dropouts
            dropouts = {k: v for k, v in recipe.model.to_dict().items() if k.endswith("dropout")}
            return fine_tuning_model(own.encoder.config, own.encoder.weights, seed=recipe.seed, **dropouts, **head)
        body = sized(recipe.model, vocab, recipe.seed)  # the recipe's encoder
        return PropertyModel(PropertyModelConfig.from_dict({**body.to_dict(), **head}))

    def facts(self, run):
        from minitransformer.cli.pretrained_encoder import EXCLUDES_TABLE, table_fingerprint
        from minitransformer.cli.run_folders import labels_fingerprint
        table, train, val, test, features, encoder = run.data.own
        r = run.recipe
        pretrained = len(run.data.extra) or (len(train.smiles) if r.pretrain else 0)
        split_seed = r.seed if r.split_seed is None else r.split_seed
        return {"split": r.split, "split_seed": split_seed if r.split == "random" else None,
                "pretrain": r.pretrain, "pretrain_data": run.recipe.pretrain_data,
                "pretrain_molecules": pretrained, EXCLUDES_TABLE: bool(run.data.extra), "tasks": table.tasks,
                "table_sha256": table_fingerprint(table.smiles),
                "labels_sha256": labels_fingerprint(table.tasks, train.labels, val.labels, test.labels),
                "encoder": None if encoder is None else encoder.path,
                "sizes": [len(train.smiles), len(val.smiles), len(test.smiles)],
                **({} if features is None else {"descriptors": features.scale.to_json()})}

    def pretraining(self, run):
        """A masked language model on the pretraining molecules (the training split's, or
        --pretrain-data's), written at random each epoch: the run's encoder under a masked-token head."""
        from minitransformer.chem.datasets.lm_data import RandomizedEpochs
        from minitransformer.models import MaskedLM
        from minitransformer.train.tasks import MLMTask
        r, vocab = run.recipe, run.data.vocab
        if r.pretrain_epochs == 0:
            return None
        smiles = run.data.extra or run.data.train
        if run.resumed_phase != "train":
            print(f"pretraining: masked language model on {len(smiles)} molecules, {r.pretrain_epochs} epochs "
                  "at most")
        ids = dict(mask_id=vocab.mask_id, vocab_size=len(vocab), pad_id=vocab.pad_id, special_ids=vocab.special_ids)
        data = RandomizedEpochs(smiles, vocab, seed=r.seed + 1, p=1.0, max_tokens=r.max_len,
                                encode=dict(cls=True), graph=run.model.config.graph_max_distance)
        masked = MaskedLM(run.model.encoder.config, encoder=run.model.encoder)  # the property model's own encoder
        return Phase("pretrain", MLMTask(**ids), data, len(smiles), r.pretrain_epochs, r.pretrain_max_time,
                     lr=r.pretrain_lr, model=masked)

    def training(self, run):
        """Fine-tuning: all the assays at once from the <cls> state, rare positives weighted up."""
        from minitransformer.chem.datasets.lm_data import LabelledEpochs
        from minitransformer.chem.graph import graph_ids
        from minitransformer.train.tasks import PropertyTask
        r, vocab, (table, train, val, test, features, _) = run.recipe, run.data.vocab, run.data.own
        # Positives are rare (2-16% per assay); weighting them by sqrt(#neg/#pos) balances each task.
        present = ~np.isnan(train.labels)  # (N, K)
        pos = np.nansum(train.labels, axis=0)  # (K,)
        neg = present.sum(axis=0) - pos  # (K,)
        pos_weight = np.sqrt(neg / np.maximum(pos, 1)) if r.pos_weight else None  # (K,)
        graph = run.model.config.graph_max_distance  # 0: no graph bias
        train_data = LabelledEpochs(train.smiles, train.labels, vocab, r.seed, r.augment, r.max_len,
                                    features=None if features is None else features.train, graph=graph)
        val_data = list(zip([graph_ids(vocab.encode(x, cls=True), x, graph) for x in val.smiles], val.labels,
                            *([] if features is None else [features.val])))
        return Phase("train", PropertyTask(vocab.pad_id, pos_weight=pos_weight), train_data, len(train.smiles),
                     r.epochs, run.budget, val_data=val_data, metric="val_auc", mode="max", patience=r.patience,
                     eval_batch_size=128)

    def evaluate(self, run, trainer):
        """Test ROC-AUC of every assay, the predictions averaged over several writings of each molecule."""
        from minitransformer.roc_auc import bootstrap_mean_auc, multilabel_roc_auc
        from minitransformer.molecules.predicting import view_probabilities
        r, (table, train, val, test, features, _) = run.recipe, run.data.own
        per_view = view_probabilities(run.model, run.data.vocab, test.smiles, r.tta, r.seed, r.max_len,
                                      features=None if features is None else features.test)  # tta x (N, K)
        probs = np.mean(per_view, axis=0)  # (N, K): the average over the writings
        auc = multilabel_roc_auc(test.labels, probs, mask=~np.isnan(test.labels), names=table.tasks)
        single = multilabel_roc_auc(test.labels, per_view[0], mask=~np.isnan(test.labels))
        interval = bootstrap_mean_auc(test.labels, probs, mask=~np.isnan(test.labels), seed=r.seed)
        write_predictions(run.out / "predictions.csv", test, probs)
        write_array(run.out / PROBABILITIES, probs)  # full precision, for an ensemble's average
        write_array(run.out / "test_labels.npy", test.labels)
        val_views = view_probabilities(run.model, run.data.vocab, val.smiles, r.tta, r.seed, r.max_len,
                                       features=None if features is None else features.val)  # tta x (N_val, K)
        write_array(run.out / VAL_PROBABILITIES, np.mean(val_views, axis=0))  # an ensemble is judged on these
        write_array(run.out / "val_labels.npy", val.labels)
        per_task = {name: None if np.isnan(v) else v for name, v in auc["per_label"].items()}  # JSON: no NaN
        return {"test_auc_mean": auc["mean"], "test_auc_mean_single_view": single["mean"], "test_auc": per_task,
                "test_auc_bootstrap": interval,
                "test_skipped": auc["skipped"], "val_auc_best": trainer.best, "split": r.split,
                "pretrain": r.pretrain, "tta": r.tta, "augmentation": augmentation(r)}, test.smiles

    def summary(self, run, m):
        from minitransformer import cli
        sizes = " / ".join(str(n) for n in run.info["sizes"])
        pretrained = f"pretraining {cli.format_duration(m['pretrain_time_s'])}, {m['pretrain_epochs']} epochs; " \
            if m.get("pretrain_epochs") else ""
        rows = [("wall time", f"{cli.format_duration(m['wall_time_s'])} ({pretrained}fine-tuning {m['epochs']} "
                              f"epochs, best {m['best_epoch']}, stopped: {m['stop_reason']})"),
                ("split", f"{m['split']}: {sizes}"),
                ("augmentation", m["augmentation"]),
                ("best validation ROC-AUC", f"{m['val_auc_best']:.4f}")]
        rows += [(f"  test ROC-AUC {name}", "n/a (one class)" if value is None else f"{value:.4f}")
                 for name, value in m["test_auc"].items()]
        boot = m["test_auc_bootstrap"]
        scored = sum(v is not None for v in m["test_auc"].values())
        of = "" if scored == len(m["test_auc"]) else f" of the {scored} assays with both classes"
        rows += [(f"test ROC-AUC, mean{of}", f"{m['test_auc_mean']:.4f} ({m['tta']} SMILES per molecule; "
                                             f"{m['test_auc_mean_single_view']:.4f} with one)"),
                 ("  95 % interval", "none: too few test molecules" if boot["low"] is None else
                  f"{boot['low']:.4f} - {boot['high']:.4f} (bootstrap over the test molecules, {boot['used']} "
                  f"draws; std {boot['std']:.4f})")]
        cli.print_table(rows, footer=cli.outputs_line(run.out))


COMMAND = TrainProperty()


class PropertyData(NamedTuple):
    """The command's own data: the table, its three splits, their descriptors (or None) and the
    pretrained encoder given with --encoder (or None)."""

    table: object  # LabelledSmiles
    train: object
    val: object
    test: object
    features: object  # SplitDescriptors | None
    encoder: object  # PretrainedEncoder | None


def run(args) -> int:
    from minitransformer.cli.property_runs import run_seeds
    return run_seeds(COMMAND, *COMMAND.settings(args))


def augmentation(r: PropertyRecipe) -> str:
    """The random-writing augmentation of a run, in words (metrics.json and the summary)."""
    train = ("none (each molecule as written in the file)" if r.augment == 0 else
             f"a fresh random SMILES of each training molecule every epoch (probability {r.augment:g})")
    return (f"training: {train}; test: the predictions of {r.tta} writings averaged per molecule (the file's SMILES "
            f"and {r.tta - 1} random)" if r.tta > 1 else f"training: {train}; test: the file's SMILES")


def write_array(path, a: np.ndarray) -> None:
    """``a`` as a .npy file, written atomically."""
    from minitransformer.atomic import atomic_write
    atomic_write(path, lambda f: np.save(f, a, allow_pickle=False))


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
