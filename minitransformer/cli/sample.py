"""``minitransformer sample``: new molecules from a trained generator (a DecoderLM or LSTMLM checkpoint).

Sampling draws one token at a time from the model's next-token distribution,
reshaped by the temperature (below 1: sharper, above 1: flatter), and
optionally cut to the ``top_k`` most likely tokens or to the smallest set whose
probabilities add up to ``top_p`` (nucleus sampling); see
:func:`minitransformer.generate.sample`. The KV cache makes each step cost one
token's worth of work. The output is a ``.smi`` file (one SMILES per line) or a
``.csv`` file that also says whether RDKit can read each molecule and gives its
canonical SMILES.
"""
from __future__ import annotations

import sys

from minitransformer.molecules.sampling import grammar_constraint, load_generator, sample_smiles

OUTPUT_SUFFIXES = (".smi", ".csv", ".txt")


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "sample", help="generate molecules from a trained generator (train lm)",
                        example="minitransformer sample runs/lm/best.npz -n 1000 --top-k 20 --out samples.smi\n"
                                "minitransformer sample runs/lm/best.npz -n 10 --temperature 0.8")
    p.add_argument("checkpoint", type=cli.existing_file("checkpoint"),
                   help="best.npz or last.npz of a `minitransformer train lm` run")
    p.add_argument("-n", "--count", type=cli.int_at_least(1, cli.MAX_SAMPLES, "they are held in memory; run the "
                                                         "command again, with another --seed, for more"),
                   default=100, help=f"number of molecules, at most {cli.MAX_SAMPLES:,} (default: 100)")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0, help="> 0 (default: 1)")
    p.add_argument("--top-k", type=cli.int_at_least(1, 1_000_000), default=None,
                   help="sample among the k most likely tokens only (default: all)")
    p.add_argument("--top-p", type=cli.number(0, 1, lo_open=True), default=None,
                   help="sample among the most likely tokens whose probabilities add up to p (default: 1)")
    p.add_argument("--seed", type=cli.seed, default=0)
    add_grammar_argument(p, "constrained sampling")
    p.add_argument("--out", default=None, type=cli.output_file,
                   help="write to this .smi (one SMILES per line) or .csv file (default: print the SMILES)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument("--backend", default=None, choices=("numpy", "cupy"))
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)
    return p


def add_grammar_argument(p, what: str, default: str = "off by default") -> None:
    """``--grammar [off|syntax|valence]`` (``sample`` and ``train lm``)."""
    p.add_argument("--grammar", nargs="?", const="syntax", default=None, choices=("off", "syntax", "valence"),
                   help=f"{what}: ban the tokens that break the SMILES syntax at each step (unclosed rings, "
                        "unbalanced parentheses, bonds at the end); --grammar valence also bans the ones that "
                        f"give an atom more bonds than RDKit allows; a feature of the sampler ({default})")


def csv_text(smiles) -> str:
    """CSV: smiles, valid (RDKit reads it: 1/0), canonical (RDKit's canonical SMILES, blank if invalid)."""
    import csv
    import io

    from minitransformer.chem import canonical
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["smiles", "valid", "canonical"])
    for s in smiles:
        c = canonical(s) if s else None
        writer.writerow([s, int(c is not None), c or ""])
    return buf.getvalue()


def run(args) -> int:
    from minitransformer import cli
    if args.out is not None and not args.out.lower().endswith(OUTPUT_SUFFIXES):
        raise ValueError(f"--out {args.out}: unknown file type; give a {', '.join(OUTPUT_SUFFIXES)} file")
    cli.refuse_overwrite(args.out, args.force, inputs=(args.checkpoint,))  # before any work
    model, vocab = load_generator(args.checkpoint)
    grammar = grammar_constraint(vocab, args.grammar)
    smiles = sample_smiles(model, vocab, args.count, temperature=args.temperature, top_k=args.top_k,
                           top_p=args.top_p, seed=args.seed, quiet=args.quiet, constraint=grammar)
    if args.out is None:
        sys.stdout.write("\n".join(smiles) + "\n")
        return 0
    text = csv_text(smiles) if args.out.lower().endswith(".csv") else "\n".join(smiles) + "\n"
    cli.write_text(args.out, text, overwrite=args.force)
    cut = reached_the_limit(smiles, model.config.max_len, vocab)
    print(f"wrote {len(smiles)} SMILES to {args.out}" + (f"; {cut} reached the length limit ({model.config.max_len - 1} "
                                                         "tokens) without ending, written as drawn" if cut else ""))
    return 0


def reached_the_limit(smiles: list, max_len: int, vocab) -> int:
    """How many samples filled every position after BOS without EOS: cut by the length limit, scored as
    written (as MOSES's CharRNN does), and worth knowing when many are. Counted in the model's own tokens
    (``vocab.tokens_of``); a ring size or mark read back as ``BAD_RING_SIZE`` or ``BAD_RING_MARK`` was one of them."""
    from minitransformer.chem.datasets.ring_marks import BAD_RING_MARK
    from minitransformer.chem.datasets.ring_sizes import BAD_RING_SIZE
    from minitransformer.chem.datasets.tokenizer import tokenize

    def length(s: str) -> int:
        bad = s.count(BAD_RING_SIZE) + s.count(BAD_RING_MARK)
        rest = s.replace(BAD_RING_SIZE, "").replace(BAD_RING_MARK, "")
        try:
            return len(vocab.tokens_of(rest)) + bad
        except ValueError:  # not a writing of this vocabulary: its SMILES tokens
            return len(tokenize(rest)) + bad
    return sum(length(s) >= max_len - 1 for s in smiles)
