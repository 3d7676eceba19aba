"""The training recipe the three ``train`` commands share: one model shape, one optimizer, one
way to apply the command line's overrides and time budgets.

Each command's presets (``train_lm.PRESETS``, ``train_property.PRESET``,
``train_seq2seq.PRESETS``) are this recipe with what differs written out: a
model is :func:`model` with its changes, an optimizer is :data:`ADAMW` with
its learning rate and warmup. :func:`make_optimizer` builds the optimizer and
schedule of any preset, :func:`apply_overrides` copies the options a user
gave over a preset, and :func:`set_budgets` turns ``--max-minutes`` and
``--pretrain-minutes`` into seconds and checks that the phases fit.
"""
from __future__ import annotations

#: The model every default preset starts from: pre-LN, D = 128 in 4 heads, GELU, no dropout.
BASE_MODEL = dict(d_model=128, n_heads=4, d_ff=512, norm="pre", activation="gelu", emb_dropout=0.0,
                  attn_dropout=0.0, resid_dropout=0.0)
#: The small model of ``--quick`` runs.
QUICK_MODEL = dict(d_model=32, n_heads=2, d_ff=64, norm="pre")
#: AdamW (betas 0.9, 0.98; weight decay 0.01) with a linear warmup and a cosine decay to 5% of the peak.
ADAMW = dict(optimizer="adamw", weight_decay=0.01, schedule="cosine")
BETAS = (0.9, 0.98)
MIN_LR_FRACTION = 0.05


def model(**changes) -> dict:
    """:data:`BASE_MODEL` with ``changes`` (layers, positions, tied embeddings, dropout ...)."""
    return dict(BASE_MODEL, **changes)


def quick_model(**changes) -> dict:
    """:data:`QUICK_MODEL` with ``changes``."""
    return dict(QUICK_MODEL, **changes)


def make_optimizer(settings: dict, model, total_steps: int, lr: float | None = None):
    """The optimizer of a preset: ``settings["optimizer"]`` (``adamw``, the default; ``adamax``;
    ``adam``) at peak ``lr`` (default ``settings["lr"]``), under ``settings["schedule"]``
    (``cosine``, the default: :class:`~minitransformer.optim.WarmupCosineLR` over ``total_steps``
    with ``settings["warmup"]`` warmup steps, down to 5% of the peak; ``constant``)."""
    from minitransformer import optim
    peak = settings["lr"] if lr is None else lr
    schedule = peak
    if settings.get("schedule", "cosine") == "cosine":
        schedule = optim.WarmupCosineLR(peak, warmup=min(settings.get("warmup", 0), total_steps - 1),
                                        total=total_steps, min_lr=peak * MIN_LR_FRACTION)
    kind = settings.get("optimizer", "adamw")
    if kind == "adamw":
        return optim.AdamW(model, lr=schedule, betas=BETAS, weight_decay=settings.get("weight_decay", 0.0))
    if kind == "adamax":
        return optim.Adamax(model, lr=schedule)
    return optim.Adam(model, lr=schedule)


def apply_overrides(settings: dict, args, keys) -> dict:
    """Copy every option of ``keys`` the user gave (not None in ``args``) over ``settings``; a
    ``--dropout`` sets the model's three dropouts. Returns ``settings``."""
    for key in keys:
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "dropout", None) is not None and isinstance(settings.get("model"), dict):
        settings["model"] = dict(settings["model"], emb_dropout=args.dropout, attn_dropout=args.dropout,
                                 resid_dropout=args.dropout)
    return settings


def set_budgets(settings: dict, args, pretraining: bool = False, pretraining_adds_time: bool = False) -> dict:
    """``settings["pretrain_max_time"]`` from ``--pretrain-minutes`` (0 = none) and
    ``settings["max_time"]`` from ``--max-minutes`` (0 = none) or the preset's. With
    ``pretraining_adds_time`` (and no ``--max-minutes``), the preset's budget is the second
    phase's own (``settings["fine_tune_time"]``) and the pretraining's comes on top. With
    ``pretraining``, refuse a pretraining budget that leaves the second phase less than a
    minute. Returns ``settings``."""
    from minitransformer.cli.arguments import check_phase_budget, max_time
    minutes = getattr(args, "pretrain_minutes", None)
    if minutes is not None:
        settings["pretrain_max_time"] = minutes * 60 if minutes > 0 else None
    if pretraining_adds_time and args.max_minutes is None and settings["max_time"] \
            and settings.get("pretrain_max_time"):
        settings["fine_tune_time"] = settings["max_time"]
        settings["max_time"] += settings["pretrain_max_time"]
    settings["max_time"] = max_time(args, settings["max_time"])
    if pretraining:
        check_phase_budget(settings.get("pretrain_max_time"), settings["max_time"])
    return settings
