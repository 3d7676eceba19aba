"""`train lm --model lstm`: the recurrent baseline trained, judged and saved by the same
command as the transformer, sampled by `minitransformer sample`, steered by `optimize`'s
Steering; and the options only a transformer has refused in one line, before any work."""
import json

import numpy as np
import pytest

from minitransformer.cli import run_cli
from minitransformer.cli.main import main
from cli_helpers import one_line_error  # noqa: E402

pytest.importorskip("rdkit")

BASE = ["train", "lm", "--model", "lstm", "--quick", "--quiet", "--data", "druglike", "--pretrain-data", "none",
        "--samples", "20"]


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("lstm") / "run"
    assert run_cli(main, BASE + ["--out", str(out)]) == 0
    return out


def test_it_trains_judges_and_saves_an_lstm(lstm_run):
    from minitransformer.checkpoint import load_checkpoint
    metrics = json.loads((lstm_run / "metrics.json").read_text())
    assert 0.0 <= metrics["bare"]["validity"] <= 1.0 and metrics["valence"]["validity"] == 1.0
    assert np.isfinite(metrics["test_nll_token"])
    ckpt = load_checkpoint(lstm_run / "best.npz")
    assert ckpt.model_type == "LSTMLM" and ckpt.vocab is not None
    config = json.loads((lstm_run / "config.json").read_text())
    assert config["run"]["settings"]["model"]["kind"] == "lstm" and config["model"]["hidden"] == 32


def test_sample_and_steering_take_an_lstm(lstm_run, tmp_path, capsys):
    out = tmp_path / "s.smi"
    assert run_cli(main, ["sample", str(lstm_run / "best.npz"), "-n", "5", "--out", str(out), "--seed", "1"]) == 0
    assert len(out.read_text().splitlines()) == 5
    from minitransformer.molecules.sampling import load_generator
    from minitransformer.molecules.objective_spec import objective_from_spec
    from minitransformer.molecules.steering import Steering, SteeringConfig
    prior, vocab = load_generator(lstm_run / "best.npz")
    steer = Steering(prior, vocab, objective_from_spec("qed"), SteeringConfig(batch_size=8, seed=0))
    record = steer.step()
    assert type(steer.agent) is type(prior) and record["step"] == 1


@pytest.mark.parametrize("extra, words", [
    (["--preset", "tomczak"], "the tomczak preset is Tomczak's transformer itself"),
    (["--dropout", "0.1"], "--dropout needs a transformer"),
    (["--plot-attention"], "--plot-attention needs a transformer"),
])
def test_transformer_only_options_are_refused(extra, words, tmp_path, capsys):
    out = tmp_path / "never"
    assert run_cli(main, BASE + ["--out", str(out)] + extra) == 2
    assert words in one_line_error(capsys)
    assert not out.exists(), "refused before any work"


def test_attention_on_an_lstm_checkpoint_says_it_has_none(lstm_run, tmp_path, capsys):
    """An LSTM has no attention weights: one line naming the model kind and what to give (once "a bug")."""
    capsys.readouterr()
    code = run_cli(main, ["attention", str(lstm_run / "best.npz"), "CCO", "--out", str(tmp_path / "maps")])
    line = one_line_error(capsys)
    assert code == 2 and "holds an LSTMLM, which has no attention" in line and "this is a bug" not in line
    assert not (tmp_path / "maps").exists()
