"""How the optimizers and the gradient clipper collect their parameters.

Both accept a module (anything with ``named_parameters()`` / ``parameters()``)
or a plain iterable. They want different things from it:

* an optimizer keeps per-parameter state under the parameter's *name*, so it
  needs ``(name, Parameter)`` pairs, each name and each Parameter once
  (:func:`named_parameters`, strict: bare Parameters are refused);
* clipping only needs every gradient once (:func:`parameter_list`, lenient:
  Parameters, pairs or a module, with tied weights counted once).

A "Parameter" here is anything with ``data`` and ``grad`` arrays.
"""
from __future__ import annotations

from collections import Counter

__all__ = ["is_parameter", "named_parameters", "parameter_list"]


def is_parameter(obj) -> bool:
    """True for a Parameter-like object (it has ``data`` and ``grad``)."""
    return hasattr(obj, "data") and hasattr(obj, "grad")


def named_parameters(params) -> list[tuple[str, object]]:
    """``(name, Parameter)`` pairs from a module or from an iterable of pairs.

    Raises ``TypeError`` for bare Parameters or malformed pairs, and
    ``ValueError`` for no parameters, a repeated name, or a Parameter listed
    twice (it would be updated twice per step).
    """
    if hasattr(params, "named_parameters"):
        pairs = list(params.named_parameters())
    else:
        pairs = []
        for item in params:
            if is_parameter(item):
                raise TypeError(
                    "optimizers keep their state by parameter name: pass the model itself or "
                    "model.named_parameters(), i.e. (name, Parameter) pairs, not bare Parameters")
            name, p = item
            if not isinstance(name, str) or not is_parameter(p):
                raise TypeError(f"expected (str, Parameter) pairs, got ({type(name).__name__}, "
                                f"{type(p).__name__})")
            pairs.append((name, p))
    if not pairs:
        raise ValueError("the optimizer got no parameters")
    counts = Counter(n for n, _ in pairs)
    dup_names = sorted(n for n, k in counts.items() if k > 1)
    if dup_names:
        raise ValueError(f"duplicate parameter names: {', '.join(dup_names)}")
    ids: dict[int, str] = {}
    for n, p in pairs:
        if id(p) in ids:
            raise ValueError(f"the same Parameter appears twice, as {ids[id(p)]!r} and {n!r}; "
                             "it would be updated twice per step")
        ids[id(p)] = n
    return pairs


def parameter_list(params) -> list:
    """Parameters (each once) from a module, Parameters, or (name, Parameter) pairs."""
    items = params.parameters() if hasattr(params, "parameters") else params
    out, seen = [], set()
    for item in items:
        p = item if is_parameter(item) else item[1]
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out
