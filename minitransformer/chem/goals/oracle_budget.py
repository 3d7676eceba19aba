r"""An oracle with a budget, and the score PMO reads from it: the area under the top-10 curve.

The PMO benchmark (Gao et al., "Sample Efficiency Matters: A Benchmark for
Practical Molecular Optimization", NeurIPS 2022) judges a method by what it
finds within a budget of oracle calls (10,000), not by what it finds at last.
Its protocol, as the paper states it:

* only **distinct valid molecules** count against the budget: a SMILES that
  does not parse is not scored; one already scored (the same canonical SMILES)
  gets its earlier score again, for free;
* every ``log_every`` (100) calls the **top-10 mean** is logged: the mean of the
  ten best scores so far (of all of them, while there are fewer than ten);
* the **AUC top-10** is the area under that curve against calls, by the
  trapezoid rule from (0 calls, 0), with the curve held at its last value up to
  the budget when a run stops early, divided by the budget: a number in [0, 1].
  It never reaches 1: a method whose every molecule scores 1 gets 1 - 50/budget
  (0.995), the first segment rising from 0. A run that stops early is not charged
  for the calls it did not make (ten molecules scoring 1, then a stop: 0.9995),
  an oddity of the protocol that PMO's own code shares.

:class:`OracleBudget` wraps any scoring function ``smiles -> scores`` (an
:class:`~minitransformer.chem.goals.objectives.Objective`, say) and keeps that
account; :func:`auc_top10` computes the area from the logged curve.
"""
from __future__ import annotations

import heapq
from typing import Callable, Sequence

import numpy as np

from minitransformer.chem.datasets.data import canonical

__all__ = ["OracleBudget", "auc_top10", "BudgetExhausted"]


class BudgetExhausted(RuntimeError):
    """Raised when a call would score a new molecule after the budget is spent."""


def auc_top10(curve: Sequence[tuple[int, float]], budget: int) -> float:
    """The area under ``curve`` (``(calls, top-10 mean)`` points, calls increasing), by the
    trapezoid rule from (0, 0), held at the last value up to ``budget``, divided by ``budget``."""
    area, prev_calls, prev_value = 0.0, 0, 0.0
    for calls, value in curve:
        area += (calls - prev_calls) * (value + prev_value) / 2.0
        prev_calls, prev_value = calls, value
    area += max(budget - prev_calls, 0) * prev_value
    return area / budget


class OracleBudget:
    """``scores = oracle(smiles)``: each distinct valid molecule is scored once by ``score_fn`` and
    counted against ``budget``; invalid SMILES score 0 and are not counted; repeats cost nothing.
    :attr:`curve` holds ``(calls, top-10 mean)`` every ``log_every`` calls (and at the end, see
    :meth:`auc`); :attr:`calls` is the number of distinct molecules scored so far."""

    def __init__(self, score_fn: Callable[[list], Sequence[float]], budget: int = 10_000, log_every: int = 100):
        if budget < 1 or log_every < 1:
            raise ValueError(f"budget and log_every must be >= 1, got {budget} and {log_every}")
        self.score_fn, self.budget, self.log_every = score_fn, int(budget), int(log_every)
        self.scores: dict[str, float] = {}  # canonical SMILES -> its score, in the order scored
        self._top: list[float] = []  # a min-heap of the ten best scores
        self.curve: list[tuple[int, float]] = []

    @property
    def calls(self) -> int:
        return len(self.scores)

    @property
    def exhausted(self) -> bool:
        return self.calls >= self.budget

    def top10_mean(self) -> float:
        return float(np.mean(self._top)) if self._top else 0.0

    def __call__(self, smiles: Sequence[str]) -> np.ndarray:
        canon = [canonical(s) if isinstance(s, str) and s else None for s in smiles]
        new = list(dict.fromkeys(c for c in canon if c is not None and c not in self.scores))
        room = self.budget - self.calls
        if new and room <= 0:
            raise BudgetExhausted(f"the budget of {self.budget} oracle calls is spent")
        new = new[:room]  # the molecules past the budget are not scored (they score 0 below)
        if new:
            values = np.asarray(self.score_fn(new), dtype=np.float64)
            if values.shape != (len(new),) or not np.all(np.isfinite(values)):
                raise ValueError(f"the scoring function returned {values.shape} values (finite ones expected, "
                                 f"one per molecule: {len(new)})")
            for c, v in zip(new, values):
                self.scores[c] = float(v)
                heapq.heappush(self._top, float(v))
                if len(self._top) > 10:
                    heapq.heappop(self._top)
                if self.calls % self.log_every == 0:
                    self.curve.append((self.calls, self.top10_mean()))
        return np.array([self.scores.get(c, 0.0) if c is not None else 0.0 for c in canon])

    def auc(self) -> float:
        """PMO's AUC top-10 of the calls made so far (the last point added if it was not logged)."""
        curve = list(self.curve)
        if self.calls and (not curve or curve[-1][0] != self.calls):
            curve.append((self.calls, self.top10_mean()))
        return auc_top10(curve, self.budget)
