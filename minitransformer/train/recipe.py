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
from typing import Mapping

from minitransformer import checks

#: The model every default preset starts from: pre-LN, D = 128 in 4 heads, GELU, no dropout.
BASE_MODEL = dict(d_model=128, n_heads=4, d_ff=512, norm="pre", activation="gelu", emb_dropout=0.0,
                  attn_dropout=0.0, resid_dropout=0.0)
#: The small model of ``--quick`` runs.
QUICK_MODEL = dict(d_model=32, n_heads=2, d_ff=64, norm="pre")
#: AdamW's betas, and where the cosine schedule ends (a fraction of the peak learning rate).
BETAS = (0.9, 0.98)
MIN_LR_FRACTION = 0.05
#: The model families a recipe can name: a transformer of the command's kind, Tomczak's
#: fixed transformer (``train lm --preset tomczak``), or a recurrent baseline.
ARCHITECTURES = ("transformer", "tomczak", "lstm", "rnn")


def model(**changes) -> dict:
    """:data:`BASE_MODEL` with ``changes`` (layers, positions, tied embeddings, dropout ...)."""
    return dict(BASE_MODEL, **changes)


def quick_model(**changes) -> dict:
    """:data:`QUICK_MODEL` with ``changes``."""
    return dict(QUICK_MODEL, **changes)


def _whole(name, value, low, optional=False):
    checks.whole(f"recipe.{name}", value, low, optional=optional)


def _real(name, value, low, high=None, optional=False, low_open=False):
    checks.real(f"recipe.{name}", value, low, high, low_open=low_open, optional=optional)


def _choice(name, value, choices):
    checks.choice(f"recipe.{name}", value, choices)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every training command decides; times are seconds (None: no limit).

    model: keyword arguments of the model's config (sizes, norm, positions, dropout), passed
        whole; ``arch`` says which model they build.
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
    """

    model: Mapping
    arch: str = "transformer"
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

    def __post_init__(self):
        if not isinstance(self.model, Mapping) or not all(isinstance(k, str) for k in self.model):
            raise ValueError(f"recipe.model must be the model's keyword arguments, got {self.model!r}")
        object.__setattr__(self, "model", dict(self.model))
        _choice("arch", self.arch, ARCHITECTURES)
        _choice("optimizer", self.optimizer, ("adamw", "adam", "adamax"))
        _choice("schedule", self.schedule, ("cosine", "constant"))
        _real("lr", self.lr, 0, low_open=True)
        _real("weight_decay", self.weight_decay, 0)
        _real("augment", self.augment, 0, 1)
        _real("clip", self.clip, 0, low_open=True, optional=True)
        for name in ("max_time", "fine_tune_time", "pretrain_max_time"):
            _real(name, getattr(self, name), 0, optional=True)
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
        """The recipe as ``config.json`` and every checkpoint record it: its fields, with the
        model written as the presets always have (Tomczak's by name, a recurrent model's
        sizes with its ``kind``), so a run recorded by an earlier version compares equal."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.arch == "tomczak":
            out["model"] = "tomczak"
        elif self.arch in ("lstm", "rnn"):
            out["model"] = {"kind": self.arch, **self.model}
        return out


@dataclasses.dataclass(frozen=True)
class LMRecipe(Recipe):
    """``train lm``: form ("as-is", "canonical", "kekule") is how molecules are written;
    metric picks the best epoch; pretrain_mix phase-1 molecules stay in phase 2; samples
    are drawn at the end, bare and (with ``grammar`` "syntax" or "valence") constrained.

    time_budget: seconds from start to summary, planned on the machine
    (:mod:`minitransformer.train.time_plan`): phase 1's molecules and phase 2's epochs
    (at least ``min_epochs``; phase 1 keeps at least ``pretrain_share`` of the training time)
    follow from the measured speed, with the judging reserved: ``judge_time`` is the seconds drawing
    and judging 2,000 samples bare and 2,000 under a grammar take at 36,000 tokens/s, grown with
    ``samples`` and scaled by the measured speed
    (:func:`minitransformer.cli.lm_time_plan.judging_seconds`). None: the counts as given."""

    label_smoothing: float = 0.0
    check_rdkit: bool = True
    metric: str = "val_nll_token"
    form: str = "kekule"
    pretrain_augment: float = 0.0
    pretrain_mix: int = 0
    samples: int = 2000
    test_limit: int | None = None
    grammar: str | None = "valence"
    time_budget: float | None = None
    judge_time: float = 40.0
    min_epochs: int = 20
    pretrain_share: float = 0.35

    def __post_init__(self):
        super().__post_init__()
        _real("label_smoothing", self.label_smoothing, 0, 1)
        _real("pretrain_augment", self.pretrain_augment, 0, 1)
        _real("time_budget", self.time_budget, 0, optional=True, low_open=True)
        _real("judge_time", self.judge_time, 0)
        _real("pretrain_share", self.pretrain_share, 0, 1)
        _whole("min_epochs", self.min_epochs, 1)
        _choice("form", self.form, ("as-is", "canonical", "kekule"))
        _choice("metric", self.metric, ("val_nll_token", "val_nll_mol_ref"))
        _choice("grammar", self.grammar, (None, "syntax", "valence"))
        _whole("pretrain_mix", self.pretrain_mix, 0)
        _whole("samples", self.samples, 1)
        _whole("test_limit", self.test_limit, 1, optional=True)


@dataclasses.dataclass(frozen=True)
class PropertyRecipe(Recipe):
    """``train property``: max_len tokens at most per molecule (<cls> and <eos> included);
    tta random writings averaged per test molecule; pos_weight balances each assay's rare
    positives; pretrain_lr is the masked-language-model phase's peak learning rate;
    descriptors: the head also reads RDKit's 2D descriptors of each molecule
    (:mod:`minitransformer.chem.descriptors`); split_seed: the seed of the random split (None: the
    run's own; the members of an ensemble share their seed's split)."""

    max_len: int = 256
    tta: int = 8
    pos_weight: bool = True
    pretrain_lr: float = 1e-3
    descriptors: bool = False
    split_seed: int | None = None

    def __post_init__(self):
        super().__post_init__()
        _whole("max_len", self.max_len, 3)
        _whole("tta", self.tta, 1)
        _whole("split_seed", self.split_seed, 0, optional=True)
        _real("pretrain_lr", self.pretrain_lr, 0, low_open=True)


@dataclasses.dataclass(frozen=True)
class Seq2SeqRecipe(Recipe):
    """``train seq2seq``: label smoothing of the loss; exact match of the first ``val_exact``
    validation molecules after each epoch (0: none)."""

    label_smoothing: float = 0.0
    val_exact: int = 200

    def __post_init__(self):
        super().__post_init__()
        _real("label_smoothing", self.label_smoothing, 0, 1)
        _whole("val_exact", self.val_exact, 0)


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
