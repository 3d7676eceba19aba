"""``minitransformer translate``: canonicalize SMILES with a trained Seq2Seq model.

SMILES come from the command line, a file (``--input``) or standard input
(``--input -``). Each is decoded greedily (``--beam 1``) or by beam search, and
the output, one tab-separated line per molecule, gives the source, the model's
answer and whether it equals RDKit's canonical SMILES (see
:mod:`minitransformer.molecules.canonicalization`). An input RDKit cannot read, or
one too long for the model, gets its line too, with the reason, rather than
stopping the whole batch.
"""
from __future__ import annotations

import sys


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "translate", help="canonicalize SMILES with a trained model (train seq2seq)",
                        example="minitransformer translate runs/seq2seq/best.npz 'OCC(C)c1ccccc1' 'C1=CC=CC=C1'\n"
                                "minitransformer translate runs/seq2seq/best.npz --input molecules.smi --beam 1")
    p.add_argument("checkpoint", type=cli.existing_file("checkpoint"),
                   help="best.npz or last.npz of a `minitransformer train seq2seq` run")
    p.add_argument("smiles", nargs="*", type=cli.smiles_text, help="SMILES to canonicalize (or use --input)")
    p.add_argument("--input", default=None, type=cli.input_file("SMILES file"),
                   help="a .smi/.csv/.txt file of SMILES, or - for standard input")
    p.add_argument("--beam", type=cli.int_at_least(1, 64, "the beams of every molecule are held at once"), default=5,
                   help="beam size (1 = greedy; default: 5)")
    p.add_argument("--out", default=None, type=cli.output_file,
                   help="write the tab-separated results to this file (default: print them)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument("--backend", default=None, choices=("numpy", "cupy"))
    p.set_defaults(run=run, more_positionals="smiles")
    return p


def load_translator(path):
    """(model, vocabulary) of an encoder-decoder's checkpoint (Seq2Seq or RNNSeq2Seq) with a
    vocabulary, or a one-line ValueError."""
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    from minitransformer.chem import Vocab
    ckpt = load_checkpoint(path)
    if ckpt.vocab is None or ckpt.model_type not in ("Seq2Seq", "RNNSeq2Seq"):
        without = "" if ckpt.vocab else " without a vocabulary"
        raise ValueError(f"{path} holds a model of kind {ckpt.model_type}{without}; "
                         "translate needs an encoder-decoder's checkpoint (Seq2Seq or RNNSeq2Seq) with a "
                         "vocabulary, as written by "
                         "`minitransformer train seq2seq` (best.npz or last.npz)")
    model, _ = model_from_checkpoint(ckpt)
    return model, Vocab.from_json(ckpt.vocab)


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.chem import canonical
    from minitransformer.molecules.canonicalization import translate
    from minitransformer.chem.datasets.user_files import read_user_smiles
    if not args.smiles and args.input is None:
        raise ValueError("no SMILES given; list them after the checkpoint, or pass --input FILE (- for stdin)")
    if args.smiles and args.input is not None:
        raise ValueError("give SMILES on the command line or --input, not both")
    cli.refuse_overwrite(args.out, args.force, inputs=(args.input, args.checkpoint))  # before any work
    sources = list(args.smiles) if args.smiles else read_user_smiles(args.input)[1]
    if not sources:
        raise ValueError(f"{args.input}: no SMILES in it; give one molecule per line, or a CSV with a smiles "
                         "column")
    model, vocab = load_translator(args.checkpoint)
    reasons = [vocab.unreadable_reason(s, model.config.max_len) for s in sources]
    problems = {i: why for i, why in enumerate(reasons) if why is not None}
    if problems and len(problems) == len(sources):
        i = min(problems)
        raise ValueError(f"nothing to translate: {sources[i][:60]!r}: {problems[i]}"
                         + (f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""))
    todo = [i for i in range(len(sources)) if i not in problems]
    answers = dict(zip(todo, translate(model, vocab, [sources[i] for i in todo], beam=args.beam)))
    lines = ["source\tprediction\tverdict"]
    for i, s in enumerate(sources):
        if i in problems:
            lines.append(f"{s}\t\tnot translated: {problems[i]}")
            continue
        pred, target = answers[i][0], canonical(s)
        lines.append(f"{s}\t{pred}\t" + ("correct" if pred == target else f"differs from RDKit's {target}"))
    text = "\n".join(lines) + "\n"
    if args.out:
        cli.write_text(args.out, text, overwrite=args.force)
        print(f"wrote {len(sources)} translations to {args.out}"
              + (f" ({len(problems)} not translated, the reason is on their line)" if problems else ""))
    else:
        sys.stdout.write(text)
    return 0
