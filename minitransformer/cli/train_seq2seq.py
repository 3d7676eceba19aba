"""``minitransformer train seq2seq``: a SMILES canonicalizer, an encoder-decoder transformer.

The task (see :mod:`minitransformer.molecules.canonicalization`): read a randomized
SMILES, write the canonical one. The flow, top to bottom (the skeleton is
:func:`~minitransformer.cli.training.run_training`): measure this machine and plan
the run in minutes (:mod:`~minitransformer.cli.seq2seq_time_plan`: by default one
pass over as many MOSES molecules as 15 minutes hold, decoding reserved) -> read
the molecules (MOSES: canonical and unique already, its own test file's molecules
as test; another set: cleaned, canonicalized, repeats dropped, a random 80/10/10
split), so that no test molecule is ever trained on -> one shared vocabulary for
both sides -> train a Seq2Seq model (cross-attention, one token table for source,
target and output, a decoder that may copy a source token by pointing at it) on
pairs (a fresh randomized SMILES of each training molecule every epoch -> its
canonical SMILES) -> decode the test sources with the best checkpoint, greedy and
beam search (beam 5), both with the KV cache -> score with RDKit (exact match,
top-5, validity, same molecule written differently; a MOSES run also on the Tox21
test molecules) -> write everything to the run folder.
"""
from __future__ import annotations

import dataclasses
import time

from minitransformer.chem.datasets.moses import is_moses
from minitransformer.cli.training import (Data, Phase, TrainingCommand, apply_overrides, invocation, preset,
                                          run_training, set_budgets)
from minitransformer.models import RNNSeq2Seq, RNNSeq2SeqConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.molecules.canonicalization import COLUMNS, MAX_TOKENS
from minitransformer.train.recipe import Seq2SeqRecipe, model, quick_model, sized, unsized

#: One token table (source embedding = target embedding = output projection), and a decoder that may
#: copy a source token by pointing at it (nn/pointer.py): on 110,000 MOSES pairs (one pass, same seed,
#: docs/RESULTS.md) the pointer took the validation loss from 0.503 to 0.279 and the held-out greedy
#: exact match from 0.4 % to 16.2 %.
ONE_TABLE = dict(share_embeddings=True, tie_embeddings=True, pointer=True, max_len=MAX_TOKENS)

PRESETS = {
    # Pre-LN, D=128, a deeper encoder than decoder (4 + 2 layers: it learns as much per epoch
    # as 3 + 3 and runs about 25% faster), sinusoidal positions, one token table for source,
    # target and output, a decoder that may point; AdamW, peak lr 2e-3 after 300 warmup steps,
    # cosine decay, batch 64 (32 took twice the steps at the same tokens/s on one process, but its
    # two ranks of 16 train 28% slower: 38.0% exact match against 48.3%, docs/RESULTS.md), no
    # dropout, no label smoothing. Planned in minutes
    # (cli/seq2seq_time_plan.py): one pass over as many MOSES molecules as this machine trains
    # on in 15 minutes, start to summary, each written at random; tested on 2,000 MOSES test
    # molecules and on the Tox21 test molecules (docs/RESULTS.md has its figures). With
    # --data tox21 the plan reads Tox21 whole and chooses the epochs.
    "default": Seq2SeqRecipe(
        model=model(Seq2SeqConfig, n_enc_layers=4, n_dec_layers=2, pos="sinusoidal", **ONE_TABLE),
        lr=2e-3, warmup=300, batch_size=64, epochs=1, max_time=15 * 60, time_budget=15 * 60, val_exact=200),
    # The longer run (--preset moses): the default model, one pass over 430,000 MOSES molecules,
    # within 28 minutes on 2 CPU cores (docs/RESULTS.md: greedy top-1 exact match 77.7%, beam-5
    # top-5 90.8%; 62.8% before the pointer).
    "moses": Seq2SeqRecipe(
        model=model(Seq2SeqConfig, n_enc_layers=4, n_dec_layers=2, pos="sinusoidal", **ONE_TABLE),
        lr=2e-3, warmup=300, batch_size=64, epochs=1, max_time=28 * 60, val_exact=200, limit=430_000),
}
# --model rnn: the attentional LSTM encoder-decoder (models/rnn_seq2seq.py) in the transformer's
# place, the rest of the preset kept: 2 + 2 LSTM layers of 208 states over 64-wide embeddings,
# Bahdanau's attention, 1.34M weights against the default transformer's 1.33M (vocabulary 40).
RNN_MODEL = unsized(RNNSeq2SeqConfig, d_model=64, hidden=208, n_layers=2, max_len=MAX_TOKENS)
RNN_QUICK = unsized(RNNSeq2SeqConfig, d_model=16, hidden=32, n_layers=1, max_len=MAX_TOKENS)
QUICK = dict(model=quick_model(Seq2SeqConfig, n_enc_layers=1, n_dec_layers=1, **ONE_TABLE),
             epochs=2, batch_size=32, warmup=10, max_time=None, time_budget=None, val_exact=20, limit=300)
#: The data of a run that names none: MOSES (Tox21 when MOSES cannot be had, and in a quick run).
DEFAULT_DATA = "moses"
BEAM = 5


def add_parser(kinds):
    from minitransformer import cli
    p = cli.add_command(kinds, "seq2seq", example="minitransformer train seq2seq --quick\n"
                                                  "minitransformer train seq2seq --epochs 30 --plot-attention",
                        help="a SMILES canonicalizer (encoder-decoder: any SMILES in, RDKit's canonical out)")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    p.add_argument("--model", default="transformer", choices=["transformer", "rnn"],
                   help="the canonicalizer: transformer (default) or rnn, the attentional LSTM encoder-decoder")
    p.add_argument("--attention", default=None, choices=["additive", "multiplicative"],
                   help="--model rnn's attention: additive (Bahdanau's, the default) or multiplicative (Luong's)")
    cli.add_common_arguments(p, out="runs/seq2seq", data_names=("tox21", "druglike", "moses"),
                             data_default="MOSES, one pass over as many molecules as --max-minutes holds; "
                                          "Tox21 when MOSES cannot be had, and with --quick")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--label-smoothing", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override the label smoothing")
    p.add_argument("--augment", choices=("fresh", "fixed"), default="fresh",
                   help="the training sources: a fresh random SMILES of each molecule every epoch (fresh, the "
                        "default), or one random SMILES per molecule for the whole run (fixed: no augmentation)")
    p.add_argument("--examples", type=cli.int_at_least(0, 1000), default=6, help="worked test examples to print")
    p.add_argument("--pointer", choices=("on", "off"), default=None,
                   help="the transformer's decoder may copy a source token by pointing at it (a pointer-generator; "
                        "default: the preset's)")
    p.add_argument("--limit", type=cli.int_at_least(10, cli.MAX_MOLECULES, "they are held in memory"), default=None,
                   help="use at most this many molecules of the data (MOSES: drawn at random; others: the first "
                        "ones; default: on MOSES as many as the time budget holds, else all)")
    p.set_defaults(run=run)
    return p


def resolve_recipe(args) -> Seq2SeqRecipe:
    """The preset, with --quick, --model and the overrides of the command line applied."""
    data = args.data or ("tox21" if args.quick else DEFAULT_DATA)
    r = dataclasses.replace(preset(PRESETS, args, QUICK), data=data, sources=args.augment, examples=args.examples,
                            fallback=args.data is None)
    r = apply_overrides(r, args, ("epochs", "lr", "batch_size", "label_smoothing", "limit"))
    if args.model == "rnn":
        for flag, given in (("--dropout", args.dropout), ("--pointer", args.pointer)):
            if given is not None:
                raise ValueError(f"{flag} needs --model transformer; the RNN model has no {flag[2:]} (leave it out)")
        r = dataclasses.replace(r, arch="rnn", model=dataclasses.replace(RNN_QUICK if args.quick else RNN_MODEL,
                                                                         attention=args.attention or "additive"))
    elif args.attention is not None:
        raise ValueError("--attention chooses the RNN model's attention; add --model rnn or leave it out")
    elif args.pointer is not None:
        r = dataclasses.replace(r, model=dataclasses.replace(r.model, pointer=args.pointer == "on"))
    r = set_budgets(r, args)
    if r.time_budget is not None:  # the preset plans in minutes: the budget is --max-minutes (0: none) or its own
        planned = tuple(count for count in ("limit", "epochs") if getattr(args, count) is None
                        and (count != "limit" or is_moses(r.data)))  # only MOSES's molecules are drawn at random
        r = dataclasses.replace(r, planned=planned, time_budget=r.max_time if planned else None)
    return r


def make_model(recipe: Seq2SeqRecipe, vocab):
    """The canonicalizer of ``recipe`` for ``vocab`` (one vocabulary on both sides): a Seq2Seq
    with one token table, or, with ``--model rnn``, an RNNSeq2Seq."""
    config = sized(recipe.model, vocab, recipe.seed)
    return RNNSeq2Seq(config) if recipe.arch == "rnn" else Seq2Seq(config)


def read_pairs(recipe: Seq2SeqRecipe, limit: int | None, quiet: bool = False):
    """``(recipe, pairs)``: the pairs' molecules of ``recipe.data`` (at most ``limit``). MOSES that
    cannot be had (no file, offline) falls back to Tox21 where the user named no data (one line says
    so; the recipe then names Tox21, read whole); ``quiet``: no log lines (the probe's first read)."""
    from minitransformer.chem.datasets.download import DownloadError
    from minitransformer.chem.datasets.seq2seq_data import prepare_pairs
    log = (lambda line: None) if quiet else print
    try:
        return recipe, prepare_pairs(recipe.data, seed=recipe.seed, max_tokens=MAX_TOKENS, limit=limit, log=log)
    except (DownloadError, FileNotFoundError) as e:
        if not (recipe.fallback and is_moses(recipe.data)):
            raise
        print(f"MOSES is not available ({str(e).split('. ')[0]}); the canonicalizer trains on Tox21 instead "
              "(--data tox21 says so and skips this line)")
    recipe = dataclasses.replace(recipe, data="tox21", limit=None,
                                 planned=tuple(c for c in recipe.planned if c != "limit"))
    return recipe, prepare_pairs("tox21", seed=recipe.seed, max_tokens=MAX_TOKENS)


def spread_evenly(n: int, k: int) -> list[int]:
    """``k`` indices (at most ``n``) spread evenly over ``range(n)``, first and last included: the validation
    molecules whose exact match each epoch reports. MOSES's validation molecules end its ordered training
    file, where neighbours are one chemical series (its first 200 share one scaffold), so the first ``k``
    would judge one series."""
    import numpy as np
    return [] if k == 0 or n == 0 else sorted({int(i) for i in np.linspace(0, n - 1, min(k, n)).round()})


class TrainSeq2Seq(TrainingCommand):
    """``train seq2seq``: what differs from the other training commands."""

    kind = "seq2seq"
    resume_places = ("last.npz",)
    panels = (("loss (nats per token)", ("train_loss", "val_loss")),
              ("validation accuracy", ("val_acc", "val_exact")))

    def settings(self, args):
        return resolve_recipe(args), invocation(args)

    def load(self, recipe, resume=None):
        """The pairs' molecules; a planned run first measures this machine on a few thousand of
        them (:mod:`~minitransformer.cli.seq2seq_time_plan`), then reads as many as it plans for."""
        from minitransformer.cli import seq2seq_time_plan as plan
        t0 = time.perf_counter()
        if recipe.planned and resume is not None:
            recipe = plan.kept_plan(recipe, resume)
        probing = bool(recipe.planned) and resume is None and recipe.time_budget is not None
        first = probing and "limit" in recipe.planned
        if first:
            print(f"measuring this machine on {plan.PROBE_MOLECULES:,} of MOSES's molecules")
        recipe, data = read_pairs(recipe, plan.PROBE_MOLECULES if first else recipe.limit, quiet=first)
        if probing:
            recipe = plan.time_planned(recipe, data, t0, make_model, MAX_TOKENS)
            if first and "limit" in recipe.planned:  # (a fallback to Tox21 reads it whole the first time)
                recipe, data = read_pairs(recipe, recipe.limit)
        return recipe, Data(data.vocab, data.train, data.val, data.test, None, data.description,
                            data.clean_summary, own=data)

    def build_model(self, recipe, data):
        return make_model(recipe, data.vocab)

    def facts(self, run):
        d = run.data
        return {"preset": run.recipe.preset, "augment": run.recipe.sources, "duplicates_dropped": d.own.duplicates,
                "split": [len(d.train), len(d.val), len(d.test)]}

    def training(self, run):
        """Pairs: a fresh random SMILES of each training molecule (or one fixed one) -> its canonical SMILES."""
        from minitransformer.chem.datasets.seq2seq_data import PairEpochs
        from minitransformer.molecules.canonicalization import exact_match_callback
        from minitransformer.train.tasks import Seq2SeqTask
        r, d, vocab = run.recipe, run.data.own, run.data.vocab
        train_data = PairEpochs(d.train, vocab, seed=r.seed, max_tokens=MAX_TOKENS, fresh=r.sources == "fresh",
                                share=run.ranks)
        picks = spread_evenly(len(d.val), r.val_exact)
        callbacks = [exact_match_callback(vocab, [d.val_src[i] for i in picks], [d.val[i] for i in picks])] \
            if r.val_exact else []
        return Phase("train", Seq2SeqTask(vocab.pad_id, r.label_smoothing), train_data, len(d.train), r.epochs,
                     run.budget, val_data=d.pairs("val"), callbacks=callbacks, metric="val_loss",
                     patience=r.patience, eval_batch_size=128)

    def evaluate(self, run, trainer):
        """Decode the test sources, greedy and beam search, and judge every answer."""
        from minitransformer.molecules.canonicalization import judge, score_translations, translate
        d, vocab, model = run.data.own, run.data.vocab, run.model
        t1 = time.perf_counter()
        greedy_out = translate(model, vocab, d.test_src)
        t_greedy = time.perf_counter() - t1
        beam_out = translate(model, vocab, d.test_src, beam=BEAM, n_best=BEAM)
        t_beam = time.perf_counter() - t1 - t_greedy
        rows = [judge(*four) for four in zip(d.test_src, d.test, (g[0] for g in greedy_out), beam_out)]
        metrics = score_translations(rows)
        write_predictions(run.out / "predictions.tsv", rows)
        if is_moses(run.recipe.data):  # the same model on the Tox21 test molecules it never saw
            metrics["tox21"] = tox21_exact_match(model, vocab, run.recipe.seed)
        metrics.update(greedy_time_s=t_greedy, beam_time_s=t_beam, beam_size=BEAM,
                       augmentation=AUGMENTATION[run.recipe.sources])
        print_examples(rows, run.recipe.examples)
        return metrics, d.test_src

    def summary(self, run, metrics):
        print_summary(metrics, run.out)


COMMAND = TrainSeq2Seq()


def run(args) -> int:
    return run_training(COMMAND, *COMMAND.settings(args))


def write_predictions(path, rows) -> None:
    """One tab-separated line per test molecule (the :data:`COLUMNS` of :func:`judge`), written atomically."""
    from minitransformer.cli import write_text
    lines = ["\t".join(COLUMNS)] + ["\t".join(str(r[c]) for c in COLUMNS) for r in rows]
    write_text(path, "\n".join(lines) + "\n")


def print_examples(rows, k: int) -> None:
    """Up to ``k`` worked examples: the first test molecules in order, always including
    the first correct and the first wrong greedy prediction."""
    if k <= 0 or not rows:
        return
    shown = list(range(min(max(k - 2, 1), len(rows))))
    for want in (1, 0):
        i = next((i for i, r in enumerate(rows) if r["greedy_correct"] == want), None)
        if i is not None and i not in shown and len(shown) < k:
            shown.append(i)
    shown += [i for i in range(len(rows)) if i not in shown][:k - len(shown)]  # fill up to k in order
    print("\nworked test examples (greedy decoding):")
    for i in sorted(shown):
        r = rows[i]
        verdict = ("correct" if r["greedy_correct"] else
                   "same molecule, other string" if r["greedy_same_molecule"] else
                   "wrong (valid SMILES of another molecule)" if r["greedy_valid"] else "wrong (invalid SMILES)")
        print(f"  source      {r['source']}\n  target      {r['target']}\n"
              f"  prediction  {r['greedy']}   [{verdict}]\n")


def tox21_exact_match(model, vocab, seed: int) -> dict:
    """Greedy exact match of a MOSES-trained canonicalizer on the Tox21 test molecules (the
    split ``train seq2seq --data tox21`` tests on); molecules with tokens MOSES never uses
    (metals, charges, ...) are counted and skipped."""
    from minitransformer.molecules.canonicalization import judge, score_translations, translate
    from minitransformer.chem.datasets.seq2seq_data import prepare_pairs
    from minitransformer.chem.datasets.tokenizer import tokenize
    tox = prepare_pairs("tox21", seed=seed, max_tokens=MAX_TOKENS, log=lambda line: None)
    pairs = [(s, t) for s, t in zip(tox.test_src, tox.test)
             if all(tok in vocab for tok in tokenize(s) + tokenize(t))]
    greedy = translate(model, vocab, [s for s, _ in pairs])
    rows = [judge(s, t, g[0], g) for (s, t), g in zip(pairs, greedy)]
    m = score_translations(rows) if rows else {}
    return {"n_test": len(tox.test), "n_skipped_unknown_tokens": len(tox.test) - len(pairs),
            "greedy_top1": m.get("greedy_top1"), "greedy_top1_by_length": m.get("greedy_top1_by_length")}


#: What ``--augment`` means, as metrics.json and the summary say it.
AUGMENTATION = {"fresh": "each training molecule's source is a fresh random SMILES every epoch",
                "fixed": "one random SMILES per training molecule for the whole run (no augmentation)"}


def print_summary(m, out) -> None:
    from minitransformer.cli.outputs import format_duration, outputs_line, print_table
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    print_table([
        ("wall time", f"{format_duration(m['wall_time_s'])} ({m['epochs']} epochs, best {m['best_epoch']}, "
                      f"stopped: {m['stop_reason']}); decoding {format_duration(m['greedy_time_s'])} greedy, "
                      f"{format_duration(m['beam_time_s'])} beam"),
        ("augmentation", m["augmentation"]),
        ("test molecules (never trained on)", f"{m['n_test']} ({m['n_test_stereo']} with stereochemistry, "
                                              f"{m['n_test_copies']} whose source is already canonical)"),
        ("greedy: top-1 exact match", f"{pct(m['greedy_top1'])}  (stereo {pct(m['greedy_top1_stereo'])}, "
                                      f"no stereo {pct(m['greedy_top1_no_stereo'])})"),
        ("greedy: top-1, sources not already canonical", pct(m["greedy_top1_not_copies"])),
        ("greedy: top-1 by target length", ", ".join(f"{k} {pct(v)}"
                                                       for k, v in m["greedy_top1_by_length"].items())),
        ("greedy: valid SMILES", pct(m["greedy_valid"])),
        ("greedy: same molecule, other string", pct(m["greedy_other_string"])),
        (f"beam {m['beam_size']}: top-1 / top-{m['beam_size']} exact match",
         f"{pct(m['beam_top1'])} / {pct(m['beam_top5'])}"),
        (f"beam {m['beam_size']}: valid SMILES (top-1 / all)", f"{pct(m['beam_valid'])} / "
                                                               f"{pct(m['beam_valid_all'])}"),
        (f"beam {m['beam_size']}: first valid answer exact", pct(m["beam_first_valid_top1"])),
        (f"beam {m['beam_size']}: same molecule, other string", pct(m["beam_other_string"])),
        *([("Tox21 test molecules: greedy top-1", f"{pct(m['tox21']['greedy_top1'])} of "
            f"{m['tox21']['n_test'] - m['tox21']['n_skipped_unknown_tokens']} ("
            f"{m['tox21']['n_skipped_unknown_tokens']} skipped: tokens MOSES never uses)")] if "tox21" in m else []),
    ], footer=outputs_line(out))


