"""``minitransformer train seq2seq``: a SMILES canonicalizer, an encoder-decoder transformer.

The task (see :mod:`minitransformer.molecules.canonicalization`): read a randomized
SMILES, write the canonical one. The flow, top to bottom: load and clean SMILES
-> canonicalize and drop repeated molecules -> random 80/10/10 split of the
molecules (no test molecule is ever trained on) -> one shared vocabulary for
both sides -> train a Seq2Seq model (cross-attention, one token table for
source, target and output) on pairs (fresh randomized SMILES of each training
molecule every epoch -> its canonical SMILES) -> decode the test sources with
the best checkpoint, greedy and beam search (beam 5), both with the KV cache ->
score with RDKit (exact match, top-5, validity, same molecule written
differently) -> write everything to the run folder.
"""
from __future__ import annotations

import time
from pathlib import Path

from minitransformer.cli import recipes
from minitransformer.molecules.canonicalization import COLUMNS, MAX_TOKENS

PRESETS = {
    # Pre-LN, D=128, a deeper encoder than decoder (4 + 2 layers), sinusoidal positions, one
    # token table for source, target and output; AdamW, peak lr 2e-3 after 100 warmup steps,
    # cosine decay, batch 32, no dropout, no label smoothing. Measured on Tox21 (1 BLAS thread,
    # machine shared, load 2-3), greedy / beam-5 top-1 / beam-5 top-5 exact match on the test set:
    #   3+3 layers, learned positions, lr 1e-3, warmup 400, batch 64, 10 epochs: 2.8 / 3.3 / 8.6%
    #   3+3, sinusoidal, lr 2e-3, warmup 100, batch 32,  6 epochs (6.6 min):  2.9 / 4.7 / 9.7%
    #   the same, 18 epochs (17.9 min):                                         7.9 / 10.5 / 22.1%
    #   the same with lr 3e-3, 16 epochs (13.8 min):                            5.8 / 7.6 / 17.7%
    #   the same + 10k drug-like molecules for training, 6 epochs (16.4 min):   7.0 / 9.0 / 18.1%
    #   4+2 layers, lr 2e-3, 16 epochs (11.8 min):                              7.4 / 9.0 / 18.2%
    # The 4+2 model learns as much per epoch as 3+3 and runs ~25% faster, so it gets more epochs.
    "default": dict(
        model=recipes.model(n_enc_layers=4, n_dec_layers=2, pos="sinusoidal"),
        **recipes.ADAMW, lr=2e-3, warmup=100, batch_size=32, epochs=20, label_smoothing=0.0,
        max_time=15 * 60, val_exact=200),
    # MOSES pairs (train seq2seq --data moses --preset moses): the default model, one pass over
    # 420,000 MOSES molecules, each written at random, in 28 minutes on 2 CPU cores (9.6k
    # tokens/s, ~245 batches of 64 a minute); tested on the first 2,000 molecules of MOSES's
    # test file, and on the Tox21 test molecules. Measured (run s2, 98 % of 430,000 in the
    # 28 minutes): greedy / beam-5 top-1 / beam-5 top-5 exact match 62.8 / 66.8 / 81.6%.
    "moses": dict(
        model=recipes.model(n_enc_layers=4, n_dec_layers=2, pos="sinusoidal"),
        **recipes.ADAMW, lr=2e-3, warmup=300, batch_size=64, epochs=1, label_smoothing=0.0,
        max_time=28 * 60, val_exact=200, limit=430_000),
}
# --model rnn: the attentional LSTM encoder-decoder (models/rnn_seq2seq.py) in the transformer's
# place, the rest of the preset kept: 2 + 2 LSTM layers of 208 states over 64-wide embeddings,
# Bahdanau's attention, 1.34M weights against the default transformer's 1.33M (vocabulary 40).
RNN_MODEL = dict(kind="rnn", d_model=64, hidden=208, n_layers=2)
RNN_QUICK = dict(kind="rnn", d_model=16, hidden=32, n_layers=1)
QUICK = dict(model=recipes.quick_model(n_enc_layers=1, n_dec_layers=1),
             epochs=2, batch_size=32, warmup=10, max_time=None, val_exact=20, limit=300)
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
    cli.add_common_arguments(p, out="runs/seq2seq", data_names=("tox21", "druglike", "moses"))
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=None, help="override the peak learning rate")
    p.add_argument("--batch-size", type=cli.int_at_least(1), default=None, help="override the batch size")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--label-smoothing", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override the label smoothing")
    p.add_argument("--augment", choices=("fresh", "fixed"), default="fresh",
                   help="the training sources: a fresh random SMILES of each molecule every epoch (fresh, the "
                        "default), or one random SMILES per molecule for the whole run (fixed: no augmentation)")
    p.add_argument("--examples", type=cli.int_at_least(0), default=6, help="worked test examples to print")
    cli.add_resume_argument(p, help="continue the run in --out (same data and options as before): alone, from "
                                    "its last.npz; or from the checkpoint named")
    p.set_defaults(run=run)
    return p


def resolve_settings(args) -> dict:
    s = {"limit": None, **PRESETS[args.preset]}
    if args.quick:
        s.update(QUICK)
    recipes.apply_overrides(s, args, ("epochs", "lr", "batch_size", "label_smoothing"))
    if args.model == "rnn":
        if args.dropout is not None:
            raise ValueError("--dropout needs --model transformer; the RNN model has no dropout (leave it out)")
        s["model"] = dict(RNN_QUICK if args.quick else RNN_MODEL, attention=args.attention or "additive")
    elif args.attention is not None:
        raise ValueError("--attention chooses the RNN model's attention; add --model rnn or leave it out")
    return recipes.set_budgets(s, args)


def make_model(settings, vocab, seed):
    """A Seq2Seq with one token table: source embedding = target embedding = output projection;
    or, with ``--model rnn``, an RNNSeq2Seq."""
    from minitransformer.models import Seq2Seq
    from minitransformer.models.seq2seq import Seq2SeqConfig
    if settings["model"].get("kind") == "rnn":
        from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
        sizes = {k: v for k, v in settings["model"].items() if k != "kind"}
        return RNNSeq2Seq(RNNSeq2SeqConfig(len(vocab), len(vocab), max_len=MAX_TOKENS, pad_id=vocab.pad_id,
                                           bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=seed, **sizes))
    cfg = Seq2SeqConfig(len(vocab), len(vocab), max_len=MAX_TOKENS, share_embeddings=True,
                        tie_embeddings=True, pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                        seed=seed, **settings["model"])
    return Seq2Seq(cfg)


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


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.chem.datasets.seq2seq_data import PairEpochs, prepare_pairs
    from minitransformer.checkpoint import model_from_checkpoint
    from minitransformer.train.tasks import Seq2SeqTask
    from minitransformer.molecules.canonicalization import exact_match_callback, judge, score_translations, translate
    from minitransformer.chem.datasets.moses import is_moses
    from minitransformer.train import TrainConfig

    t0 = time.perf_counter()
    settings = resolve_settings(args)
    out = Path(args.out)
    # The folder belongs to one run: reusing it needs --resume (checked below) or --force.
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz",))
    data = prepare_pairs(args.data, seed=args.seed, max_tokens=MAX_TOKENS, limit=settings["limit"])
    vocab = data.vocab
    model = make_model(settings, vocab, args.seed)
    print(f"model: {type(model).__name__}, {model.num_parameters():,} weights; preset {args.preset}"
          f"{' (quick)' if args.quick else ''}")

    train_data = PairEpochs(data.train, vocab, seed=args.seed, max_tokens=MAX_TOKENS, fresh=args.augment == "fresh")
    steps_per_epoch = -(-len(data.train) // settings["batch_size"])
    optimizer = recipes.make_optimizer(settings, model, max(2, steps_per_epoch * settings["epochs"]))
    k = settings["val_exact"]
    callbacks = [exact_match_callback(vocab, data.val_src[:k], data.val[:k])] if k else []
    config = TrainConfig(epochs=settings["epochs"], batch_size=settings["batch_size"], clip=1.0,
                         metric="val_loss", mode="min",
                         seed=args.seed, max_time=settings["max_time"], eval_batch_size=128,
                         out_dir=str(out), quiet=args.quiet)
    run_info = {"preset": args.preset, "quick": args.quick, "seed": args.seed, "settings": settings, "data": data.description,
                "cleaning": data.clean_summary, "duplicates_dropped": data.duplicates,
                "split": [len(data.train), len(data.val), len(data.test)],
                "data_sha256": cli.data_fingerprint(data.train, data.val, data.test)}
    if resume is not None:  # the same data, vocabulary and settings, or a clear refusal
        cli.check_resume(resume, out, run_info, vocab)
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, args.argv, args.seed, args.data, run_info["data_sha256"])
    cli.write_json(out / "config.json", {"model": model.config.to_dict(), "train": config.__dict__, "run": run_info})
    trainer = cli.run_fit("train", model, Seq2SeqTask(vocab.pad_id, settings["label_smoothing"]), optimizer,
                          train_data, data.pairs("val"), config=config, callbacks=callbacks, vocab=vocab,
                          extra_meta={"run": run_info}, resume=resume)
    t_train = time.perf_counter() - t0

    # Decode the test sources with the best checkpoint.
    if (out / "best.npz").exists():
        model, _ = model_from_checkpoint(out / "best.npz")
    model.eval()
    t1 = time.perf_counter()
    greedy_out = translate(model, vocab, data.test_src)
    t_greedy = time.perf_counter() - t1
    beam_out = translate(model, vocab, data.test_src, beam=BEAM, n_best=BEAM)
    t_beam = time.perf_counter() - t1 - t_greedy
    rows = [judge(*four) for four in zip(data.test_src, data.test, (g[0] for g in greedy_out), beam_out)]
    metrics = score_translations(rows)
    write_predictions(out / "predictions.tsv", rows)
    cli.save_curves(trainer.history, out / "curves.png",
                    panels=(("loss (nats per token)", ("train_loss", "val_loss")),
                            ("validation accuracy", ("val_acc", "val_exact"))))
    if args.plot_attention:
        from minitransformer.cli.attention import plot_attention_example
        plot_attention_example(model, vocab, data.test_src, out)

    if is_moses(args.data):  # the same model on the Tox21 test molecules it never saw
        metrics["tox21"] = tox21_exact_match(model, vocab, args.seed)
    metrics.update({"epochs": len(trainer.history),
                    "best_epoch": trainer.best_epoch, "stop_reason": trainer.stop_reason,
                    "train_time_s": t_train, "greedy_time_s": t_greedy, "beam_time_s": t_beam,
                    "wall_time_s": time.perf_counter() - t0, "parameters": model.num_parameters(),
                    "beam_size": BEAM, "preset": args.preset, "quick": args.quick,
                    "augmentation": AUGMENTATION[args.augment]})
    cli.write_json(out / "metrics.json", metrics)
    print_examples(rows, args.examples)
    print_summary(metrics, out, args.plot_attention)
    return 0


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


def print_summary(m, out, attention: bool) -> None:
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
        (f"beam {m['beam_size']}: same molecule, other string", pct(m["beam_other_string"])),
        *([("Tox21 test molecules: greedy top-1", f"{pct(m['tox21']['greedy_top1'])} of "
            f"{m['tox21']['n_test'] - m['tox21']['n_skipped_unknown_tokens']} ("
            f"{m['tox21']['n_skipped_unknown_tokens']} skipped: tokens MOSES never uses)")] if "tox21" in m else []),
    ], footer=outputs_line(out))


