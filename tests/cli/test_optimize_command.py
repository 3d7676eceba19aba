"""``minitransformer optimize``: a run folder with every scored molecule, an exact --resume, one-line refusals."""
import csv
import json
import sys

import pytest

pytest.importorskip("rdkit")

from test_command import error_line, run  # noqa: E402  (the same folder)

def _go(path, out, capsys, *extra):
    return run(["optimize", path, "--score", "qed", "--batch-size", "8", "--out", out, "--quiet", *extra], capsys)


def test_a_run_writes_every_output_and_resumes_exactly(tiny_checkpoints, tmp_path, capsys):
    lm = tiny_checkpoints["lm"]
    code, said = _go(lm, tmp_path / "straight", capsys, "--steps", "4")
    assert code == 0, said.err
    for name in ("scored.csv", "best.csv", "history.json", "curves.png", "last.npz", "config.json",
                 "provenance.json"):
        assert (tmp_path / "straight" / name).is_file(), name
    rows = list(csv.DictReader(open(tmp_path / "straight" / "scored.csv")))
    assert len(rows) == 4 * 8 and rows[0].keys() == {"step", "smiles", "canonical", "score", "qed"}
    assert all(float(r["score"]) == 0.0 for r in rows if not r["canonical"]), "an invalid molecule scores 0"
    assert len(json.loads((tmp_path / "straight" / "history.json").read_text())) == 4
    code, _ = _go(lm, tmp_path / "halves", capsys, "--steps", "2")
    assert code == 0
    code, said = _go(lm, tmp_path / "halves", capsys, "--steps", "4", "--resume")
    assert code == 0, said.err
    assert (tmp_path / "halves" / "scored.csv").read_text() == (tmp_path / "straight" / "scored.csv").read_text()


def test_a_resume_with_another_score_is_refused(tiny_checkpoints, tmp_path, capsys):
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "r", capsys, "--steps", "1")[0] == 0
    code, said = run(["optimize", lm, "--score", "qed,sa", "--batch-size", "8", "--out", tmp_path / "r",
                      "--steps", "2", "--resume"], capsys)
    assert code == 2 and "score differ" in error_line(said)
    code, said = _go(lm, tmp_path / "r", capsys, "--steps", "2")
    assert code != 0 and "--resume" in error_line(said) and "--force" in error_line(said)


@pytest.mark.parametrize("argv, message", [
    (["--score", "qed,toxicity"], "unknown score component 'toxicity'"),
    (["--score", "forbid"], "is not a valid SMARTS"),
    (["--score", "missing.toml"], "score file not found"),
    (["--score", "user"], "must be written module:function"),
    (["--score", "pmo:drd2"], "unknown PMO task 'drd2'"),
])
def test_bad_scores_are_refused_before_any_work(tiny_checkpoints, tmp_path, capsys, argv, message):
    code, said = run(["optimize", tiny_checkpoints["lm"], *argv, "--out", tmp_path / "o"], capsys)
    assert code == 2 and message in error_line(said)
    assert not (tmp_path / "o").exists(), "nothing was written"


def test_a_prior_of_the_wrong_kind_is_refused(tiny_checkpoints, tmp_path, capsys):
    code, said = run(["optimize", tiny_checkpoints["property"], "--score", "qed", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "a generator's checkpoint (DecoderLM or LSTMLM)" in error_line(said)


def test_a_user_function_failing_mid_run_stops_in_one_line_and_resumes(tiny_checkpoints, tmp_path, capsys,
                                                                       monkeypatch):
    """The third call fails: the command stops with one line (exit 1, a runtime failure, not "a bug"),
    keeps the two steps scored before it, and --resume continues from them once the function works."""
    (tmp_path / "flaky_score.py").write_text(
        "import os\nCALLS = [0]\n"
        "def score(smiles):\n"
        "    CALLS[0] += 1\n"
        "    if os.environ.get('FLAKY_FAIL') and CALLS[0] == 3:\n"
        "        raise RuntimeError('the assay server is down')\n"
        "    return [0.5] * len(smiles)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FLAKY_FAIL", "1")
    spec = tmp_path / "score.json"
    spec.write_text(json.dumps({"components": [{"name": "user", "function": "flaky_score:score"}]}))
    argv = ["optimize", tiny_checkpoints["lm"], "--score", spec, "--batch-size", "4", "--out", tmp_path / "run",
            "--quiet", "--steps", "4"]
    code, said = run(argv, capsys)
    line = error_line(said)
    assert code == 1 and "the scoring function failed (RuntimeError: the assay server is down)" in line
    assert "this is a bug" not in line
    rows = list(csv.DictReader(open(tmp_path / "run" / "scored.csv")))
    assert {r["step"] for r in rows} == {"1", "2"}, "the two finished steps are kept"
    monkeypatch.delenv("FLAKY_FAIL")
    code, said = run(argv + ["--resume"], capsys)
    assert code == 0, said.err
    rows = list(csv.DictReader(open(tmp_path / "run" / "scored.csv")))
    assert [r["step"] for r in rows][::4] == ["1", "2", "3", "4"]
    monkeypatch.delitem(sys.modules, "flaky_score", raising=False)
