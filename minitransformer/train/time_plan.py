"""A two-phase recipe planned in minutes on the machine it runs on, not in molecules.

A recipe that says "200,000 molecules, then 30 epochs" takes twice as long on a
machine half as fast, and a time limit then cuts its second phase short. A time plan
instead measures the machine first (:func:`measure_speed`: a few training steps of
the run's own model, in tokens per second) and splits a budget between the phases
(:func:`plan_phases`):

    budget = spent so far + phase 1 + phase 2 + judging (reserved)

Phase 2 (the main set) keeps its epochs when they fit in what is left after phase 1's
minimum share, and never falls below ``min_epochs``; phase 1 (pretraining on a larger
set) takes the rest: handed more molecules than its measured speed covers in that time,
it stops when its time is up (its learning rate then ends a little above its floor, and
phase 2 warms up from there anyway). The judging (sampling and every metric, whose
novelty canonicalizes every phase-1 molecule) is reserved inside the budget, so the run
ends within it from start to summary.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class PhasePlan:
    """What a time plan decided: phase 1's molecules, phase 2's epochs, and the seconds
    each part is expected to take at ``tokens_per_s`` (JSON-ready, for the run's record)."""

    phase1_molecules: int
    phase2_epochs: int
    phase1_s: float
    phase2_s: float
    judge_s: float
    tokens_per_s: float

    def line(self) -> str:
        m = lambda s: f"{s / 60:.1f} min"  # noqa: E731
        return (f"time plan at {self.tokens_per_s:,.0f} tokens/s: phase 1 ~{m(self.phase1_s)} (up to "
                f"{self.phase1_molecules:,} molecules), phase 2 {self.phase2_epochs} epochs "
                f"(~{m(self.phase2_s)}), judging ~{m(self.judge_s)} reserved")


def plan_phases(budget_s: float, spent_s: float, judge_s: float, tokens_per_s: float, phase1_tokens: float,
                phase2_tokens: float, epochs: int, min_epochs: int, phase1_share: float,
                overhead: float = 1.1, write_s: float = 0.0, phase2_write_s: float = 0.0,
                phase2_molecules: int = 0, judge_per_molecule: float = 0.0, margin: float = 1.0,
                judged: str = "the judging") -> PhasePlan:
    """Split ``budget_s`` (start to summary) between the phases.

    ``spent_s`` have gone already (reading the data); ``judge_s`` are reserved for the
    judging; the rest, T, is training. One epoch of phase 2 takes ``phase2_tokens /
    tokens_per_s`` seconds, times ``overhead`` (its validation). Phase 2 gets ``epochs``
    of them if phase 1 keeps at least ``phase1_share`` of T, else as many as fit beside that
    share, but at least ``min_epochs`` (phase 1 then gets what remains). Phase 1 gets the
    rest of T, as the molecules (of ``phase1_tokens`` tokens each, on average) it covers at
    ``tokens_per_s``. ``write_s`` / ``phase2_write_s``: the seconds writing one molecule as a
    random SMILES costs in phase 1 / phase 2 (every epoch, before its steps; phase 2 writes
    ``phase2_molecules``). ``judge_per_molecule``: the seconds the judging spends on each
    phase-1 molecule (canonicalizing it, for novelty against every training molecule), reserved
    beside ``judge_s``. ``margin``: phase 1 is handed that many times the molecules its time
    covers at ``tokens_per_s`` and stops at its time (a probe that reads low then costs no
    time; the reserve counts every molecule handed). ``judged``: what ``judge_s`` is reserved for, in
    words (the refusal names it). A ValueError when too little is left for training."""
    if not tokens_per_s > 0:
        raise ValueError(f"the measured speed must be > 0 tokens/s, got {tokens_per_s}")
    T = budget_s - spent_s - judge_s
    per_epoch = overhead * phase2_tokens / tokens_per_s + phase2_write_s * phase2_molecules
    per_molecule = overhead * phase1_tokens / tokens_per_s + write_s  # phase 1's training
    if T < min_epochs * per_epoch:
        raise ValueError(f"a {budget_s / 60:g}-minute budget leaves {max(T, 0) / 60:.1f} minutes of training on this "
                         f"machine ({tokens_per_s:,.0f} tokens/s) beside {judge_s / 60:.1f} reserved for {judged}, "
                         f"less than {min_epochs} epochs of the main set need ({min_epochs * per_epoch / 60:.1f} "
                         "minutes); raise --max-minutes" + (" or draw fewer --samples" if "samples" in judged else ""))
    E = epochs
    if T - E * per_epoch < phase1_share * T:
        E = max(min_epochs, int((1 - phase1_share) * T // per_epoch))
    t2 = E * per_epoch
    t1 = (T - t2) * per_molecule / (per_molecule + margin * judge_per_molecule)  # trained, later judged against
    return PhasePlan(int(margin * t1 / per_molecule), E, t1, t2, judge_s + (T - t2 - t1), tokens_per_s)


def measure_speed(model, task, batches, optimizer, steps: int, warmup: int) -> float:
    """Training tokens per second of ``model`` on this machine: ``warmup`` untimed steps, then
    ``steps`` timed ones over ``batches`` (host batches the task collated), in turn. The model
    and optimizer are changed: measure on copies made for it."""
    batches = list(batches)
    if steps < 1 or not batches:
        raise ValueError(f"measure_speed needs at least one timed step and one batch, got {steps} and {len(batches)}")
    tokens, t0 = 0, None
    for i in range(warmup + steps):
        if i == warmup:
            t0 = time.perf_counter()
        batch = batches[i % len(batches)]
        loss, n_tok = task.loss(model, batch, np.random.default_rng(i))  # a task that draws (MLM) gets its rng
        model.zero_grad()
        task.backward(model)
        optimizer.step()
        float(loss)  # wait for the step (a GPU queues its work)
        if i >= warmup:
            tokens += int(n_tok)
    return tokens / max(time.perf_counter() - t0, 1e-9)
