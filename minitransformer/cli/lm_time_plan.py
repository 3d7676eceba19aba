"""``train lm``'s default run, planned in minutes on the machine it runs on.

:func:`time_planned` measures the speed of the run's own model (:func:`probe_speed`) and
turns the preset's 15 minutes into phase 1's molecules, phase 2's epochs and the budgets
(:func:`minitransformer.train.time_plan.plan_phases`); data-parallel ranks take rank 0's
plan, and a resumed run keeps the plan its checkpoint records.
"""
from __future__ import annotations

import dataclasses
import time

from minitransformer.train.recipe import LMRecipe


#: Scored tokens of a phase-1 molecule (MOSES, Kekule form, EOS included), on average.
PHASE1_TOKENS = 41.5


def time_planned(recipe: LMRecipe, data, args, resume, spent: float, make_model) -> LMRecipe:
    """``recipe`` with phase 1's molecules, phase 2's epochs and the budgets planned to end the
    run within ``recipe.time_budget`` on this machine (:mod:`minitransformer.train.time_plan`).
    The speed is measured on the run's own model, every rank side by side; data-parallel ranks
    all take rank 0's plan (their data must agree). A resumed run keeps the plan it started with."""
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.cli import parallel
    from minitransformer.train.time_plan import plan_phases
    if resume is not None:
        kept = load_checkpoint(resume).meta.get("run", {}).get("settings", {})
        fields = ("pretrain_limit", "epochs", "pretrain_max_time", "max_time")
        if all(k in kept for k in fields):
            return dataclasses.replace(recipe, **{k: kept[k] for k in fields})
    from minitransformer.fast.parallel import usable_cpus
    dp = parallel.current()
    ranks = 1 if dp is None else dp.size
    if dp is not None:
        dp.barrier()  # every rank has read its data: they measure side by side, as they will train
    encoded = data.encode(data.train)
    speed, write_s, canon_s = probe_speed(make_model(recipe, data.vocab, args.seed), recipe, encoded, data.train,
                                          data.vocab.pad_id, args.seed, ranks)
    phase2_tokens = sum(len(ids) - 1 for ids in encoded) + recipe.pretrain_mix * PHASE1_TOKENS
    plan = parallel.on_rank0(lambda: plan_phases(  # rank 0's plan, or its refusal, on every rank
        recipe.time_budget, spent, recipe.judge_time * 36_000 / speed, speed, PHASE1_TOKENS, phase2_tokens,
        recipe.epochs, recipe.min_epochs, recipe.pretrain_share,
        write_s=write_s / usable_cpus(),  # phase 1's many molecules: written by workers on every core
        phase2_write_s=write_s / ranks,  # phase 2's few: each rank writes its share itself
        phase2_molecules=len(data.train) + recipe.pretrain_mix,
        judge_per_molecule=canon_s))  # novelty canonicalizes every phase-1 molecule, on rank 0
    print(plan.line())
    return dataclasses.replace(recipe, pretrain_limit=max(plan.phase1_molecules, recipe.batch_size),
                               epochs=plan.phase2_epochs, pretrain_max_time=1.15 * plan.phase1_s,
                               max_time=recipe.time_budget - plan.judge_s)  # training ends by then


def probe_speed(model, recipe: LMRecipe, encoded, smiles, pad_id: int, seed: int,
                ranks: int) -> tuple[float, float, float]:
    """(training tokens per second, seconds one core takes to write a molecule at random, and to
    canonicalize one) of the recipe on this machine: steps of ``model`` (a copy made for it) on
    the main set's molecules (``encoded``, their id lists, padded with ``pad_id``; ``smiles``, as
    written), each process on its share of a batch (``ranks`` processes train at about ``ranks``
    times one's speed), and a few hundred of them written at random and canonicalized."""
    from minitransformer.chem.datasets.data import canonical
    from minitransformer.chem.datasets.lm_data import _random_writings
    from minitransformer.train.recipe import make_optimizer
    from minitransformer.train.tasks import LMTask
    from minitransformer.train.time_plan import measure_speed
    task = LMTask(pad_id)
    B = max(1, recipe.batch_size // ranks)
    ids = sorted(encoded[:10 * B], key=len)  # batches of like lengths, as training buckets them
    batches = [task.collate(ids[i:i + B]) for i in range(0, len(ids), B)]
    speed = ranks * measure_speed(model, task, batches, make_optimizer(recipe, model, 100), steps=2 * len(batches),
                                  warmup=len(batches))  # every shape once before the clock starts
    sample = smiles[:300]
    t0 = time.perf_counter()
    _random_writings((sample, (seed, 1), 1.0, recipe.form == "kekule"))
    t1 = time.perf_counter()
    [canonical(s) for s in sample]
    return speed, (t1 - t0) / len(sample), (time.perf_counter() - t1) / len(sample)
