"""A training recipe: everything a ``train`` command decides before it touches data, typed.

A recipe is a frozen dataclass, checked when it is built, so a preset with a typo
or a command line with a negative learning rate is refused before any work, with
the field's name in the message. :class:`Recipe` holds what every training command
shares (the model's sizes, the optimizer and its schedule, the batch size, the
epochs and the time budgets, an optional pretraining phase); each command's
recipe adds its own fields:

* :class:`LMRecipe` - ``train lm``: how molecules are written, the pretraining
  mix, the final samples and their grammar;
* :class:`PropertyRecipe` - ``train property``: the longest molecule, test-time
  augmentation, the class weights, the pretraining learning rate;
* :class:`Seq2SeqRecipe` - ``train seq2seq``: label smoothing, the validation
  exact-match subset.

A variant is ``dataclasses.replace(recipe, lr=1e-3)``: checked again.
:func:`make_optimizer` builds the optimizer and learning-rate schedule of any
recipe. :meth:`Recipe.record` is the recipe as the run folder records it
(``config.json``), the form a resumed run is compared against.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar
from minitransformer import checks
from minitransformer.nn.config import ConfigBase
from minitransformer.train.config import TrainConfig

#: The options every default preset's transformer starts from: pre-LN, D = 128 in 4 heads, GELU, no dropout.
BASE_MODEL = dict(d_model=128, n_heads=4, d_ff=512, norm="pre", activation="gelu", emb_dropout=0.0,
                  attn_dropout=0.0, resid_dropout=0.0)
#: The small transformer of ``--quick`` runs.
QUICK_MODEL = dict(d_model=32, n_heads=2, d_ff=64, norm="pre")
#: AdamW's betas, and where the cosine schedule ends (a fraction of the peak learning rate).
BETAS = (0.9, 0.98)
MIN_LR_FRACTION = 0.05
#: The model families a recipe can name: a transformer of the command's kind, Tomczak's
#: fixed transformer (``train lm --preset tomczak``), or a recurrent baseline.
ARCHITECTURES = ("transformer", "tomczak", "lstm", "rnn")
#: What the data and the run's seed decide when the model is built, so not the recipe's to record.
BUILT_FROM_DATA = ConfigBase.VOCAB_FIELDS + ("pad_id", "bos_id", "eos_id", "seed")


def unsized(cls, **options):
    """The model config ``cls(**options)`` (``DecoderLMConfig``, ``Seq2SeqConfig`` ...) with every
    vocabulary size None: a recipe's model, before the data gives it a vocabulary."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{f: None for f in cls.VOCAB_FIELDS if f in names}, **options)


def model(cls, **changes):
    """A recipe's transformer: ``cls`` with :data:`BASE_MODEL`'s options and ``changes``."""
    return unsized(cls, **dict(BASE_MODEL, **changes))


def quick_model(cls, **changes):
    """A ``--quick`` recipe's transformer: ``cls`` with :data:`QUICK_MODEL`'s options and ``changes``."""
    return unsized(cls, **dict(QUICK_MODEL, **changes))


def sized(config, vocab, seed: int, **fields):
    """The recipe's model ``config`` made for ``vocab`` (its size and special tokens, on both
    sides of an encoder-decoder) with weights drawn from ``seed``, and ``fields`` set."""
    names = {f.name for f in dataclasses.fields(config)}
    ids = {f"{name}_id": getattr(vocab, f"{name}_id") for name in ("pad", "bos", "eos") if f"{name}_id" in names}
    sizes = {f: len(vocab) for f in ConfigBase.VOCAB_FIELDS if f in names}
    return dataclasses.replace(config, seed=seed, **sizes, **ids, **fields)


def _whole(name, value, low, optional=False):
    checks.whole(f"recipe.{name}", value, low, optional=optional)


def _real(name, value, low, high=None, optional=False, low_open=False):
    checks.real(f"recipe.{name}", value, low, high, low_open=low_open, optional=optional)


def _choice(name, value, choices):
    checks.choice(f"recipe.{name}", value, choices)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every training command decides; times are seconds (None: no limit).

    model: the model's config (``DecoderLMConfig``, ``EncoderConfig``, ``Seq2SeqConfig``,
        ``LSTMLMConfig`` ...) with its vocabulary left to the data (:func:`unsized`); ``arch`` names
        its family. The command builds it with :func:`sized` once the vocabulary is known.
    seed: draws the weights, the split and every random choice of the run.
    quick: a small, fast run (a smoke test of the pipeline); preset: the preset it started from.
    optimizer / lr / warmup / schedule / weight_decay: AdamW (or Adam, Adamax) at peak ``lr``,
        with ``warmup`` linear steps then a cosine decay to 5% of the peak (or a constant rate).
    batch_size / epochs / patience: the main phase (patience None: no early stopping).
    clip: the largest global gradient norm (None: no clipping).
    max_time: the whole run's training budget; ``fine_tune_time`` is the main phase's own
        when the pretraining's budget comes on top of it.
    augment: probability of writing a training molecule as a random SMILES each epoch.
    data: what to train on (a data set's name or a file; None: the command's default), as given.
    limit: use at most this many molecules of the data (None: all).
    pretrain_*: the optional first phase (``pretrain_epochs`` 0: none) and its data.
    average: the decay per step of a running average of the weights that the main phase keeps,
        evaluates and saves as ``best.npz`` (None: none; ``TrainConfig.average``).
    loss_norm: what each step's token loss is divided by, in both phases: its batch's scored tokens
        (``"batch"``) or the epoch's mean per batch (``"epoch"``; ``TrainConfig.loss_norm``).
    """

    model: ConfigBase
    arch: str = "transformer"
    seed: int = 0
    quick: bool = False
    preset: str = "default"
    optimizer: str = "adamw"
    lr: float = 1e-3
    warmup: int = 0
    schedule: str = "cosine"
    weight_decay: float = 0.01
    batch_size: int = 32
    epochs: int = 10
    patience: int | None = None
    clip: float | None = 1.0
    max_time: float | None = None
    fine_tune_time: float | None = None
    augment: float = 0.0
    data: str | None = None
    limit: int | None = None
    pretrain_data: str | None = None
    pretrain_epochs: int = 0
    pretrain_limit: int | None = None
    pretrain_max_time: float | None = None
    average: float | None = None
    loss_norm: str = "batch"

    #: Fields :meth:`record` leaves out: the run record holds the seed and ``quick`` beside the
    #: settings, and a command's choices of how to run (not what to train) may change on a resume.
    NOT_RECORDED: ClassVar[tuple[str, ...]] = ("seed", "quick")

    def __post_init__(self):
        if not isinstance(self.model, ConfigBase):
            raise ValueError(f"recipe.model must be a model's config (DecoderLMConfig, EncoderConfig ...), got "
                             f"{self.model!r}")
        _whole("seed", self.seed, 0)
        if not (isinstance(self.preset, str) and self.preset):
            raise ValueError(f"recipe.preset must name the preset, got {self.preset!r}")
        _choice("arch", self.arch, ARCHITECTURES)
        _choice("optimizer", self.optimizer, ("adamw", "adam", "adamax"))
        _choice("schedule", self.schedule, ("cosine", "constant"))
        _choice("loss_norm", self.loss_norm, TrainConfig.LOSS_NORMS)
        _real("lr", self.lr, 0, low_open=True)
        _real("weight_decay", self.weight_decay, 0)
        _real("augment", self.augment, 0, 1)
        _real("clip", self.clip, 0, low_open=True, optional=True)
        for name in ("max_time", "fine_tune_time", "pretrain_max_time"):
            _real(name, getattr(self, name), 0, optional=True)
        checks.real("recipe.average", self.average, 0, 1, low_open=True, high_open=True, optional=True)
        _whole("warmup", self.warmup, 0)
        _whole("batch_size", self.batch_size, 1)
        _whole("epochs", self.epochs, 0)
        _whole("pretrain_epochs", self.pretrain_epochs, 0)
        for name in ("patience", "limit", "pretrain_limit"):
            _whole(name, getattr(self, name), 1, optional=True)
        if self.pretrain_data is not None and not (isinstance(self.pretrain_data, str) and self.pretrain_data):
            raise ValueError(f"recipe.pretrain_data must name the pretraining molecules (or be None), "
                             f"got {self.pretrain_data!r}")

    def record(self) -> dict:
        """The recipe as ``config.json`` and every checkpoint record it: its fields, the model's
        options but what the data and the seed decide (:data:`BUILT_FROM_DATA`), written as the
        presets always have (Tomczak's by name, a recurrent model's with its ``kind``), so a run
        recorded by an earlier version compares equal."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self.NOT_RECORDED}
        options = {k: v for k, v in self.model.to_dict().items() if k not in BUILT_FROM_DATA}
        out["model"] = {"tomczak": "tomczak", "lstm": {"kind": "lstm", **options},
                        "rnn": {"kind": "rnn", **options}}.get(self.arch, options)
        return out


@dataclasses.dataclass(frozen=True)
class LMRecipe(Recipe):
    """``train lm``: form ("as-is", "canonical", "kekule") is how molecules are written, rings
    how their ring bonds are (``"paired"`` labels, SMILES; their ``"sizes"`` at the closing
    atom: :mod:`minitransformer.chem.datasets.ring_sizes`; or labels whose closing one is ``"marked"``:
    :mod:`minitransformer.chem.datasets.ring_marks`; no grammar samples with sizes); metric picks
    the best epoch; pretrain_mix phase-1 molecules stay in phase 2; samples are drawn at the end,
    bare and (with ``grammar`` "syntax" or "valence") constrained.

    time_budget: seconds from start to summary, planned on the machine
    (:mod:`minitransformer.train.time_plan`): phase 1's molecules and phase 2's epochs
    (at least ``min_epochs``; phase 1 keeps at least ``pretrain_share`` of the training time)
    follow from the measured speed, with the judging reserved: ``judge_time`` is the seconds drawing
    and judging 2,000 samples bare and 2,000 under a grammar take at 36,000 tokens/s, grown with
    ``samples`` and scaled by the measured speed
    (:func:`minitransformer.cli.lm_time_plan.judging_seconds`). None: the counts as given.
    planned: the run is planned in minutes (a MOSES phase 1, no count fixed by the user); with
    ``time_budget`` None it keeps a resumed run's plan without a limit.
    fallback: phase 1 may fall back to RDKit's drug-like molecules when MOSES cannot be had (not
    when the user named its data). temperature: the final samples' sampling temperature."""

    label_smoothing: float = 0.0
    check_rdkit: bool = True
    metric: str = "val_nll_token"
    form: str = "kekule"
    rings: str = "paired"
    pretrain_augment: float = 0.0
    pretrain_mix: int = 0
    samples: int = 2000
    test_limit: int | None = None
    grammar: str | None = "valence"
    time_budget: float | None = None
    judge_time: float = 40.0
    min_epochs: int = 20
    pretrain_share: float = 0.35
    planned: bool = False
    fallback: bool = True
    temperature: float = 1.0

    NOT_RECORDED = Recipe.NOT_RECORDED + ("planned", "fallback", "temperature")

    def __post_init__(self):
        super().__post_init__()
        _real("label_smoothing", self.label_smoothing, 0, 1)
        _real("pretrain_augment", self.pretrain_augment, 0, 1)
        _real("time_budget", self.time_budget, 0, optional=True, low_open=True)
        _real("judge_time", self.judge_time, 0)
        _real("pretrain_share", self.pretrain_share, 0, 1)
        _real("temperature", self.temperature, 0, low_open=True)
        _whole("min_epochs", self.min_epochs, 1)
        _choice("form", self.form, ("as-is", "canonical", "kekule"))
        _choice("rings", self.rings, ("paired", "sizes", "marked"))
        if self.rings == "sizes" and self.grammar is not None:
            raise ValueError(f"grammar {self.grammar!r} reads ring labels in pairs; with rings {self.rings!r} the "
                             "samples are the bare model's only (grammar None)")
        _choice("metric", self.metric, ("val_nll_token", "val_nll_mol_ref"))
        _choice("grammar", self.grammar, (None, "syntax", "valence"))
        _whole("pretrain_mix", self.pretrain_mix, 0)
        _whole("samples", self.samples, 1)
        _whole("test_limit", self.test_limit, 1, optional=True)


@dataclasses.dataclass(frozen=True)
class PropertyRecipe(Recipe):
    """``train property``: max_len tokens at most per molecule (<cls> and <eos> included; the
    model's ``max_len`` follows it); tta random writings averaged per test molecule; pos_weight
    balances each assay's rare positives; head_hidden: the classifier head's hidden units (0: one
    linear layer); descriptors: the head also reads RDKit's 2D descriptors of each molecule
    (:mod:`minitransformer.chem.descriptors`).

    split: ``"random"`` (80/10/10, drawn by ``split_seed``; None: the run's seed, and the members
    of an ensemble share their seed's split) or ``"scaffold"``. pretrain: a masked-language-model
    phase first (at peak ``pretrain_lr``), on ``pretrain_data``, which may fall back to the training
    split's molecules when MOSES cannot be had (``fallback``: not when the user named the data).
    encoder: fine-tune this pretrained encoder instead (a checkpoint path). seeds / ensemble: the
    runs of one command (:mod:`minitransformer.cli.property_runs`): one per seed (none: the run's
    own), each of ``ensemble`` models."""

    max_len: int = 256
    tta: int = 8
    pos_weight: bool = True
    pretrain_lr: float = 1e-3
    head_hidden: int = 0
    descriptors: bool = False
    split: str = "random"
    split_seed: int | None = None
    pretrain: bool = False
    fallback: bool = True
    encoder: str | None = None
    seeds: tuple[int, ...] = ()
    ensemble: int = 1

    NOT_RECORDED = Recipe.NOT_RECORDED + ("fallback", "seeds", "ensemble")

    def __post_init__(self):
        super().__post_init__()
        _whole("max_len", self.max_len, 3)
        _whole("tta", self.tta, 1)
        _whole("head_hidden", self.head_hidden, 0)
        _whole("ensemble", self.ensemble, 1)
        _whole("split_seed", self.split_seed, 0, optional=True)
        _real("pretrain_lr", self.pretrain_lr, 0, low_open=True)
        _choice("split", self.split, ("random", "scaffold"))
        for seed in self.seeds:
            _whole("seeds", seed, 0)
        if self.model.max_len != self.max_len:  # one length: the data's limit is the model's
            object.__setattr__(self, "model", dataclasses.replace(self.model, max_len=self.max_len))


@dataclasses.dataclass(frozen=True)
class Seq2SeqRecipe(Recipe):
    """``train seq2seq``: label smoothing of the loss; exact match of ``val_exact`` validation
    molecules, spread evenly over the set, after each epoch (0: none); sources: a fresh random SMILES of each
    training molecule every epoch (``"fresh"``) or one for the whole run (``"fixed"``); examples:
    worked test examples the summary prints.

    time_budget: seconds from start to summary, planned on the machine
    (:mod:`minitransformer.cli.seq2seq_time_plan`); planned: the counts the plan decides, of
    ``"limit"`` (MOSES's training molecules, drawn at random) and ``"epochs"`` (none: the counts as
    given, and the budget only stops the training); with ``time_budget`` None a planned run uses the
    counts as given, and a resumed one the counts its checkpoint records. fallback: the data may fall
    back to Tox21 when MOSES cannot be had (not when the user named the data)."""

    label_smoothing: float = 0.0
    val_exact: int = 200
    sources: str = "fresh"
    examples: int = 6
    time_budget: float | None = None
    planned: tuple[str, ...] = ()
    fallback: bool = False

    NOT_RECORDED = Recipe.NOT_RECORDED + ("examples", "planned", "fallback")

    def __post_init__(self):
        super().__post_init__()
        _real("label_smoothing", self.label_smoothing, 0, 1)
        _real("time_budget", self.time_budget, 0, optional=True, low_open=True)
        _whole("val_exact", self.val_exact, 0)
        _whole("examples", self.examples, 0)
        _choice("sources", self.sources, ("fresh", "fixed"))
        if not (isinstance(self.planned, tuple) and set(self.planned) <= {"limit", "epochs"}):
            raise ValueError(f"recipe.planned must be a tuple of the counts a time plan decides ('limit', "
                             f"'epochs'), got {self.planned!r}")


def make_optimizer(recipe: Recipe, model, total_steps: int, lr: float | None = None):
    """The optimizer of ``recipe`` for ``model`` at peak ``lr`` (default ``recipe.lr``): with
    the cosine schedule, :class:`~minitransformer.optim.WarmupCosineLR` over ``total_steps``
    with ``recipe.warmup`` warmup steps, down to 5% of the peak."""
    from minitransformer import optim
    peak = recipe.lr if lr is None else lr
    schedule = peak
    if recipe.schedule == "cosine":
        schedule = optim.WarmupCosineLR(peak, warmup=min(recipe.warmup, total_steps - 1), total=total_steps,
                                        min_lr=peak * MIN_LR_FRACTION)
    if recipe.optimizer == "adamw":
        return optim.AdamW(model, lr=schedule, betas=BETAS, weight_decay=recipe.weight_decay)
    if recipe.optimizer == "adamax":
        return optim.Adamax(model, lr=schedule)
    return optim.Adam(model, lr=schedule)
