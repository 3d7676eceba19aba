"""The checks themselves: :func:`check_kernel` for pure kernel pairs and
:func:`check_module` for stateful layers.

Both follow the same recipe: run the forward pass, contract its output with a
fixed random array ``R`` to get one scalar, call the handwritten backward with
``dout = R`` for the analytic gradients, then compute numerical gradients with
:mod:`minitransformer.gradcheck.numerical` (element-wise, or along random
directions) and compare the two with :mod:`minitransformer.gradcheck.report`.
The shared part of that recipe is :func:`_check_all`; everything before it
(copying inputs, deciding what to differentiate, the accumulation check of
``param.grad``) is specific to kernels or modules.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from minitransformer import backend
from minitransformer.gradcheck.numerical import (
    DEFAULT_EPS, as_list, is_float_array, looks_like_array, require_float64,
    numerical_directional, numerical_grad,
)
from minitransformer.gradcheck.report import (
    DEFAULT_ATOL, DEFAULT_RTOL, GradcheckError, GradcheckReport, TensorCheck, format_where,
    compare_gradients, relative_error,
)

__all__ = ["check_kernel", "check_module"]

_MODES = ("elementwise", "directional")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _pack(out, items):
    """Give ``items`` the structure of ``out``: a single value or a tuple."""
    return tuple(items) if isinstance(out, (tuple, list)) else items[0]


def _weights(outs: Sequence, seed: int) -> list:
    """One fixed random weight array R per float output (None for non-float outputs).

    Entries have random signs and magnitudes in [0.5, 1.5), so every output counts.
    """
    rng = np.random.default_rng(seed)
    weights = []
    for o in outs:
        if looks_like_array(o) and getattr(o.dtype, "kind", "") == "f":
            sign = np.where(rng.random(o.shape) < 0.5, -1.0, 1.0)
            r = sign * (0.5 + rng.random(o.shape))
            weights.append(backend.asarray(np.asarray(r, dtype=np.float64)))
        else:
            weights.append(None)
    return weights


def _copy_struct(items: Sequence) -> list:
    return [None if r is None else r.copy() for r in items]


def _host_copy(a):
    return None if a is None else np.array(backend.to_numpy(a), dtype=np.float64, copy=True)


def _match_grads(grads, names: list, what: str) -> dict:
    """Map a backward's result (one array or a tuple, in argument order) onto ``names``."""
    items = list(grads) if isinstance(grads, (tuple, list)) else [grads]
    if grads is None and not names:
        return {}
    if len(items) < len(names):
        raise GradcheckError(
            f"gradcheck: {what} returned {len(items)} gradient(s) but there are {len(names)} "
            f"differentiable input(s) ({', '.join(names)}); it must return one per floating-point "
            "input, in argument order"
        )
    if any(g is not None for g in items[len(names):]):
        raise GradcheckError(
            f"gradcheck: {what} returned {len(items)} gradients for {len(names)} differentiable "
            f"input(s) ({', '.join(names)}); pass grad_names= to say which is which"
        )
    return {n: _host_copy(g) for n, g in zip(names, items)}


def _validate(mode, eps, rtol, atol):
    if mode not in _MODES:
        raise ValueError(f"gradcheck: mode must be one of {_MODES}, got {mode!r}")
    if not eps > 0 or not rtol > 0 or not atol >= 0:
        raise ValueError(f"gradcheck: need eps > 0, rtol > 0, atol >= 0; got {eps}, {rtol}, {atol}")


# ---------------------------------------------------------------------------
# The shared checking loop
# ---------------------------------------------------------------------------
def _check_all(variables, analytic, evaluate, dout, *, mode, n_directions, joint, seed, eps,
               rtol, atol) -> list:
    """Compare ``analytic[name]`` with numerical derivatives for every ``(name, array)``.

    ``evaluate()`` runs the forward pass on the current values and returns what
    ``dout`` weights (or a scalar when ``dout`` is None). ``mode`` has been
    validated by the caller (:func:`_validate`).
    """
    results = []
    if mode == "elementwise":
        for name, x in variables:
            if analytic[name] is None:
                results.append(compare_gradients(name, None, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
                continue
            num = numerical_grad(evaluate, x, eps, dout)
            results.append(compare_gradients(name, analytic[name], num, rtol=rtol, atol=atol))
        return results

    if n_directions < 1:
        raise ValueError(f"gradcheck: n_directions must be >= 1, got {n_directions}")
    rng = np.random.default_rng(seed + 7919)
    usable = []
    for name, x in variables:
        a = analytic[name]
        if a is None:
            results.append(compare_gradients(name, None, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
        elif tuple(np.shape(a)) != tuple(x.shape):
            results.append(compare_gradients(name, a, np.zeros(tuple(x.shape)), rtol=rtol, atol=atol))
        elif x.size:
            usable.append((name, x, a))
    groups = ([(f"joint({', '.join(n for n, _, _ in usable)})", usable)] if joint and usable
              else [(n, [(n, x, a)]) for n, x, a in usable])
    for label, members in groups:
        ana_vals, num_vals = [], []
        for _ in range(n_directions):
            us = [rng.standard_normal(tuple(x.shape)) for _, x, _ in members]
            norm = np.sqrt(sum(float((u * u).sum()) for u in us))
            us = [u / norm for u in us]
            ana_vals.append(sum(float((a * u).sum()) for (_, _, a), u in zip(members, us)))
            num_vals.append(numerical_directional(evaluate, [(x, u) for (_, x, _), u in zip(members, us)],
                                                  eps, dout))
        err = relative_error(np.array(ana_vals), np.array(num_vals), rtol, atol)
        k = int(np.argmax(err))
        shape = tuple(members[0][1].shape) if len(members) == 1 else (sum(int(x.size) for _, x, _ in members),)
        results.append(TensorCheck(label, shape, bool(err[k] <= rtol), float(err[k]),
                                   f"direction {k + 1} of {n_directions}",
                                   ana_vals[k], num_vals[k], n_directions))
    return results


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------
def check_kernel(forward: Callable, backward: Callable, inputs: dict, kwargs: dict | None = None, *,
                 wrt: Iterable[str] | None = None, grad_names: Sequence[str] | None = None,
                 mode: str = "elementwise", n_directions: int = 3, joint: bool = False,
                 seed: int = 0, eps: float = DEFAULT_EPS, rtol: float = DEFAULT_RTOL,
                 atol: float = DEFAULT_ATOL, raise_on_failure: bool = True) -> GradcheckReport:
    """Gradient-check a pure kernel pair ``forward(*inputs, **kwargs) -> (out, cache)``,
    ``backward(dout, cache) -> grads``.

    The scalar is :math:`L = \\sum \\mathrm{out} \\odot R` for a fixed random
    ``R`` (seeded by ``seed``; one per output if ``out`` is a tuple); the analytic
    gradients come from ``backward(R, cache)``, the numerical ones from central
    differences (element-wise, or along random directions with
    ``mode="directional"``).

    Args:
        forward: the kernel's forward function.
        backward: its backward, called as ``backward(dout, cache)``. It returns
            one array or a tuple, matched *in order* to the floating-point array
            inputs; integer ids/targets and boolean masks are data, not
            variables, and get no gradient. Trailing ``None`` results are
            allowed (``linear_backward`` returns ``db=None`` without a bias).
            Adapt other conventions with a lambda, e.g.
            ``lambda d, c: cross_entropy_backward(c, d)``.
        inputs: ``{name: value}`` passed to ``forward`` positionally, in order.
            Float arrays (float64, active backend) are copied first, so the
            caller's arrays are never touched and aliasing inputs cannot mix.
        kwargs: keyword arguments for ``forward`` (masks, flags); never perturbed.
        wrt: names to check (default: every floating-point input).
        grad_names: the input names the backward's results belong to, in order,
            when the default matching does not fit.
        mode, n_directions, joint: ``"elementwise"`` (default) or
            ``"directional"`` with ``n_directions`` random unit directions per
            tensor (or shared by all tensors when ``joint``).
        seed: seeds ``R`` and the directions.
        eps, rtol, atol: step and tolerances (see the docstrings of
            :mod:`~minitransformer.gradcheck.numerical` and
            :mod:`~minitransformer.gradcheck.report`).
        raise_on_failure: raise :class:`GradcheckError` (an AssertionError) when
            a tensor fails; otherwise return the report either way.

    Returns:
        A :class:`GradcheckReport` (``.ok``, ``.checks``, readable ``str``).

    Example::

        check_kernel(attention_forward, attention_backward,
                     {"q": q, "k": k, "v": v}, {"mask": causal_mask(T)})
    """
    _validate(mode, eps, rtol, atol)
    kwargs = dict(kwargs or {})
    names = list(inputs)
    values = {}
    for n, v in inputs.items():
        values[n] = v.copy() if is_float_array(v, n) else v
    float_names = [n for n in names if is_float_array(values[n], n)]
    for n in float_names:
        require_float64(values[n], n)
    targets = list(float_names if wrt is None else wrt)
    for n in targets:
        if n not in float_names:
            raise ValueError(f"gradcheck: cannot check {n!r}: not a floating-point input "
                             f"(differentiable inputs: {float_names})")

    def run():
        result = forward(*[values[n] for n in names], **kwargs)
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError("gradcheck: forward must return (out, cache)")
        return result

    before = {n: _host_copy(values[n]) for n in float_names}
    out, cache = run()
    dout = _weights(as_list(out), seed)
    grads = backward(_pack(out, _copy_struct(dout)), cache)
    analytic = _match_grads(grads, list(grad_names or float_names), "backward")
    for n in float_names:
        if not np.array_equal(before[n], _host_copy(values[n]), equal_nan=True):
            raise GradcheckError(
                f"gradcheck: input {n!r} was modified in place by forward/backward; a kernel must "
                "not overwrite its inputs (the numerical derivative would be meaningless)"
            )
    for n in targets:
        analytic.setdefault(n, None)

    def evaluate():
        return as_list(run()[0])

    report = GradcheckReport(
        _check_all([(n, values[n]) for n in targets], analytic, evaluate, dout, mode=mode,
                   n_directions=n_directions, joint=joint, seed=seed, eps=eps, rtol=rtol, atol=atol),
        mode, eps, rtol, atol, title=f"gradient check of {getattr(forward, '__name__', 'forward')}",
    )
    return report.raise_if_failed() if raise_on_failure else report


# ---------------------------------------------------------------------------
# Modules
# ---------------------------------------------------------------------------
def check_module(module, inputs, loss_fn: Callable | None = None, *, kwargs: dict | None = None,
                 mode: str = "elementwise", n_directions: int = 3, joint: bool = False,
                 params: Iterable[str] | None = None, check_inputs: bool = True,
                 check_accumulation: bool = True, eval_mode: bool = True, seed: int = 0,
                 eps: float = DEFAULT_EPS, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                 raise_on_failure: bool = True) -> GradcheckReport:
    """Gradient-check an ``nn.Module``: its input gradients and every parameter's ``.grad``.

    The module must follow the library's protocol: ``module.forward(*inputs,
    **kwargs)`` fills its caches and returns an array or a tuple of arrays;
    ``module.backward(dout)`` returns the input gradient(s) (one array, or a
    tuple in argument order such as cross-attention's ``(dx, dcontext)``) and
    *adds* the parameter gradients into ``param.grad``.

    Procedure: remember each sub-module's training flag and switch to
    ``eval()`` (dropout off; ``eval_mode=False`` keeps the current mode), zero
    the gradients, run forward and backward once with ``dout = R`` to collect
    the analytic gradients, optionally run them once more to verify that
    ``param.grad`` accumulates (it must double), zero the gradients again, then
    perturb every checked parameter's ``.data`` and every float input in place
    and compare. Training flags are restored at the end; ``param.grad`` is left
    at zero.

    Args:
        module: the module under test (float64 parameters).
        inputs: a single array, a tuple/list of positional inputs (named
            ``inputs[0]``, ...), or a ``{name: value}`` dict passed positionally
            in order. Float arrays are differentiated (float64, copied first);
            ids and masks are passed through.
        loss_fn: optional ``loss_fn(out) -> (loss, dout)`` returning a scalar loss
            and its gradient with respect to ``out`` (same structure as ``out``).
            Default: ``loss = sum(out * R)`` with a fixed random ``R`` per output.
        kwargs: keyword arguments for ``forward``; never perturbed.
        mode: ``"elementwise"`` (2 forward passes per element) or
            ``"directional"`` (2 per direction; for large modules).
        n_directions: directions per tensor (or in total, with ``joint``).
        joint: directional mode only: one random direction over all checked
            tensors at once instead of one per tensor.
        params: parameter names to check (default: all).
        check_inputs: also check the gradients returned for float inputs.
        check_accumulation: verify that a second backward doubles ``param.grad``.
        eval_mode: switch the module to ``eval()`` during the check.
        seed, eps, rtol, atol, raise_on_failure: as in :func:`check_kernel`.

    Returns:
        A :class:`GradcheckReport`; raises :class:`GradcheckError` on failure
        unless ``raise_on_failure=False``.

    Example::

        layer = nn.Linear(3, 4)              # built under dtype_scope("float64")
        check_module(layer, xp.ones((2, 3)))
        check_module(big_block, (x, mask), mode="directional", n_directions=4)
    """
    _validate(mode, eps, rtol, atol)
    kwargs = dict(kwargs or {})
    if isinstance(inputs, dict):
        names, raw = list(inputs), list(inputs.values())
    elif isinstance(inputs, (tuple, list)):
        names, raw = [f"inputs[{i}]" for i in range(len(inputs))], list(inputs)
    else:
        names, raw = ["input"], [inputs]
    values = [v.copy() if is_float_array(v, n) else v for n, v in zip(names, raw)]
    float_idx = [i for i, (n, v) in enumerate(zip(names, values)) if is_float_array(v, n)]
    for i in float_idx:
        require_float64(values[i], names[i])

    all_params = list(module.named_parameters())
    wanted = None if params is None else list(params)
    if wanted is not None:
        unknown = sorted(set(wanted) - {n for n, _ in all_params})
        if unknown:
            raise ValueError(f"gradcheck: unknown parameter(s) {unknown}; the module has "
                             f"{[n for n, _ in all_params]}")
    checked = [(n, p) for n, p in all_params if wanted is None or n in wanted]
    for n, p in checked:
        require_float64(p.data, n)

    flags = [(m, m.training) for m in module.modules()]
    if eval_mode:
        module.eval()
    try:
        def forward():
            return module.forward(*values, **kwargs)

        def backward_once():
            out = forward()
            if loss_fn is None:
                d = _pack(out, _copy_struct(dout))
            else:
                _, d = loss_fn(out)
            return module.backward(d)

        module.zero_grad()
        out = forward()
        dout = _weights(as_list(out), seed) if loss_fn is None else None
        if loss_fn is None:
            dinputs = module.backward(_pack(out, _copy_struct(dout)))
        else:
            _, d = loss_fn(out)
            dinputs = module.backward(d)
        param_grads = {n: _host_copy(p.grad) for n, p in checked}
        results = []
        if check_inputs and float_idx:
            grads_in = _match_grads(dinputs, [names[i] for i in float_idx], f"{type(module).__name__}.backward")
        else:
            grads_in = {}

        if check_accumulation and checked:
            backward_once()
            for n, p in checked:
                first, second = param_grads[n], _host_copy(p.grad)
                if first is None or first.shape != second.shape:
                    continue  # reported by the main comparison
                floor = 1e-12 * float(np.abs(first).max()) if first.size else 0.0
                err = relative_error(second, 2.0 * first, 1e-10, max(floor, 1e-300))
                if err.size and float(err.max()) > 1e-10:
                    k = int(np.argmax(err))
                    where = tuple(int(i) for i in np.unravel_index(k, first.shape))
                    results.append(TensorCheck(
                        f"{n} (accumulation)", first.shape, False, float(err.flat[k]), where,
                        float(second.flat[k]), float(2.0 * first.flat[k]), int(first.size),
                        note=f"a second backward must add to .grad (+=), not overwrite it: at "
                             f"{format_where(n, where)} .grad is {second.flat[k]:.9e} after two "
                             f"backward passes, expected twice {first.flat[k]:.9e}",
                    ))
        module.zero_grad()

        if loss_fn is None:
            def evaluate():
                return as_list(forward())
        else:
            def evaluate():
                return loss_fn(forward())[0]

        variables = [(names[i], values[i]) for i in float_idx if names[i] in grads_in]
        variables += [(n, p.data) for n, p in checked]
        analytic = dict(grads_in)
        analytic.update(param_grads)
        results = _check_all(variables, analytic, evaluate, dout, mode=mode, n_directions=n_directions,
                             joint=joint, seed=seed, eps=eps, rtol=rtol, atol=atol) + results
    finally:
        for m, flag in flags:
            m.training = flag
    report = GradcheckReport(results, mode, eps, rtol, atol,
                             title=f"gradient check of {type(module).__name__}")
    return report.raise_if_failed() if raise_on_failure else report
