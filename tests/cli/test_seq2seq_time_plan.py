"""``train seq2seq`` planned in minutes: the plan's arithmetic, the counts the command line leaves
to it, a planned run's data, and a resumed run keeping its plan."""
import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer.cli.seq2seq_time_plan import (MIN_MOLECULES, SAFETY, VALIDATION_MOLECULES, kept_plan,
                                                   moses_limit, plan_pairs)


# --------------------------------------------------------------------------- the arithmetic
def test_a_large_set_gets_one_pass_over_as_many_molecules_as_the_time_holds():
    plan = plan_pairs(900, 30, 120, per_molecule_s=0.004, validation_s=20, available=1_500_000)
    T = (900 - 30 - 120) * (1 - SAFETY)
    assert plan.epochs == 1
    assert plan.molecules == int((T - 20) / 0.004)
    assert plan.train_s == pytest.approx(plan.molecules * 0.004 + 20)
    assert plan.reserve_s == pytest.approx(900 - 30 - plan.train_s) and plan.reserve_s >= 120


def test_a_small_set_is_read_whole_for_the_passes_that_fit():
    plan = plan_pairs(900, 30, 120, per_molecule_s=0.004, validation_s=5, available=5_000)
    T = (900 - 30 - 120) * (1 - SAFETY)
    assert plan.molecules == 5_000 and plan.epochs == round(T / (5_000 * 0.004 + 5))
    assert plan.epochs > 20


def test_one_and_a_half_passes_become_two_passes_over_fewer_molecules():
    T = (900 - 0 - 0) * (1 - SAFETY)
    available = int(T / 1.5 / 0.01)
    plan = plan_pairs(900, 0, 0, per_molecule_s=0.01, validation_s=0, available=available)
    assert plan.epochs == 2 and plan.molecules < available
    assert plan.molecules * 2 * 0.01 <= T


def test_epochs_given_are_kept_and_the_molecules_follow():
    three = plan_pairs(900, 30, 120, 0.004, 10, 1_500_000, epochs=3)
    T = (900 - 30 - 120) * (1 - SAFETY)
    assert three.epochs == 3 and three.molecules == int((T - 3 * 10) / (3 * 0.004))


def test_reading_each_molecule_is_paid_once_not_every_epoch():
    free = plan_pairs(900, 30, 120, 0.004, 10, 1_500_000, epochs=2)
    read = plan_pairs(900, 30, 120, 0.004, 10, 1_500_000, epochs=2, read_per_molecule_s=0.004)
    assert read.molecules == pytest.approx(free.molecules * 2 / 3, rel=0.01)


def test_a_budget_too_small_for_training_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"1-minute budget leaves .* raise --max-minutes"):
        plan_pairs(60, 30, 40, per_molecule_s=0.004, validation_s=10, available=1_500_000)
    with pytest.raises(ValueError, match="seconds per molecule"):
        plan_pairs(900, 0, 0, per_molecule_s=0.0, validation_s=0, available=10)


@settings(max_examples=200, deadline=None)
@given(budget=st.floats(60, 7200), spent=st.floats(0, 120), reserve=st.floats(0, 300),
       per_molecule=st.floats(1e-4, 0.05), validation=st.floats(0, 60), available=st.integers(1, 2_000_000),
       epochs=st.one_of(st.none(), st.integers(1, 5)))
def test_a_plan_always_ends_its_training_before_the_reserve(budget, spent, reserve, per_molecule, validation,
                                                          available, epochs):
    try:
        plan = plan_pairs(budget, spent, reserve, per_molecule, validation, available, epochs=epochs)
    except ValueError as e:
        assert "raise --max-minutes" in str(e)
        return
    assert 1 <= plan.molecules <= available and plan.epochs >= 1
    assert plan.molecules >= min(MIN_MOLECULES, available)
    assert epochs is None or plan.epochs == epochs
    assert spent + plan.train_s <= budget - reserve + 1e-6, "training ends before what the end needs"
    assert plan.train_s == pytest.approx(plan.epochs * (plan.molecules * per_molecule + validation))


@pytest.mark.parametrize("train", [900, 50_000, 89_999, 90_000, 213_441, 1_000_000])
def test_the_moses_limit_gives_the_planned_training_molecules(train):
    from minitransformer.chem.datasets.moses import split_moses
    limit = moses_limit(train)
    kept, val = split_moses(list(range(limit)))
    assert len(kept) >= train and len(kept) - train <= 1
    assert len(val) == min(VALIDATION_MOLECULES, limit // 10)


# --------------------------------------------------------------------------- the command line
def _recipe(*argv):
    from minitransformer.cli.main import build_parser
    from minitransformer.cli.train_seq2seq import resolve_recipe
    return resolve_recipe(build_parser().parse_args(["train", "seq2seq", *argv]))


def test_the_default_run_is_planned_on_moses_in_fifteen_minutes():
    r = _recipe()
    assert r.data == "moses" and r.fallback
    assert r.planned == ("limit", "epochs") and r.time_budget == 15 * 60


@pytest.mark.parametrize("argv, planned", [
    (["--epochs", "2"], ("limit",)),
    (["--limit", "50000"], ("epochs",)),
    (["--data", "tox21"], ("epochs",)),
    (["--limit", "50000", "--epochs", "2"], ()),
    (["--quick"], ()),
    (["--preset", "moses"], ()),
])
def test_a_count_the_user_gives_is_not_planned(argv, planned):
    r = _recipe(*argv)
    assert r.planned == planned
    assert (r.time_budget is None) == (not planned)


def test_max_minutes_is_the_whole_run_budget_and_zero_plans_nothing():
    assert _recipe("--max-minutes", "5").time_budget == 300
    r = _recipe("--max-minutes", "0")
    assert r.time_budget is None and r.max_time is None
    assert not _recipe("--data", "tox21").fallback, "data the user named never falls back"


def test_a_resumed_run_keeps_its_counts_and_moves_its_end_with_the_budget(tmp_path):
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.models import Seq2Seq, Seq2SeqConfig
    model = Seq2Seq(Seq2SeqConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2, d_ff=32,
                                  n_enc_layers=1, n_dec_layers=1, max_len=16))
    settings_then = {"limit": 223_441, "epochs": 1, "max_time": 780.0, "time_budget": 900.0}
    path = tmp_path / "last.npz"
    save_checkpoint(path, model, extra={"run": {"settings": settings_then}})
    r = _recipe()
    kept = kept_plan(dataclasses.replace(r, time_budget=1200.0), path)
    assert (kept.limit, kept.epochs, kept.max_time) == (223_441, 1, 1080.0)
    assert kept_plan(dataclasses.replace(r, time_budget=None), path).max_time is None
    assert kept_plan(r, path).max_time == 780.0


# --------------------------------------------------------------------------- a planned run's data
def _have_moses():
    from minitransformer.chem.datasets.moses import find_moses
    try:
        find_moses("train", download=False), find_moses("test", download=False)
    except (OSError, ValueError):
        return False
    return bool(os.environ.get("MINITRANSFORMER_DATA"))


@pytest.mark.slow
def test_a_planned_moses_run_measures_first_then_reads_the_molecules_it_planned(capsys, monkeypatch):
    if not _have_moses():
        pytest.skip("the MOSES files and Tox21 are not on this machine ($MINITRANSFORMER_DATA)")
    from minitransformer.cli import seq2seq_time_plan
    from minitransformer.cli.train_seq2seq import QUICK, TrainSeq2Seq
    monkeypatch.setattr(seq2seq_time_plan, "reserve_seconds", lambda *a: 5.0)  # the end of a quick model: seconds
    monkeypatch.setattr(seq2seq_time_plan, "VALIDATION_SHARE", 0.1)  # its validation too
    real = seq2seq_time_plan.probe_pairs
    measured = []

    def slow_machine(*args):  # the probe runs, and the plan reads a machine of 200 molecules a second, whatever
        measured.append(real(*args))  # this one does under load: a short read of some thousands of molecules
        return measured[-1]._replace(tokens_per_s=measured[-1].tokens_per_pair * 200)
    monkeypatch.setattr(seq2seq_time_plan, "probe_pairs", slow_machine)
    r = dataclasses.replace(_recipe(), model=QUICK["model"], val_exact=20, time_budget=60.0)
    planned, data = TrainSeq2Seq().load(r)
    said = capsys.readouterr().out
    assert "measuring this machine" in said and "time plan at" in said
    assert said.index("time plan at") < said.index("data: MOSES"), "the plan comes before the planned read"
    assert planned.epochs == 1 and abs(moses_limit(len(data.train)) - planned.limit) <= 1
    assert 0 < planned.max_time < 60.0
    assert measured[0].tokens_per_s > 0 and measured[0].tokens_per_pair > 10 and measured[0].write_s > 0
    assert len(data.test) == 2_000 and len(data.val) == min(VALIDATION_MOLECULES, planned.limit // 10)


def test_without_moses_the_default_falls_back_to_tox21_unless_the_user_named_it(monkeypatch, capsys):
    import minitransformer.chem.datasets.seq2seq_data as seq2seq_data
    from minitransformer.chem.datasets.download import DownloadError
    from minitransformer.cli.train_seq2seq import read_pairs
    seen = []

    def offline(data, **kw):
        seen.append(data)
        if data == "moses":
            raise DownloadError("could not download molsets-0.3.1-py3-none-any.whl. Offline? Put the files ...")
        return "Tox21's pairs"
    monkeypatch.setattr(seq2seq_data, "prepare_pairs", offline)
    r, pairs = read_pairs(_recipe(), 3_000, quiet=True)
    assert pairs == "Tox21's pairs" and seen == ["moses", "tox21"]
    assert r.data == "tox21" and r.limit is None and r.planned == ("epochs",)
    assert "MOSES is not available (could not download molsets-0.3.1-py3-none-any.whl)" in capsys.readouterr().out
    with pytest.raises(DownloadError):
        read_pairs(_recipe("--data", "moses"), 3_000)


def test_training_ends_early_enough_for_its_last_validation():
    plan = plan_pairs(900, 30, 120, per_molecule_s=0.004, validation_s=20, available=1_500_000)
    assert plan.validation_s == 20
    assert plan.training_ends(900) == pytest.approx(900 - plan.reserve_s - 20)
    assert plan.training_ends(900) + 20 <= 900 - 120


def test_the_decoding_probe_times_one_batch_of_each_search_and_the_reserve_adds_them_up():
    from minitransformer.chem.datasets.vocab import Vocab
    from minitransformer.cli.seq2seq_time_plan import END_FIXED_S, TOX21_OUT_OF_DISTRIBUTION_S, probe_decoding, \
        reserve_seconds
    from minitransformer.models import Seq2Seq, Seq2SeqConfig
    vocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N"])
    model = Seq2Seq(Seq2SeqConfig(src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), d_model=16, n_heads=2,
                                  d_ff=32, n_enc_layers=1, n_dec_layers=1, max_len=24))
    model.eval()
    seconds = probe_decoding(model, vocab, ["CCO", "OCC", "c1ccccc1"] * 50, beam=5)
    assert 0 < seconds < 1.0
    assert reserve_seconds(2000, False, 0.03, 2.0) == pytest.approx(END_FIXED_S + 60.0)
    assert reserve_seconds(2000, True, 0.03, 2.0) == pytest.approx(END_FIXED_S + 60.0 + 2 * TOX21_OUT_OF_DISTRIBUTION_S)
