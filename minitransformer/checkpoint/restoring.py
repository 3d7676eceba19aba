"""Putting a checkpoint to use: into a model and optimizer, or into a new model.

* :func:`restore` loads a :class:`Checkpoint` into objects that exist (a resumed
  run): weights, optimizer state, dropout RNG. It checks that everything fits
  first and changes nothing if anything does not.
* :func:`model_from_checkpoint` builds the model that a checkpoint describes. From
  a path, the config's size is bounded
  (:func:`~minitransformer.checkpoint.limits.check_declared_parameters`) before the
  model is built, and the weights' shapes are compared with the model's before any
  weight is read.
* :func:`average_checkpoints` averages the weights of several checkpoints.
"""
from __future__ import annotations

import numpy as np

from minitransformer.checkpoint.contents import Checkpoint, CheckpointError, check_finite, one_line
from minitransformer.checkpoint.files import read_checkpoint, load_checkpoint
from minitransformer.checkpoint.limits import check_declared_parameters, model_classes


def _fit_problems(model, model_type, shapes: dict) -> list[str]:
    """Differences between a model and a checkpoint's weight names and shapes."""
    own = dict(model.named_parameters())
    problems = []
    for n in sorted(set(own) - set(shapes)):
        problems.append(f"missing in checkpoint: {n} {tuple(own[n].shape)}")
    for n in sorted(set(shapes) - set(own)):
        problems.append(f"not in model: {n} {tuple(shapes[n])}")
    for n in sorted(set(own) & set(shapes)):
        if tuple(own[n].shape) != tuple(shapes[n]):
            problems.append(f"shape of {n}: model {tuple(own[n].shape)}, checkpoint {tuple(shapes[n])}")
    if model_type and model_type != type(model).__name__:
        problems.insert(0, f"model type: checkpoint {model_type}, model {type(model).__name__}")
    return problems


_REBUILD = "load it with model_from_checkpoint, or build the model with the checkpoint's config"
_FORGED = "its weights disagree with its own config: the file is corrupted or forged; use an earlier checkpoint"


def _does_not_fit(where, problems, shown: int = 3, hint: str = _REBUILD) -> CheckpointError:
    """One line: the file, the first few differences, and how many more there are."""
    kinds: dict = {}  # one of each kind of difference first (type, missing, extra, shape), then the rest
    for p in problems:
        kinds.setdefault(p.split(":", 1)[0], []).append(p)
    firsts = [group[0] for group in kinds.values()]
    ordered = firsts + [p for p in problems if p not in firsts]
    listed = "; ".join(ordered[:shown])
    if len(problems) > shown:
        listed += f"; ... and {len(problems) - shown} more"
    return CheckpointError(f"{where} does not fit this model (different architecture): {listed}; {hint}")


def restore(model, ckpt: Checkpoint, optimizer=None) -> None:
    """Load weights (and optimizer state and RNG) into existing objects.

    Everything is checked first; on any mismatch a :class:`CheckpointError` lists
    the differing names and shapes and nothing has been changed. Non-finite weights
    (or optimizer state) are refused too, naming the tensor.
    """
    problems = _fit_problems(model, ckpt.model_type, {k: np.shape(v) for k, v in ckpt.weights.items()})
    if problems:
        raise _does_not_fit(ckpt.where, problems)
    check_finite(ckpt.where, ckpt.weights, ckpt.optim_arrays if optimizer is not None else {})
    opt_state = ckpt.optimizer_state() if optimizer is not None else None
    if optimizer is not None and "upgraded_from" in ckpt.meta:
        raise CheckpointError(f"{ckpt.where} holds an {ckpt.meta['upgraded_from']}: its model loads "
                              "(model_from_checkpoint), but its training cannot be resumed; start a new run")
    if optimizer is not None and opt_state is None:
        raise CheckpointError(f"{ckpt.where} has no optimizer state to restore")
    if optimizer is not None:
        try:
            optimizer.load_state_dict(opt_state)  # checks everything before it writes anything
        except ValueError as err:
            raise CheckpointError(f"{ckpt.where}: its optimizer state does not fit ({one_line(err)})") from err
    model.load_state_dict(ckpt.weights)  # cannot fail now: names and shapes were checked above
    if "model_rng" in ckpt.meta and getattr(model, "rng", None) is not None:
        model.rng.load_state_dict(ckpt.meta["model_rng"])


def _build_model(meta: dict, where):
    """The model a checkpoint's metadata describes, its size bounded before it is built."""
    classes = model_classes()
    model_type = meta.get("model_type")
    if model_type not in classes:
        raise CheckpointError(f"{where} holds an unknown model type {model_type!r}; "
                              f"known types: {sorted(classes)}")
    check_declared_parameters(where, model_type, meta.get("config"))
    cls, cfg_cls = classes[model_type]
    try:
        config = cfg_cls.from_dict(meta["config"])
    except Exception as err:  # the config's own checks (ValueError, TypeError ...)
        raise CheckpointError(f"{where}: its model config is invalid ({one_line(err)})") from err
    return cls(config)


def model_from_checkpoint(path_or_ckpt):
    """Build the model described by a checkpoint and load its weights.

    Returns ``(model, checkpoint)``; the model is in eval mode. From a path, the
    config is bounded (:data:`~minitransformer.checkpoint.limits.MAX_PARAMETERS`)
    before the model is built, and the weights' shapes are compared with the
    model's before any weight is read.
    """
    built = {}
    where = path_or_ckpt.where if isinstance(path_or_ckpt, Checkpoint) else str(path_or_ckpt)

    def build(meta, weight_shapes):
        model = _build_model(meta, where)
        problems = _fit_problems(model, meta.get("model_type"), weight_shapes)
        if problems:
            raise _does_not_fit(where, problems, hint=_FORGED)
        built["model"] = model

    if isinstance(path_or_ckpt, Checkpoint):
        ckpt = path_or_ckpt
        build(ckpt.meta, {k: np.shape(v) for k, v in ckpt.weights.items()})
    else:
        ckpt = read_checkpoint(path_or_ckpt, before_arrays=build)
    model = built["model"]
    restore(model, ckpt)
    return model.eval(), ckpt


def average_checkpoints(paths) -> dict:
    """Average the weights of several checkpoints of one architecture (as the original
    transformer did with its last checkpoints). Returns {name: float array}; load it
    with ``model.load_state_dict``."""
    paths = list(paths)
    if not paths:
        raise ValueError("average_checkpoints: give at least one checkpoint path")
    total = None
    for p in paths:
        w = load_checkpoint(p).weights
        if total is None:
            total = {k: v.astype(np.float64) for k, v in w.items()}
            dtypes = {k: v.dtype for k, v in w.items()}
            continue
        if set(w) != set(total) or any(w[k].shape != total[k].shape for k in w):
            raise CheckpointError(f"average_checkpoints: {p} has a different architecture from {paths[0]}")
        for k in total:
            total[k] += w[k]
    return {k: (v / len(paths)).astype(dtypes[k]) for k, v in total.items()}
