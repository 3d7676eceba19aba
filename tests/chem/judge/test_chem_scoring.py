"""score_smiles / format_score / load_reference on small hand-checked sets."""
import gzip
import json

import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.judge.scoring import (cosine_of_counts, format_score, load_reference,  # noqa: E402
                                          read_samples, score_smiles)

REF = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "OC(=O)c1ccccc1", "c1ccc2ccccc2c1",
       "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "O=C(O)CCc1ccccc1"]


def test_known_mix():
    samples = ["CCO", "OCC", "c1ccccc1O", "xyz", "", "C1CC", "CCCCCl"]  # 4 valid, 3 distinct, 1 novel
    r = score_smiles(samples, REF)
    assert r["n_samples"] == 7 and r["validity"] == pytest.approx(4 / 7)
    assert r["uniqueness"] == pytest.approx(3 / 4)
    assert r["novelty"] == pytest.approx(1 / 3) and r["n_novel"] == 1
    assert 0 < r["intdiv1"] < 1 and 0 < r["snn"] < 1
    json.dumps(r, allow_nan=False)


def test_against_itself():
    r = score_smiles(REF, REF)
    assert r["snn"] == pytest.approx(1.0) and r["frag"] == pytest.approx(1.0)
    assert r["scaf"] == pytest.approx(1.0) and r["novelty"] == 0.0
    assert r["kl_score"] == pytest.approx(1.0, abs=1e-6)


def test_no_reference_empty_and_all_invalid():
    r = score_smiles(REF[:3], None)
    assert r["validity"] == 1.0 and r["novelty"] is None and r["kl_score"] is None and r["snn"] is None
    empty = score_smiles([], REF)
    assert empty["n_samples"] == 0 and empty["validity"] is None and empty["snn"] is None
    bad = score_smiles(["xyz", "C1CC", ""], REF)
    assert bad["validity"] == 0.0 and bad["uniqueness"] is None and bad["intdiv1"] is None
    for result in (r, empty, bad):
        text = format_score(result)
        assert "validity" in text and "IntDiv2" in text and "n/a" in text


def test_cosine_of_counts():
    from collections import Counter
    assert cosine_of_counts(Counter(a=1, b=1), Counter(a=2, b=2)) == pytest.approx(1.0)
    assert cosine_of_counts(Counter(a=1), Counter(b=1)) == 0.0
    assert cosine_of_counts(Counter(), Counter(a=1)) is None


def test_files_with_headers_names_blank_lines_and_gzip(tmp_path):
    smi = tmp_path / "s.smi.gz"
    smi.write_bytes(gzip.compress(b"SMILES\nCCO ethanol\nc1ccccc1 benzene\n"))
    csv = tmp_path / "s.csv"
    csv.write_text("id,SMILES\n1,CCO\n\n2,c1ccccc1\n")  # a blank CSV row holds no sample
    assert read_samples(smi) == read_samples(csv) == ["CCO", "c1ccccc1"]
    assert load_reference(csv) == ["CCO", "c1ccccc1"]
    assert len(load_reference("druglike")) == 10000


def test_an_empty_line_is_an_empty_sample_and_stays_in_the_denominator(tmp_path):
    """MOSES counts an empty sample as invalid; so does score. Only a header line is skipped."""
    from minitransformer.chem.datasets.user_files import read_user_file
    path = tmp_path / "weak_model.smi"
    path.write_text("smiles\nCCO\n\n#CC\nc1ccccc1\n\n")
    found = read_user_file(path)
    assert found.smiles == ["CCO", "", "#CC", "c1ccccc1", ""] and found.skipped() == "a header line"
    r = score_smiles(found.smiles, None, fcd=False)
    assert r["n_samples"] == 5 and r["validity"] == pytest.approx(2 / 5)


def test_the_kl_reference_is_guacamols_draw_by_default():
    """GuacaMol draws its KL reference with seed 42; so does every default here."""
    from minitransformer.chem.judge.evaluation import evaluate_samples
    from minitransformer.chem.judge.metrics import KL_SEED
    train = REF * 3
    assert KL_SEED == 42
    default = evaluate_samples(REF[:5], train, filters=None)
    assert default["kl_score"] == evaluate_samples(REF[:5], train, seed=42, filters=None)["kl_score"]


def test_a_csv_cell_longer_than_the_csv_modules_limit_is_read(tmp_path):
    """Cells over 131,072 characters were an 'unexpected Error'; now the SMILES is read,
    and judged invalid by the guard, never parsed."""
    from minitransformer.chem.datasets.data import read_smiles
    huge = "C" * 200_000
    path = tmp_path / "big.csv"
    path.write_text(f"id,smiles\n1,CCO\n2,{huge}\n3,c1ccccc1\n")
    assert read_samples(path) == ["CCO", huge, "c1ccccc1"] and read_smiles(path)[1] == huge
    r = score_smiles(read_samples(path), None, fcd=False)
    assert r["n_samples"] == 3 and r["n_valid"] == 2


@pytest.mark.parametrize("payload, words", [(gzip.compress(b"CCO\n", mtime=0), "gzip-compressed"),
                                            ("CCO\n".encode("utf-16"), "not UTF-8 text")])
def test_binary_standard_input_is_one_line_naming_it(payload, words, monkeypatch):
    """Gzip or UTF-16 on stdin said "'utf-8' codec can't encode ... surrogates"."""
    import io
    import sys

    class Stdin:
        buffer = io.BytesIO(payload)
    monkeypatch.setattr(sys, "stdin", Stdin())
    with pytest.raises(ValueError, match=f"standard input is {words}") as err:
        read_samples("-")
    assert "\n" not in str(err.value)
