r"""Parameter groups: per-group learning rate and weight decay, as in PyTorch.

An optimizer takes its parameters in one of two forms:

* one collection: a module, or ``(name, Parameter)`` pairs. That is one group
  with no settings of its own: it uses the optimizer's ``lr`` and its
  ``weight_decay`` on the parameters that ``no_decay`` does not exempt;
* a list of groups, each a dict ``{"params": ..., "lr": ..., "weight_decay": ...}``.
  ``"params"`` is a module, ``(name, Parameter)`` pairs, or bare Parameters
  (named ``"<group>.<i>"``, e.g. ``"1.0"``, since the optimizer keeps its state
  by name: rebuild the groups in the same order to resume from a checkpoint).
  ``"lr"`` (a float or a schedule) and ``"weight_decay"`` are optional: a group
  that sets ``weight_decay`` decays *all* its parameters by it (``no_decay`` does
  not apply to it); a group that does not falls back on the optimizer's settings.

:func:`param_groups` builds the usual two groups, decayed matrices and
undecayed biases and LayerNorm parameters::

    opt = AdamW(param_groups(model, weight_decay=0.1), lr=3e-4)

Internally a group is ``{"names": [...], "lr": float or None, "schedule":
callable or None, "weight_decay": float or None}`` (None: the optimizer's own).
"""
from __future__ import annotations

__all__ = ["param_groups", "split_groups"]

GROUP_KEYS = ("params", "lr", "weight_decay")


def param_groups(model, weight_decay: float = 0.01, no_decay=None) -> list[dict]:
    """Two groups of ``model``'s parameters, full dotted names kept:
    ``[{"params": decayed, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]``.

    ``no_decay(name, Parameter) -> bool`` picks the exempt ones; the default exempts
    ``ndim < 2`` (biases, LayerNorm gains and shifts), the rule of
    :func:`~minitransformer.optim.optimizer.default_no_decay`. An empty group is left out.
    """
    no_decay = no_decay or (lambda name, param: param.data.ndim < 2)
    pairs = list(model.named_parameters())
    decay = [(n, p) for n, p in pairs if not no_decay(n, p)]
    exempt = [(n, p) for n, p in pairs if no_decay(n, p)]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def is_group_list(params) -> bool:
    """True for a list (or tuple) of group dicts."""
    return isinstance(params, (list, tuple)) and len(params) > 0 and all(isinstance(g, dict) for g in params)


def _group_pairs(index: int, params, is_parameter) -> list:
    """``(name, Parameter)`` pairs of one group's ``"params"`` (bare Parameters get ``"<index>.<i>"``)."""
    if hasattr(params, "named_parameters"):
        return list(params.named_parameters())
    items = list(params)
    return [(f"{index}.{i}", item) if is_parameter(item) else item for i, item in enumerate(items)]


def checked_pairs(items, is_parameter) -> list:
    """``(name, Parameter)`` pairs from an iterable of them; bare Parameters are refused,
    since the optimizer keeps its state by name."""
    pairs = []
    for item in items:
        if is_parameter(item):
            raise TypeError(
                "optimizers keep their state by parameter name: pass the model itself or "
                "model.named_parameters(), i.e. (name, Parameter) pairs, not bare Parameters")
        name, p = item
        if not isinstance(name, str) or not is_parameter(p):
            raise TypeError(f"expected (str, Parameter) pairs, got ({type(name).__name__}, "
                            f"{type(p).__name__})")
        pairs.append((name, p))
    return pairs


def split_groups(params: list[dict], check_lr, check_setting, is_parameter) -> tuple[list, list[dict]]:
    """``(pairs, groups)`` from a list of group dicts: every ``(name, Parameter)``
    pair in group order, and the groups as the optimizer keeps them (see the
    module docstring). ``check_lr`` and ``check_setting`` validate a group's ``lr``
    and ``weight_decay`` as the constructor validates its own; ``is_parameter``
    tells a bare Parameter from a ``(name, Parameter)`` pair. (The optimizer passes
    its own, so this module needs nothing from it.)
    """
    if not is_group_list(params):
        raise ValueError("parameter groups must be a list of dicts such as {'params': ..., 'weight_decay': 0.0}")
    pairs, groups = [], []
    for i, g in enumerate(params):
        unknown = sorted(set(g) - set(GROUP_KEYS))
        if unknown or "params" not in g:
            raise ValueError(f"parameter group {i}: keys {sorted(g)}; a group has 'params' and optionally "
                             "'lr' and 'weight_decay'")
        gp = _group_pairs(i, g["params"], is_parameter)
        if not gp:
            raise ValueError(f"parameter group {i} has no parameters")
        lr, schedule = g.get("lr"), None
        if callable(lr):
            lr, schedule = None, lr
        elif lr is not None:
            lr = check_lr(lr, f"parameter group {i}: lr")
        wd = g.get("weight_decay")
        wd = None if wd is None else check_setting("weight_decay", wd)
        pairs += gp
        groups.append({"names": [n for n, _ in gp], "lr": lr, "schedule": schedule, "weight_decay": wd})
    return pairs, groups
