"""One way to check a setting: a number, a whole number or a choice, refused in one line naming it.

Every typed carrier of settings (a recipe, a score specification, a checkpoint's record) checks its
fields the same way, so a bad value reads the same wherever it is found:
``recipe.lr must be a finite number > 0, got -1``. A bool is never a number here (``True`` is an
``int`` to Python, never a learning rate to a user), and a number too large for a float
(``10**400``) is not finite.
"""
from __future__ import annotations

import math
import reprlib
from typing import Sequence

__all__ = ["is_whole", "is_number", "is_finite_number", "whole", "real", "choice", "shown"]

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 60, 60, 4, 4, 3


def shown(value) -> str:
    """``repr(value)`` cut short (a forged file's megabyte string or deep nesting stays one short line)."""
    return _SHORT.repr(value)


def is_whole(value) -> bool:
    """An ``int`` that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """An ``int`` or a ``float`` that is not a bool (NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """A real number (not a bool, not a string) that is finite as a float (10**400 is not)."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def whole(name: str, value, low: int | None = None, high: int | None = None, optional: bool = False):
    """``value``, a whole number within ``[low, high]`` (None: unbounded), or a ValueError naming
    ``name``; with ``optional`` None passes too."""
    if value is None and optional:
        return None
    if not is_whole(value) or (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            span = f" from {low:,} to {high:,}"
        else:
            span = f" >= {low}" if low is not None else f" <= {high}" if high is not None else ""
        raise ValueError(f"{name} must be a whole number{span}{' (or None)' if optional else ''}, got {shown(value)}")
    return value


def real(name: str, value, low: float | None = None, high: float | None = None, low_open: bool = False,
         high_open: bool = False, optional: bool = False):
    """``value``, a finite number within the bounds (``low_open``: above ``low``, not at it), or a
    ValueError naming ``name``; with ``optional`` None passes too."""
    if value is None and optional:
        return None
    ok = is_finite_number(value) and (low is None or (value > low if low_open else value >= low)) \
        and (high is None or (value < high if high_open else value <= high))
    if not ok:
        parts = ([f"{'>' if low_open else '>='} {low:g}"] if low is not None else []) \
            + ([f"{'<' if high_open else '<='} {high:g}"] if high is not None else [])
        span = (" " + " and ".join(parts)) if parts else ""
        raise ValueError(f"{name} must be a finite number{span}{' (or None)' if optional else ''}, "
                         f"got {shown(value)}")
    return value


def choice(name: str, value, choices: Sequence):
    """``value``, one of ``choices``, or a ValueError naming ``name`` and them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {shown(value)}")
    return value
