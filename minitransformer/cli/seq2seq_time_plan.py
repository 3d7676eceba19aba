"""``train seq2seq``'s default run, planned in minutes on the machine it runs on.

A canonicalizer learns from the number of different molecules it is shown, so the
default run spends its 15 minutes on one pass over as many MOSES molecules as this
machine can train on in them, each written as a fresh random SMILES. How many is
measured, not guessed (:func:`time_planned`):

    budget = reading the data + training (molecules x seconds each + validation) + decoding (reserved)

1. a few thousand molecules are read first (the probe's, drawn at random; the small
   data sets are read whole), and the run's own model trains a few steps on their
   pairs, every data-parallel rank side by side (:func:`probe_pairs`);
2. :func:`plan_pairs` turns the measured seconds per molecule into the molecules and
   epochs that end the training in time, with the decoding of the test molecules
   (greedy and beam search, and the Tox21 molecules beside MOSES's) reserved inside
   the budget; MOSES is then read with that many training molecules;
3. a resumed run keeps the plan its checkpoint records (:func:`kept_plan`).

On MOSES the plan chooses the molecules (one pass, or ``--epochs`` passes); on a
small data set (Tox21) it reads them all and chooses the epochs. Given both
``--limit`` and ``--epochs``, nothing is left to plan, and the budget only stops the
training.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import NamedTuple

from minitransformer.train.recipe import Seq2SeqRecipe

class Costs(NamedTuple):
    """What one model family costs, measured 2026-12-07 on a 2-core AMD EPYC VM (the reference
    machine) from the default run's history and metrics.json: how much faster the probe trains than
    a whole epoch (its batches of like lengths from a few hundred molecules; the attention's cost
    grows with a batch's longest string, the recurrent model's does not); how much faster the whole
    test decodes per molecule than :func:`probe_decoding`'s two batches with an untrained model (which
    writes to the length limit, where a trained one stops at its EOS); and a test molecule's
    decoding, greedy and beam, on that machine."""

    probe_optimism: float
    decoding_speedup: float
    decode_s: float


#: The transformer: probes of 11,044, 9,764 and 10,061 tokens/s, epochs of 9,551, 9,995 and 8,626 (a
#: probe reads 2 % low to 17 % high: :data:`SAFETY` and the trainer's time limit cover the rest); 2,000 test
#: molecules decoded in 55-68 s where the decoding probe, both ranks probing side by side, read 0.114 s
#: a molecule (0.080 s alone). The attentional LSTM: probe 7,020 tokens/s, its epoch 7,116; 51 s, 0.053 s.
COSTS = {"transformer": Costs(1.12, 3.5, 0.034), "rnn": Costs(1.0, 2.0, 0.026)}
#: Reading and standardizing Tox21, then decoding its test molecules greedily (a MOSES run's second
#: test set), on the reference machine.
TOX21_OUT_OF_DISTRIBUTION_S = 30.0
#: The end's fixed part: the curves, the best checkpoint read back, the predictions written.
END_FIXED_S = 5.0
#: Reading MOSES with ``limit`` molecules: seconds per molecule (tokenizing, the vocabulary, encoding)
#: on the reference machine, beside the probe's own reading, which :func:`time_planned` measures.
READ_PER_MOLECULE_S = 1.0e-4
#: Validation costs about this share of a training step's time per pair, plus the exact match of
#: ``val_exact`` molecules decoded greedily: a forward pass without a backward, but every rank computes
#: all of it, so on the default run's two ranks 10,000 MOSES pairs took 40 s, as long as training on
#: them (0.17 of it on one process).
VALIDATION_SHARE = 1.0
#: Molecules the probe reads from MOSES (drawn at random) and trains a few steps on.
PROBE_MOLECULES = 3_000
#: A planned run trains on at least this many molecules, else it is refused (raise --max-minutes).
MIN_MOLECULES = 1_000
#: The share of the training time the plan leaves unplanned, so that a probe that reads a little
#: high still ends in time (training stops at its budget in any case, then validates once more).
SAFETY = 0.05


class PairPlan(NamedTuple):
    """What :func:`plan_pairs` decided: the training molecules per epoch and the epochs, the
    seconds training is expected to take and the seconds reserved after it."""

    molecules: int
    epochs: int
    train_s: float
    reserve_s: float
    seconds_per_molecule: float
    validation_s: float

    def training_ends(self, budget_s: float) -> float:
        """When training must stop (seconds from the start) for its last validation to end before
        the reserve: the trainer's ``max_time``."""
        return budget_s - self.reserve_s - self.validation_s

    def line(self, tokens_per_s: float) -> str:
        return (f"time plan at {tokens_per_s:,.0f} tokens/s ({1 / self.seconds_per_molecule:,.0f} molecules/s): "
                f"{self.epochs} epoch{'s' if self.epochs != 1 else ''} over {self.molecules:,} training molecules "
                f"(~{self.train_s / 60:.1f} min), decoding and judging ~{self.reserve_s / 60:.1f} min reserved")


def plan_pairs(budget_s: float, spent_s: float, reserve_s: float, per_molecule_s: float, validation_s: float,
               available: int, epochs: int | None = None, read_per_molecule_s: float = 0.0,
               min_molecules: int = MIN_MOLECULES) -> PairPlan:
    """The molecules and epochs that fill ``budget_s`` (start to summary).

    ``spent_s`` have gone already; ``reserve_s`` are kept for the end (decoding, judging); each
    training molecule costs ``per_molecule_s`` an epoch (its steps and its random writing) and
    ``read_per_molecule_s`` once (reading it in); each epoch's validation ``validation_s``. The
    data offers ``available`` training molecules. With ``epochs`` given, as many molecules as that
    many passes leave time for; else one pass over as many as fit when the whole set does not,
    or all of them, for the whole number of passes nearest to what fits (the molecules then
    trimmed so that they end in time). A ValueError, naming the fix, when fewer than
    ``min_molecules`` fit."""
    if not (per_molecule_s > 0 and math.isfinite(per_molecule_s)):
        raise ValueError(f"the seconds per molecule must be a finite number > 0, got {per_molecule_s}")
    if available < 1:
        raise ValueError(f"the data offers no training molecules ({available}) to plan for")
    T = (budget_s - spent_s - reserve_s) * (1 - SAFETY)  # training and reading, start to end
    if epochs is None:
        whole = (T - available * read_per_molecule_s) / (available * per_molecule_s + validation_s)
        epochs = max(1, round(whole))
    per_molecule = epochs * per_molecule_s + read_per_molecule_s
    molecules = min(available, int((T - epochs * validation_s) / per_molecule))
    if molecules < min(min_molecules, available):
        raise ValueError(f"a {budget_s / 60:g}-minute budget leaves {max(T, 0) / 60:.1f} minutes of training on this "
                         f"machine ({1 / per_molecule_s:,.0f} molecules/s) beside {reserve_s / 60:.1f} reserved for "
                         f"decoding the test molecules, too little for {epochs} pass{'es' if epochs > 1 else ''} over "
                         f"{min(min_molecules, available):,} molecules; raise --max-minutes")
    train_s = molecules * per_molecule + epochs * validation_s
    return PairPlan(molecules, epochs, train_s, budget_s - spent_s - train_s, per_molecule_s, validation_s)


class PairProbe(NamedTuple):
    """What :func:`probe_pairs` measured: training tokens/s (all ranks together), the target
    tokens of a pair on average, and the seconds one core spends writing a molecule at random."""

    tokens_per_s: float
    tokens_per_pair: float
    write_s: float


def probe_pairs(model, recipe: Seq2SeqRecipe, smiles, vocab, n_ranks: int, max_tokens: int) -> PairProbe:
    """The training speed of ``model`` (a copy is trained) on pairs of ``smiles`` (canonical
    SMILES, written at random as the epochs write them), in batches of like lengths as training
    buckets them, each rank on its share of a batch."""
    from minitransformer.chem.datasets.seq2seq_data import PairEpochs
    from minitransformer.train.recipe import make_optimizer
    from minitransformer.train.tasks import Seq2SeqTask
    from minitransformer.train.time_plan import measure_speed
    B = max(1, recipe.batch_size // n_ranks)
    sample = list(smiles[:max(300, 10 * B)])
    t0 = time.perf_counter()
    pairs = PairEpochs(sample, vocab, seed=recipe.seed, max_tokens=max_tokens)(0)
    write_s = (time.perf_counter() - t0) / len(sample)
    task = Seq2SeqTask(vocab.pad_id, recipe.label_smoothing)
    pairs = sorted(pairs[:10 * B], key=task.length)  # batches of like lengths, as training buckets them
    batches = [task.collate(pairs[i:i + B]) for i in range(0, len(pairs), B)]
    optimizer = make_optimizer(recipe, model, 10_000)  # early in a run's schedule, as training starts
    speed = n_ranks * measure_speed(model, task, batches, optimizer, steps=4 * len(batches), warmup=len(batches))
    tokens = sum(len(t) - 1 for _, t in pairs) / len(pairs)  # scored target tokens a pair
    return PairProbe(speed, tokens, write_s)


def probe_decoding(model, vocab, sources, beam: int) -> float:
    """Seconds to decode one test molecule greedily and with beam search (``beam`` answers), as the
    test does (:func:`~minitransformer.molecules.canonicalization.translate`, one process), measured
    on one batch of each of ``sources`` with the probe's untrained ``model``."""
    from minitransformer.molecules.canonicalization import translate
    greedy_rows, beam_rows = 128, max(1, 128 // beam)  # one call of each, as translate batches them
    t0 = time.perf_counter()
    translate(model, vocab, sources[:greedy_rows])
    t1 = time.perf_counter()
    translate(model, vocab, sources[:beam_rows], beam=beam, n_best=beam)
    t2 = time.perf_counter()
    return (t1 - t0) / min(greedy_rows, len(sources)) + (t2 - t1) / min(beam_rows, len(sources))


def reserve_seconds(n_test: int, tox21_too: bool, decode_s: float, scale: float) -> float:
    """The seconds the end of a run takes: decoding ``n_test`` test molecules greedily and with beam
    search (``decode_s`` each), and the Tox21 molecules beside them (``tox21_too``: reading them is
    most of it, :data:`TOX21_OUT_OF_DISTRIBUTION_S` on the reference machine, ``scale`` times as long
    on this one)."""
    return END_FIXED_S + n_test * decode_s + (TOX21_OUT_OF_DISTRIBUTION_S * scale if tox21_too else 0.0)


def time_planned(recipe: Seq2SeqRecipe, pairs, started: float, make_model, max_tokens: int) -> Seq2SeqRecipe:
    """``recipe`` with the counts it leaves to the plan (``recipe.planned``: MOSES's ``limit``, the
    ``epochs``) and its training budget (``max_time``) planned to end the run within
    ``recipe.time_budget`` on this machine.

    ``pairs``: the data read so far (:class:`~minitransformer.chem.datasets.seq2seq_data.PairSplits`:
    the probe's few thousand MOSES molecules when the plan chooses the molecules, else the data
    itself); ``started``: when the run started (``time.perf_counter``). Data-parallel ranks measure
    side by side and all take rank 0's plan."""
    from minitransformer.chem.datasets.moses import is_moses
    from minitransformer.cli import ranks
    from minitransformer.cli.training import check_fits_in_memory
    n_ranks = ranks.side_by_side()  # every rank has read its data: they measure side by side
    model = make_model(recipe, pairs.vocab)
    check_fits_in_memory(model)  # before the probe trains it: a model too large is refused, not swapped
    probe = probe_pairs(model, recipe, pairs.train, pairs.vocab, n_ranks, max_tokens)
    costs = COSTS[recipe.arch]
    speed = probe.tokens_per_s / costs.probe_optimism  # what a whole epoch trains at
    decode_s = probe_decoding(model, pairs.vocab, pairs.test_src, BEAM) / costs.decoding_speedup
    scale = decode_s / costs.decode_s  # this machine's one process against the reference machine's
    per_molecule = probe.tokens_per_pair / speed + probe.write_s / n_ranks  # ranks share the writing
    choose_molecules = "limit" in recipe.planned
    n_val = VALIDATION_MOLECULES if choose_molecules else len(pairs.val)
    validation = (n_val * VALIDATION_SHARE * probe.tokens_per_pair / speed
                  + recipe.val_exact * GREEDY_SHARE * decode_s)
    reserve = reserve_seconds(len(pairs.test), is_moses(recipe.data), decode_s, scale)
    plan = ranks.on_rank0(lambda: plan_pairs(  # rank 0's plan on every rank (their probes differ a little)
        recipe.time_budget, time.perf_counter() - started, reserve, per_molecule, validation,
        pairs.available if choose_molecules else len(pairs.train),
        epochs=None if "epochs" in recipe.planned else recipe.epochs,
        read_per_molecule_s=READ_PER_MOLECULE_S * scale if choose_molecules else 0.0))
    print(plan.line(probe.tokens_per_s))
    return dataclasses.replace(recipe, limit=moses_limit(plan.molecules) if choose_molecules else recipe.limit,
                               epochs=plan.epochs,
                               max_time=plan.training_ends(recipe.time_budget))  # rank 0's, as the plan


#: Greedy decoding (the validation's exact match) costs about this share of a test molecule's
#: greedy and beam decoding (12 s of 68 s).
GREEDY_SHARE = 0.2
#: The test decodes with beam search of this width (``train seq2seq``'s ``BEAM``).
BEAM = 5


#: The validation molecules a MOSES run holds out (the last of the molecules read; ``split_moses``).
VALIDATION_MOLECULES = 10_000


def moses_limit(train_molecules: int) -> int:
    """The MOSES ``limit`` that gives ``train_molecules`` training molecules: ``split_moses`` holds out
    10,000 of them for validation, or a tenth when fewer than 100,000 are read."""
    if train_molecules >= 9 * VALIDATION_MOLECULES:
        return train_molecules + VALIDATION_MOLECULES
    return math.ceil(train_molecules / 0.9)


#: The settings a time plan decides, which a resumed run keeps.
PLANNED = ("limit", "epochs", "max_time")


def kept_plan(recipe: Seq2SeqRecipe, resume) -> Seq2SeqRecipe:
    """``recipe`` resumed on the counts its checkpoint (``resume``) records: the molecules and epochs
    stay (the schedule was planned for them), and the end of training moves by as much as
    ``--max-minutes`` moved the budget (``--max-minutes 0``: no end). A checkpoint without these
    records leaves the recipe as it is (the resume then says what differs)."""
    from minitransformer.checkpoint import load_checkpoint
    kept = load_checkpoint(resume).meta.get("run", {}).get("settings", {})
    if not all(k in kept for k in PLANNED):
        return recipe
    counts = {k: kept[k] for k in PLANNED}
    old, new = kept.get("time_budget"), recipe.time_budget
    if new is None:
        counts["max_time"] = None
    elif old is not None and counts["max_time"] is not None:
        counts["max_time"] = max(60.0, counts["max_time"] + new - old)
    else:  # planned without a budget before: the new budget stops the training
        counts["max_time"] = new
    return dataclasses.replace(recipe, **counts)
