"""The skeleton every ``train`` command runs (:func:`minitransformer.cli.training.run_training`), tested
with a fake command of its own: the story's order, the files it writes, the phases, and a resume."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from minitransformer.cli.training import Data, Invocation, Phase, TrainingCommand, run_training
from minitransformer.models import DecoderLM, DecoderLMConfig
from minitransformer.train.recipe import Recipe, sized, unsized

MOLECULES = ["CCO", "CCN", "CCC", "COC", "CNC", "CCCO", "OCCO", "NCCN", "CC(C)O", "CC(=O)O"]


class FakeCommand(TrainingCommand):
    """A tiny language model on ten molecules, each hook noting that it ran."""

    kind = "fake"

    def __init__(self, pretrain_epochs: int = 1):
        self.calls, self.pretrain_epochs = [], pretrain_epochs

    def recipe(self):
        return Recipe(model=unsized(DecoderLMConfig, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16), lr=1e-2,
                      batch_size=4, epochs=2, pretrain_epochs=self.pretrain_epochs)

    def load(self, recipe, resume=None):
        from minitransformer.chem import Vocab
        self.calls.append("load")
        vocab = Vocab.build(MOLECULES)
        return recipe, Data(vocab, MOLECULES[:6], MOLECULES[6:8], MOLECULES[8:], None, "ten molecules", None)

    def build_model(self, recipe, data):
        self.calls.append("build_model")
        return DecoderLM(sized(recipe.model, data.vocab, recipe.seed))

    def describe(self, run):
        return "a fake command"

    def facts(self, run):
        return {"molecules": len(run.data.train)}

    def _phase(self, name, run, epochs):
        from minitransformer.train.tasks import LMTask
        ids = [run.data.vocab.encode(s) for s in run.data.train]
        val = [run.data.vocab.encode(s) for s in run.data.val]
        return Phase(name, LMTask(run.data.vocab.pad_id), ids, len(ids), epochs, None, val_data=val)

    def pretraining(self, run):
        self.calls.append("pretraining")
        return self._phase("pretrain", run, run.recipe.pretrain_epochs) if run.recipe.pretrain_epochs else None

    def training(self, run):
        self.calls.append("training")
        return self._phase("train", run, run.recipe.epochs)

    def evaluate(self, run, trainer):
        self.calls.append("evaluate")
        return {"best_so_far": trainer.best}, []

    def summary(self, run, metrics):
        self.calls.append("summary")


def train(command, out, resume=None, read_back=False):
    """``command``'s run into ``out``, as a command line would ask for it."""
    asked = Invocation(Path(out), resume=resume, quiet=True, argv=("train", "fake"))
    return run_training(command, command.recipe(), asked, read_back=read_back)


def test_the_skeleton_tells_the_story_in_order_and_writes_every_file_of_a_run(tmp_path):
    command = FakeCommand()
    assert train(command, tmp_path / "run") == 0
    assert command.calls == ["load", "build_model", "pretraining", "training", "evaluate", "summary"]
    out = tmp_path / "run"
    for name in ("provenance.json", "config.json", "metrics.json", "curves.png", "last.npz", "best.npz",
                 "pretrain/last.npz", "history.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["run"]["molecules"] == 6 and config["run"]["data"] == "ten molecules"  # the command's facts
    assert config["run"]["settings"]["epochs"] == 2 and len(config["run"]["data_sha256"]) == 16
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and metrics["pretrain_epochs"] == 1 and "best_so_far" in metrics


def test_a_resume_continues_the_main_phase_without_pretraining_again_and_a_read_back_only_checks(tmp_path):
    out = tmp_path / "run"
    assert train(FakeCommand(), out) == 0
    from minitransformer.cli.arguments import AUTO
    pretrained = (out / "pretrain" / "last.npz").stat().st_mtime_ns
    again = FakeCommand()
    assert train(again, out, resume=AUTO) == 0
    assert "evaluate" in again.calls
    assert (out / "pretrain" / "last.npz").stat().st_mtime_ns == pretrained, "a finished phase 1 runs once"
    metrics = (out / "metrics.json").read_text()
    looked = FakeCommand()
    assert train(looked, out, resume=AUTO, read_back=True) == 0
    assert looked.calls == ["load", "build_model"] and (out / "metrics.json").read_text() == metrics


def test_a_resume_with_other_settings_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    assert train(FakeCommand(), out) == 0
    from minitransformer.cli.arguments import AUTO
    files = lambda: {p.name: p.stat().st_mtime_ns for p in out.iterdir()  # noqa: E731 (the run's, not its lock)
                     if p.is_file() and not p.name.startswith(".")}
    before = files()
    with pytest.raises(ValueError, match="pretrain_epochs: 1 then, 2 now"):
        train(FakeCommand(pretrain_epochs=2), out, resume=AUTO)
    assert files() == before
