r"""Goal-directed generation: a copy of a trained generator, fine-tuned toward a score (REINVENT).

The *prior* is a trained :class:`~minitransformer.models.DecoderLM` (``train lm``);
the *agent* starts as its copy. Each :meth:`Steering.step`:

1. samples a batch of SMILES from the agent (the KV cache, as ``sample`` does);
2. scores them with an :class:`~minitransformer.chem.goals.objectives.Objective`; an
   invalid sample, or one already seen in this run (the same canonical SMILES),
   scores 0 (with ``score_repeats``, a repeat gets its score again, as in PMO's
   REINVENT, so the agent is not pushed away from what it does well); with the
   **diversity filter**, a molecule whose Bemis-Murcko scaffold has already been
   rewarded ``scaffold_limit`` times scores 0 too, so the agent cannot settle on one
   scaffold;
3. with **experience replay**, adds ``replay_k`` molecules drawn from a memory of
   the ``replay`` best molecules so far to the batch;
4. takes one Adam step on REINVENT's augmented-likelihood loss
   (:mod:`minitransformer.train.augmented_likelihood`, where its gradient is derived):
   the agent's log-likelihood of each sequence is pulled toward the prior's plus
   :math:`\sigma` times its score; with ``top_fraction`` below 1 (**augmented
   hill-climb**, Thomas et al., J. Cheminform. 2022), only that fraction of the batch,
   the best-scored first, enters the loss, so each step learns from the molecules worth
   climbing from rather than pushing the agent's whole batch around;
5. with **augmented memory** (``memory="augmented"``, Guo and Schwaller, 2024), takes
   ``augment_rounds`` more Adam steps on the same loss, each on new random writings
   (SMILES enumeration) of the step's valid molecules and of the whole memory, with
   the scores they already have: more learning from every scoring call, which is what
   a budget of scoring calls counts. And a **selective memory purge**: once the
   diversity filter has closed a scaffold, the memory forgets its molecules, so that
   replay does not keep pulling the agent back to it.

Apart from the memory, which replay draws from and the purge thins, :attr:`Steering.top` keeps
the run's result: the best distinct molecules drawn so far by the objective's own score (a molecule
the diversity filter zeroed for the agent still counts there).

The state (agent weights, optimizer, random stream, memory, the best molecules, scaffold counts,
the molecules seen, the step) is :meth:`Steering.state_dict`, so a run resumes exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.chem.datasets.data import canonical
from minitransformer.chem.datasets.properties import murcko_scaffold
from minitransformer.train.augmented_likelihood import (augmented_likelihood_backward, augmented_likelihood_forward,
                                                         sequence_log_likelihood_backward,
                                                         sequence_log_likelihood_forward)
from minitransformer.train.divergence import TrainingDiverged

__all__ = ["SteeringConfig", "Steering", "check_steering_state", "TOP_KEPT"]

TOP_KEPT = 100  # the best distinct molecules a run reports (Steering.top)
REPEAT, FILTERED = 1, 2  # why Steering.score set a molecule the objective scored above 0 to 0


@dataclass
class SteeringConfig:
    """The settings of a steering run, checked when made."""

    batch_size: int = 64  # molecules sampled per step
    sigma: float = 60.0  # the score's weight in the augmented likelihood
    lr: float = 1e-4  # Adam's learning rate for the agent
    replay: int = 100  # size of the memory of best molecules (0: no experience replay)
    replay_k: int = 10  # molecules replayed per step
    scaffold_limit: int = 25  # rewards per scaffold before it scores 0 (0: no diversity filter)
    temperature: float = 1.0
    seed: int = 0
    grammar: str | None = None  # None (the bare agent), "syntax" or "valence": a constrained sampler
    score_repeats: bool = False  # a molecule drawn again gets its score again instead of 0
    memory: str = "replay"  # "replay" (REINVENT's experience replay) or "augmented" (augmented memory)
    augment_rounds: int = 2  # with memory="augmented": extra steps on random writings, per scoring
    kekule: bool = False  # write the random writings in Kekule form (as the prior was trained)
    top_fraction: float = 1.0  # share of each sampled batch, best first, that the loss sees (1: all, REINVENT)

    def __post_init__(self):
        if not isinstance(self.score_repeats, bool):
            raise ValueError(f"score_repeats must be True or False, got {self.score_repeats!r}")
        if self.memory not in ("replay", "augmented"):
            raise ValueError(f"memory must be 'replay' or 'augmented', got {self.memory!r}")
        if not isinstance(self.kekule, bool):
            raise ValueError(f"kekule must be True or False, got {self.kekule!r}")
        if self.grammar not in (None, "syntax", "valence"):
            raise ValueError(f"grammar must be None, 'syntax' or 'valence', got {self.grammar!r}")
        for name in ("batch_size", "replay", "replay_k", "scaffold_limit", "seed", "augment_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "batch_size" else 0):
                raise ValueError(f"{name} must be a whole number >= {1 if name == 'batch_size' else 0}, got {value!r}")
        for name in ("sigma", "lr", "temperature", "top_fraction"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.top_fraction > 1:
            raise ValueError(f"top_fraction is a share of the batch, at most 1, got {self.top_fraction!r}")


class Steering:
    """REINVENT on a trained prior: ``Steering(prior, vocab, objective, config)``, then
    :meth:`step` as often as the budget allows. :attr:`agent` is the model being steered."""

    def __init__(self, prior, vocab, objective, config: SteeringConfig | None = None):
        from minitransformer.optim import Adam
        self.config = config or SteeringConfig()
        self.prior, self.vocab, self.objective = prior.eval(), vocab, objective
        self.agent = type(prior)(prior.config)  # a DecoderLM, or an LSTMLM
        self.agent.load_state_dict(prior.state_dict())
        self.agent.eval()  # sampling and the loss without dropout (the prior's own setting for training it is not ours)
        self.optimizer = Adam(self.agent, lr=self.config.lr)
        self.constraint = None
        if self.config.grammar:  # the agent's own likelihood is still what is trained (the sampler only bans)
            from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
            self.constraint = SmilesGrammar(vocab, valence=self.config.grammar == "valence")
        self.rng = backend.RNG(self.config.seed, stream=7)
        self.memory: list[tuple[float, str, list]] = []  # (score, canonical SMILES, ids), best first
        self.top: list[tuple[float, str]] = []  # (the objective's score, canonical SMILES), best first
        self.scaffold_counts: dict[str, int] = {}
        self.seen: set[str] = set()
        self.t = 0

    # ------------------------------------------------------------------ scoring
    def score(self, smiles: list[str]) -> tuple[np.ndarray, list, dict]:
        """(scores with invalid, repeated and filtered molecules at 0, canonical SMILES or None,
        the objective's raw scores and parts). The dict's ``"zeroed"`` (B,) says why a molecule the
        objective scored above 0 scores 0: 1 a repeat, 2 the diversity filter (0: it did not)."""
        raw, parts = self.objective(smiles)
        canon = [canonical(s) if s else None for s in smiles]
        scores = np.array(raw, dtype=np.float64)  # (B,)
        zeroed = np.zeros(len(smiles), dtype=np.int8)  # (B,)
        for i, c in enumerate(canon):
            repeat = c in self.seen
            if c is None or (repeat and not self.config.score_repeats):
                zeroed[i] = REPEAT if c is not None and scores[i] > 0 else 0
                scores[i] = 0.0
                continue
            if not repeat and scores[i] > 0:
                self.top.append((float(scores[i]), c))
            self.seen.add(c)
            if self.config.scaffold_limit and scores[i] > 0:
                scaffold = murcko_scaffold(c)
                if self.scaffold_counts.get(scaffold, 0) >= self.config.scaffold_limit:
                    # the scaffold's bucket is full (a repeat was counted when first drawn)
                    scores[i], zeroed[i] = 0.0, FILTERED
                elif not repeat:
                    self.scaffold_counts[scaffold] = self.scaffold_counts.get(scaffold, 0) + 1
        self.top.sort(key=lambda m: -m[0])
        del self.top[TOP_KEPT:]
        return scores, canon, {"raw": np.asarray(raw), "zeroed": zeroed, **parts}

    def _remember(self, scores, canon, rows) -> None:
        if not self.config.replay:
            return
        kept = {m[1] for m in self.memory}
        for s, c, row in zip(scores, canon, rows):
            if c is not None and s > 0 and c not in kept:  # each molecule once (a repeat may score again)
                kept.add(c)
                self.memory.append((float(s), c, list(map(int, row))))
        if self.config.memory == "augmented" and self.config.scaffold_limit:  # the selective purge, before the cut
            limit = self.config.scaffold_limit
            self.memory = [m for m in self.memory if self.scaffold_counts.get(murcko_scaffold(m[1]), 0) < limit]
        self.memory.sort(key=lambda m: -m[0])
        del self.memory[self.config.replay:]

    def _replayed(self) -> tuple[list, np.ndarray]:
        """k molecules of the memory: (token rows, scores)."""
        if not self.config.replay or not self.memory:
            return [], np.zeros(0)
        k = min(self.config.replay_k, len(self.memory))
        pick = self.rng.host().choice(len(self.memory), size=k, replace=False)
        return [self.memory[i][2] for i in pick], np.array([self.memory[i][0] for i in pick])

    def _rewritten(self, canon: list, rows: list) -> tuple[list, int]:
        """A new random writing of each molecule as token rows (<bos> ... <eos>), and how many were
        rewritten: a molecule whose writing needs a token the vocabulary lacks, or more than max_len
        ids, keeps its row."""
        from minitransformer.chem.datasets.data import randomize_smiles
        rng, max_len, out, fresh = self.rng.host(), self.agent.config.max_len, [], 0
        for c, row in zip(canon, rows):
            ids = self.vocab.encode(randomize_smiles(c, rng, self.config.kekule))
            ok = len(ids) <= max_len and self.vocab.unk_id not in ids
            out.append(ids if ok else list(map(int, row)))
            fresh += ok
        return out, fresh

    # ------------------------------------------------------------------ resuming
    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly: the agent's weights and optimizer, the
        random stream, the memory, the best molecules, the scaffold counts, the molecules seen and the step."""
        return {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": self.rng.state_dict(), "memory": [list(m) for m in self.memory],
                "top": [list(m) for m in self.top],
                "scaffold_counts": dict(self.scaffold_counts), "seen": sorted(self.seen), "t": self.t}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s output. Every field of the steering state is checked first
        (:func:`check_steering_state`): a damaged or forged one is a one-line ValueError and changes nothing."""
        check_steering_state(state, len(self.vocab), self.config)
        self.agent.load_state_dict(state["agent"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.rng.load_state_dict(state["rng"])
        self.memory = [(float(s), str(c), [int(i) for i in ids]) for s, c, ids in state["memory"]]
        # a state saved before the best molecules were kept apart: its memory is what it reported as best
        self.top = [(float(s), str(c)) for s, c, *_ in state.get("top", state["memory"])]
        self.scaffold_counts = {str(k): int(v) for k, v in state["scaffold_counts"].items()}
        self.seen, self.t = set(state["seen"]), int(state["t"])

    # ------------------------------------------------------------------ one step
    def step(self) -> dict:
        """Sample, score, replay, and one Adam step on the augmented likelihood (1 + augment_rounds with
        augmented memory). Returns the step's numbers."""
        from minitransformer.generate import sample
        cfg = self.config
        ids = sample(self.agent, batch_size=cfg.batch_size, temperature=cfg.temperature, rng=self.rng,
                     constraint=self.constraint)  # (B, T)
        smiles = [self.vocab.decode(row) for row in ids]
        scores, canon, parts = self.score(smiles)
        self._remember(scores, canon, ids)
        rows, replay_scores = self._replayed()
        learn = self._best_of_batch(scores)  # the rows the loss sees (all of them unless top_fraction < 1)
        loss = self._update([list(map(int, ids[i])) for i in learn] + rows,
                            np.concatenate([scores[learn], replay_scores]))
        rewritten, written = 0, 0
        if cfg.memory == "augmented":  # more steps on new writings of this step's molecules and the whole memory
            parsed = [i for i in learn if canon[i] is not None]
            again = [canon[i] for i in parsed] + [m[1] for m in self.memory]
            again_rows = [ids[i] for i in parsed] + [m[2] for m in self.memory]
            again_scores = np.concatenate([scores[parsed], [m[0] for m in self.memory]])
            for _ in range(cfg.augment_rounds):
                if again:
                    new_rows, fresh = self._rewritten(again, again_rows)
                    self._update(new_rows, again_scores)
                    rewritten, written = rewritten + fresh, written + len(again)
        self.t += 1
        valid = sum(c is not None for c in canon)
        return {"step": self.t, "loss": loss, "mean_score": float(scores.mean()),
                "rewritten": rewritten / written if written else None,
                "mean_raw_score": float(np.mean(parts["raw"])), "validity": valid / len(smiles),
                "filtered": float(np.mean(parts["zeroed"] == FILTERED)),
                "repeats": float(np.mean(parts["zeroed"] == REPEAT)),
                "top10": float(np.mean(sorted(scores)[-10:])), "best": self.top[0] if self.top else None,
                "smiles": smiles, "scores": scores.tolist(), "canonical": canon,
                "parts": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in parts.items()
                          if k not in ("raw", "zeroed")},
                "rewarded_scaffolds": len(self.scaffold_counts)}

    def _best_of_batch(self, scores: np.ndarray) -> list:
        """The indices of the batch the loss learns from, in batch order: all of them, or with
        ``top_fraction`` < 1 the ceil(top_fraction * B) best-scored (ties: the earlier drawn first)."""
        B = len(scores)
        if self.config.top_fraction >= 1:
            return list(range(B))
        n = math.ceil(round(self.config.top_fraction * B, 9))  # 0.55 * 100 is 55.000000000000007: 55
        return sorted(np.argsort(-scores, kind="stable")[:n].tolist())

    def _update(self, all_rows: list, scores: np.ndarray) -> float:
        """One Adam step of the agent on the augmented likelihood of these token rows and scores."""
        cfg = self.config
        T = max(len(r) for r in all_rows)
        batch = np.full((len(all_rows), T), self.vocab.pad_id, dtype=np.int64)  # (B + k, T)
        for i, r in enumerate(all_rows):
            batch[i, :len(r)] = r
        inputs, targets = backend.asarray(batch[:, :-1]), backend.asarray(batch[:, 1:])  # (N, T-1) each
        targets = xp.where(_after_eos(targets, self.vocab.eos_id), self.vocab.pad_id, targets)  # (N, T-1)
        prior_logp, _ = sequence_log_likelihood_forward(self.prior(inputs), targets, self.vocab.pad_id)  # (N,)
        logits = self.agent(inputs)  # (N, T-1, V)
        agent_logp, lcache = sequence_log_likelihood_forward(logits, targets, self.vocab.pad_id)  # (N,)
        all_scores = backend.asarray(scores.astype(logits.dtype))  # (N,)
        loss, acache = augmented_likelihood_forward(agent_logp, prior_logp, all_scores, cfg.sigma)
        self._refuse_divergence("loss", float(loss))
        self.agent.zero_grad()
        self.agent.backward(sequence_log_likelihood_backward(augmented_likelihood_backward(1.0, acache), lcache))
        self._refuse_divergence("gradient", _first_non_finite(self.agent, "grad"))
        self.optimizer.step()
        self._refuse_divergence("weights", _first_non_finite(self.agent, "data"))
        return float(loss)


    def _refuse_divergence(self, what: str, value) -> None:
        """TrainingDiverged, naming the step, when ``value`` (a loss, or the name of the first parameter
        whose gradient or weight is not finite) says the agent diverged."""
        bad = not math.isfinite(value) if isinstance(value, float) else value is not None
        if bad:
            where = f"its loss is {value}" if what == "loss" else f"the {what} of {value} are not finite"
            raise TrainingDiverged(f"the agent diverged at step {self.t + 1}: {where} (sigma={self.config.sigma:g}, "
                                   f"lr={self.config.lr:g}); nothing of this step is saved. A lower --sigma or "
                                   "--lr keeps it finite")


def _first_non_finite(model, field: str) -> str | None:
    """The name of the first parameter whose ``field`` (``"grad"`` or ``"data"``) holds NaN or infinity.
    One host read when all are finite (a sum over every parameter), a second pass only to name one."""
    params = list(model.named_parameters())
    total = sum(xp.abs(getattr(p, field)).sum() for _, p in params)  # () on the device: inf or NaN if any is
    if math.isfinite(float(total)):
        return None
    for name, p in params:
        if not bool(xp.isfinite(getattr(p, field)).all()):
            return name
    return None


def check_steering_state(state: dict, vocab_size: int, config: SteeringConfig) -> None:
    """A one-line ValueError unless every field of a steering state is what :meth:`Steering.state_dict`
    writes: ``t`` a whole number >= 0; ``rng`` a seed and a counter (whole numbers >= 0); ``memory`` at
    most ``config.replay`` entries of (a score in [0, 1], a canonical SMILES, token ids below
    ``vocab_size``); ``top`` (absent from states saved before it was kept) at most :data:`TOP_KEPT`
    entries of (a finite score, a SMILES); ``scaffold_counts`` scaffold -> whole number >= 0; ``seen`` a
    list of SMILES."""
    def whole(value, low=0):
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low

    def refuse(what):
        raise ValueError(f"steering state: {what}; the checkpoint is damaged or was not written by "
                         "`minitransformer optimize`")
    if not isinstance(state, dict):
        refuse(f"a {type(state).__name__}, not a table")
    missing = [k for k in ("t", "rng", "memory", "scaffold_counts", "seen") if k not in state]
    if missing:
        refuse(f"no {', '.join(missing)}")
    if not whole(state["t"]):
        refuse(f"step t={state['t']!r} is not a whole number >= 0")
    rng = state["rng"]
    if not (isinstance(rng, dict) and whole(rng.get("seed")) and whole(rng.get("counter"))
            and rng["seed"] < 2**64 and rng["counter"] < 2**64):
        refuse(f"rng={rng!r} is not a seed and a counter (whole numbers from 0 to 2**64)")
    memory = state["memory"]
    if not isinstance(memory, list) or len(memory) > max(config.replay, 0):
        refuse(f"memory is not a list of at most replay={config.replay} molecules")
    for entry in memory:
        ok = isinstance(entry, (list, tuple)) and len(entry) == 3
        score, smiles, ids = entry if ok else (None, None, None)
        if not (ok and isinstance(score, (int, float)) and not isinstance(score, bool) and 0 <= score <= 1
                and isinstance(smiles, str) and smiles and isinstance(ids, list) and ids
                and all(whole(i) and i < vocab_size for i in ids)):
            refuse(f"memory entry {str(entry)[:80]!r} is not (a score in [0, 1], a SMILES, token ids below "
                   f"{vocab_size})")
    top = state.get("top", [])
    if not (isinstance(top, list) and len(top) <= TOP_KEPT and all(
            isinstance(m, (list, tuple)) and len(m) == 2 and isinstance(m[0], (int, float))
            and not isinstance(m[0], bool) and math.isfinite(m[0]) and isinstance(m[1], str) and m[1] for m in top)):
        refuse(f"top is not a list of at most {TOP_KEPT} (a finite score, a SMILES)")
    counts = state["scaffold_counts"]
    if not (isinstance(counts, dict) and all(isinstance(k, str) and whole(v) for k, v in counts.items())):
        refuse("scaffold_counts is not a table of scaffold -> whole number >= 0")
    if not (isinstance(state["seen"], list) and all(isinstance(c, str) for c in state["seen"])):
        refuse("seen is not a list of SMILES")


def _after_eos(targets, eos_id: int):
    """(N, T) True at every position after a row's first EOS target (already padding, or
    replayed rows' tails): those positions add nothing to a sequence's log-likelihood."""
    is_eos = (targets == eos_id).astype(xp.int64)  # (N, T)
    return (xp.cumsum(is_eos, axis=1) - is_eos) > 0  # (N, T)
