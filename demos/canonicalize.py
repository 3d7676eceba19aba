#!/usr/bin/env python3
"""Translate a randomized SMILES into the canonical SMILES with an encoder-decoder transformer.

    python demos/canonicalize.py                      # default preset, Tox21 if available
    python demos/canonicalize.py --quick              # a smoke test (< 1 minute)
    python demos/canonicalize.py --plot-attention     # also draw the cross-attention of a test example
    python demos/canonicalize.py translate --checkpoint runs/canonicalize/best.npz 'OCC(C)c1ccccc1'

A molecule has many SMILES (one per starting atom and atom order) but exactly one
canonical SMILES (RDKit's). The task: read any of them, write the canonical one.
Because the canonical string is unique, success is an exact string match.

The flow, top to bottom: load and clean SMILES -> canonicalize and drop repeated
molecules -> random 80/10/10 split of the molecules (no test molecule is ever
trained on) -> one shared vocabulary for both sides -> train a Seq2Seq model
(cross-attention, one token table for source, target and output) on pairs
(fresh randomized SMILES of each training molecule every epoch -> its canonical
SMILES) -> decode the test sources with the best checkpoint, greedy and beam
search (beam 5), both with the KV cache -> score with RDKit (exact match, top-5,
validity, same molecule written differently) -> write everything to the run
folder and print worked examples and a summary.
"""
from __future__ import annotations

import sys

try:  # Ctrl-C while starting: one line, exit status 130, no traceback
    import os

    # Before NumPy loads: idle OpenBLAS threads sleep after ~1.5 ms, so the library's
    # CPU thread pool gets the cores (minitransformer/fast/parallel.py explains).
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")

    import argparse  # noqa: E402
    import time
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

    from minitransformer import backend  # noqa: E402
except KeyboardInterrupt:
    print("interrupted while starting; nothing was written", file=sys.stderr)
    raise SystemExit(130) from None

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
        model=dict(d_model=128, n_heads=4, n_enc_layers=4, n_dec_layers=2, d_ff=512, norm="pre",
                   pos="sinusoidal", activation="gelu", emb_dropout=0.0, attn_dropout=0.0, resid_dropout=0.0),
        lr=2e-3, weight_decay=0.01, warmup=100, batch_size=32, epochs=20, label_smoothing=0.0,
        max_time=15 * 60, val_exact=200),
}
QUICK = dict(model=dict(d_model=32, n_heads=2, n_enc_layers=1, n_dec_layers=1, d_ff=64, norm="pre"),
             epochs=2, batch_size=32, warmup=10, max_time=None, val_exact=20, limit=300)
MAX_TOKENS = 128  # the longest source or target, BOS and EOS included (the model's max_len)
BEAM = 5


def build_parser() -> argparse.ArgumentParser:
    from minitransformer import cli
    p = cli.ArgumentParser(prog="canonicalize.py", description="Train a transformer to translate randomized "
                                                                "SMILES into canonical SMILES.")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    cli.add_common_arguments(p, out="runs/canonicalize")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=None, help="override the peak learning rate")
    p.add_argument("--batch-size", type=cli.int_at_least(1), default=None, help="override the batch size")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--label-smoothing", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override the label smoothing")
    p.add_argument("--examples", type=cli.int_at_least(0), default=6, help="worked test examples to print")
    cli.add_resume_argument(p, help="continue the run in --out (same data and options as before): alone, from "
                                    "its last.npz; or from the checkpoint named")
    return p


def build_translate_parser() -> argparse.ArgumentParser:
    from minitransformer import cli
    p = cli.ArgumentParser(prog="canonicalize.py translate",
                           description="Canonicalize SMILES with a saved model (beam search).")
    p.add_argument("smiles", nargs="+", help="SMILES strings to canonicalize")
    p.add_argument("--checkpoint", required=True, type=cli.existing_file("checkpoint"),
                   help="a .npz written by a training run")
    p.add_argument("--beam", type=cli.int_at_least(1), default=BEAM, help="beam size (1 = greedy)")
    p.add_argument("--out", default=None, type=cli.output_file,
                   help="write the results (tab-separated) to this file (default: print them)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument("--backend", default=None, choices=list(backend.BACKENDS)[:2])
    return p


def resolve_settings(args) -> dict:
    from minitransformer.cli import max_time
    s = dict(PRESETS[args.preset], limit=None)
    if args.quick:
        s.update(QUICK)
    for name in ("epochs", "lr", "batch_size", "label_smoothing"):
        if getattr(args, name) is not None:
            s[name] = getattr(args, name)
    if args.dropout is not None:
        s["model"] = dict(s["model"], emb_dropout=args.dropout, attn_dropout=args.dropout,
                          resid_dropout=args.dropout)
    s["max_time"] = max_time(args, s["max_time"])
    return s


def make_model(settings, vocab, seed):
    """A Seq2Seq with one token table: source embedding = target embedding = output projection."""
    from minitransformer.models import Seq2Seq
    from minitransformer.models.seq2seq import Seq2SeqConfig
    cfg = Seq2SeqConfig(len(vocab), len(vocab), max_len=MAX_TOKENS, share_embeddings=True,
                        tie_embeddings=True, pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                        seed=seed, **settings["model"])
    return Seq2Seq(cfg)


def make_optimizer(settings, model, total_steps):
    """AdamW with a linear warmup and a cosine decay to 5% of the peak over ``total_steps``."""
    from minitransformer import optim
    lr = optim.WarmupCosineLR(settings["lr"], warmup=min(settings["warmup"], total_steps - 1),
                              total=total_steps, min_lr=settings["lr"] * 0.05)
    return optim.AdamW(model, lr=lr, betas=(0.9, 0.98), weight_decay=settings["weight_decay"])


def translate(model, vocab, sources, beam: int = 1, n_best: int = 1, batch_size: int = 128) -> list:
    """Decode SMILES strings with the KV cache; returns one list of ``n_best`` strings per source.

    ``beam=1`` is greedy decoding, otherwise beam search of width ``beam``. Sources are
    decoded in batches of similar length (less padding), results come back in input order.
    """
    import numpy as np
    from minitransformer.generate import beam_search, greedy
    from minitransformer.tasks import pad_batch
    encoded = [vocab.encode(s) for s in sources]
    order = np.argsort([len(e) for e in encoded], kind="stable")
    out = [None] * len(sources)
    rows = max(1, batch_size // beam)  # items per call; beam search decodes beam * rows rows
    for start in range(0, len(order), rows):
        idx = order[start:start + rows]
        src = pad_batch([encoded[i] for i in idx], vocab.pad_id)  # (b, S)
        max_len = min(src.shape[1] + 50, MAX_TOKENS, model.config.max_len)
        if beam == 1:
            ids = greedy(model, src=src, max_len=max_len)[:, None, :]  # (b, 1, T)
        else:
            ids, _ = beam_search(model, src=src, beam_size=beam, n_best=n_best, max_len=max_len)  # (b, n, T)
        for i, hyps in zip(idx, ids):
            out[i] = [vocab.decode(row) for row in hyps]
    return out


def has_stereo(smiles: str) -> bool:
    """Whether a SMILES writes stereochemistry (tetrahedral @ or double-bond / \\)."""
    return any(c in smiles for c in "@/\\")


LENGTH_BINS = ((0, 20), (20, 40), (40, MAX_TOKENS))  # target length in tokens, for the breakdown
COLUMNS = ("source", "target", "greedy", "greedy_correct", "greedy_same_molecule", "greedy_valid",
           "beam_top1", "beam_rank", "beam_valid", "beam_same_molecule", "beam_top5")


def judge(source: str, target: str, greedy_out: str, beam_out: list) -> dict:
    """One test molecule: the predictions and how they compare with the canonical ``target``.

    ``*_same_molecule``: the prediction parses and RDKit canonicalizes it to ``target``
    (true for an exact match too). ``beam_rank``: 1..K where the target sits among the
    K beam hypotheses, 0 when it is not among them.
    """
    from minitransformer.chem import canonical
    g_canon = canonical(greedy_out) if greedy_out else None
    b_canon = canonical(beam_out[0]) if beam_out[0] else None
    return {
        "source": source, "target": target, "greedy": greedy_out,
        "greedy_correct": int(greedy_out == target), "greedy_same_molecule": int(g_canon == target),
        "greedy_valid": int(g_canon is not None),
        "beam_top1": beam_out[0], "beam_rank": next((k + 1 for k, h in enumerate(beam_out) if h == target), 0),
        "beam_valid": int(b_canon is not None), "beam_same_molecule": int(b_canon == target),
        "beam_valid_all": sum(bool(h) and canonical(h) is not None for h in beam_out) / len(beam_out),
        "beam_top5": " ".join(beam_out),
    }


def score(rows: list) -> dict:
    """Test metrics from :func:`judge` rows; every rate is a fraction of the test molecules
    (of a subset, for the stereo and length breakdowns: None when the subset is empty)."""
    import numpy as np
    from minitransformer.chem import tokenize

    def rate(key, keep=None):
        values = np.array([r[key] for r in rows], dtype=np.float64)  # (N,)
        values = values if keep is None else values[keep]
        return float(values.mean()) if values.size else None  # None: no such molecule in the test set

    rank = np.array([r["beam_rank"] for r in rows])  # (N,)
    stereo = np.array([has_stereo(r["target"]) for r in rows])  # (N,) bool
    copy = np.array([r["source"] == r["target"] for r in rows])  # (N,) bool: the source is already canonical
    length = np.array([len(tokenize(r["target"])) for r in rows])  # (N,) target tokens
    m = {
        "n_test": len(rows), "n_test_stereo": int(stereo.sum()), "n_test_copies": int(copy.sum()),
        "greedy_top1": rate("greedy_correct"), "greedy_valid": rate("greedy_valid"),
        "greedy_same_molecule": rate("greedy_same_molecule"),
        "beam_top1": float((rank == 1).mean()), "beam_top5": float((rank > 0).mean()),
        "beam_valid": rate("beam_valid"), "beam_valid_all": rate("beam_valid_all"),
        "beam_same_molecule": rate("beam_same_molecule"),
        "greedy_top1_stereo": rate("greedy_correct", stereo),
        "greedy_top1_no_stereo": rate("greedy_correct", ~stereo),
        "greedy_top1_not_copies": rate("greedy_correct", ~copy),
    }
    # "same molecule, other string": a valid SMILES of the right molecule that is not the canonical one
    m["greedy_other_string"] = m["greedy_same_molecule"] - m["greedy_top1"]
    m["beam_other_string"] = m["beam_same_molecule"] - m["beam_top1"]
    m["greedy_top1_by_length"] = {f"{lo}-{hi - 1} tokens": rate("greedy_correct", (length >= lo) & (length < hi))
                                  for lo, hi in LENGTH_BINS}
    return m


def exact_match_callback(vocab, sources, targets):
    """A :func:`~minitransformer.train.fit` callback: greedy exact match on fixed validation pairs."""
    def val_exact(trainer, epoch, metrics):
        out = translate(trainer.model, vocab, sources)
        return {"val_exact": sum(o[0] == t for o, t in zip(out, targets)) / len(targets)}
    return val_exact


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


def train_command(args) -> int:
    from minitransformer import cli
    from minitransformer.chem.seq2seq_data import PairEpochs, prepare_pairs
    from minitransformer.checkpoint import model_from_checkpoint
    from minitransformer.tasks import Seq2SeqTask
    from minitransformer.train import TrainConfig

    t0 = time.perf_counter()
    settings = resolve_settings(args)
    out = Path(args.out)
    # The folder belongs to one run: reusing it needs --resume (checked below) or --force.
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz",))
    data = prepare_pairs(args.data, seed=args.seed, max_tokens=MAX_TOKENS, limit=settings["limit"])
    vocab = data.vocab
    model = make_model(settings, vocab, args.seed)
    print(f"model: {model.num_parameters():,} weights; preset {args.preset}{' (quick)' if args.quick else ''}")

    train_data = PairEpochs(data.train, vocab, seed=args.seed, max_tokens=MAX_TOKENS)
    steps_per_epoch = -(-len(data.train) // settings["batch_size"])
    optimizer = make_optimizer(settings, model, max(2, steps_per_epoch * settings["epochs"]))
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
    metrics = score(rows)
    write_predictions(out / "predictions.tsv", rows)
    cli.save_curves(trainer.history, out / "curves.png",
                    panels=(("loss (nats per token)", ("train_loss", "val_loss")),
                            ("validation accuracy", ("val_acc", "val_exact"))))
    if args.plot_attention:
        plot_attention(model, vocab, data.test_src, data.test, out)

    metrics.update({"epochs": len(trainer.history),
                    "best_epoch": trainer.best_epoch, "stop_reason": trainer.stop_reason,
                    "train_time_s": t_train, "greedy_time_s": t_greedy, "beam_time_s": t_beam,
                    "wall_time_s": time.perf_counter() - t0, "parameters": model.num_parameters(),
                    "beam_size": BEAM, "preset": args.preset, "quick": args.quick})
    cli.write_json(out / "metrics.json", metrics)
    print_examples(rows, args.examples)
    print_summary(metrics, out, args.plot_attention)
    return 0


def plot_attention(model, vocab, sources, targets, out) -> Path:
    """Cross-attention heatmaps (every decoder layer and head) of one test example:
    the first test molecule of 12 to 40 tokens (or the first), teacher-forced on its
    canonical SMILES. Row = a target position, column = the source token it reads."""
    from minitransformer.chem import tokenize
    from minitransformer.cli import save_plot
    from minitransformer.viz import plot_cross_attention
    i = next((i for i, t in enumerate(targets) if 12 <= len(tokenize(t)) <= 40), 0)
    src_ids, tgt_ids = vocab.encode(sources[i]), vocab.encode(targets[i])
    src_tokens = ["<bos>"] + tokenize(sources[i]) + ["<eos>"]
    tgt_tokens = ["<bos>"] + tokenize(targets[i])  # decoder inputs: the target shifted right
    return save_plot(out / "attention_cross.png",
                     lambda target: plot_cross_attention(model, src_ids, tgt_ids[:-1], src_tokens, tgt_tokens, target,
                                                         title=f"cross-attention: {sources[i]}  ->  {targets[i]}"))


def print_summary(m, out, attention: bool) -> None:
    from minitransformer.cli import print_table
    pct = lambda x: "n/a" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    print_table([
        ("wall time", f"{m['wall_time_s'] / 60:.1f} min ({m['epochs']} epochs, best {m['best_epoch']}, "
                      f"stopped: {m['stop_reason']}); decoding {m['greedy_time_s']:.0f} s greedy, "
                      f"{m['beam_time_s']:.0f} s beam"),
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
    ], footer=f"outputs in {out}/: metrics.json history.json config.json best.npz predictions.tsv curves.png"
              + (" attention_cross.png" if attention else ""))


def translate_command(argv) -> int:
    from minitransformer import cli
    from minitransformer.chem import Vocab, canonical
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    args = build_translate_parser().parse_args(argv)
    cli.refuse_overwrite(args.out, args.force)  # before any work
    for s in args.smiles:
        if canonical(s) is None:
            raise ValueError(f"RDKit cannot parse the input SMILES {s!r}")
    cli.use_backend(args)
    ckpt = load_checkpoint(args.checkpoint)
    if ckpt.vocab is None or ckpt.model_type != "Seq2Seq":
        raise ValueError(f"{args.checkpoint} was not written by this demo (it needs a Seq2Seq with a vocabulary, "
                         f"it holds a {ckpt.model_type}); give the best.npz of a canonicalize.py run")
    model, _ = model_from_checkpoint(ckpt)
    vocab = Vocab.from_json(ckpt.vocab)
    for s in args.smiles:
        if len(vocab.encode(s)) >= model.config.max_len:
            raise ValueError(f"the input SMILES {s[:40]!r}... is too long for this model ({len(vocab.encode(s))} "
                             f"tokens with BOS and EOS; it reads fewer than {model.config.max_len})")
    outs = translate(model, vocab, args.smiles, beam=args.beam)
    lines = []
    for s, (pred,) in zip(args.smiles, outs):
        verdict = "correct" if pred == canonical(s) else "differs from RDKit: " + canonical(s)
        lines.append(f"{s}\t{pred}\t{verdict}")
    text = "\n".join(lines) + "\n"
    if args.out:
        cli.write_text(args.out, text, overwrite=args.force)
        print(f"wrote {len(lines)} translations to {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None) -> int:
    from minitransformer.cli import demo_main
    return demo_main(argv, build_parser, train_command, {"translate": translate_command})


def cli() -> int:
    """``main`` for the command line: known input errors print one clear line, not a traceback."""
    try:
        from minitransformer.cli import run_cli
    except KeyboardInterrupt:
        print("interrupted while starting; nothing was written", file=sys.stderr)
        return 130
    return run_cli(main)


if __name__ == "__main__":
    _code = cli()
    from minitransformer.cli.errors import exit_for_good
    exit_for_good(_code)
