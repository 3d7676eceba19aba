"""``Parameter`` and the ``Module`` base class every layer derives from.

A module owns parameters (and sub-modules), runs ``forward`` while keeping in
``self.cache`` what its ``backward`` will need, and on ``backward(dout)``
accumulates parameter gradients with ``+=`` and returns the input gradient.
There is no autograd: each layer's backward is written out by hand next to its
forward.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp


class Parameter:
    """A trainable array ``data`` with its gradient ``grad`` (same shape and dtype).

    ``grad`` starts at zero; backward passes add into it, ``zero_grad`` clears it.
    ``requires_grad=False`` freezes it (:meth:`Module.freeze`): backward still adds
    into ``grad`` (cheap, and no layer has to know), but no optimizer moves it or
    advances its state, and gradient clipping leaves it out of the norm.
    """

    __slots__ = ("data", "grad", "requires_grad")

    def __init__(self, data, requires_grad: bool = True):
        self.data = data
        self.grad = xp.zeros_like(data)
        self.requires_grad = bool(requires_grad)

    @property
    def shape(self):
        return self.data.shape

    def __repr__(self):
        frozen = "" if self.requires_grad else ", requires_grad=False"
        return f"Parameter(shape={tuple(self.data.shape)}, dtype={self.data.dtype}{frozen})"


def check_array(x, what: str) -> None:
    """Raise ValueError unless ``x`` is an array (NumPy, CuPy: anything with ``ndim``).

    The layers' entry points call it, so ``Linear(...)([0.1, 0.2])`` fails with one
    line naming the fix instead of deep inside a kernel. One attribute look-up: cheap.
    """
    if not hasattr(x, "ndim"):
        raise ValueError(f"{what}: expected a NumPy/CuPy array, got {type(x).__name__}; "
                        "wrap it with np.asarray(...)")


def _shape(value) -> tuple:
    """The shape of a host or device array (``np.shape`` refuses device arrays)."""
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


class Module:
    """Base class: parameter bookkeeping, train/eval mode, state dicts.

    Subclasses implement ``forward(...)`` (which fills ``self.cache``) and
    ``backward(dout)``. Sub-modules and parameters are found by walking the
    instance attributes in the order they were assigned, so names are stable
    dotted paths such as ``blocks.3.attn.qkv.weight``.
    """

    training: bool = True
    cache = None

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, dout):  # pragma: no cover - abstract
        raise NotImplementedError

    def _require_cache(self):
        """The forward cache, or a clear error if forward has not run."""
        if self.cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward() was called before forward(): run the "
                "forward pass first (backward needs the values it cached)."
            )
        return self.cache

    # -- traversal ---------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        for key, value in vars(self).items():
            if isinstance(value, Module):
                yield key, value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        yield prefix, self
        for key, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{key}" if prefix else key)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs; a shared (tied) Parameter appears once."""
        seen: set[int] = set()
        for mod_name, mod in self.named_modules(prefix):
            for key, value in vars(mod).items():
                if isinstance(value, Parameter) and id(value) not in seen:
                    seen.add(id(value))
                    yield (f"{mod_name}.{key}" if mod_name else key), value

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many numbers the parameters hold (tied ones once); ``trainable_only``
        counts only those not frozen."""
        return int(sum(p.data.size for p in self.parameters()
                       if p.requires_grad or not trainable_only))

    # -- freezing ------------------------------------------------------------
    def requires_grad_(self, flag: bool = True) -> "Module":
        """Set ``requires_grad`` of every parameter (see :class:`Parameter`); returns self."""
        for p in self.parameters():
            p.requires_grad = bool(flag)
        return self

    def freeze(self) -> "Module":
        """Freeze every parameter: optimizers leave them as they are. Returns self,
        so ``model.embed.freeze()`` reads as it does."""
        return self.requires_grad_(False)

    def unfreeze(self) -> "Module":
        """Undo :meth:`freeze`: optimizers update these parameters again. Returns self."""
        return self.requires_grad_(True)

    # -- gradients and modes -------------------------------------------------
    def zero_grad(self) -> None:
        """Set every parameter gradient to zero (backward passes accumulate)."""
        for p in self.parameters():
            p.grad.fill(0)

    def train(self, mode: bool = True) -> "Module":
        """Training mode: dropout is active."""
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> "Module":
        """Evaluation mode: dropout is the identity."""
        return self.train(False)

    def astype(self, dtype) -> "Module":
        """Cast every parameter (and its gradient) to ``dtype``, in place."""
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p.grad = p.grad.astype(dtype)
        for m in self.modules():
            m.cache = None
            if hasattr(m, "on_astype"):
                m.on_astype(dtype)
        return self

    # -- state -------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: host NumPy copy of the weights}, whatever the backend."""
        return {name: np.array(backend.to_numpy(p.data)) for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> tuple[list[str], list[str]]:
        """Load weights by name; returns ``(missing_keys, unexpected_keys)``, sorted.

        ``strict=True`` (the default) refuses any missing or unexpected name;
        ``strict=False`` loads the names both sides have and reports the rest (as
        PyTorch does). A shape mismatch is always refused. Everything is checked
        before anything is written, so a refused dict leaves the module untouched.
        """
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        wrong = [
            f"{n}: expected {tuple(own[n].shape)}, got {_shape(state[n])}"
            for n in own if n in state and tuple(own[n].shape) != _shape(state[n])
        ]
        problems = []
        if strict and missing:
            problems.append("missing: " + ", ".join(missing))
        if strict and unexpected:
            problems.append("unexpected: " + ", ".join(unexpected))
        if wrong:
            problems.append("shape mismatch: " + "; ".join(wrong))
        if problems:
            fix = " (or strict=False to load the names that match)" if strict and (missing or unexpected) else ""
            raise ValueError(f"state dict does not fit {type(self).__name__}: " + " | ".join(problems)
                             + f"; load weights saved from the same architecture{fix}")
        for n, p in own.items():
            if n not in state:
                continue
            # np.array copies: under NumPy asarray alone would alias the caller's array
            p.data = backend.asarray(np.array(backend.to_numpy(state[n]), dtype=p.data.dtype))
            p.grad = xp.zeros_like(p.data)
        return missing, unexpected

    # -- printing ------------------------------------------------------------
    def extra_repr(self) -> str:
        """This module's own settings in one line, e.g. ``in=4, out=8, bias=True``
        (leaf layers override it; containers print their children instead)."""
        return ""

    def __repr__(self) -> str:
        """The module tree as PyTorch prints it: one child per indented line,
        ``(name): Child(settings)``; a container's own settings come first."""
        extra, children = self.extra_repr(), list(self.named_children())
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = [extra] if extra else []
        lines += [f"({name}): " + repr(child) for name, child in children]
        body = "\n".join(lines).replace("\n", "\n  ")
        return f"{type(self).__name__}(\n  {body}\n)"


class ModuleList(Module):
    """An indexable list of modules whose parameters are named ``0.``, ``1.`` ..."""

    def __init__(self, modules=()):
        self._items = list(modules)

    def named_children(self):
        for i, m in enumerate(self._items):
            yield str(i), m

    def __getitem__(self, i):
        return self._items[i]

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(self._items)

    def append(self, module: Module) -> None:
        self._items.append(module)
