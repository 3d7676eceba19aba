"""``train lm``'s default run, planned in minutes on the machine it runs on.

:func:`time_planned` measures the speed of the run's own model (:func:`probe_speed`) and
turns the preset's 15 minutes into phase 1's molecules, phase 2's epochs and the budgets
(:func:`minitransformer.train.time_plan.plan_phases`); data-parallel ranks take rank 0's
plan, and a resumed run keeps the plan its checkpoint records.
"""
from __future__ import annotations

import dataclasses
import time
from typing import NamedTuple

from minitransformer.train.recipe import LMRecipe


#: What the end of a run costs at :data:`REFERENCE_SPEED` training tokens/s, scaled to the machine by
#: the measured speed: a fixed part (the test NLL, ChemNet on the held-out molecules), each sample of
#: each set (drawing it, about 1.2 ms, and judging it: ChemNet, filters, fingerprints, fragments,
#: descriptors, about 5 ms) and each pair IntDiv compares. Measured 2026-12-06 (a 2-core AMD EPYC
#: whose probe read 15,100 tokens/s; judging 2 x 4,000 drug-like molecules took 96 s, drawing an
#: untrained model's 100-token samples 6.7 ms each, bare or under the valence grammar alike; IntDiv of
#: 60,000 molecules 73 s) and scaled to the reference speed.
REFERENCE_SPEED = 36_000.0
JUDGE_FIXED_S = 15.0
JUDGE_PER_SAMPLE_S = 6.2e-3
INTDIV_PER_PAIR_S = 0.85e-8
#: The preset's samples, for which ``judge_time`` is the reserve (bare and under a grammar).
PRESET_SAMPLES = 2000
#: The weights of the model whose speed the costs above are scaled by: the default transformer on
#: Tox21 and MOSES tokens. Judging runs at the machine's speed, not the model's.
JUDGE_MODEL_WEIGHTS = 812_160


def judging_seconds(recipe: LMRecipe, tokens_per_s: float, weights: int | None = None) -> float:
    """The seconds to reserve for drawing and judging ``recipe.samples`` samples (bare, and as many
    again under ``recipe.grammar``) on a machine that trains at ``tokens_per_s``: the preset's
    ``judge_time`` for its 2,000 bare and 2,000 constrained samples, grown or shrunk with the
    sample count and the sets by the measured costs above (IntDiv's pairs grow as its square).

    ``weights``: the model's, when it is smaller than :data:`JUDGE_MODEL_WEIGHTS`. A smaller model
    trains faster on the same machine, while RDKit and ChemNet judge no faster, so its speed is
    scaled down by the ratio of the weights before it stands for the machine's (a model's speed
    grows more slowly than its weights shrink, so this errs on the side of a larger reserve). A
    larger model's lower speed is taken as it is (a larger reserve again)."""
    if weights is not None:
        tokens_per_s *= min(1.0, weights / JUDGE_MODEL_WEIGHTS)
    def at_reference(n: int, sets: int) -> float:
        return JUDGE_FIXED_S + sets * n * JUDGE_PER_SAMPLE_S + sets * n * n * INTDIV_PER_PAIR_S
    sets = 2 if recipe.grammar else 1
    scale = recipe.judge_time / at_reference(PRESET_SAMPLES, 2)
    return scale * at_reference(recipe.samples, sets) * REFERENCE_SPEED / tokens_per_s


#: Scored tokens of a phase-1 molecule (MOSES, Kekule form, EOS included), on average.
PHASE1_TOKENS = 41.5
#: The probe reads 5-33 % below the speed training reaches (its few steps come first in a
#: process, on a few hundred molecules): phase 1 is handed this many times the molecules its
#: share covers at the probe's speed, and stops at its share of the time.
PROBE_MARGIN = 1.3


#: The options that fix a count the plan would decide: given, they turn the plan off.
COUNTS = ("epochs", "pretrain_epochs", "pretrain_limit", "pretrain_minutes")


def with_time_budget(r: LMRecipe, max_minutes: float | None, given=()) -> LMRecipe:
    """A preset that plans its phases in minutes (``time_budget``), with the command line applied:
    the run is ``planned`` when phase 1 is on MOSES and no option that fixes a count is ``given``
    (:data:`COUNTS`); ``max_minutes`` is then the whole run's budget (0: none, which lifts the
    plan's limits, not its counts). Unplanned, the counts are as given and there is no budget."""
    if r.time_budget is None or r.pretrain_data != "moses" or any(name in COUNTS for name in given):
        return dataclasses.replace(r, time_budget=None, planned=False)
    r = dataclasses.replace(r, planned=True)
    if max_minutes is not None:
        return dataclasses.replace(r, time_budget=max_minutes * 60 if max_minutes > 0 else None)
    return r


def time_planned(recipe: LMRecipe, data, resume, spent: float, make_model, max_len: int) -> LMRecipe:
    """``recipe`` with phase 1's molecules, phase 2's epochs and the budgets planned to end the
    run within ``recipe.time_budget`` on this machine (:mod:`minitransformer.train.time_plan`).
    The speed is measured on the run's own model (at most ``max_len`` tokens a sequence), every
    rank side by side; data-parallel ranks all take rank 0's plan (their data must agree). A
    resumed run keeps the plan it started with (:func:`kept_plan`: another budget, or none with
    ``--max-minutes 0``, moves only its end)."""
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.cli import ranks
    from minitransformer.train.time_plan import plan_phases
    if resume is not None:
        meta = load_checkpoint(resume).meta
        kept = meta.get("run", {}).get("settings", {})
        if all(k in kept for k in PLANNED) and (recipe.time_budget or kept.get("time_budget")) is not None:
            return kept_plan(recipe, kept, trained_speed(meta))
    if recipe.time_budget is None:  # --max-minutes 0 on a run that recorded no plan: nothing to plan or keep
        return recipe
    from minitransformer.cpus import usable_cpus
    n_ranks = ranks.side_by_side()  # every rank has read its data: they measure side by side
    from minitransformer.cli.training import check_fits_in_memory
    model = make_model(recipe, data.vocab)
    check_fits_in_memory(model)  # before the probe trains it: a model too large is refused, not swapped
    probe = probe_speed(model, recipe, data.train, data.vocab, recipe.seed, n_ranks, max_len)
    speed, weights = probe.tokens_per_s, model.num_parameters()
    phase2_tokens = (probe.stretch * sum(len(ids) - 1 for ids in data.encode(data.train))  # as written at random
                     + recipe.pretrain_mix * PHASE1_TOKENS)
    plan = ranks.on_rank0(lambda: plan_phases(  # rank 0's plan, or its refusal, on every rank
        recipe.time_budget, spent, judging_seconds(recipe, speed, weights), speed, PHASE1_TOKENS, phase2_tokens,
        recipe.epochs, recipe.min_epochs, recipe.pretrain_share,
        write_s=probe.write_s / usable_cpus(),  # phase 1's many molecules: written by workers on every core
        phase2_write_s=probe.write_s / n_ranks,  # phase 2's few: each rank writes its share itself
        phase2_molecules=len(data.train) + recipe.pretrain_mix,
        judge_per_molecule=probe.canon_s,  # novelty canonicalizes every phase-1 molecule, on rank 0
        margin=PROBE_MARGIN,
        judged=f"drawing and judging {recipe.samples:,} samples" + (f" and as many under the {recipe.grammar} grammar"
                                                                    if recipe.grammar else "")))
    print(plan.line())
    return dataclasses.replace(recipe, pretrain_limit=max(plan.phase1_molecules, recipe.batch_size),
                               epochs=plan.phase2_epochs, pretrain_max_time=plan.phase1_s,
                               max_time=recipe.time_budget - plan.judge_s)  # training ends by then


#: The settings a time plan decides, which a resumed run keeps.
PLANNED = ("pretrain_limit", "epochs", "pretrain_max_time", "max_time")


def kept_plan(recipe: LMRecipe, kept: dict, speed: float | None = None) -> LMRecipe:
    """``recipe`` resumed on the plan its checkpoint records (``kept``: the run's saved settings):
    the molecules and epochs stay (the schedules were planned for them). A budget changed on the
    command line (``recipe.time_budget``; None: no limit) moves the training's end by as much as the
    budget moved; a sample count changed moves it by the change in the judging's reserve
    (:func:`judging_seconds` at ``speed``, the tokens/s the run trained at; None: unknown, taken as
    half the reference speed). Phase 1 never runs past that end less a minute. A budget the run can
    no longer hold, or a limit given to a run resumed before without one, is a one-line ValueError."""
    counts = {k: kept[k] for k in PLANNED}
    old, new = kept.get("time_budget"), recipe.time_budget
    if new is None:
        if old is not None:
            counts.update(max_time=None, pretrain_max_time=None)
        return dataclasses.replace(recipe, **counts)
    if old is None or counts["max_time"] is None:
        raise ValueError(f"--max-minutes {new / 60:g}: this run was last trained with no time limit (--max-minutes "
                         "0), so its plan no longer says where its training ends; resume it with --max-minutes 0, "
                         "or start afresh with --force")
    speed = speed or REFERENCE_SPEED / 2
    then = dataclasses.replace(recipe, samples=kept.get("samples", recipe.samples))
    reserve = judging_seconds(recipe, speed) - judging_seconds(then, speed)  # more samples: an earlier end
    end = counts["max_time"] + new - old - reserve
    if end < 60.0:
        raise ValueError(f"a {new / 60:g}-minute budget leaves this resumed run {max(end, 0) / 60:.1f} minutes of "
                         f"training beside {judging_seconds(recipe, speed) / 60:.1f} reserved for drawing and judging "
                         f"{recipe.samples:,} samples; raise --max-minutes or draw fewer --samples")
    phase1 = counts["pretrain_max_time"]
    counts.update(max_time=end, pretrain_max_time=None if phase1 is None else min(phase1, max(end - 60, 1.0)))
    return dataclasses.replace(recipe, **counts)


def trained_speed(meta: dict) -> float | None:
    """The tokens/s a checkpoint's run trained at (the mean of its epochs' records), or None."""
    history = ((meta.get("trainer") or {}).get("history") or []) if isinstance(meta, dict) else []
    speeds = [h.get("tokens_per_s") for h in history if isinstance(h, dict)]
    speeds = [s for s in speeds if isinstance(s, (int, float)) and s > 0]
    return sum(speeds) / len(speeds) if speeds else None


class Probe(NamedTuple):
    """What :func:`probe_speed` measured."""

    tokens_per_s: float  # training, all ranks together
    write_s: float  # one core writing a molecule as a random SMILES
    canon_s: float  # one core canonicalizing a molecule
    stretch: float  # tokens of a random writing / tokens of the molecule as given


def probe_speed(model, recipe: LMRecipe, smiles, vocab, seed: int, ranks: int, max_len: int) -> Probe:
    """The recipe's speed on this machine, measured on the strings training sees: the first few
    hundred of the main set's molecules (``smiles``) written at random and encoded with ``vocab``
    (at most ``max_len`` tokens; each write and a canonicalization of each timed), then training
    steps of ``model`` (a copy made for it) on them, in batches of like lengths as training
    buckets them, each process on its share of a batch (``ranks`` processes train at about
    ``ranks`` times one's speed)."""
    from minitransformer.chem.datasets.data import canonical
    from minitransformer.chem.datasets.lm_data import RandomizedEpochs
    from minitransformer.train.recipe import make_optimizer
    from minitransformer.train.tasks import LMTask
    from minitransformer.train.time_plan import measure_speed
    B = max(1, recipe.batch_size // ranks)
    sample = smiles[:max(300, 10 * B)]
    t0 = time.perf_counter()
    written = RandomizedEpochs(sample, vocab, seed=seed, max_tokens=max_len, kekule_form=recipe.form == "kekule")(0)
    t1 = time.perf_counter()
    for s in sample:  # as the judging's novelty does with every phase-1 molecule
        canonical(s)
    t2 = time.perf_counter()
    stretch = sum(len(w) - 1 for w in written) / max(sum(len(vocab.encode(s)) - 1 for s in sample), 1)
    task = LMTask(vocab.pad_id)
    ids = sorted(written[:10 * B], key=len)  # batches of like lengths, as training buckets them
    batches = [task.collate(ids[i:i + B]) for i in range(0, len(ids), B)]
    optimizer = make_optimizer(recipe, model, 10_000)  # a run's schedule: early on, the rates training has
    speed = ranks * measure_speed(model, task, batches, optimizer, steps=3 * len(batches),
                                  warmup=3 * len(batches))  # a process's first steps run slower
    return Probe(speed, (t1 - t0) / len(sample), (t2 - t1) / len(sample), stretch)
