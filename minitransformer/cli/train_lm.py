"""``minitransformer train lm``: a molecule generator, a decoder-only transformer on SMILES.

The flow, top to bottom (the skeleton is :func:`~minitransformer.cli.training.run_training`):
load and clean SMILES -> split -> build the vocabulary -> (optionally) pretrain on a
larger set of drug-like molecules -> train a DecoderLM (next-token prediction, the
best epoch chosen by validation NLL) -> evaluate on the test split -> sample
molecules with the KV cache -> judge them with RDKit -> write everything to the run
folder and print a summary. The metrics (validity, uniqueness, novelty, IntDiv, KL
score) are defined in :mod:`minitransformer.chem.judge.metrics`.
"""
from __future__ import annotations

import dataclasses
import time

from minitransformer.cli.training import (Data, Phase, TrainingCommand, apply_overrides, invocation, preset,
                                          run_training, set_budgets)
from minitransformer.models import LSTMLM, DecoderLM, DecoderLMConfig, LSTMLMConfig
from minitransformer.train.config import TrainConfig
from minitransformer.train.recipe import LMRecipe, model, quick_model, sized, unsized

MAX_LEN = 102  # BOS + up to 100 tokens + EOS
#: The transformer of the default, moses and pmo presets: 4 pre-LN blocks of D = 128, learned
#: positions, the output projection tied to the token embedding.
OURS = model(DecoderLMConfig, n_layers=4, pos="learned", tie_embeddings=True, max_len=MAX_LEN)
PRESETS = {
    # Ours: pre-LN, tied embeddings, AdamW with warmup + cosine, molecules written in Kekule form, batch
    # 32, and two phases: one pass over MOSES molecules teaches SMILES and drug-like chemistry, then up to
    # 60 epochs on Tox21 (at least 20) with 1,000 of those molecules mixed in, the whole run planned to end
    # within 15 minutes on the machine it runs on (time_budget: the speed is measured first, phase 1 gets
    # the molecules the time left beside phase 2 and the judging covers; with --epochs, --pretrain-limit,
    # --pretrain-epochs or --pretrain-minutes the counts are as given: 200,000 molecules in 9.5 minutes at
    # most). Both phases write every molecule as a fresh random SMILES each epoch (augment 1): the model
    # sees many writings of each molecule, so it learns the chemistry rather than one string per molecule.
    # A label that closes a ring is a token of its own (rings="marked", chem/datasets/ring_marks.py): whether
    # a ring is open is then a count of tokens, not a parity, and the model leaves few rings open.
    # Every token weighs the same (loss_norm="epoch"): batches hold molecules of one length, and a mean
    # per batch would weigh a short molecule's tokens more, which taught the model to stop early and to
    # learn small molecules by heart.
    # The final samples are drawn bare and under the SMILES grammar with valence rules (a sampler feature;
    # --grammar off: the bare model's only). Measured in docs/RESULTS.md.
    # Without the MOSES files (offline) phase 1 is DRUGLIKE_PHASE1 instead.
    "default": LMRecipe(
        model=OURS, lr=1.5e-3, warmup=300,
        batch_size=32, epochs=60, augment=1.0, max_time=14.5 * 60, metric="val_nll_token", form="kekule",
        pretrain_data="moses", pretrain_epochs=1, pretrain_limit=200_000, pretrain_max_time=9.5 * 60,
        pretrain_augment=1.0, pretrain_mix=1000, grammar="valence", time_budget=15 * 60, rings="marked",
        loss_norm="epoch"),
    # J. Tomczak, "ARMs parameterized by Transformers": 10 post-LN blocks, heads as wide
    # as the model, dropout on the embedding sum only, Adamax, patience 10.
    "tomczak": LMRecipe(
        model=DecoderLMConfig.tomczak(None, max_len=MAX_LEN), arch="tomczak", optimizer="adamax", lr=1e-3,
        weight_decay=0.0, schedule="constant",
        batch_size=64, epochs=1000, patience=10, check_rdkit=False, metric="val_nll_mol_ref", form="as-is"),
    # The MOSES benchmark (train lm --data moses --preset moses): the default model, no
    # pretraining, molecules written in Kekule form (so the model never draws an aromatic ring
    # RDKit cannot kekulize, and the valence grammar is complete), one pass over the whole
    # training file, 1,574,663 molecules in random order (the file is ordered; about 34
    # minutes at 32k tokens/s on 2 cores, the cosine schedule ending where training ends,
    # 40 at most), then 30,000 samples bare and 30,000 under the valence grammar, judged by
    # every MOSES metric, FCD included (moses_table.md). The test NLL uses 10,000 of the test
    # molecules. Measured in docs/RESULTS.md: 34.0 minutes of training, 49.3 in all; bare
    # validity 0.976, FCD/Test 0.146; under the grammar validity 1.000.
    "moses": LMRecipe(
        model=OURS, lr=1.5e-3, warmup=300,
        batch_size=64, epochs=1, max_time=40 * 60, metric="val_nll_token", form="kekule", samples=30000,
        test_limit=10_000, grammar="valence"),
    # A prior for goal-directed design (optimize, benchmarks/pmo.py) that reaches drug targets'
    # weight (MOSES: 250-350 Da, many targets 400-550): one pass over 600,000 MOSES molecules, then
    # one over 300,000 heavier ones joined from halves of MOSES molecules (--data recombined, this
    # preset's default; chem/datasets/recombined.py) with 200,000 phase-1 molecules mixed in. Counts,
    # not minutes (docs/RESULTS.md states the time).
    "pmo": LMRecipe(
        model=OURS, lr=1.5e-3, warmup=300,
        batch_size=64, epochs=1, max_time=None, metric="val_nll_token", form="kekule", samples=10_000,
        test_limit=10_000, grammar="valence", pretrain_data="moses", pretrain_epochs=1, pretrain_limit=600_000,
        pretrain_max_time=None, pretrain_augment=0.0, augment=0.0, pretrain_mix=200_000),
}
#: The data a preset trains on when --data is not given (else Tox21).
PRESET_DATA = {"pmo": "recombined"}
# "default" when MOSES cannot be had (no files, no network): phase 1 is 5 epochs on RDKit's
# 10,000 drug-like molecules, phase 2 12 epochs with 3,000 of them mixed in, no random SMILES.
DRUGLIKE_PHASE1 = dict(pretrain_data="druglike", pretrain_epochs=5, pretrain_limit=None, pretrain_max_time=None,
                       epochs=12, pretrain_mix=3000, augment=0.0, pretrain_augment=0.0)
# --model lstm: an LSTM language model (CharRNN-style, models/lstm_lm.py) in the transformer's
# place, everything else of the preset kept. Sized like the default transformer: 2 layers of
# 256 states over 64-wide embeddings, about 0.86M weights against its 0.81M.
LSTM_MODEL = unsized(LSTMLMConfig, d_model=64, hidden=256, n_layers=2, max_len=MAX_LEN)
LSTM_QUICK = unsized(LSTMLMConfig, d_model=16, hidden=32, n_layers=1, max_len=MAX_LEN)
QUICK = dict(model=quick_model(DecoderLMConfig, n_layers=2, tie_embeddings=True, max_len=MAX_LEN),
             pretrain_data="druglike", pretrain_max_time=None, epochs=2, batch_size=32, warmup=10, patience=None,
             max_time=None, augment=0.5, pretrain_epochs=1, pretrain_limit=300, pretrain_mix=50, limit=400,
             samples=400, time_budget=None)


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
    cli.add_common_arguments(p, out="runs/lm", data_names=("tox21", "druglike", "moses", "recombined"),
                             data_default="Tox21 if found, else druglike; recombined for --preset pmo")
    p.add_argument("--augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a training molecule as a random SMILES each epoch")
    p.add_argument("--form", default=None, choices=["as-is", "canonical", "kekule"],
                   help="how training molecules are written (default: the preset's)")
    p.add_argument("--rings", default=None, choices=["paired", "sizes", "marked"],
                   help="how the model writes a ring bond: paired labels as SMILES does; once, by the ring's "
                        "size, at the atom that closes it, so that no ring can be left open; or paired labels whose "
                        "closing one is a token of its own, so that an open ring is a count, not a parity (samples are "
                        "read back into SMILES; no grammar samples with sizes; default: the preset's, marked for "
                        "the default preset, paired for the others)")
    p.add_argument("--dropout", type=cli.number(0, 1, hi_open=True), default=None,
                   help="override every dropout of the model")
    p.add_argument("--d-model", type=cli.int_at_least(16, cli.MAX_WIDTH), default=None,
                   help="override the model width D (heads of 32 numbers each, feed-forward 4 D)")
    p.add_argument("--n-layers", type=cli.int_at_least(1, cli.MAX_LAYERS), default=None,
                   help="override the number of blocks")
    p.add_argument("--samples", type=cli.int_at_least(1, cli.MAX_SAMPLES, "they are held in memory and judged"),
                   default=None,
                   help="molecules to sample at the end (default: the preset's, 2000; 30,000 for moses)")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0,
                   help="sampling temperature, > 0 (default: 1)")
    add_grammar_argument(p, "besides the bare model's final samples, draw as many under a constraint and "
                            "report both", default="valence; off: the bare model's samples only")
    p.add_argument("--average", type=cli.number(0, 1, hi_open=True), default=None, metavar="DECAY",
                   help="keep a running average of the weights of the main phase with this decay per step (e.g. "
                        "0.999, reached after about 10 / (1 - DECAY) steps) and judge, keep and sample the average "
                        "(0 = none; default: the preset's)")
    p.add_argument("--loss-norm", default=None, choices=TrainConfig.LOSS_NORMS,
                   help="what each step's loss is divided by: its batch's tokens (a mean per batch, which weighs a "
                        "short molecule's tokens more, as batches hold molecules of one length) or the epoch's mean "
                        "tokens a batch (every token weighs the same; default: the preset's)")
    p.add_argument("--pretrain-data", default=None,
                   type=cli.data_source(("druglike", "tox21", "moses", "recombined", "none")),
                   help="pretrain on these molecules first (druglike, tox21, moses, recombined, a file, or none; "
                        "default: the preset's)")
    p.add_argument("--pretrain-epochs", type=cli.int_at_least(0, cli.MAX_EPOCHS), default=None)
    p.add_argument("--pretrain-augment", type=cli.number(0, 1), default=None,
                   help="probability of writing a pretraining molecule as a random SMILES each epoch")
    p.add_argument("--pretrain-limit", type=cli.int_at_least(1, cli.MAX_MOLECULES, "they are held in memory"),
                   default=None,
                   help="pretrain on at most this many molecules (the first ones of the pretraining data)")
    p.add_argument("--pretrain-minutes", type=cli.number(0, cli.MAX_MINUTES), default=None,
                   help="time budget of the pretraining phase (0 = none; it counts against --max-minutes)")
    p.add_argument("--pretrain-mix", type=cli.int_at_least(0, cli.MAX_MOLECULES, "they are held in memory"),
                   default=None,
                   help="keep this many phase-1 molecules in the phase-2 training set (against over-fitting)")
    p.set_defaults(run=run)
    return p


def resolve_recipe(args) -> LMRecipe:
    """The preset, with --quick and the overrides of the command line applied."""
    r = preset(PRESETS, args, QUICK)
    data = PRESET_DATA.get(args.preset) if args.data is None and not args.quick else args.data
    r = dataclasses.replace(r, data=data, temperature=args.temperature, fallback=args.pretrain_data is None)
    if args.quick and args.preset == "tomczak":
        r = dataclasses.replace(r, arch="transformer", model=dataclasses.replace(QUICK["model"], norm="post",
                                                                                 tie_embeddings=False))
    if args.rings == "sizes" and r.grammar is not None:  # the grammar reads SMILES's paired labels
        if args.grammar not in (None, "off"):
            raise ValueError(f"--grammar {args.grammar} reads ring labels in pairs; with --rings sizes the samples "
                             "are the bare model's (leave out --grammar)")
        r = dataclasses.replace(r, grammar=None)
    r = apply_overrides(r, args, ("epochs", "form", "rings", "lr", "batch_size", "augment", "pretrain_augment",
                                  "pretrain_epochs", "pretrain_mix", "pretrain_limit", "samples", "loss_norm"))
    if args.model == "lstm":
        r = _lstm_recipe(r, args)
    elif args.d_model is not None or args.n_layers is not None:
        if r.arch == "tomczak":
            raise ValueError(f"--d-model and --n-layers change the default and moses models; the {args.preset} "
                             "preset's model is fixed (leave them out)")
        sizes = {}
        if args.d_model is not None:
            if args.d_model % 32:
                raise ValueError(f"--d-model {args.d_model}: give a multiple of 32 (heads of 32 numbers each)")
            sizes.update(d_model=args.d_model, n_heads=args.d_model // 32, d_ff=4 * args.d_model)
        if args.n_layers is not None:
            sizes.update(n_layers=args.n_layers)
        r = dataclasses.replace(r, model=dataclasses.replace(r.model, **sizes))
    if args.pretrain_data is not None:
        r = dataclasses.replace(r, pretrain_data=None if args.pretrain_data == "none" else args.pretrain_data)
    if not r.pretrain_data:
        r = dataclasses.replace(r, pretrain_epochs=0)
    if args.grammar is not None:
        r = dataclasses.replace(r, grammar=None if args.grammar == "off" else args.grammar)
    if args.average is not None:
        r = dataclasses.replace(r, average=args.average or None)
    if r.time_budget is not None:
        from minitransformer.cli.lm_time_plan import COUNTS, with_time_budget
        r = with_time_budget(r, args.max_minutes, given=[name for name in COUNTS if getattr(args, name) is not None])
    return set_budgets(r, args, pretraining=r.pretrain_epochs > 0 and r.time_budget is None)


def _lstm_recipe(r: LMRecipe, args) -> LMRecipe:
    """``--model lstm``: the LSTM in the preset's model's place, with --d-model (its states)
    and --n-layers; the options that only a transformer has are refused in one line."""
    if args.preset == "tomczak":
        raise ValueError("--model lstm replaces the default and moses presets' transformer; the tomczak preset "
                         "is Tomczak's transformer itself (leave out --model or --preset)")
    for flag, given in (("--dropout", args.dropout), ("--plot-attention", args.plot_attention or None)):
        if given is not None:
            raise ValueError(f"{flag} needs a transformer; the LSTM model has no attention and no dropout "
                             "(leave it out)")
    sizes = {}
    if args.d_model is not None:
        sizes["hidden"] = args.d_model
    if args.n_layers is not None:
        sizes["n_layers"] = args.n_layers
    return dataclasses.replace(r, arch="lstm", model=dataclasses.replace(LSTM_QUICK if args.quick else LSTM_MODEL,
                                                                          **sizes))


def phase1_molecules(recipe: LMRecipe, held_out) -> tuple[LMRecipe, list]:
    """The phase-1 molecules of ``recipe`` without the ``held_out`` ones. When the preset's
    MOSES cannot be had (no files, offline), the drug-like phase 1 takes its place, said in
    one line, and the recipe comes back changed to it; a --pretrain-data the user named
    (``recipe.fallback`` False) is never replaced (its error stops the run)."""
    from minitransformer.chem import canonical
    from minitransformer.chem.datasets import lm_data
    exclude = {canonical(x) for x in held_out}
    extra = lm_data.pretraining_or_fallback(recipe.pretrain_data, not recipe.fallback, "phase 1 uses RDKit's 10,000 "
                                            "drug-like molecules instead", exclude=exclude, form=recipe.form,
                                            limit=recipe.pretrain_limit)
    if extra is not None:
        return recipe, extra
    default = PRESETS["default"]  # the drug-like recipe, except what the user set, and no time plan
    kept = {k: v for k, v in DRUGLIKE_PHASE1.items()
            if k.startswith("pretrain") or getattr(recipe, k) == getattr(default, k)}
    recipe = dataclasses.replace(recipe, time_budget=None, planned=False, **kept)
    return recipe, lm_data.pretraining_smiles("druglike", exclude=exclude, form=recipe.form)


def make_model(recipe: LMRecipe, vocab):
    """The generator of ``recipe`` for ``vocab``: a DecoderLM (the recipe's, or Tomczak's), or an LSTMLM."""
    config = sized(recipe.model, vocab, recipe.seed)
    return LSTMLM(config) if recipe.arch == "lstm" else DecoderLM(config)


class TrainLM(TrainingCommand):
    """``train lm``: what differs from the other training commands."""

    kind = "lm"

    def settings(self, args):
        return resolve_recipe(args), invocation(args, args.pretrain_data)

    def load(self, recipe, resume=None):
        from minitransformer.chem import Vocab
        from minitransformer.chem.datasets.lm_data import prepare_smiles
        t0 = time.perf_counter()
        data = prepare_smiles(recipe.data, check_rdkit=recipe.check_rdkit, form=recipe.form, limit=recipe.limit,
                              test_limit=recipe.test_limit, rings=recipe.rings)
        extra = []
        from minitransformer.cli.lm_time_plan import time_planned
        if recipe.planned and (recipe.time_budget is not None or resume is not None):
            recipe = time_planned(recipe, data, resume, time.perf_counter() - t0, make_model, MAX_LEN)
        if recipe.pretrain_epochs > 0:
            recipe, extra = phase1_molecules(recipe, data.val + data.test)
            data.vocab = Vocab.build(data.train + extra, rings=recipe.rings)  # one vocabulary for both phases
        return recipe, Data(data.vocab, data.train, data.val, data.test, extra, data.description,
                            data.clean_summary, own=data)

    def build_model(self, recipe, data):
        return make_model(recipe, data.vocab)

    def facts(self, run):
        d, mix = run.data, min(len(run.data.extra), run.recipe.pretrain_mix)
        return {"preset": run.recipe.preset, "split": [len(d.train), len(d.val), len(d.test)],
                "pretrain_molecules": len(d.extra), "pretrain_mix": mix}

    def _writings(self, run, smiles, p):
        """The training data of ``smiles``: as encoded, or written at random each epoch with probability ``p``."""
        from minitransformer.chem.datasets.lm_data import RandomizedEpochs
        if p <= 0:
            return run.data.own.encode(smiles)
        return RandomizedEpochs(smiles, run.data.vocab, seed=run.recipe.seed, p=p, max_tokens=MAX_LEN,
                                kekule_form=run.recipe.form == "kekule", share=run.ranks)

    def _validation(self, run):
        """The callback that gives each epoch its validation NLL and accuracy."""
        from minitransformer.molecules.likelihood import batches_of, sequence_metrics
        pad = run.data.vocab.pad_id
        batches = batches_of(run.data.own.encode(run.data.val), 128, pad)
        return lambda trainer, epoch, metrics: {f"val_{k}": v for k, v in
                                                sequence_metrics(trainer.model, batches, pad).items()}

    def pretraining(self, run):
        from minitransformer.train.tasks import LMTask
        r, extra = run.recipe, run.data.extra
        if not extra:
            return None
        if run.resumed_phase != "train":
            print(f"pretraining on {len(extra)} molecules for {r.pretrain_epochs} epochs")
        return Phase("pretrain", LMTask(run.data.vocab.pad_id), self._writings(run, extra, r.pretrain_augment),
                     len(extra), r.pretrain_epochs, r.pretrain_max_time, callbacks=[self._validation(run)])

    def training(self, run):
        """Phase 2: the main set (fine-tuning, when phase 1 ran), with a fixed random subset of
        the phase-1 molecules mixed in, which keeps the model from memorising."""
        import numpy as np

        from minitransformer.train.tasks import LMTask
        r, extra, seed = run.recipe, run.data.extra, run.recipe.seed
        mix = [extra[i] for i in np.sort(np.random.default_rng([seed, 2]).permutation(len(extra))
                                         [:r.pretrain_mix])] if extra else []
        train_smiles = run.data.train + mix
        train_data = self._writings(run, train_smiles, r.augment)
        epochs = phase2_epochs(run, train_data, run.data.own.encode(train_smiles))
        return Phase("train", LMTask(run.data.vocab.pad_id, r.label_smoothing), train_data, len(train_smiles),
                     epochs, run.budget, callbacks=[self._validation(run)], metric=r.metric, patience=r.patience)

    def evaluate(self, run, trainer):
        """The test NLL, then the final samples, bare and under the grammar, judged."""
        from minitransformer import cli
        from minitransformer.chem import canonical
        from minitransformer.chem.judge.draw import DrawingUnavailable, molecule_grid_png
        from minitransformer.chem.judge.generator_report import judge_sample_sets
        from minitransformer.chem.datasets.moses import is_moses
        from minitransformer.molecules.likelihood import batches_of, sequence_metrics
        from minitransformer.molecules.sampling import draw_sample_sets, samples_file
        from minitransformer.cli import ranks
        r, d, model = run.recipe, run.data, run.model
        t1 = time.perf_counter()
        sets = draw_sample_sets(model, d.vocab, r.samples, r.grammar, r.temperature, r.seed, run.asked.quiet,
                                parallel=run.ranks)  # data-parallel ranks share the drawing
        t_sample = time.perf_counter() - t1
        valid = [s for s in sets["bare"] if canonical(s) is not None]

        def judged():  # rank 0 alone judges (and writes); every rank gets its figures
            test = sequence_metrics(model, batches_of(d.own.encode(d.test), 128, d.vocab.pad_id),
                                    d.vocab.pad_id) if d.test else {}
            for label, smiles in sets.items():
                cli.write_text(run.out / samples_file(label), "\n".join(smiles) + "\n")
            report, table = judge_sample_sets(sets, d.train, d.val + d.test, d.extra, moses=is_moses(r.data),
                                              seed=r.seed)
            if table is not None:
                cli.write_text(run.out / "moses_table.md", table)
                print(table)
            try:
                png, drawn = molecule_grid_png(valid, n=24)
            except DrawingUnavailable as exc:  # the run's results stay; only the picture is missing
                png, drawn = None, None
                print(f"molecules.png not drawn: {exc}")
            if drawn:
                cli.write_bytes(run.out / "molecules.png", png)
            elif drawn == 0:
                print(f"no valid molecule among the {len(sets['bare'])} bare samples, so there is no molecules.png "
                      "to draw")
            return test, report
        test, report = ranks.on_rank0(judged)
        metrics = {f"test_{k}": v for k, v in test.items()}
        metrics.update(report)
        metrics.update(sample_time_s=t_sample, temperature=r.temperature, grammar=r.grammar)
        return metrics, valid or d.test or d.train

    def summary(self, run, metrics):
        print_summary(metrics, run.out)


COMMAND = TrainLM()


def run(args) -> int:
    return run_training(COMMAND, *COMMAND.settings(args))


def phase2_epochs(run, train_data, train_ids) -> int:
    """How many epochs phase 2 runs. Phase 1's measured speed (tokens/s) and one epoch's
    tokens give an epoch's time: if fewer epochs than the recipe's fit the time left, the
    schedule is planned for those (a cosine stopped half-way leaves the learning rate high and
    costs more than the missing epochs); a time-planned run whose phase 1 went faster than its
    plan takes more, up to the preset's. Data-parallel ranks take rank 0's count. A resumed
    phase 2 keeps the number it started with (config.json)."""
    from minitransformer.atomic import parse_json
    epochs, budget = run.recipe.epochs, run.budget
    speed = run.pre_history[-1].get("tokens_per_s") if run.pre_history else None
    chosen = epochs
    if run.resumed_phase == "train":
        try:
            chosen = int(parse_json((run.out / "config.json").read_text(encoding="utf-8"))["train"]["epochs"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    elif budget is not None and speed:
        most = PRESETS[run.recipe.preset].epochs if run.recipe.time_budget is not None else epochs
        t0 = time.perf_counter()
        epoch0 = train_data(0) if callable(train_data) else train_ids  # (cached: fit reuses epoch 0's writings)
        rewrite = time.perf_counter() - t0  # the random writings of one epoch, when augmenting
        per_epoch = 1.1 * sum(len(ids) - 1 for ids in epoch0) / speed + rewrite
        chosen = max(1, min(most, int(budget // per_epoch)))
        if chosen != epochs:
            print(f"phase 2: {chosen} epochs fit the {budget / 60:.1f} minutes left (about {per_epoch:.0f} s each "
                  f"at phase 1's {speed:,.0f} tokens/s; planned {epochs}); the schedule is planned for {chosen}")
    return chosen if run.ranks is None else run.ranks.from_rank0(chosen)  # every rank the same schedule


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
                     m.get("fcd_reference"))
    if m.get("fcd_note"):
        rows.append(("FCD", m["fcd_note"]))
    print_table(rows, footer=outputs_line(out))
