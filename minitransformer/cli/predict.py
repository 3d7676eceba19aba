"""``minitransformer predict``: a trained property model's predictions for the user's molecules.

The molecules come from a CSV file with a ``smiles`` column (an ``id`` or
``name`` column is kept), a ``.smi`` file (SMILES, then an optional name), or
standard input (``-``). Each molecule is written ``--views`` times (as given,
then as random SMILES) and the model's probabilities are averaged, as the
training command does for its test set (see
:mod:`minitransformer.molecules.predicting`). The output CSV has one probability per
assay, and for a molecule the model cannot read (RDKit cannot parse it, it has
tokens the model never saw, or it is too long) ``readable`` is 0 and ``reason``
says why; such a molecule never stops the others.
"""
from __future__ import annotations

import sys


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "predict", help="predict properties of your molecules (train property)",
                        example="minitransformer predict runs/property/best.npz my_molecules.csv --out predictions.csv\n"
                                "echo 'CCO ethanol' | minitransformer predict runs/property/best.npz -")
    p.add_argument("checkpoint", type=cli.existing_file("checkpoint"),
                   help="best.npz of a `minitransformer train property` run")
    p.add_argument("molecules", type=cli.input_file("molecule file"),
                   help="a .csv (with a smiles column) or .smi file, or - for standard input")
    p.add_argument("--out", default=None, type=cli.output_file,
                   help="write the CSV to this file (default: print it)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument("--views", type=cli.int_at_least(1, 256, "each view is a full pass of the model; averaging "
                                                    "more than a few dozen changes nothing"), default=8,
                   help="writings of each molecule averaged (1 = only the SMILES as given; default: 8)")
    p.add_argument("--seed", type=cli.seed, default=0, help="seed of the random writings (default: 0)")
    p.add_argument("--backend", default=None, choices=("numpy", "cupy"))
    p.set_defaults(run=run)
    return p


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.molecules.predicting import PropertyPredictor, predictions_csv, write_predictions_csv
    from minitransformer.chem.datasets.user_files import read_user_smiles
    cli.refuse_overwrite(args.out, args.force, inputs=(args.molecules, args.checkpoint))  # before any work
    predictor = PropertyPredictor.from_checkpoint(args.checkpoint)
    ids, smiles = read_user_smiles(args.molecules)
    if not smiles:
        raise ValueError(f"{args.molecules}: no molecules in it; give one SMILES per line, or a CSV with a "
                         "smiles column")
    probs, ok, reasons = predictor.predict(smiles, views=args.views, seed=args.seed)
    if not ok.any():  # as translate: a file of rows that only say why is no prediction
        raise ValueError(f"nothing to predict: {smiles[0][:60]!r}: {reasons[0]}"
                         + (f" (and {len(smiles) - 1} more the model cannot read)" if len(smiles) > 1 else ""))
    if args.out is None:
        sys.stdout.write(predictions_csv(ids, smiles, probs, ok, reasons, predictor.task_names))
    else:
        write_predictions_csv(args.out, ids, smiles, probs, ok, reasons, predictor.task_names,
                              overwrite=args.force)
        print(f"wrote predictions of {len(predictor.task_names)} assays for {len(smiles)} molecules to {args.out}")
    if not ok.all():
        print(f"{int((~ok).sum())} of {len(smiles)} molecules could not be read; their rows say why "
              "(readable=0, reason)", file=sys.stderr)
    return 0
