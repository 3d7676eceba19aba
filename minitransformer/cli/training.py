"""One skeleton for every ``train`` command: the sequence they share, written once.

Whatever the model, a training run is the same story:

    claim the run folder -> read the data, build the vocabulary -> build the model
    -> record what produced the run -> (pretrain) -> train, keeping the best epoch
    -> evaluate the best checkpoint -> write the results, print a summary

:func:`run_training` tells it. A command (``train lm``, ``train property``,
``train seq2seq``) is a :class:`TrainingCommand` that fills in only what
differs: its settings, read from the command line in one place
(:meth:`TrainingCommand.settings`: the typed recipe of :mod:`minitransformer.train.recipe`,
what is trained, and an :class:`Invocation`, where the run writes and how it talks), its
data and model, the :class:`Phase` of each call of :func:`~minitransformer.train.fit`
(task, data, metric), its evaluation and its summary. So every command claims
its folder, checks ``--resume`` against the run it continues, writes
``provenance.json``, ``config.json``, ``curves.png`` and ``metrics.json``, and
stops, resumes and budgets its time the same way.

A resumed run continues the phase its checkpoint was saved in: a pretraining
phase that finished is not run again (its history is read back from
``OUT/pretrain``). :func:`preset`, :func:`apply_overrides` and :func:`set_budgets` turn the
command line's options into a variant of a preset; nothing after
:meth:`TrainingCommand.settings` reads the command line.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from minitransformer.chem.datasets.vocab import Vocab
from minitransformer.nn.module import Module
from minitransformer.train.recipe import Recipe, make_optimizer
from minitransformer.train.tasks import Task

if TYPE_CHECKING:
    from minitransformer.distributed import DataParallel


@dataclasses.dataclass
class Phase:
    """One call of :func:`~minitransformer.train.fit`: what a command chooses for it.

    name: ``"pretrain"`` (its files go to ``OUT/pretrain``) or ``"train"``.
    task: the loss (``LMTask``, ``MLMTask``, ``PropertyTask``, ``Seq2SeqTask``).
    train_data: examples, or a callable ``epoch -> examples`` (fresh random writings).
    examples: training examples per epoch (the schedule's length is counted from it).
    epochs / max_time: this phase's epochs and budget in seconds (None: no limit).
    val_data / callbacks: what the end of each epoch evaluates.
    metric / mode / patience: which epoch is best, and when to stop early.
    lr: this phase's peak learning rate (None: the recipe's).
    model: the model this phase trains (None: the run's; a pretraining phase may train the run's
        encoder under another head).
    """

    name: str
    task: Task
    train_data: Sequence | Callable[[int], Sequence]
    examples: int
    epochs: int
    max_time: float | None
    val_data: Sequence | None = None
    callbacks: Sequence[Callable] = ()
    metric: str | None = None
    mode: str = "min"
    patience: int | None = None
    lr: float | None = None
    eval_batch_size: int | None = None
    model: Module | None = None


@dataclasses.dataclass
class Data:
    """What a command's data step gives the skeleton: the vocabulary, the three splits as
    SMILES and the pretraining molecules (None: the command has none), all fingerprinted so
    that ``--resume`` refuses other data, where the data came from, and the command's own
    loaded data (``own``)."""

    vocab: Vocab
    train: list
    val: list
    test: list
    extra: list | None
    description: str
    cleaning: str | None
    own: object = None  # whatever the command keeps of its data (its table, splits, features ...)

    def fingerprint(self) -> str:
        from minitransformer.cli.run_folders import data_fingerprint
        return data_fingerprint(self.train, self.val, self.test, *([] if self.extra is None else [self.extra]))


@dataclasses.dataclass(frozen=True)
class Invocation:
    """Where a run writes and how it talks: what the command line asks beside the recipe, not
    recorded with the run (a resume may change it).

    out: the run folder. resume: continue the run in it (a checkpoint, or
    :data:`~minitransformer.cli.run_folders.AUTO`: the folder's latest). force: move an earlier
    run's files aside. reads: the files the run reads, which ``force`` never moves. quiet: no
    progress bars. plot_attention: draw an example's attention at the end. argv: the command line,
    for ``provenance.json``.
    """

    out: Path
    resume: str | None = None
    force: bool = False
    reads: tuple[str, ...] = ()
    quiet: bool = False
    plot_attention: bool = False
    argv: tuple[str, ...] = ()


def invocation(args, *reads: str | None) -> Invocation:
    """The :class:`Invocation` of a ``train`` command's common options (and ``reads``: the files
    the run reads beside ``--data``)."""
    return Invocation(Path(args.out), args.resume, args.force, (args.data, *(r for r in reads if r)),
                      args.quiet, args.plot_attention, tuple(args.argv or ()))


@dataclasses.dataclass
class Run:
    """A run in progress, handed to every step of a command."""

    recipe: Recipe
    asked: Invocation
    out: Path
    data: Data
    model: Module | None = None
    info: dict = dataclasses.field(default_factory=dict)  # what config.json and every checkpoint record
    resume: Path | None = None  # the checkpoint to continue from
    resumed_phase: str | None = None  # the phase it was saved in
    pre_history: list = dataclasses.field(default_factory=list)
    ranks: DataParallel | None = None  # the data-parallel ranks this run trains on (None: one process)
    budget: float | None = None  # seconds left for the main phase
    untimed_s: float = 0.0  # one-off preparation the time budgets leave out (the pretraining targets' descriptors)


class TrainingCommand:
    """What one ``train`` command fills in; :func:`run_training` does the rest."""

    #: the kind after ``train`` (``lm``), and the checkpoints ``--resume`` looks for, latest phase first
    kind = ""
    resume_places = ("last.npz", "pretrain/last.npz")
    #: the panels of ``curves.png`` (None: loss and the metric)
    panels = None

    def settings(self, args) -> tuple[Recipe, Invocation]:
        """The one place a command reads its command line: the preset with the options applied,
        and where the run goes (refusals here come before any work)."""
        raise NotImplementedError

    def load(self, recipe: Recipe, resume: Path | None = None) -> tuple[Recipe, Data]:
        """The data; the recipe comes back changed when the data or the machine imposes it (a
        fallback, a time plan); ``resume``: the checkpoint a resumed run continues from."""
        raise NotImplementedError

    def build_model(self, recipe: Recipe, data: Data):
        """The model of ``recipe`` for ``data.vocab``, its weights drawn from ``recipe.seed``."""
        raise NotImplementedError

    def describe(self, run: Run) -> str:
        """What the first line says after the model's size (the preset, by default)."""
        return f"preset {run.recipe.preset}"

    def facts(self, run: Run) -> dict:
        """The command's own entries of the run record (``config.json``'s ``run``)."""
        return {}

    def pretraining(self, run: Run) -> Phase | None:
        """The first phase, or None when the run has none."""
        return None

    def training(self, run: Run) -> Phase:
        raise NotImplementedError

    def evaluate(self, run: Run, trainer) -> tuple[dict, list]:
        """The best model's test metrics (writing its output files), and the SMILES
        ``--plot-attention`` picks its example from."""
        raise NotImplementedError

    def summary(self, run: Run, metrics: dict) -> None:
        raise NotImplementedError


def run_training(command: TrainingCommand, recipe: Recipe, asked: Invocation, read_back: bool = False) -> int:
    """Train, evaluate and report one run of ``command`` with ``recipe``, as ``asked`` (see the
    module's story). ``read_back`` (with ``--resume``, for a run that finished): stop once the run
    in the folder is shown to be this command's (its data, labels, vocabulary and settings, as a
    resume compares them)."""
    from minitransformer import cli
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    from minitransformer.cli import ranks
    from minitransformer.train.history import tagged

    t0 = time.perf_counter()
    out = asked.out
    # The folder belongs to one run: reusing it needs --resume (checked below) or --force.
    kept = read_back and not any((out / place).is_file() for place in command.resume_places)
    resume = None if kept else cli.claim_run_folder(  # (a finished run without checkpoints: its record only)
        out, asked.resume, asked.force, resume_places=command.resume_places, reads=asked.reads)
    recipe, data = command.load(recipe, resume)
    run = Run(recipe, asked, out, data, resume=resume, ranks=ranks.current())
    run.model = command.build_model(recipe, data)
    check_fits_in_memory(run.model)  # before anything is written: a retry then needs no --force
    print(f"model: {type(run.model).__name__}, {run.model.num_parameters():,} weights; {command.describe(run)}"
          f"{' (quick)' if recipe.quick else ''}")
    run.info = {"quick": recipe.quick, "seed": recipe.seed, "settings": recipe.record(), "data": data.description,
                "cleaning": data.cleaning,
                "data_sha256": data.fingerprint(),
                **command.facts(run)}
    _check_ranks_agree(run.info, run.ranks)
    if resume is not None:  # the same data, vocabulary and settings, or a clear refusal (rank 0's, said once)
        ranks.on_rank0(lambda: cli.check_resume(resume, out, run.info, data.vocab))
        run.resumed_phase = load_checkpoint(resume).meta.get("phase", "train")
        if run.resumed_phase not in ("pretrain", "train"):
            raise ValueError(f"{resume} says it was saved in phase {str(run.resumed_phase)[:40]!r}, which train "
                             f"{command.kind} does not have (pretrain or train); it is damaged or not this "
                             "command's checkpoint")
    if read_back:
        if resume is None:  # its checkpoints were removed: config.json's record is compared
            from minitransformer.cli.run_folders import check_recorded_run
            check_recorded_run(out, run.info)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, asked.argv, recipe.seed, recipe.data, run.info["data_sha256"])

    pretraining = command.pretraining(run)
    if pretraining is not None and run.resumed_phase != "train":
        trainer = _fit(run, pretraining, resume=resume if run.resumed_phase == "pretrain" else None)
        run.pre_history = tagged(trainer.history, "pretrain")
    elif pretraining is not None:  # resuming the main phase: the pretraining rows come from its folder
        run.pre_history = tagged(cli.read_history(out / "pretrain"), "pretrain")
    t_pre = time.perf_counter() - t0 - run.untimed_s
    run.budget = None if recipe.max_time is None else max(60.0, recipe.max_time - t_pre)

    trainer = _fit(run, command.training(run), resume=resume if run.resumed_phase == "train" else None)
    t_train = time.perf_counter() - t0
    history = run.pre_history + tagged(trainer.history, "train")
    cli.save_curves(history, out / "curves.png", **({"panels": command.panels} if command.panels else {}))

    if (out / "best.npz").exists():  # evaluate the best epoch's weights
        run.model, _ = model_from_checkpoint(out / "best.npz")
    run.model.eval()
    metrics, examples = command.evaluate(run, trainer)
    if asked.plot_attention and examples:
        from minitransformer.cli.attention import plot_attention_example
        plot_attention_example(run.model, data.vocab, examples, out)
    metrics.update({"epochs": len(trainer.history), "best_epoch": trainer.best_epoch,
                    "stop_reason": trainer.stop_reason, "train_time_s": t_train,
                    "wall_time_s": time.perf_counter() - t0, "parameters": run.model.num_parameters(),
                    "quick": recipe.quick, "preset": recipe.preset})
    if pretraining is not None:
        metrics.update(pretrain_epochs=len(run.pre_history), pretrain_time_s=t_pre)
    cli.write_json(out / "metrics.json", metrics)
    command.summary(run, metrics)
    return 0


#: Bytes training holds per weight: the weight, its gradient and Adam's two moments, in float32.
TRAINING_BYTES_PER_WEIGHT = 16


def check_fits_in_memory(model, available: int | None = None) -> None:
    """Refuse (ValueError, exit status 2), before any file is written, a model whose weights,
    gradients and optimizer moments alone need more memory than this machine has free
    (``available`` bytes; read from the machine when not given). On a GPU the device's memory
    decides, and is not checked here."""
    from minitransformer import backend
    from minitransformer.runtime import available_memory
    if backend.name() != "numpy":
        return
    available = available_memory() if available is None else available
    need = TRAINING_BYTES_PER_WEIGHT * model.num_parameters()
    if available is not None and need > available:
        raise ValueError(f"the model has {model.num_parameters():,} weights: training them takes at least "
                         f"{need / 2 ** 30:.1f} GiB (weights, gradients and Adam's two moments in float32), more "
                         f"than the {available / 2 ** 30:.1f} GiB this machine has free; choose a smaller model "
                         "(--d-model, --n-layers, --head-hidden)")


def _check_ranks_agree(info: dict, dp) -> None:
    """Data-parallel ranks (``dp``) must train on the same data with the same settings (a step
    pairs their collective calls one for one): refuse, on every rank, a run where they differ."""
    from minitransformer.cli.outputs import json_safe
    if dp is None:
        return
    mine = (info["data_sha256"], repr(json_safe(info["settings"])))
    if any(other != mine for other in dp.gather(mine)):
        refusal = RuntimeError("the data-parallel ranks read different data or settings (a time plan or a "
                               "fallback differed between them); run with --ranks 1")
        refusal.on_every_rank = True
        raise refusal


def _fit(run: Run, phase: Phase, resume: Path | None):
    """One phase: its optimizer (the schedule as long as the phase), its settings, and
    :func:`~minitransformer.cli.run_state.run_fit`; the main phase writes ``config.json`` first."""
    from minitransformer import cli
    from minitransformer.train import TrainConfig
    recipe = run.recipe
    steps = max(2, -(-phase.examples // recipe.batch_size) * phase.epochs)
    model = run.model if phase.model is None else phase.model
    optimizer = make_optimizer(recipe, model, steps, lr=phase.lr)
    folder = run.out / "pretrain" if phase.name == "pretrain" else run.out
    config = TrainConfig(epochs=phase.epochs, batch_size=recipe.batch_size, clip=recipe.clip,
                         patience=phase.patience, metric=phase.metric, mode=phase.mode, seed=recipe.seed,
                         max_time=phase.max_time, eval_batch_size=phase.eval_batch_size, out_dir=str(folder),
                         quiet=run.asked.quiet, average=recipe.average if phase.name == "train" else None,
                         loss_norm=recipe.loss_norm)
    if phase.name == "train":
        cli.write_json(run.out / "config.json", {"model": run.model.config.to_dict(), "train": config.__dict__,
                                                 "run": run.info})
    return cli.run_fit(phase.name, model, phase.task, optimizer, phase.train_data, phase.val_data,
                       config=config, callbacks=phase.callbacks, vocab=run.data.vocab,
                       extra_meta={"run": run.info}, resume=resume, parallel=run.ranks,
                       earlier_history=run.pre_history if phase.name == "train" else ())


# ----------------------------------------------------------------------------- the command line
def preset(presets: Mapping[str, Recipe], args, quick: Mapping) -> Recipe:
    """The recipe ``--preset`` names (``"default"`` for a command without presets), made small by
    ``--quick`` (``quick``'s fields replaced), with the run's seed."""
    name = getattr(args, "preset", "default")
    recipe = dataclasses.replace(presets[name], seed=args.seed, quick=args.quick, preset=name)
    return dataclasses.replace(recipe, **quick) if args.quick else recipe


def apply_overrides(recipe: Recipe, args, names: Sequence[str]) -> Recipe:
    """``recipe`` with every option of ``names`` the user gave (not None in ``args``); a
    ``--dropout`` sets the model's three dropouts; ``--weight-decay`` (every command) needs an AdamW recipe."""
    given = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    if getattr(args, "weight_decay", None) is not None:
        if recipe.optimizer != "adamw":
            raise ValueError(f"--weight-decay sets AdamW's decay, and this preset trains with {recipe.optimizer} "
                             "(leave it out)")
        given["weight_decay"] = args.weight_decay
    if getattr(args, "dropout", None) is not None:
        p = args.dropout
        given["model"] = dataclasses.replace(recipe.model, emb_dropout=p, attn_dropout=p, resid_dropout=p)
    return dataclasses.replace(recipe, **given)


def set_budgets(recipe: Recipe, args, pretraining: bool = False, pretraining_adds_time: bool = False) -> Recipe:
    """``recipe`` with its budgets from the command line: ``pretrain_max_time`` from
    ``--pretrain-minutes`` (0 = none), ``max_time`` from ``--max-minutes`` (0 = none) or the
    preset's. With ``pretraining_adds_time`` (and no ``--max-minutes``) the preset's budget is
    the main phase's own (``fine_tune_time``) and the pretraining's comes on top. With
    ``pretraining``, a pretraining budget that leaves the main phase less than a minute is
    refused."""
    from minitransformer.cli.arguments import check_phase_budget, max_time
    minutes = getattr(args, "pretrain_minutes", None)
    if minutes is not None:
        recipe = dataclasses.replace(recipe, pretrain_max_time=minutes * 60 if minutes > 0 else None)
    total = recipe.max_time
    if pretraining_adds_time and args.max_minutes is None and total and recipe.pretrain_max_time:
        recipe = dataclasses.replace(recipe, fine_tune_time=total)
        total += recipe.pretrain_max_time
    recipe = dataclasses.replace(recipe, max_time=max_time(args, total))
    if pretraining:
        check_phase_budget(recipe.pretrain_max_time, recipe.max_time)
    return recipe
