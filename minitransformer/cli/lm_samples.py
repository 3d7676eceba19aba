"""The end of ``train lm``: the final samples, bare and constrained, and their judgement.

:func:`draw_sample_sets` draws the bare model's samples and, with a grammar, as many
under it; :func:`judge_sample_sets` gives each set every metric
(:func:`~minitransformer.chem.judge.generator_report.judge_samples`), FCD against the held-out
molecules (MOSES: its two test sets) beside the floor, and for MOSES the benchmark
table. The summary prints them side by side (``train_lm.print_summary``).
"""
from __future__ import annotations

from pathlib import Path


def samples_file(label: str) -> str:
    """``samples.smi`` for the bare model's samples, ``samples_<grammar>.smi`` for a constrained sampler's."""
    return "samples.smi" if label == "bare" else f"samples_{label}.smi"


def draw_sample_sets(model, vocab, settings, args) -> dict:
    """The final samples, labelled: ``"bare"`` (the model's own distribution) and, when a grammar
    is set, the same number drawn under it with the same seed (``"valence"`` or ``"syntax"``)."""
    from minitransformer.cli.sample import grammar_constraint, sample_smiles
    draw = dict(n=settings["samples"], temperature=args.temperature, seed=args.seed, quiet=args.quiet)
    sets = {"bare": sample_smiles(model, vocab, **draw)}
    if settings["grammar"]:
        rule = grammar_constraint(vocab, settings["grammar"])
        sets[settings["grammar"]] = sample_smiles(model, vocab, constraint=rule, **draw)
    return sets


def judge_sample_sets(sets: dict, data, extra: list, args) -> dict:
    """Every metric of each sample set (:func:`~minitransformer.chem.judge.generator_report.judge_samples`),
    FCD against the held-out molecules (MOSES: against its test and scaffold-test sets) beside the
    floor, and for MOSES the benchmark table of each set (``moses_table.md``)."""
    from minitransformer.chem.frechet.fcd import fcd_judge_or_note
    from minitransformer.chem.judge.generator_report import judge_samples
    from minitransformer.chem.datasets.moses import is_moses, load_moses
    from minitransformer.chem.judge.moses_report import moses_references
    moses = is_moses(args.data)
    n = len(sets["bare"])
    if moses:  # novelty against all of MOSES's train and FCD against its two test sets, as MOSES counts them
        train = load_moses("train")
        references = moses_references()
        described = {"test": "MOSES test", "test_scaffolds": "MOSES scaffold test"}
        real = train
    else:  # FCD against the molecules never trained on (validation and test), the floor from training ones
        train, references = data.train, {"heldout": data.val + data.test}
        described = {"heldout": f"held-out molecules ({len(data.val) + len(data.test)}, validation + test)"}
        real = data.train
    judge, note = fcd_judge_or_note(references, real, n, seed=args.seed)
    if note:
        print(note)
    compare = references if moses else None  # SNN, Frag, Scaf against the test sets: the bare samples only
    report = {label: judge_samples(smiles, train, heldout=None if moses else data.val + data.test,
                                   all_training=data.train + extra if extra else None, fcd_judge=judge,
                                   references=compare if label == "bare" else None)
              for label, smiles in sets.items()}
    report.update(fcd_floor=judge.floor if judge else None, fcd_floor_n=judge.floor_n if judge else None,
                  fcd_reference=described, fcd_note=note or None)
    if moses:  # the MOSES table: the bare model's every metric beside the published models, then the grammar's
        from minitransformer import cli
        from minitransformer.chem.judge.moses_report import markdown_table, moses_row
        rows = {label: moses_row(report[label]) for label in sets}
        for label, row in rows.items():
            report[label]["moses"] = row
        floor = judge and {"label": f"{judge.floor_n:,} MOSES training molecules (the FCD floor)",
                           "fcd_test": judge.floor["test"], "fcd_testsf": judge.floor["test_scaffolds"]}
        table = markdown_table(rows["bare"], label=f"minitransformer, bare model ({n:,} samples)", floor=floor,
                               others={f"minitransformer, {label} grammar": row for label, row in rows.items()
                                       if label != "bare"})
        cli.write_text(Path(args.out) / "moses_table.md", table)
        print(table)
    return report
