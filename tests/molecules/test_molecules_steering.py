"""Steering a generator toward a score (REINVENT): the score rises within a few steps, invalid and
repeated molecules score 0, the diversity filter and the memory hold, the settings are checked."""
import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem import Vocab  # noqa: E402
from minitransformer.chem.goals.objectives import Component, Objective  # noqa: E402
from minitransformer.models import DecoderLM, DecoderLMConfig  # noqa: E402
from minitransformer.molecules.steering import Steering, SteeringConfig  # noqa: E402


def _carbon_share(smiles):
    """A toy score: the share of carbon atoms in the string (every C/O/N string is a valid molecule)."""
    return [s.count("C") / len(s) if s else 0.0 for s in smiles]


def _prior(seed=0):
    vocab = Vocab.build(["CCO", "CCN", "CON"])
    model = DecoderLM(DecoderLMConfig(vocab_size=len(vocab), max_len=12, d_model=16, n_heads=2, n_layers=1,
                                      d_ff=32, pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id,
                                      seed=seed))
    return model, vocab


def test_the_agents_score_rises_within_a_few_steps():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": _carbon_share})]),
                   SteeringConfig(batch_size=32, sigma=20.0, lr=3e-3, scaffold_limit=0, seed=1))
    before = {n: p.data.copy() for n, p in prior.named_parameters()}
    raw = [run.step()["mean_raw_score"] for _ in range(12)]
    assert np.mean(raw[-3:]) > np.mean(raw[:3]) + 0.15, raw
    assert all(np.array_equal(before[n], p.data) for n, p in prior.named_parameters()), "the prior never moves"
    assert not all(np.array_equal(before[n], p.data) for n, p in run.agent.named_parameters()), "the agent does"


def test_invalid_and_repeated_molecules_score_zero():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                   SteeringConfig(batch_size=4, scaffold_limit=0))
    scores, canon, _ = run.score(["CCO", "OCC", "C1CC", "", "CCN"])
    assert scores.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0], "OCC is CCO again; C1CC and '' are invalid"
    assert run.score(["CCN"])[0].tolist() == [0.0], "seen in an earlier step"


def test_with_score_repeats_a_repeat_scores_again_but_is_remembered_once():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [0.5] * len(s)})]),
                   SteeringConfig(batch_size=4, scaffold_limit=0, score_repeats=True))
    scores, canon, _ = run.score(["CCO", "OCC", "C1CC", "", "CCN"])
    assert scores.tolist() == [0.5, 0.5, 0.0, 0.0, 0.5], "OCC is CCO again and scores again; invalid ones 0"
    run._remember(scores, canon, [[1]] * 5)
    run._remember(*run.score(["CCO"])[:2], [[1]])
    assert sorted(m[1] for m in run.memory) == ["CCN", "CCO"], "each molecule once in the memory"
    # with the diversity filter, a full scaffold's repeats score 0 too, and a repeat is not counted again
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                   SteeringConfig(batch_size=4, scaffold_limit=2, score_repeats=True))
    assert run.score(["Cc1ccccc1", "Cc1ccccc1"])[0].tolist() == [1.0, 1.0]
    assert run.scaffold_counts == {"c1ccccc1": 1}
    assert run.score(["CCc1ccccc1", "Cc1ccccc1"])[0].tolist() == [1.0, 0.0], "the bucket filled up"


def test_the_diversity_filter_zeroes_an_overused_scaffold():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                   SteeringConfig(batch_size=4, scaffold_limit=2))
    scores, _, parts = run.score(["Cc1ccccc1", "CCc1ccccc1", "CCCc1ccccc1", "C1CCCCC1"])
    assert scores.tolist() == [1.0, 1.0, 0.0, 1.0], "the third benzene scaffold gets nothing"
    assert parts["raw"].tolist() == [1.0] * 4 and parts["zeroed"].tolist() == [0, 0, 2, 0], "and says why"
    assert run.score(["CCO", "CCO"])[2]["zeroed"].tolist() == [0, 1], "a repeat is zeroed as one"


def test_a_step_reports_the_objectives_mean_beside_the_rewarded_one_and_what_zeroed_the_difference():
    """The diversity filter lowers the mean the agent learns from, not what the molecules are worth: the progress
    line leads with the objective's own mean and names the shares the filter and the repeats set to 0."""
    from minitransformer.cli.optimize import progress_line
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                   SteeringConfig(batch_size=32, scaffold_limit=1, seed=3))
    r = [run.step() for _ in range(3)][-1]
    assert r["filtered"] + r["repeats"] > 0 and r["mean_raw_score"] > r["mean_score"]
    zeroed = (r["filtered"] + r["repeats"]) * 32
    assert r["mean_score"] == pytest.approx(r["mean_raw_score"] - zeroed / 32)  # the objective scores every one 1
    line = progress_line(r, 3)
    assert line.startswith(f"step 3/3: mean score {r['mean_raw_score']:.3f} (rewarded {r['mean_score']:.3f}, zeroed: ")
    assert ("diversity filter" in line) == (r["filtered"] > 0) and ("repeats" in line) == (r["repeats"] > 0)


def test_the_memory_keeps_the_best_and_replays_them():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": _carbon_share})]),
                   SteeringConfig(batch_size=16, replay=5, replay_k=3, scaffold_limit=0))
    for _ in range(3):
        run.step()
    assert 0 < len(run.memory) <= 5 and [m[0] for m in run.memory] == sorted((m[0] for m in run.memory), reverse=True)
    rows, scores = run._replayed()
    assert len(rows) == min(3, len(run.memory)) and all(s > 0 for s in scores)


@pytest.mark.parametrize("bad, message", [(dict(batch_size=0), "batch_size"), (dict(sigma=-1.0), "sigma"),
                                          (dict(lr=float("nan")), "lr"), (dict(replay=-1), "replay"),
                                          (dict(score_repeats=1), "score_repeats"), (dict(top_fraction=0), "top_fraction"),
                                          (dict(top_fraction=1.5), "top_fraction")])
def test_bad_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        SteeringConfig(**bad)


@pytest.mark.parametrize("memory", [dict(), dict(memory="augmented", augment_rounds=1)], ids=["replay", "augmented"])
def test_a_resumed_run_continues_bit_exactly(memory):
    objective = Objective([Component("user", params={"function": _carbon_share})])
    config = SteeringConfig(batch_size=8, sigma=20.0, lr=3e-3, replay=4, replay_k=2, scaffold_limit=0, seed=3,
                            **memory)
    prior, vocab = _prior()
    straight = Steering(prior, vocab, objective, config)
    for _ in range(4):
        last = straight.step()
    first = Steering(prior, vocab, objective, config)
    for _ in range(2):
        first.step()
    resumed = Steering(prior, vocab, objective, config)
    resumed.load_state_dict(first.state_dict())
    for _ in range(2):
        again = resumed.step()
    assert again["smiles"] == last["smiles"] and again["scores"] == last["scores"]
    for (name, a), (_, b) in zip(straight.agent.named_parameters(), resumed.agent.named_parameters()):
        assert np.array_equal(a.data, b.data), name


def test_the_grammar_sampler_gives_valid_molecules_only():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": _carbon_share})]),
                   SteeringConfig(batch_size=16, scaffold_limit=0, grammar="valence"))
    assert run.step()["validity"] == 1.0
    with pytest.raises(ValueError, match="grammar must be"):
        SteeringConfig(grammar="strict")


def _counting(function):
    calls = []

    def scored(smiles):
        calls.append(len(smiles))
        return function(smiles)
    return scored, calls


def test_augmented_memory_learns_more_from_each_scoring_on_new_writings():
    """memory="augmented": one scoring call a step, 1 + augment_rounds Adam steps, the extra ones
    on other writings of the step's molecules and of the whole memory, with the scores they already had."""
    from minitransformer.chem.datasets.data import canonical
    scored, calls = _counting(_carbon_share)
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": scored})]),
                   SteeringConfig(batch_size=8, replay=6, replay_k=3, scaffold_limit=0, memory="augmented",
                                  augment_rounds=2, seed=2))
    seen_rows = []
    real = run._update

    def spy(rows, scores):
        seen_rows.append((rows, scores))
        return real(rows, scores)
    run._update = spy
    valid = []
    for _ in range(3):
        valid.append(sum(bool(c) for c in run.step()["canonical"]))
    assert calls == valid and min(valid) > 0, "the objective is called once a step, on its valid molecules"
    assert run.optimizer.t == 9, "three Adam steps a scoring step"
    rows, scores = seen_rows[-1]  # an augmentation round: every row a writing of a scored molecule
    decoded = [canonical(vocab.decode(r)) for r in rows]
    assert None not in decoded and len(decoded) == len(scores)
    step_rows, step_scores = seen_rows[-3]
    known = {}  # molecule -> the scores it holds: in this step's batch, in the memory
    for r, s in zip(step_rows, step_scores):
        known.setdefault(canonical(vocab.decode(r)), set()).add(float(s))
    for s, c, _ in run.memory:
        known.setdefault(c, set()).add(s)
    assert all(float(s) in known[c] for c, s in zip(decoded, scores)), "the scores they already had"
    assert set(decoded) >= {m[1] for m in run.memory}, "the whole memory is rewritten"
    written = [vocab.decode(r) for r in rows]
    assert any(w != vocab.decode(r) for w, r in zip(written, seen_rows[-2][0])), "new writings each round"


def test_augmented_memory_purges_closed_scaffolds_from_the_memory():
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                   SteeringConfig(batch_size=4, replay=10, scaffold_limit=2, memory="augmented"))
    smiles = ["Cc1ccccc1", "CCc1ccccc1", "C1CCCCC1"]
    scores, canon, _ = run.score(smiles)
    run._remember(scores, canon, [[1]] * 3)
    assert {m[1] for m in run.memory} == {"C1CCCCC1"}, "the benzene scaffold reached its limit: forgotten"
    small = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                     SteeringConfig(batch_size=4, replay=2, scaffold_limit=2, memory="augmented"))
    scores, canon, _ = small.score(["Cc1ccccc1", "CCc1ccccc1", "C1CCCCC1"])
    small._remember(np.array([0.9, 0.8, 0.5]), canon, [[1]] * 3)
    assert [m[1] for m in small.memory] == ["C1CCCCC1"], "purged before the memory is cut to its size"
    keep = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [1.0] * len(s)})]),
                    SteeringConfig(batch_size=4, replay=10, scaffold_limit=2))
    scores, canon, _ = keep.score(smiles)
    keep._remember(scores, canon, [[1]] * 3)
    assert len(keep.memory) == 3, "REINVENT's replay keeps them"


@pytest.mark.parametrize("memory", ["replay", "augmented"])
def test_hill_climbing_learns_from_the_best_share_of_the_batch_only(memory):
    """top_fraction=0.5 (augmented hill-climb): the step's loss sees the ceil(B/2) best-scored molecules
    of the batch, in the order drawn, then the replayed ones; every molecule is still scored and
    remembered, and augmented memory rewrites only the kept ones beside the memory."""
    from minitransformer.chem.datasets.data import canonical
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": _carbon_share})]),
                   SteeringConfig(batch_size=7, replay=6, replay_k=2, scaffold_limit=0, top_fraction=0.5,
                                  memory=memory, augment_rounds=1, seed=3))
    seen = []
    real_score, real_update = run.score, run._update
    run.score = lambda smiles: seen.append(("score", real_score(smiles))) or seen[-1][1]
    run._update = lambda rows, scores: seen.append(("update", rows, scores, len(run.memory))) or real_update(rows, scores)
    for _ in range(3):
        run.step()
    scored = [entry[1] for entry in seen if entry[0] == "score"]
    updates = [entry[1:] for entry in seen if entry[0] == "update"]
    assert len(updates) == (3 if memory == "replay" else 6)
    first = updates[::1 if memory == "replay" else 2]  # each step's own update (augmented: then one round)
    for (scores, canon, _), (rows, learnt, remembered) in zip(scored, first):
        best = sorted(np.argsort(-scores, kind="stable")[:4].tolist())  # ceil(7 / 2) = 4
        assert learnt[:4].tolist() == scores[best].tolist(), "the best four, in the order drawn"
        assert [canonical(vocab.decode(r)) for r in rows[:4]] == [canon[i] for i in best]
        assert len(rows) == 4 + min(2, remembered), "then the replayed molecules"
    if memory == "augmented":
        (scores, canon, _), (rows, _, remembered) = scored[-1], updates[-1]
        best = sorted(np.argsort(-scores, kind="stable")[:4].tolist())
        kept = [canon[i] for i in best if canon[i] is not None]
        assert [canonical(vocab.decode(r)) for r in rows[:len(kept)]] == kept
        assert len(rows) == len(kept) + remembered, "the kept molecules, then the whole memory"
    every = {c for scores, canon, _ in scored for c, s in zip(canon, scores) if c is not None and s > 0}
    assert {m[1] for m in run.memory} <= every and len(run.memory) == min(6, len(every)), \
        "the memory still takes from the whole batch"


@pytest.mark.parametrize("fraction, B, kept", [(0.55, 100, 55), (0.07, 100, 7), (0.5, 7, 4), (0.01, 64, 1),
                                                (1 / 3, 9, 3)])
def test_hill_climbing_keeps_the_ceiling_of_the_share_not_a_rounding_error_more(fraction, B, kept):
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("qed")]), SteeringConfig(batch_size=B, top_fraction=fraction))
    scores = np.random.default_rng(0).random(B)  # (B,)
    assert len(run._best_of_batch(scores)) == kept


def test_an_unknown_memory_is_refused():
    with pytest.raises(ValueError, match="memory must be"):
        SteeringConfig(memory="fifo")


def test_the_best_molecules_are_kept_apart_from_the_memory():
    """Steering.top is the run's result: the best distinct molecules by the objective, with no replay
    memory at all, and with those the purge forgot or the diversity filter zeroed for the agent."""
    from minitransformer.molecules.steering import TOP_KEPT
    prior, vocab = _prior()
    run = Steering(prior, vocab, Objective([Component("user", params={"function": _carbon_share})]),
                   SteeringConfig(batch_size=16, replay=0, scaffold_limit=0))
    steps = [run.step() for _ in range(3)]
    assert run.memory == [] and run.top, "replay off: no memory, the best still kept"
    drawn = {c: s for r in steps for c, s in zip(r["canonical"], r["scores"]) if c is not None and s > 0}
    assert sorted(run.top, key=lambda m: (-m[0], m[1])) == sorted(((s, c) for c, s in drawn.items()),
                                                                  key=lambda m: (-m[0], m[1]))[:TOP_KEPT]
    assert steps[-1]["best"] == run.top[0]
    scores = {"Cc1ccccc1": 0.95, "CCc1ccccc1": 0.9, "CCCc1ccccc1": 0.85, "C1CCCCC1": 0.3}
    run = Steering(prior, vocab, Objective([Component("user", params={"function": lambda s: [scores[m] for m in s]})]),
                   SteeringConfig(batch_size=4, replay=10, scaffold_limit=2, memory="augmented"))
    got, canon, _ = run.score(list(scores))
    run._remember(got, canon, [[1]] * 4)
    assert got.tolist() == [0.95, 0.9, 0.0, 0.3], "the third benzene is zeroed for the agent"
    assert [m[1] for m in run.memory] == ["C1CCCCC1"], "and the benzenes purged from the memory"
    assert run.top == [(0.95, "Cc1ccccc1"), (0.9, "CCc1ccccc1"), (0.85, "CCCc1ccccc1"), (0.3, "C1CCCCC1")], \
        "all three stay among the best"
    resumed = Steering(prior, vocab, run.objective, run.config)
    resumed.load_state_dict(run.state_dict())
    assert resumed.top == run.top
    old = run.state_dict()
    del old["top"]  # a state saved before the best were kept apart: its memory stands for them
    resumed.load_state_dict(old)
    assert resumed.top == [(0.3, "C1CCCCC1")]
    with pytest.raises(ValueError, match="top is not"):
        resumed.load_state_dict({**run.state_dict(), "top": [[float("nan"), "C"]]})
