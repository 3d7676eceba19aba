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


def test_phase_1_is_capped_by_the_molecules_there_are():
    plan = plan_phases(tokens_per_s=400_000, max_phase1_molecules=1000, **RUN)
    assert plan.phase1_molecules == 1000 and plan.phase1_s == pytest.approx(1000 * 1.1 * 41.5 / 400_000)
