"""Checkpoints written by earlier versions, read in today's layout: the one place that knows them.

minitransformer 0.2.0 saved every encoder-only model as one ``Encoder`` that carried its
heads, switched per call (``forward(ids, head="mlm" | "cls")``). Today the encoder is the
body alone and a head is composed with it (:mod:`minitransformer.models.masked_lm`,
:mod:`minitransformer.models.property_model`). Such a checkpoint has model type
``"Encoder"`` and a config with the head options ``mlm_head``, ``n_outputs``,
``n_features``, ``head_hidden`` (and perhaps ``pooling`` and ``n_aux``, options of heads
since removed, at their defaults ``"cls"`` and 0). :func:`upgrade` reads it as

=====================  ===================  =============================================
0.2.0 config           model type           weights
=====================  ===================  =============================================
``n_outputs`` > 0      ``PropertyModel``    ``embed.*``, ``blocks.*``, ``ln_f.*`` ->
                                            ``encoder.*``; ``cls_hidden.*`` ->
                                            ``head.hidden.*``; ``cls.*`` -> ``head.out.*``;
                                            ``mlm.*`` (the pretraining head) left out
else ``mlm_head``      ``MaskedLM``         the body -> ``encoder.*``; ``mlm.*`` ->
                                            ``head.proj.*``
else                   ``Encoder``          as they are
=====================  ===================  =============================================

with the config of that model (the head options it does not have left out). The
optimizer's state is not carried over: the model loads, the run it came from cannot be
resumed (:func:`~minitransformer.checkpoint.restoring.restore` says so); the metadata
records ``upgraded_from``.
"""
from __future__ import annotations

from typing import Callable

from minitransformer.checks import is_whole
from minitransformer.checkpoint.contents import CheckpointError

#: The head options of a 0.2.0 ``Encoder`` config, with their defaults.
HEAD_OPTIONS = {"mlm_head": True, "n_outputs": 0, "n_features": 0, "head_hidden": 0}
#: Options of heads removed before 0.2.0's successor: a config may name them at these defaults only.
REMOVED_OPTIONS = {"pooling": "cls", "n_aux": 0}
#: What ``upgraded_from`` says of a 0.2.0 encoder.
ENCODER_0_2_0 = "Encoder with its heads (minitransformer 0.2.0)"
BODY = ("embed.", "blocks.", "ln_f.")


def upgrade(meta: dict) -> tuple[dict, Callable[[str], str | None] | None]:
    """``(meta, rename)``: the metadata in today's layout and ``rename(old weight name)``, the
    weight's name today (None: left out). A checkpoint in today's layout comes back as it is,
    with ``rename`` None."""
    config = meta.get("config")
    if meta.get("model_type") != "Encoder" or not isinstance(config, dict) \
            or not set(config) & (set(HEAD_OPTIONS) | set(REMOVED_OPTIONS)):
        return meta, None
    for name, default in REMOVED_OPTIONS.items():
        if name in config and config[name] != default:
            raise CheckpointError(f"its Encoder was made with {name}={config[name]!r}, an option of a head that has "
                                  "been removed (it lost on validation, docs/RESULTS.md); this model cannot be made "
                                  "any more")
    heads = {**HEAD_OPTIONS, **{k: config[k] for k in HEAD_OPTIONS if k in config}}
    for name in ("n_outputs", "n_features", "head_hidden"):
        if not is_whole(heads[name]) or heads[name] < 0:
            raise CheckpointError(f"its model config has {name}={heads[name]!r}; it must be a whole number >= 0")
    body = {k: v for k, v in config.items() if k not in HEAD_OPTIONS and k not in REMOVED_OPTIONS}
    if heads["n_outputs"] > 0:
        model_type = "PropertyModel"
        config = {**body, **{k: heads[k] for k in ("n_outputs", "n_features", "head_hidden")}}
        head = {"cls_hidden.": "head.hidden.", "cls.": "head.out."}
    elif heads["mlm_head"]:
        model_type, config, head = "MaskedLM", body, {"mlm.": "head.proj."}
    else:
        model_type, config, head = "Encoder", body, {}

    def rename(name: str) -> str | None:
        if name.startswith(BODY):
            return name if model_type == "Encoder" else "encoder." + name
        for old, new in head.items():
            if name.startswith(old):
                return new + name[len(old):]
        return None

    meta = {k: v for k, v in meta.items() if k != "optimizer"}
    meta.update(model_type=model_type, config=config, upgraded_from=ENCODER_0_2_0)
    if isinstance(meta.get("entries"), list):
        meta["entries"] = sorted("weights/" + rename(e[len("weights/"):]) for e in meta["entries"]
                                 if e.startswith("weights/") and rename(e[len("weights/"):]) is not None)
    return meta, rename
