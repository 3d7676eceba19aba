"""`train seq2seq --model rnn`: the attentional LSTM encoder-decoder trained, decoded (greedy
and beam search), judged and saved by the same command as the transformer, read back by
`translate`; and the options that do not fit it refused in one line, before any work."""
import json

import pytest

from minitransformer.cli import run_cli
from minitransformer.cli.main import main
from cli_helpers import one_line_error  # noqa: E402

pytest.importorskip("rdkit")

BASE = ["train", "seq2seq", "--model", "rnn", "--quick", "--quiet", "--data", "druglike", "--examples", "0"]


@pytest.fixture(scope="module")
def rnn_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("rnn") / "run"
    assert run_cli(main, BASE + ["--out", str(out), "--attention", "multiplicative", "--plot-attention"]) == 0
    return out


def test_it_trains_decodes_and_saves_an_rnn(rnn_run):
    from minitransformer.checkpoint import load_checkpoint
    metrics = json.loads((rnn_run / "metrics.json").read_text())
    for key in ("greedy_top1", "beam_top1", "beam_top5", "greedy_valid"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert metrics["beam_size"] == 5 and metrics["n_test"] > 0
    ckpt = load_checkpoint(rnn_run / "best.npz")
    assert ckpt.model_type == "RNNSeq2Seq" and ckpt.meta["config"]["attention"] == "multiplicative"
    assert (rnn_run / "predictions.tsv").read_text().count("\n") > 1
    assert (rnn_run / "attention_cross.png").read_bytes()[:4] == b"\x89PNG", "its attention, drawn"


def test_the_attention_command_draws_it(rnn_run, tmp_path, capsys):
    out = tmp_path / "pics"
    assert run_cli(main, ["attention", str(rnn_run / "best.npz"), "c1ccccc1O", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["attention_cross.png", "attention_cross_molecule.png"]


def test_translate_reads_it(rnn_run, tmp_path, capsys):
    out = tmp_path / "t.tsv"
    assert run_cli(main, ["translate", str(rnn_run / "best.npz"), "OCC", "c1ccccc1O", "--out", str(out)]) == 0
    assert len(out.read_text().strip().splitlines()) == 3  # a header and one line per SMILES


@pytest.mark.parametrize("argv, words", [
    (BASE + ["--dropout", "0.1"], "--dropout needs --model transformer"),
    (["train", "seq2seq", "--quick", "--attention", "additive"], "--attention chooses the RNN model's attention"),
])
def test_what_does_not_fit_is_refused(argv, words, tmp_path, capsys):
    out = tmp_path / "never"
    assert run_cli(main, argv + ["--out", str(out)]) == 2
    assert words in one_line_error(capsys)
    assert not out.exists(), "refused before any work"
