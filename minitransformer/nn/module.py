"""``Parameter`` and ``Module``, the base of every layer. No autograd: ``forward``
keeps in ``self.cache`` what the hand-written ``backward(dout)`` needs, which adds
parameter gradients with ``+=`` and returns the input gradient.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp


class Parameter:
    """An array ``data`` and its gradient ``grad`` (zeros at first). Frozen (``requires_grad``
    False), it still gets ``grad`` (no layer need know), but optimizers and clipping skip it."""

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
    """Raise ValueError unless ``x`` is an array: a list fails here, not in a kernel."""
    if not hasattr(x, "ndim"):
        raise ValueError(f"{what}: expected a NumPy/CuPy array, got {type(x).__name__}; "
                         "wrap it with np.asarray(...)")


def _shape(value) -> tuple:
    """``np.shape`` refuses device arrays."""
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


class Module:
    """Sub-modules and parameters are found in attribute order: names are stable
    dotted paths such as ``blocks.3.attn.qkv.weight``."""

    training: bool = True
    cache = None

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError

    def backward(self, dout):  # pragma: no cover
        raise NotImplementedError

    def _require_cache(self):
        if self.cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward() was called before forward(): run the "
                "forward pass first (backward needs the values it cached).")
        return self.cache

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for key, value in vars(self).items():
            if isinstance(value, Module):
                yield key, value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for key, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{key}" if prefix else key)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """A shared (tied) Parameter appears once; its ``grad`` sums both uses."""
        seen: set[int] = set()
        for mod_name, mod in self.named_modules(prefix):
            for key, value in vars(mod).items():
                if isinstance(value, Parameter) and id(value) not in seen:
                    seen.add(id(value))
                    yield (f"{mod_name}.{key}" if mod_name else key), value

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self, trainable_only: bool = False) -> int:
        return int(sum(p.data.size for p in self.parameters()
                       if p.requires_grad or not trainable_only))

    def requires_grad_(self, flag: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = bool(flag)
        return self

    def freeze(self) -> Module:
        return self.requires_grad_(False)

    def unfreeze(self) -> Module:
        return self.requires_grad_(True)

    def zero_grad(self) -> None:
        """Backward passes accumulate: clear before each."""
        for p in self.parameters():
            p.grad.fill(0)

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def astype(self, dtype) -> Module:
        """Cast every parameter and gradient in place; caches are dropped."""
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p.grad = p.grad.astype(dtype)
        for m in self.modules():
            m.cache = None
            if hasattr(m, "on_astype"):
                m.on_astype(dtype)
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: host NumPy copy of the weights}."""
        return {name: np.array(backend.to_numpy(p.data)) for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> tuple[list[str], list[str]]:
        """Returns ``(missing_keys, unexpected_keys)``, sorted; ``strict=False`` loads the names
        both sides have. A refused dict (a shape mismatch always is) leaves the module untouched."""
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        wrong = [f"{n}: expected {tuple(own[n].shape)}, got {_shape(state[n])}"
                 for n in own if n in state and tuple(own[n].shape) != _shape(state[n])]
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
            # np.array copies; asarray alone would alias the caller's NumPy array
            p.data = backend.asarray(np.array(backend.to_numpy(state[n]), dtype=p.data.dtype))
            p.grad = xp.zeros_like(p.data)
        return missing, unexpected

    def extra_repr(self) -> str:
        """Own settings, e.g. ``in=4, out=8, bias=True``."""
        return ""

    def __repr__(self) -> str:
        extra, children = self.extra_repr(), list(self.named_children())
        if not children:
            return f"{type(self).__name__}({extra})"
        lines = [extra] if extra else []
        lines += [f"({name}): " + repr(child) for name, child in children]
        body = "\n".join(lines).replace("\n", "\n  ")
        return f"{type(self).__name__}(\n  {body}\n)"


class ModuleList(Module):
    """Children named ``0``, ``1``, ..."""

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
