"""A two-phase recipe planned in minutes: phase 2 keeps its epochs where they fit, never fewer
than its minimum; phase 1 gets the rest as molecules; the judging is reserved."""
import pytest

from minitransformer.train.time_plan import plan_phases

# A run like the default one: a 15-minute budget, 20 s spent reading data, 40 s of judging,
# 370,000 tokens an epoch of phase 2, phase-1 molecules of 41.5 tokens.
RUN = dict(budget_s=900, spent_s=20, judge_s=40, phase1_tokens=41.5, phase2_tokens=370_000, epochs=30,
           min_epochs=20, phase1_share=0.35)


def test_a_fast_machine_keeps_every_epoch_and_gives_phase_1_the_rest():
    plan = plan_phases(tokens_per_s=40_000, **RUN)
    assert plan.phase2_epochs == 30
    assert plan.phase1_s + plan.phase2_s == pytest.approx(900 - 20 - 40)
    assert plan.phase1_molecules == int(plan.phase1_s * 40_000 / (1.1 * 41.5))


def test_a_slow_machine_keeps_phase_1_its_share_and_phase_2_at_least_its_minimum():
    plan = plan_phases(tokens_per_s=18_000, **RUN)
    T = 900 - 20 - 40
    assert 20 <= plan.phase2_epochs < 30 and plan.phase1_s >= 0.35 * T - 1e-9
    slower = plan_phases(tokens_per_s=12_000, **RUN)
    assert slower.phase2_epochs == 20 and slower.phase1_s < 0.35 * T  # the minimum of phase 2 comes first


def test_a_budget_that_cannot_hold_the_minimum_epochs_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="raise --max-minutes"):
        plan_phases(tokens_per_s=5_000, **RUN)


def test_random_writing_is_paid_in_each_phase_at_its_own_rate():
    """Phase 2's few molecules are written by each rank itself, phase 1's many by workers on every
    core: each cost shortens its own phase's share."""
    plain = plan_phases(tokens_per_s=40_000, **RUN)
    costly = plan_phases(tokens_per_s=40_000, write_s=1e-4, phase2_write_s=5e-4, phase2_molecules=8_600, **RUN)
    assert costly.phase2_epochs == plain.phase2_epochs and costly.phase2_s == pytest.approx(plain.phase2_s + 30 * 4.3)
    assert costly.phase1_molecules < plain.phase1_molecules


def test_the_judging_of_each_phase_1_molecule_is_reserved_beside_the_fixed_judging():
    """Novelty against every training molecule canonicalizes each phase-1 molecule at the end:
    phase 1 gets fewer molecules, and the reserve grows by their canonicalizing."""
    plain = plan_phases(tokens_per_s=40_000, **RUN)
    judged = plan_phases(tokens_per_s=40_000, judge_per_molecule=1e-4, **RUN)
    assert judged.phase2_epochs == plain.phase2_epochs and judged.phase2_s == plain.phase2_s
    assert judged.phase1_molecules < plain.phase1_molecules
    assert judged.judge_s == pytest.approx(40 + judged.phase1_molecules * 1e-4, abs=1e-3)
    assert judged.phase1_s + judged.phase2_s + judged.judge_s == pytest.approx(900 - 20)


def test_phase_1_is_handed_a_margin_of_molecules_and_the_reserve_counts_them_all():
    """A probe that reads low must not leave time unused: phase 1 gets more molecules than its time
    covers (it stops at its time), and the judging reserve canonicalizes every one handed."""
    exact = plan_phases(tokens_per_s=40_000, judge_per_molecule=1e-4, **RUN)
    handed = plan_phases(tokens_per_s=40_000, judge_per_molecule=1e-4, margin=1.3, **RUN)
    assert handed.phase2_epochs == exact.phase2_epochs
    covered = handed.phase1_s * 40_000 / (1.1 * 41.5)
    assert handed.phase1_molecules == pytest.approx(1.3 * covered, abs=1)
    assert handed.judge_s == pytest.approx(40 + handed.phase1_molecules * 1e-4, abs=1e-3)
    assert handed.phase1_s + handed.phase2_s + handed.judge_s == pytest.approx(900 - 20)


def test_the_speed_probe_serves_a_task_that_draws_and_refuses_no_timed_step():
    """measure_speed hands the task an rng (MLM corrupts each batch with one) and needs a timed step."""
    import numpy as np
    import pytest
    from minitransformer.models import EncoderConfig, MaskedLM
    from minitransformer.optim import Adam
    from minitransformer.train.tasks import MLMTask
    from minitransformer.train.time_plan import measure_speed
    model = MaskedLM(EncoderConfig(vocab_size=12, max_len=8, d_model=8, n_heads=2, n_layers=1, d_ff=16, pad_id=0,
                                   seed=0))
    task = MLMTask(mask_id=4, vocab_size=12, special_ids=(0, 1, 2, 3, 4))
    batches = [task.collate([[5, 6, 7, 8, 9], [6, 7, 8, 10, 11]])]
    assert measure_speed(model, task, batches, Adam(model, lr=1e-3), steps=2, warmup=1) > 0
    with pytest.raises(ValueError, match="at least one timed step"):
        measure_speed(model, task, batches, Adam(model, lr=1e-3), steps=0, warmup=1)
