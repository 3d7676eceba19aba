"""The MOSES table: every column computed from the three MOSES splits, beside the published rows."""
import pytest

pytest.importorskip("rdkit")

import minitransformer.chem.judge.filters as filters  # noqa: E402
import minitransformer.chem.datasets.moses as moses  # noqa: E402
from minitransformer.chem.judge.moses_report import COLUMNS, PUBLISHED, markdown_table, moses_benchmark  # noqa: E402

SPLITS = {"train": ["CCO", "c1ccccc1", "CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1", "CCN(CC)CC"],
          "test": ["c1ccc2ccccc2c1", "CCCO"], "test_scaffolds": ["c1ccc2[nH]ccc2c1", "CCCN"]}


def test_moses_benchmark_on_tiny_splits(monkeypatch):
    monkeypatch.setattr(moses, "load_moses", lambda split, download=True, limit=None: list(SPLITS[split]))
    monkeypatch.setattr(filters, "default_filters", lambda download=True: (None, "no alert files in this test"))
    samples = ["CCO", "c1ccc2ccccc2c1", "c1ccc2ccccc2c1", "CCCCl", "C1CC"]
    row = moses_benchmark(samples, seed=0)
    assert row["valid"] == pytest.approx(4 / 5) and row["unique_1k"] == pytest.approx(3 / 4)
    assert row["novelty"] == pytest.approx(1 / 3)  # CCCCl only: CCO and naphthalene are in train
    assert 0 < row["snn_testsf"] < row["snn_test"] < 1  # naphthalene is in test, only indole in test_scaffolds
    assert row["scaf_test"] == pytest.approx(1.0)  # the only 2-ring scaffold on both sides: naphthalene
    assert row["scaf_testsf"] == pytest.approx(0.0)  # indole vs naphthalene: no scaffold in common
    assert row["filters"] is None and "no alert files" in row["filters_note"]
    table = markdown_table(row, label="tiny")
    lines = table.splitlines()
    assert len(lines) == 2 + len(PUBLISHED) + 1 and lines[-1].startswith("| **tiny** | 0.8000 | 0.7500 |")
    assert all(line.count("|") == len(COLUMNS) + 2 for line in lines)
    assert "| CharRNN | 0.9748 |" in table  # the published row, as MOSES's README gives it
