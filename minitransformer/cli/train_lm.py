"""``minitransformer train lm``: a molecule generator, a decoder-only transformer on SMILES.

The flow, top to bottom: load and clean SMILES -> split -> build the
vocabulary -> (optionally) pretrain on a larger set of drug-like molecules ->
train a DecoderLM (next-token prediction, the best epoch chosen by validation
NLL) -> evaluate on the test split -> sample molecules with the KV cache ->
judge them with RDKit -> write everything to the run folder and print a
summary. The metrics (validity, uniqueness, novelty, IntDiv, KL score) are
defined in :mod:`minitransformer.chem.judge.metrics`.
"""
from __future__ import annotations

import time
from pathlib import Path

from minitransformer.cli import recipes

PRESETS = {
    # Ours: pre-LN, tied embeddings, AdamW with warmup + cosine, molecules written in
    # Kekule form, batch 32, and two phases: one pass over 200,000 MOSES molecules (9.5
    # minutes at most) teaches SMILES and drug-like chemistry, then 30 epochs on Tox21 with
    # 2,000 of those molecules mixed in. Both phases write every molecule as a fresh random
    # SMILES each epoch (augment 1): the model sees many writings of each molecule, so it
    # learns the chemistry rather than one string per molecule. The final samples are
    # drawn bare and under the SMILES grammar with valence rules (a sampler feature;
    # --grammar off: the bare model's only). Measured (docs/RESULTS.md, runs r12 and d1,
    # 12.2 and 12.8 minutes on 2 cores): bare validity 0.935 / 0.918, uniqueness 0.976 /
    # 0.973, novelty 0.894 / 0.900, FCD 1.44 times the floor of real Tox21 molecules in
    # both; under the grammar validity 1.000 and FCD 1.39 / 1.36 times the floor. (The default until 2026-11-26, 130,000 canonical molecules
    # and 8 epochs without augmentation: bare validity 0.894, FCD 2.13 times the floor.)
    # Without the MOSES files (offline) phase 1 is DRUGLIKE_PHASE1 instead.
    "default": dict(
        model=recipes.model(n_layers=4, pos="learned", tie_embeddings=True),
        **recipes.ADAMW, lr=1.5e-3, warmup=300,
        batch_size=32, epochs=30, patience=None, label_smoothing=0.0, augment=1.0,
        max_time=14.5 * 60, check_rdkit=True, metric="val_nll_token", form="kekule",
        pretrain_data="moses", pretrain_epochs=1, pretrain_limit=200_000, pretrain_max_time=9.5 * 60,
        pretrain_augment=1.0, pretrain_mix=2000, grammar="valence"),
    # J. Tomczak, "ARMs parameterized by Transformers": 10 post-LN blocks, heads as wide
    # as the model, dropout on the embedding sum only, Adamax, patience 10.
    "tomczak": dict(
        model="tomczak", optimizer="adamax", lr=1e-3, weight_decay=0.0, warmup=0, schedule="constant",
        batch_size=64, epochs=1000, patience=10, label_smoothing=0.0, augment=0.0,
        max_time=None, check_rdkit=False, metric="val_nll_mol_ref", form="as-is",
        pretrain_data=None, pretrain_epochs=0, pretrain_mix=0, grammar="valence"),
    # The MOSES benchmark (train lm --data moses --preset moses): the default model, no
    # pretraining, molecules written in Kekule form (so the model never draws an aromatic ring
    # RDKit cannot kekulize, and the valence grammar is complete), one pass over the whole
    # training file, 1,574,663 molecules in random order (the file is ordered; about 34
    # minutes at 32k tokens/s on 2 cores, the cosine schedule ending where training ends,
    # 40 at most), then 30,000 samples bare and 30,000 under the valence grammar, judged by
    # every MOSES metric, FCD included (moses_table.md). The test NLL uses 10,000 of the test
    # molecules. Measured (docs/RESULTS.md, run m3): 34.0 minutes of training, 49.3 in all;
    # bare validity 0.976, FCD/Test 0.146, novelty 0.903; under the grammar validity 1.000,
    # FCD/Test 0.203.
    "moses": dict(
        model=recipes.model(n_layers=4, pos="learned", tie_embeddings=True),
        **recipes.ADAMW, lr=1.5e-3, warmup=300,
        batch_size=64, epochs=1, patience=None, label_smoothing=0.0, augment=0.0,
        max_time=40 * 60, check_rdkit=True, metric="val_nll_token", form="kekule",
        pretrain_data=None, pretrain_epochs=0, pretrain_mix=0, samples=30000, limit=None,
        test_limit=10_000, grammar="valence"),
}
# "default" when MOSES cannot be had (no files, no network): phase 1 is 5 epochs on RDKit's
# 10,000 drug-like molecules, phase 2 12 epochs with 3,000 of them mixed in, no random
# SMILES (the default until 2026-11-24: validity 0.871 bare, uniqueness 0.971, novelty 0.874).
DRUGLIKE_PHASE1 = dict(pretrain_data="druglike", pretrain_epochs=5, pretrain_limit=None, pretrain_max_time=None,
                       epochs=12, pretrain_mix=3000, augment=0.0, pretrain_augment=0.0)
# --model lstm: an LSTM language model (CharRNN-style, models/lstm_lm.py) in the transformer's
# place, everything else of the preset kept. Sized like the default transformer: 2 layers of
# 256 states over 64-wide embeddings, about 0.86M weights against its 0.81M.
LSTM_MODEL = dict(kind="lstm", d_model=64, hidden=256, n_layers=2)
LSTM_QUICK = dict(kind="lstm", d_model=16, hidden=32, n_layers=1)
QUICK = dict(model=recipes.quick_model(n_layers=2, tie_embeddings=True),
             pretrain_data="druglike", pretrain_max_time=None, epochs=2, batch_size=32, warmup=10, patience=None, max_time=None, augment=0.5,
             pretrain_epochs=1, pretrain_limit=300, pretrain_mix=50, limit=400, samples=400)
MAX_LEN = 102  # BOS + up to 100 tokens + EOS


def add_parser(kinds):
    from minitransformer import cli
    from minitransformer.cli.sample import add_grammar_argument
    p = cli.add_command(kinds, "lm", help="a molecule generator (decoder-only, next-token prediction)",
                        example="minitransformer train lm --quick\n"
                                "minitransformer train lm --preset tomczak --data tox21 --out runs/tomczak")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS))
    p.add_argument("--model", default="transformer", choices=["transformer", "lstm"],
                   help="the generator: transformer (default) or lstm, the recurrent baseline (2 layers of 256 "
                        "states; --d-model sets the states, --n-layers the layers)")
    cli.add_common_arguments(p, out="runs/lm", data_names=("tox21", "druglike", "moses"))
    p.add_argument("--augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a training molecule as a random SMILES each epoch")
    p.add_argument("--form", default=None, choices=["as-is", "canonical", "kekule"],
                   help="how training molecules are written (default: the preset's)")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--d-model", type=cli.int_at_least(16), default=None,
                   help="override the model width D (heads of 32 numbers each, feed-forward 4 D)")
    p.add_argument("--n-layers", type=cli.int_at_least(1), default=None, help="override the number of blocks")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=None, help="override the peak learning rate")
    p.add_argument("--batch-size", type=cli.int_at_least(1), default=None, help="override the batch size")
    p.add_argument("--samples", type=cli.int_at_least(1, cli.MAX_SAMPLES, "they are held in memory and judged"),
                   default=None,
                   help="molecules to sample at the end (default: the preset's, 2000; 30,000 for moses)")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0,
                   help="sampling temperature, > 0 (default: 1)")
    add_grammar_argument(p, "besides the bare model's final samples, draw as many under a constraint and "
                            "report both", default="valence; off: the bare model's samples only")
    p.add_argument("--pretrain-data", default=None, type=cli.data_source(("druglike", "tox21", "moses", "none")),
                   help="pretrain on these molecules first (druglike, tox21, moses, a file, or none; default: the "
                        "preset's)")
    p.add_argument("--pretrain-epochs", type=cli.int_at_least(0), default=None)
    p.add_argument("--pretrain-augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a pretraining molecule as a random SMILES each epoch")
    p.add_argument("--pretrain-limit", type=cli.int_at_least(1), default=None,
                   help="pretrain on at most this many molecules (the first ones of the pretraining data)")
    p.add_argument("--pretrain-minutes", type=cli.number(0), default=None,
                   help="time budget of the pretraining phase (0 = none; it counts against --max-minutes)")
    p.add_argument("--pretrain-mix", type=cli.int_at_least(0), default=None,
                   help="keep this many phase-1 molecules in the phase-2 training set (against over-fitting)")
    cli.add_resume_argument(p, help="continue the run in --out (same data and options as before): alone, from "
                                    "its last.npz, or pretrain/last.npz when it stopped while pretraining; or from "
                                    "the checkpoint named")
    p.set_defaults(run=run)
    return p


def resolve_settings(args) -> dict:
    """The preset, with --quick and the overrides of the command line applied."""
    s = {"limit": None, "samples": 2000, "pretrain_augment": 0.0, **PRESETS[args.preset]}
    if args.quick:
        s.update(QUICK)
        if args.preset == "tomczak":
            s["model"] = dict(QUICK["model"], norm="post", tie_embeddings=False)
    recipes.apply_overrides(s, args, ("epochs", "form", "lr", "batch_size", "augment", "pretrain_augment",
                                      "pretrain_epochs", "pretrain_mix", "pretrain_limit", "samples"))
    if args.model == "lstm":
        _lstm_settings(s, args)
    elif args.d_model is not None or args.n_layers is not None:
        if not isinstance(s["model"], dict):
            raise ValueError(f"--d-model and --n-layers change the default and moses models; the {args.preset} "
                             "preset's model is fixed (leave them out)")
        if args.d_model is not None:
            if args.d_model % 32:
                raise ValueError(f"--d-model {args.d_model}: give a multiple of 32 (heads of 32 numbers each)")
            s["model"] = dict(s["model"], d_model=args.d_model, n_heads=args.d_model // 32, d_ff=4 * args.d_model)
        if args.n_layers is not None:
            s["model"] = dict(s["model"], n_layers=args.n_layers)
    if args.pretrain_data is not None:
        s["pretrain_data"] = None if args.pretrain_data == "none" else args.pretrain_data
    if not s["pretrain_data"]:
        s["pretrain_epochs"] = 0
    if args.grammar is not None:
        s["grammar"] = None if args.grammar == "off" else args.grammar
    return recipes.set_budgets(s, args, pretraining=s["pretrain_epochs"] > 0)


def _lstm_settings(s: dict, args) -> None:
    """``--model lstm``: the LSTM in the preset's model's place, with --d-model (its states)
    and --n-layers; the options that only a transformer has are refused in one line."""
    if args.preset == "tomczak":
        raise ValueError("--model lstm replaces the default and moses presets' transformer; the tomczak preset "
                         "is Tomczak's transformer itself (leave out --model or --preset)")
    for flag, given in (("--dropout", args.dropout), ("--plot-attention", args.plot_attention or None)):
        if given is not None:
            raise ValueError(f"{flag} needs a transformer; the LSTM model has no attention and no dropout "
                             "(leave it out)")
    s["model"] = dict(LSTM_QUICK if args.quick else LSTM_MODEL)
    if args.d_model is not None:
        s["model"]["hidden"] = args.d_model
    if args.n_layers is not None:
        s["model"]["n_layers"] = args.n_layers


def phase1_molecules(settings, data, user_chose: bool) -> list:
    """The phase-1 molecules of ``settings`` (the main set's held-out ones removed). When
    the preset's MOSES cannot be had (no files, offline), the drug-like phase 1 takes its
    place, said in one line and written into ``settings``; a --pretrain-data the user
    named is never replaced (its error stops the run)."""
    from minitransformer.chem import canonical
    from minitransformer.chem.datasets import lm_data
    exclude = {canonical(x) for x in data.val + data.test}
    extra = lm_data.pretraining_or_fallback(settings, user_chose, "phase 1 uses RDKit's 10,000 drug-like "
                                            "molecules instead", exclude=exclude, form=settings["form"],
                                            limit=settings.get("pretrain_limit"))
    if extra is not None:
        return extra
    for key, value in DRUGLIKE_PHASE1.items():  # the drug-like recipe, except what the user set
        if key.startswith("pretrain") or settings[key] == PRESETS["default"][key]:
            settings[key] = value
    return lm_data.pretraining_smiles("druglike", exclude=exclude, form=settings["form"])


def make_model(settings, vocab, seed):
    from minitransformer.models import DecoderLM, DecoderLMConfig
    ids = dict(vocab_size=len(vocab), pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=seed)
    if isinstance(settings["model"], dict) and settings["model"].get("kind") == "lstm":
        from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
        sizes = {k: v for k, v in settings["model"].items() if k != "kind"}
        return LSTMLM(LSTMLMConfig(max_len=MAX_LEN, **ids, **sizes))
    if settings["model"] == "tomczak":
        return DecoderLM(DecoderLMConfig.tomczak(max_len=MAX_LEN, **ids))
    return DecoderLM(DecoderLMConfig(max_len=MAX_LEN, **ids, **settings["model"]))


def run(args) -> int:
    import numpy as np

    from minitransformer import cli
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    from minitransformer.chem import Vocab, canonical
    from minitransformer.chem.judge.draw import DrawingUnavailable, molecule_grid_png
    from minitransformer.chem.datasets.lm_data import RandomizedEpochs, prepare_smiles
    from minitransformer.molecules.likelihood import batches_of, sequence_metrics
    from minitransformer.train.tasks import LMTask
    from minitransformer.train import TrainConfig
    from minitransformer.train.history import tagged

    t0 = time.perf_counter()
    settings = resolve_settings(args)
    out = Path(args.out)
    # The folder belongs to one run: reusing it needs --resume (checked below) or --force.
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz", "pretrain/last.npz"))
    data = prepare_smiles(args.data, check_rdkit=settings["check_rdkit"], form=settings["form"],
                          limit=settings["limit"], test_limit=settings.get("test_limit"))
    extra = []
    if settings["pretrain_epochs"] > 0:
        extra = phase1_molecules(settings, data, user_chose=args.pretrain_data is not None)
        data.vocab = Vocab.build(data.train + extra)  # one vocabulary for both phases
    vocab = data.vocab
    model = make_model(settings, vocab, args.seed)
    print(f"model: {type(model).__name__}, {model.num_parameters():,} weights; preset {args.preset}"
          f"{' (quick)' if args.quick else ''}")
    run_info = {"preset": args.preset, "quick": args.quick, "seed": args.seed, "settings": settings,
                "data": data.description, "cleaning": data.clean_summary,
                "split": [len(data.train), len(data.val), len(data.test)],
                "pretrain_molecules": len(extra), "pretrain_mix": min(len(extra), settings["pretrain_mix"]),
                "data_sha256": cli.data_fingerprint(data.train, data.val, data.test, extra)}
    if resume is not None:  # the same data, vocabulary and settings, or a clear refusal
        cli.check_resume(resume, out, run_info, vocab)
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, args.argv, args.seed, args.data, run_info["data_sha256"])
    val_batches = batches_of(data.encode(data.val), 128, vocab.pad_id)

    def lm_metrics(trainer, epoch, metrics):
        return {f"val_{k}": v for k, v in sequence_metrics(trainer.model, val_batches, vocab.pad_id).items()}

    # Phase 1 (optional): pretrain on the extra molecules. Skipped when resuming phase 2.
    resume_phase = load_checkpoint(resume).meta.get("phase", "train") if resume is not None else None
    if resume_phase not in (None, "pretrain", "train"):
        raise ValueError(f"{resume} says it was saved in phase {str(resume_phase)[:40]!r}, which train lm does "
                         "not have (pretrain or train); it is damaged or not this command's checkpoint")
    pre_history = []
    if extra and resume_phase != "train":
        print(f"pretraining on {len(extra)} molecules for {settings['pretrain_epochs']} epochs")
        steps = -(-len(extra) // settings["batch_size"]) * settings["pretrain_epochs"]
        pre_config = TrainConfig(epochs=settings["pretrain_epochs"], batch_size=settings["batch_size"], clip=1.0,
                                 seed=args.seed, out_dir=str(out / "pretrain"), quiet=args.quiet,
                                 max_time=settings.get("pretrain_max_time"))
        pre_data = data.encode(extra)
        if settings["pretrain_augment"] > 0:
            pre_data = RandomizedEpochs(extra, vocab, seed=args.seed, p=settings["pretrain_augment"],
                                        max_tokens=model.config.max_len, kekule_form=settings["form"] == "kekule")
        pre = cli.run_fit("pretrain", model, LMTask(vocab.pad_id),
                          recipes.make_optimizer(settings, model, max(2, steps)),
                          pre_data, config=pre_config, callbacks=[lm_metrics], vocab=vocab,
                          extra_meta={"run": run_info}, resume=resume if resume_phase == "pretrain" else None)
        pre_history = tagged(pre.history, "pretrain")
    elif extra:  # resuming phase 2: the pretraining rows come from its folder
        pre_history = tagged(cli.read_history(out / "pretrain"), "pretrain")
    t_pre = time.perf_counter() - t0

    # Phase 2: train on the main set (fine-tune, when phase 1 ran), optionally with a fixed
    # random subset of the phase-1 molecules mixed in, which keeps the model from memorising.
    mix = [extra[i] for i in np.sort(np.random.default_rng([args.seed, 2]).permutation(len(extra))
                                     [:settings["pretrain_mix"]])] if extra else []
    train_smiles = data.train + mix
    train_ids = data.encode(train_smiles)
    train_data = train_ids
    if settings["augment"] > 0:
        train_data = RandomizedEpochs(train_smiles, vocab, seed=args.seed, p=settings["augment"],
                                      max_tokens=model.config.max_len, kekule_form=settings["form"] == "kekule")
    steps_per_epoch = -(-len(train_ids) // settings["batch_size"])
    budget = None if settings["max_time"] is None else max(60.0, settings["max_time"] - t_pre)
    epochs = phase2_epochs(settings, out, resume_phase, budget, pre_history, train_ids, train_data)
    optimizer = recipes.make_optimizer(settings, model, max(2, steps_per_epoch * epochs))
    config = TrainConfig(epochs=epochs, batch_size=settings["batch_size"], clip=1.0,
                         patience=settings["patience"], metric=settings["metric"], mode="min",
                         seed=args.seed, max_time=budget, out_dir=str(out), quiet=args.quiet)
    cli.write_json(out / "config.json", {"model": model.config.to_dict(), "train": config.__dict__, "run": run_info})
    trainer = cli.run_fit("train", model, LMTask(vocab.pad_id, settings["label_smoothing"]), optimizer, train_data,
                          config=config, callbacks=[lm_metrics], vocab=vocab, extra_meta={"run": run_info},
                          resume=resume if resume_phase == "train" else None, earlier_history=pre_history)
    t_train = time.perf_counter() - t0

    # Evaluate the best checkpoint on the test split, then sample from it.
    if (out / "best.npz").exists():
        model, _ = model_from_checkpoint(out / "best.npz")
    model.eval()
    test = sequence_metrics(model, batches_of(data.encode(data.test), 128, vocab.pad_id), vocab.pad_id) \
        if data.test else {}
    t1 = time.perf_counter()
    from minitransformer.cli.lm_samples import draw_sample_sets, judge_sample_sets, samples_file
    sets = draw_sample_sets(model, vocab, settings, args)
    t_sample = time.perf_counter() - t1
    for label, smiles in sets.items():
        cli.write_text(out / samples_file(label), "\n".join(smiles) + "\n")
    report = judge_sample_sets(sets, data, extra, args)
    valid = [s for s in sets["bare"] if canonical(s) is not None]
    try:
        png, drawn = molecule_grid_png(valid, n=24)
    except DrawingUnavailable as exc:  # the run's results stay; only the picture is missing
        png, drawn = None, None
        print(f"molecules.png not drawn: {exc}")
    if drawn:
        cli.write_bytes(out / "molecules.png", png)
    elif drawn == 0:
        print(f"no valid molecule among the {len(sets['bare'])} bare samples, so there is no molecules.png to draw")
    cli.save_curves(pre_history + tagged(trainer.history, "train"), out / "curves.png")
    if args.plot_attention:
        from minitransformer.cli.attention import plot_attention_example
        plot_attention_example(model, vocab, valid or data.test or data.train, out)

    metrics = {f"test_{k}": v for k, v in test.items()}
    metrics.update(report)
    metrics.update({"epochs": len(trainer.history), "best_epoch": trainer.best_epoch,
                    "stop_reason": trainer.stop_reason, "pretrain_time_s": t_pre, "train_time_s": t_train,
                    "sample_time_s": t_sample, "wall_time_s": time.perf_counter() - t0,
                    "parameters": model.num_parameters(), "temperature": args.temperature, "grammar": settings["grammar"],
                    "preset": args.preset,
                    "quick": args.quick})
    cli.write_json(out / "metrics.json", metrics)
    print_summary(metrics, out)
    return 0


def phase2_epochs(settings, out, resume_phase, budget, pre_history, train_ids, train_data) -> int:
    """How many epochs phase 2 runs: the preset's, unless the time left for it would cut the
    learning-rate schedule short. Phase 1's speed (tokens/s) and one epoch's tokens give an
    epoch's time; if fewer epochs fit the budget, the schedule is planned for those (a cosine
    stopped half-way leaves the learning rate high and costs more than the missing epochs).
    A resumed phase 2 keeps the number it started with (config.json)."""
    import time as clock

    from minitransformer.atomic import parse_json
    epochs = settings["epochs"]
    if resume_phase == "train":
        try:
            return int(parse_json((out / "config.json").read_text(encoding="utf-8"))["train"]["epochs"])
        except (OSError, ValueError, KeyError, TypeError):
            return epochs
    speed = pre_history[-1].get("tokens_per_s") if pre_history else None
    if budget is None or not speed:
        return epochs
    t0 = clock.perf_counter()
    epoch0 = train_data(0) if callable(train_data) else train_ids  # (cached: fit reuses epoch 0's writings)
    rewrite = clock.perf_counter() - t0  # the random writings of one epoch, when augmenting
    per_epoch = 1.1 * sum(len(ids) - 1 for ids in epoch0) / speed + rewrite
    fit = max(1, int(budget // per_epoch))
    if fit < epochs:
        print(f"phase 2: {fit} of {epochs} epochs fit the {budget / 60:.1f} minutes left (about "
              f"{per_epoch:.0f} s each at phase 1's {speed:,.0f} tokens/s); the schedule is planned for {fit}")
        return fit
    return epochs


def print_summary(m, out) -> None:
    from minitransformer.chem.judge.generator_report import side_by_side
    from minitransformer.cli.outputs import format_duration, outputs_line, print_table
    number = lambda key, fmt: format(m[key], fmt) if m.get(key) is not None else "n/a"  # noqa: E731
    sets = {label: m[label] for label in ("bare", "valence", "syntax") if m.get(label)}
    rows = [
        ("wall time", f"{format_duration(m['wall_time_s'])} ({m['epochs']} epochs, best {m['best_epoch']}, "
                      f"stopped: {m['stop_reason']})"),
        ("test NLL per molecule (summed over tokens and EOS)", f"{number('test_nll_mol_ref', '.2f')} nats"),
        ("test NLL per token", f"{number('test_nll_token', '.4f')} nats"),
        ("test next-token accuracy (tokens + EOS)", number("test_acc_token", ".3f")),
    ] + side_by_side({("bare model" if k == "bare" else f"{k} grammar"): v for k, v in sets.items()},
                     m.get("fcd_floor"), m.get("fcd_reference"))
    if m.get("fcd_note"):
        rows.append(("FCD", m["fcd_note"]))
    print_table(rows, footer=outputs_line(out))
