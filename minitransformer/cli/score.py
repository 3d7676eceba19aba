"""``minitransformer score``: judge a file of generated SMILES, ours or another generator's.

The metrics (each defined in the table it prints, and in
:mod:`minitransformer.chem.judge.scoring`): validity, uniqueness, novelty against a
reference set, internal diversity (IntDiv1, IntDiv2), the KL score of
physico-chemical descriptor distributions, the nearest-neighbour (SNN),
fragment (Frag) and scaffold (Scaf) similarities to the reference, and the
Fréchet ChemNet Distance (FCD) to the whole reference, as MOSES and ``fcd_torch``
compute it, beside its floor (measured on split halves of the reference, and said so). The reference
is the molecules the generator was trained on: ``tox21``, ``druglike`` or a
file. The result is printed as a table, and written as JSON with ``--json``.

``--reference moses`` judges the samples the MOSES way instead
(:func:`~minitransformer.chem.judge.moses_report.moses_benchmark`): novelty and the KL
score against MOSES's ``train``, SNN, Frag and Scaf against ``test`` and
``test_scaffolds``, FCD/Test and FCD/TestSF, printed under the published MOSES
rows, with the FCD floor (as many MOSES training molecules) below.
"""
from __future__ import annotations

import json
import sys


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "score", help="judge a file of generated SMILES (validity, novelty, IntDiv, KL ...)",
                        example="minitransformer score runs/lm/samples.smi --reference tox21\n"
                                "minitransformer score other_model.csv --reference train.smi --json scores.json\n"
                                "minitransformer score runs/moses/samples.smi --reference moses")
    p.add_argument("samples", type=cli.input_file("SMILES file"),
                   help="the generated molecules: .smi/.txt (one per line) or .csv (smiles column), or - for stdin")
    p.add_argument("--reference", default=None,
                   type=cli.data_source(("tox21", "druglike", "moses"),
                                        refused={"none": "leave out --reference instead"}),
                   help="the training molecules, for novelty, KL, SNN, Frag and Scaf: tox21, druglike or a file "
                        "(default: none, and those metrics are n/a); moses: the MOSES benchmark table (novelty "
                        "and KL against its train file, SNN/Frag/Scaf against test and test_scaffolds)")
    p.add_argument("--json", default=None, type=cli.output_file, metavar="FILE",
                   help="also write the numbers as JSON to FILE (- for standard output, instead of the table)")
    p.add_argument("--force", action="store_true", help="overwrite the --json file if it exists")
    p.add_argument("--seed", type=cli.seed, default=42,
                   help="seed of the KL score's draw of reference molecules (default: 42, GuacaMol's own draw) "
                        "and of the FCD floor's split of the reference (IntDiv uses all pairs: no seed)")
    p.set_defaults(run=run)
    return p


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.chem.datasets.data import canonical
    from minitransformer.chem.judge.scoring import format_score, load_reference, score_smiles
    from minitransformer.chem.datasets.user_files import read_user_file
    to_stdout = args.json == "-"
    if not to_stdout:
        cli.refuse_overwrite(args.json, args.force, option="--json", inputs=(args.samples, args.reference))
    found = read_user_file(args.samples)
    samples = found.smiles
    if not samples:
        raise ValueError(f"{args.samples}: no SMILES in it; give one molecule per line, or a CSV with a "
                         "smiles column")
    if found.skipped():  # every other line is a sample, an empty one too
        print(f"{args.samples}: skipped {found.skipped()}; every other line is a sample", file=sys.stderr)
    if args.reference == "moses":
        return run_moses(args, samples, to_stdout)
    reference = load_reference(args.reference) if args.reference else None
    if reference is not None and not any(canonical(s) for s in reference):  # before any metric is computed
        raise ValueError(f"--reference {args.reference}: no valid molecule in it ({len(reference)} lines), so novelty, "
                         "KL, SNN, Frag, Scaf and FCD have nothing to compare with; give a file of SMILES")
    result = score_smiles(samples, reference, seed=args.seed)
    result.update(samples_file=str(args.samples), reference=args.reference, skipped_lines=found.skipped() or None)
    if to_stdout:
        sys.stdout.write(json.dumps(cli.json_safe(result), indent=1) + "\n")
        return 0
    sys.stdout.write(format_score(result))
    if args.json:
        cli.write_json(args.json, result, overwrite=args.force)
        print(f"wrote {args.json}")
    return 0


def run_moses(args, samples, to_stdout: bool) -> int:
    """``--reference moses``: every MOSES column, printed under the published rows, with the
    FCD floor (as many random MOSES training molecules as valid samples, against the same test sets)
    below."""
    from minitransformer import cli
    from minitransformer.chem.frechet.fcd import fcd_judge_or_note
    from minitransformer.chem.datasets.moses import load_moses
    from minitransformer.chem.judge.moses_report import markdown_table, moses_benchmark, moses_references
    print("scoring against MOSES: its 1.58M training molecules are canonicalized for novelty (minutes)",
          file=sys.stderr)
    judge, why = fcd_judge_or_note(moses_references(), load_moses("train"), seed=args.seed)
    row = moses_benchmark(samples, seed=args.seed, fcd_judge=judge)
    floor, floor_n = judge.floor(row["n_valid"]) if judge else ({}, 0)
    floor = floor and {"label": f"{floor_n:,} MOSES training molecules (the FCD floor)",
                       "fcd_test": floor["test"], "fcd_testsf": floor["test_scaffolds"]}
    row.update(samples_file=str(args.samples), reference="moses", fcd_floor=floor or None, fcd_note=why or None)
    if to_stdout:
        sys.stdout.write(json.dumps(cli.json_safe(row), indent=1) + "\n")
        return 0
    sys.stdout.write(markdown_table(row, label=f"{args.samples} ({row['n_samples']:,} samples)", floor=floor))
    sys.stdout.write((f"\n{why}.\n" if why else "") +
                     (f"Filters: {row['filters_note']}.\n" if row["filters_note"] else ""))
    if args.json:
        cli.write_json(args.json, row, overwrite=args.force)
        print(f"wrote {args.json}")
    return 0
