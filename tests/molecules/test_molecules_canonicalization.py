"""Judging a canonicalizer's answers: exact match, the beam's ranks, and the beam's first valid answer."""
import pytest

pytest.importorskip("rdkit")

from minitransformer.molecules.canonicalization import judge, score_translations  # noqa: E402

TARGET = "Cc1ccccc1O"  # RDKit's canonical SMILES of o-cresol


def test_the_first_valid_answer_skips_strings_that_are_not_smiles():
    row = judge("Oc1ccccc1C", TARGET, "Cc1ccccc1(O", ["Cc1ccccc1(O", "Cc1cccc", TARGET, "CCO", "C"])
    assert row["greedy_correct"] == 0 and row["greedy_valid"] == 0
    assert row["beam_rank"] == 3 and row["beam_valid"] == 0
    assert row["beam_first_valid"] == TARGET and row["beam_first_valid_correct"] == 1
    assert row["beam_valid_all"] == pytest.approx(3 / 5)


def test_a_valid_wrong_first_answer_stays_the_answer_and_no_valid_answer_keeps_the_first():
    wrong_first = judge("Oc1ccccc1C", TARGET, TARGET, ["CCO", TARGET, "C", "CC", "CCC"])
    assert wrong_first["beam_first_valid"] == "CCO" and wrong_first["beam_first_valid_correct"] == 0
    none_valid = judge("Oc1ccccc1C", TARGET, TARGET, ["c1cc(", "C1CC", "", "((", "C%"])
    assert none_valid["beam_first_valid"] == "c1cc(" and none_valid["beam_first_valid_correct"] == 0
    m = score_translations([wrong_first, none_valid, judge("Oc1ccccc1C", TARGET, TARGET, [TARGET] * 5)])
    assert m["beam_first_valid_top1"] == pytest.approx(1 / 3) and m["beam_top1"] == pytest.approx(1 / 3)
    assert m["beam_top5"] == pytest.approx(2 / 3) and m["greedy_top1"] == 1.0
