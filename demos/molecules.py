#!/usr/bin/env python3
"""Generate molecules with an autoregressive transformer trained on SMILES.

    python demos/molecules.py                        # default preset, Tox21 if available
    python demos/molecules.py --preset tomczak       # the reference article's model
    python demos/molecules.py --quick                # a smoke test (< 1 minute)
    python demos/molecules.py sample --checkpoint runs/molecules/best.npz -n 100

The flow, top to bottom: load and clean SMILES -> split -> build the vocabulary ->
train a DecoderLM (next-token prediction, early stopping on validation NLL) ->
evaluate on the test split -> sample molecules with the KV cache -> judge them
with RDKit (validity, uniqueness, novelty, internal diversity, KL score) -> write
everything to the run folder and print a summary.
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
    # Ours: pre-LN, tied embeddings, AdamW with warmup + cosine, molecules written in
    # Kekule form, batch 32, and two phases: 5 epochs on RDKit's 10,000 drug-like
    # molecules teach the SMILES grammar, then 12 epochs on Tox21 with 3,000 of those
    # molecules mixed in, which keeps the model from memorising the small Tox21 set.
    # Measured on Tox21 (see README): validity 0.749 -> 0.857 against Tox21 alone, with
    # uniqueness and novelty up too (0.953 -> 0.973, 0.811 -> 0.866). Kekule beats
    # canonical SMILES on validity; randomized-SMILES augmentation and dropout slowed
    # learning too much for a 15-minute budget (validity 0.51-0.60).
    "default": dict(
        model=dict(d_model=128, n_heads=4, n_layers=4, d_ff=512, norm="pre", pos="learned",
                   activation="gelu", tie_embeddings=True, emb_dropout=0.0, attn_dropout=0.0,
                   resid_dropout=0.0),
        optimizer="adamw", lr=1.5e-3, weight_decay=0.01, warmup=300, schedule="cosine",
        batch_size=32, epochs=12, patience=None, label_smoothing=0.0, augment=0.0,
        max_time=13 * 60, check_rdkit=True, metric="val_nll_token", form="kekule",
        pretrain_data="druglike", pretrain_epochs=5, pretrain_mix=3000),
    # J. Tomczak, "ARMs parameterized by Transformers": 10 post-LN blocks, heads as wide
    # as the model, dropout on the embedding sum only, Adamax, patience 10.
    "tomczak": dict(
        model="tomczak", optimizer="adamax", lr=1e-3, weight_decay=0.0, warmup=0, schedule="constant",
        batch_size=64, epochs=1000, patience=10, label_smoothing=0.0, augment=0.0,
        max_time=None, check_rdkit=False, metric="val_nll_mol_ref", form="as-is",
        pretrain_data=None, pretrain_epochs=0, pretrain_mix=0),
}
QUICK = dict(model=dict(d_model=32, n_heads=2, n_layers=2, d_ff=64, norm="pre", tie_embeddings=True),
             epochs=2, batch_size=32, warmup=10, patience=None, max_time=None, augment=0.5,
             pretrain_epochs=1, pretrain_limit=300, pretrain_mix=50)


def build_parser() -> argparse.ArgumentParser:
    from minitransformer import cli
    p = cli.ArgumentParser(prog="molecules.py", description="Train a transformer on SMILES and generate molecules.")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    cli.add_common_arguments(p, out="runs/molecules")
    p.add_argument("--augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a training molecule as a random SMILES each epoch")
    p.add_argument("--form", default=None, choices=["as-is", "canonical", "kekule"],
                   help="how training molecules are written (default: the preset's)")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=None, help="override the peak learning rate")
    p.add_argument("--batch-size", type=cli.int_at_least(1), default=None, help="override the batch size")
    p.add_argument("--samples", type=cli.int_at_least(1), default=2000, help="molecules to sample at the end")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0,
                   help="sampling temperature, > 0 (default: 1)")
    p.add_argument("--pretrain-data", default=None, type=cli.data_source(("druglike", "tox21", "none")),
                   help="pretrain on these molecules first (druglike, tox21, a file, or none; default: the preset's)")
    p.add_argument("--pretrain-epochs", type=cli.int_at_least(0), default=None)
    p.add_argument("--pretrain-mix", type=cli.int_at_least(0), default=None,
                   help="keep this many phase-1 molecules in the phase-2 training set (against over-fitting)")
    cli.add_resume_argument(p, help="continue the run in --out (same data and options as before): alone, from "
                                    "its last.npz, or pretrain/last.npz when it stopped while pretraining; or from "
                                    "the checkpoint named")
    return p


def build_sample_parser() -> argparse.ArgumentParser:
    from minitransformer import cli
    p = cli.ArgumentParser(prog="molecules.py sample", description="Sample from a saved model.")
    p.add_argument("--checkpoint", required=True, type=cli.existing_file("checkpoint"),
                   help="a .npz written by a training run")
    p.add_argument("-n", type=cli.int_at_least(1), default=100, help="number of molecules")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0, help="> 0 (default: 1)")
    p.add_argument("--seed", type=cli.seed, default=0)
    p.add_argument("--out", default=None, type=cli.output_file,
                   help="write the SMILES to this file (default: print them)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument("--backend", default=None, choices=list(backend.BACKENDS)[:2])
    return p


def resolve_settings(args) -> dict:
    from minitransformer.cli import max_time
    s = dict(PRESETS[args.preset])
    if args.quick:
        s.update(QUICK)
        if args.preset == "tomczak":
            s["model"] = dict(QUICK["model"], norm="post", tie_embeddings=False)
    if args.epochs is not None:
        s["epochs"] = args.epochs
    if args.form is not None:
        s["form"] = args.form
    if args.lr is not None:
        s["lr"] = args.lr
    if args.batch_size is not None:
        s["batch_size"] = args.batch_size
    if args.dropout is not None and isinstance(s["model"], dict):
        s["model"] = dict(s["model"], emb_dropout=args.dropout, attn_dropout=args.dropout,
                          resid_dropout=args.dropout)
    if args.augment is not None:
        s["augment"] = args.augment
    if args.pretrain_data is not None:
        s["pretrain_data"] = None if args.pretrain_data == "none" else args.pretrain_data
    if args.pretrain_epochs is not None:
        s["pretrain_epochs"] = args.pretrain_epochs
    if args.pretrain_mix is not None:
        s["pretrain_mix"] = args.pretrain_mix
    if not s["pretrain_data"]:
        s["pretrain_epochs"] = 0
    s["max_time"] = max_time(args, s["max_time"])
    return s


def make_model(settings, vocab, seed):
    from minitransformer.models import DecoderLM, DecoderLMConfig
    ids = dict(vocab_size=len(vocab), pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=seed)
    if settings["model"] == "tomczak":
        cfg = DecoderLMConfig.tomczak(max_len=102, **ids)  # BOS + up to 100 tokens + EOS
    else:
        cfg = DecoderLMConfig(max_len=102, **ids, **settings["model"])
    return DecoderLM(cfg)


def make_optimizer(settings, model, total_steps):
    from minitransformer import optim
    if settings["schedule"] == "cosine":
        lr = optim.WarmupCosineLR(settings["lr"], warmup=min(settings["warmup"], total_steps - 1),
                                  total=total_steps, min_lr=settings["lr"] * 0.05)
    else:
        lr = settings["lr"]
    if settings["optimizer"] == "adamw":
        return optim.AdamW(model, lr=lr, betas=(0.9, 0.98), weight_decay=settings["weight_decay"])
    if settings["optimizer"] == "adamax":
        return optim.Adamax(model, lr=lr)
    return optim.Adam(model, lr=lr)


def sample_smiles(model, vocab, n, temperature, seed, batch_size=500):
    """Draw ``n`` SMILES with the KV cache; returns a list of strings (possibly invalid)."""
    from minitransformer.generate import sample
    out = []
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        ids = sample(model, batch_size=b, temperature=temperature, rng=seed * 1000 + start)
        out.extend(vocab.decode(row) for row in ids)
    return out


def train_command(args) -> int:
    from minitransformer.chem import canonical, evaluate_samples
    from minitransformer.chem.metrics import novelty
    from minitransformer import cli
    from minitransformer.chem.draw import molecule_grid_png
    from minitransformer.chem import Vocab
    from minitransformer.chem.lm_data import RandomizedEpochs, prepare_smiles, pretraining_smiles
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.chem.lm_metrics import batches_of, sequence_metrics
    from minitransformer.tasks import LMTask
    from minitransformer.train import TrainConfig

    import numpy as np
    t0 = time.perf_counter()
    settings = resolve_settings(args)
    out = Path(args.out)
    # The folder belongs to one run: reusing it needs --resume (checked below) or --force.
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz", "pretrain/last.npz"))
    data = prepare_smiles(args.data, check_rdkit=settings["check_rdkit"], form=settings["form"],
                          limit=400 if args.quick else None)
    extra = []
    if settings["pretrain_epochs"] > 0:
        extra = pretraining_smiles(settings["pretrain_data"], exclude={canonical(x) for x in data.val + data.test},
                                   form=settings["form"])[:settings.get("pretrain_limit")]
        data.vocab = Vocab.build(data.train + extra)  # one vocabulary for both phases
    vocab = data.vocab
    model = make_model(settings, vocab, args.seed)
    print(f"model: {model.num_parameters():,} weights; preset {args.preset}{' (quick)' if args.quick else ''}")
    run_info = {"preset": args.preset, "quick": args.quick, "seed": args.seed, "settings": settings, "data": data.description,
                "cleaning": data.clean_summary, "split": [len(data.train), len(data.val), len(data.test)],
                "pretrain_molecules": len(extra), "pretrain_mix": min(len(extra), settings["pretrain_mix"]),
                "data_sha256": cli.data_fingerprint(data.train, data.val, data.test, extra)}
    if resume is not None:  # the same data, vocabulary and settings, or a clear refusal
        cli.check_resume(resume, out, run_info, vocab)
    out.mkdir(parents=True, exist_ok=True)
    val_batches = batches_of(data.encode(data.val), 128, vocab.pad_id)

    def lm_metrics(trainer, epoch, metrics):
        return {f"val_{k}": v for k, v in sequence_metrics(trainer.model, val_batches, vocab.pad_id).items()}

    # Phase 1 (optional): pretrain on the extra molecules. Skipped when resuming phase 2.
    resume_phase = load_checkpoint(resume).meta.get("phase", "train") if resume is not None else None
    if extra and resume_phase != "train":
        print(f"pretraining on {len(extra)} molecules for {settings['pretrain_epochs']} epochs")
        steps = -(-len(extra) // settings["batch_size"]) * settings["pretrain_epochs"]
        pre_config = TrainConfig(epochs=settings["pretrain_epochs"], batch_size=settings["batch_size"], clip=1.0,
                                 seed=args.seed, out_dir=str(out / "pretrain"), quiet=args.quiet)
        cli.run_fit("pretrain", model, LMTask(vocab.pad_id), make_optimizer(settings, model, max(2, steps)),
                    data.encode(extra), config=pre_config, callbacks=[lm_metrics], vocab=vocab,
                    extra_meta={"run": run_info, "phase": "pretrain"},
                    resume=resume if resume_phase == "pretrain" else None)
    t_pre = time.perf_counter() - t0

    # Phase 2: train on the main set (fine-tune, when phase 1 ran), optionally with a fixed
    # random subset of the phase-1 molecules mixed in, which keeps the model from memorising.
    mix = [extra[i] for i in np.sort(np.random.default_rng([args.seed, 2]).permutation(len(extra))
                                     [:settings["pretrain_mix"]])] if extra else []
    train_smiles = data.train + mix
    train_ids = data.encode(train_smiles)
    if settings["augment"] > 0:
        train_data = RandomizedEpochs(train_smiles, vocab, seed=args.seed, p=settings["augment"],
                                      max_tokens=model.config.max_len)
    else:
        train_data = train_ids
    steps_per_epoch = -(-len(train_ids) // settings["batch_size"])
    optimizer = make_optimizer(settings, model, max(2, steps_per_epoch * settings["epochs"]))
    budget = None if settings["max_time"] is None else max(60.0, settings["max_time"] - t_pre)
    config = TrainConfig(epochs=settings["epochs"], batch_size=settings["batch_size"], clip=1.0,
                         patience=settings["patience"], metric=settings["metric"], mode="min",
                         seed=args.seed, max_time=budget, out_dir=str(out), quiet=args.quiet)
    cli.write_json(out / "config.json", {"model": model.config.to_dict(), "train": config.__dict__, "run": run_info})
    trainer = cli.run_fit("train", model, LMTask(vocab.pad_id, settings["label_smoothing"]), optimizer, train_data,
                          config=config, callbacks=[lm_metrics], vocab=vocab,
                          extra_meta={"run": run_info, "phase": "train"},
                          resume=resume if resume_phase == "train" else None)
    t_train = time.perf_counter() - t0

    # Evaluate the best checkpoint on the test split, then sample from it.
    from minitransformer.checkpoint import model_from_checkpoint
    if (out / "best.npz").exists():
        model, _ = model_from_checkpoint(out / "best.npz")
    model.eval()
    test = sequence_metrics(model, batches_of(data.encode(data.test), 128, vocab.pad_id), vocab.pad_id) \
        if data.test else {}
    t1 = time.perf_counter()
    samples = sample_smiles(model, vocab, args.samples, args.temperature, args.seed)
    t_sample = time.perf_counter() - t1
    cli.write_text(out / "samples.smi", "\n".join(samples) + "\n")
    chem = evaluate_samples(samples, data.train, seed=args.seed)
    if extra:  # novelty above is against the main training set (the definition); this one counts phase 1 too
        chem["novelty_vs_all_training"] = novelty(samples, data.train + extra)
    valid = [s for s in samples if canonical(s) is not None]
    png, drawn = molecule_grid_png(valid, n=24)
    if drawn:
        cli.write_bytes(out / "molecules.png", png)
    else:
        print(f"no valid molecule among the {len(samples)} samples, so there is no molecules.png to draw")
    cli.save_curves(trainer.history, out / "curves.png")
    if args.plot_attention:
        plot_attention_example(model, vocab, valid or data.test or data.train, out)

    metrics = {f"test_{k}": v for k, v in test.items()}
    metrics.update(chem)
    metrics.update({"epochs": len(trainer.history), "best_epoch": trainer.best_epoch,
                    "stop_reason": trainer.stop_reason, "pretrain_time_s": t_pre, "train_time_s": t_train,
                    "sample_time_s": t_sample,
                    "wall_time_s": time.perf_counter() - t0, "parameters": model.num_parameters(),
                    "temperature": args.temperature, "preset": args.preset, "quick": args.quick})
    cli.write_json(out / "metrics.json", metrics)
    print_summary(metrics, out)
    return 0


def plot_attention_example(model, vocab, smiles, out) -> None:
    """Causal self-attention maps (first and last layer, every head) of one molecule."""
    import numpy as np
    from minitransformer.viz import plot_decoder_attention
    from minitransformer.cli import attention_example, save_plot
    example = attention_example(smiles)
    ids = vocab.encode(example)[:-1]  # (T,): BOS + tokens, the model's input when it predicts EOS
    tokens = [vocab.id_to_token(i) for i in ids]
    path = save_plot(out / "attention.png",
                     lambda target: plot_decoder_attention(model, np.asarray(ids), tokens, target, layers=[0, -1]))
    print(f"attention maps of {example} (first and last layer) in {path}")


def print_summary(m, out) -> None:
    from minitransformer.cli import print_table
    print_table([
        ("wall time", f"{m['wall_time_s'] / 60:.1f} min ({m['epochs']} epochs, best {m['best_epoch']}, "
                      f"stopped: {m['stop_reason']})"),
        ("test NLL / molecule (ref. style)", f"{m.get('test_nll_mol_ref', float('nan')):.2f} nats"),
        ("test NLL / token", f"{m.get('test_nll_token', float('nan')):.4f} nats"),
        ("test accuracy (tokens + EOS)", f"{m.get('test_acc_token', float('nan')):.3f}"),
        ("test rec (ref. style, with padding)", f"{m.get('test_rec_ref', float('nan')):.3f}"),
        ("validity", f"{m['validity']:.3f} of {m['n_samples']} samples"),
        ("uniqueness", f"{m['uniqueness']:.3f}"),
        ("novelty", f"{m['novelty']:.3f}"),
        ("IntDiv1 / IntDiv2", f"{m['intdiv1']:.3f} / {m['intdiv2']:.3f}"),
        ("KL score", f"{m['kl_score']:.3f}"),
    ], footer=f"outputs in {out}/: metrics.json history.json config.json best.npz samples.smi curves.png "
              "molecules.png")


def sample_command(argv) -> int:
    from minitransformer import cli
    args = build_sample_parser().parse_args(argv)
    cli.refuse_overwrite(args.out, args.force)  # before any work
    cli.use_backend(args)
    from minitransformer.chem import Vocab
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    ckpt = load_checkpoint(args.checkpoint)
    if ckpt.model_type != "DecoderLM" or ckpt.vocab is None:
        what = "no vocabulary" if ckpt.model_type == "DecoderLM" else f"a {ckpt.model_type} model"
        raise ValueError(f"{args.checkpoint} holds {what}; sampling needs a DecoderLM checkpoint with a "
                         "vocabulary, as written by a molecules.py training run (best.npz or last.npz)")
    model, _ = model_from_checkpoint(ckpt)
    vocab = Vocab.from_json(ckpt.vocab)
    smiles = sample_smiles(model, vocab, args.n, args.temperature, args.seed)
    text = "\n".join(smiles) + "\n"
    if args.out:
        cli.write_text(args.out, text, overwrite=args.force)
        print(f"wrote {len(smiles)} SMILES to {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None) -> int:
    from minitransformer.cli import demo_main
    return demo_main(argv, build_parser, train_command, {"sample": sample_command})


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
