"""A run folder belongs to one run.

Re-running a demo into an old ``--out`` folder used to mix two runs: the new run's
vocabulary with the old ``best.npz`` (an IndexError when decoding), the old
``history.json`` next to the new ``metrics.json``. Now reusing a folder needs
``--resume`` (same data, vocabulary and settings, checked) or ``--force`` (the old
files move to ``old-YYYYmmdd-HHMMSS/`` first); otherwise the run is refused with
both ways out in one line.
"""
import json
import shutil

import pytest

from minitransformer.cli import run_cli
from cli_helpers import one_line_error  # noqa: E402

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")

BASE = ["--quick", "--quiet", "--pretrain-data", "none", "--samples", "10"]


@pytest.fixture
def old_run(finished_run, tmp_path):
    """A private copy of the finished run (tests may change it)."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out


@pytest.fixture
def other_data(tmp_path):
    """Other molecules, with tokens (Br, I, [nH]) the drug-like vocabulary does not have."""
    rows = [f"{'C' * (8 + i % 9)}{tail}" for i in range(60)
            for tail in ("Br", "I", "c1cc[nH]c1")][:120]
    path = tmp_path / "other.smi"
    path.write_text("\n".join(rows) + "\n")
    return path


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_rerun_into_an_old_run_folder_is_refused(molecules, old_run, other_data, capsys):
    before = snapshot(old_run)
    code = run_cli(molecules.main, BASE + ["--data", str(other_data), "--out", str(old_run)])
    assert code == 2
    line = one_line_error(capsys)
    assert "already holds a run" in line and "--resume" in line and "--force" in line
    assert snapshot(old_run) == before, "a refused run must not touch the folder"


def test_force_moves_the_old_run_aside_and_starts_afresh(molecules, old_run, other_data, capsys):
    before = snapshot(old_run)
    code = run_cli(molecules.main, BASE + ["--data", str(other_data), "--out", str(old_run), "--force"])
    assert code == 0
    aside = [p for p in old_run.iterdir() if p.name.startswith("old-")]
    assert len(aside) == 1 and aside[0].is_dir()
    assert snapshot(aside[0]) == before, "every old file is kept, unchanged, in old-*/"
    config = json.loads((old_run / "config.json").read_text())
    assert "other.smi" in config["run"]["data"], "the folder now holds the new run only"
    history = json.loads((old_run / "history.json").read_text())
    assert len(history) == json.loads((old_run / "metrics.json").read_text())["epochs"]


def test_resume_with_other_data_is_refused_naming_what_differs(molecules, old_run, other_data, capsys):
    before = snapshot(old_run)
    for resume in (["--resume"], ["--resume", str(old_run / "last.npz")]):
        code = run_cli(molecules.main, BASE + ["--data", str(other_data), "--out", str(old_run)] + resume)
        assert code == 2
        line = one_line_error(capsys)
        assert line.startswith("error: cannot resume")
        assert "vocabulary" in line and "data" in line and "--force" in line
    assert snapshot(old_run) == before


def test_resume_with_other_settings_is_refused(molecules, old_run, capsys):
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(old_run), "--resume", "--lr", "0.01"])
    assert code == 2
    assert "settings.lr" in one_line_error(capsys)


def test_resume_of_the_same_run_continues(molecules, old_run, capsys):
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(old_run), "--resume",
                                           "--max-minutes", "5"])  # a new time budget is fine
    assert code == 0, capsys.readouterr().err


def test_resume_and_force_together_or_resume_without_a_run(molecules, tmp_path, capsys, no_work):
    (tmp_path / "run").mkdir()
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(tmp_path / "run"), "--resume",
                                           "--force"])
    assert code == 2 and "contradict" in one_line_error(capsys)
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(tmp_path / "run"), "--resume"])
    assert code == 2 and "no checkpoint to resume" in one_line_error(capsys)


@pytest.mark.parametrize("name", ["canonicalize", "tox21_property"])
def test_every_training_command_refuses_a_folder_holding_a_run_offering_resume_and_force(name, load_demo, tmp_path, capsys, no_work):
    demo = load_demo(name)
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}\n")
    (out / "best.npz").write_bytes(b"old weights")
    data = "druglike"
    if name == "tox21_property":
        data = str(tmp_path / "labels.csv")
        (tmp_path / "labels.csv").write_text("smiles,y\nCCO,1\n")
    assert run_cli(demo.main, ["--quick", "--quiet", "--data", data, "--out", str(out)]) == 2
    line = one_line_error(capsys)
    assert "already holds a run" in line and "--force" in line
    assert "--resume" in line, "every train command can resume"
    assert (out / "best.npz").read_bytes() == b"old weights"


def test_force_refuses_to_move_aside_a_file_the_run_reads(molecules, old_run, capsys):
    """Training on the old run's own samples with --force: they would move away before being read."""
    before = snapshot(old_run)
    data = old_run / "samples.smi"
    code = run_cli(molecules.main, BASE + ["--data", str(data), "--out", str(old_run), "--force"])
    assert code == 2
    line = one_line_error(capsys)
    assert "--force would move" in line and "samples.smi" in line and "another --out" in line
    assert snapshot(old_run) == before, "a refused run must not touch the folder"


def test_force_moves_only_run_files(molecules, tmp_path, capsys, no_work):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}\n")
    (out / "pretrain").mkdir()
    (out / "pretrain" / "last.npz").write_bytes(b"x")
    (out / "notes.txt").write_text("my notes")
    # no_work stops the run right after the folder was claimed (an unexpected error, status 1)
    assert run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(out), "--force"]) == 1
    aside = [p for p in out.iterdir() if p.name.startswith("old-")]
    assert len(aside) == 1
    assert sorted(p.name for p in aside[0].iterdir()) == ["config.json", "pretrain"]
    assert (out / "notes.txt").read_text() == "my notes", "not a run's file: left where it is"


def test_a_folder_without_run_files_is_free(molecules, tmp_path, capsys, no_work):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    assert run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(out)]) == 1  # reached the work
    assert "work started" in capsys.readouterr().err


def test_resume_from_elsewhere_into_a_folder_of_another_run_is_refused(molecules, old_run, other_data, tmp_path,
                                                                       capsys):
    """The checkpoint named may fit the new data; the folder's own run must fit too."""
    fresh = tmp_path / "fresh"
    assert run_cli(molecules.main, BASE + ["--data", str(other_data), "--out", str(fresh)]) == 0
    (old_run / "config.json").unlink()  # only the checkpoints tell which run the folder holds
    before = snapshot(old_run)
    code = run_cli(molecules.main, BASE + ["--data", str(other_data), "--out", str(old_run), "--resume",
                                           str(fresh / "last.npz")])
    assert code == 2
    line = one_line_error(capsys)
    assert "best.npz: vocabulary" in line or "last.npz: vocabulary" in line, line
    assert snapshot(old_run) == before


def test_resume_with_another_seed_is_refused(molecules, old_run, capsys):
    # the seed fixes the split, the batch order and the samples: resuming under another one mixes two runs
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(old_run), "--resume", "--seed", "7"])
    assert code == 2
    assert "seed" in one_line_error(capsys)


def test_divergence_prints_one_line_and_no_numpy_warnings(molecules, tmp_path, capsys, recwarn):
    code = run_cli(molecules.main, BASE + ["--data", "druglike", "--out", str(tmp_path / "run"), "--lr", "1e308"])
    assert code == 1
    one_line_error(capsys)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_one_molecule_names_the_file_and_how_many_are_needed(molecules, tmp_path, capsys):
    data = tmp_path / "one.smi"
    data.write_text("CCOc1ccccc1C(=O)O\n")
    code = run_cli(molecules.main, BASE + ["--data", str(data), "--out", str(tmp_path / "run")])
    assert code == 2
    line = one_line_error(capsys)
    assert "one.smi" in line and "at least" in line


def test_a_new_time_budget_or_sample_count_is_no_reason_to_refuse_a_resume():
    """``--max-minutes`` changes ``max_time`` and, for a run whose pretraining adds its own time,
    ``fine_tune_time``: both may change on ``--resume``; another learning rate may not."""
    from minitransformer.cli.run_folders import _differences
    then = {"settings": {"max_time": 1560.0, "fine_tune_time": 660.0, "samples": 2000, "lr": 5e-4}}
    now = {"settings": {"max_time": 1800.0, "fine_tune_time": None, "samples": 100, "lr": 5e-4}}
    assert _differences(then, now) == []
    assert _differences(then, {"settings": dict(now["settings"], lr=1e-3)}) == ["settings.lr: 0.0005 then, 0.001 now"]


def test_a_run_recorded_with_a_setting_at_its_old_place_compares_at_its_new_one(tmp_path):
    """A property run recorded ``settings.model.head_hidden`` before the head's width became the
    recipe's own field: its record still reads back, and another width is still refused."""
    from minitransformer.cli.run_folders import check_recorded_run
    (tmp_path / "config.json").write_text(json.dumps({"run": {"settings": {"model": {"d_model": 128,
                                                                                      "head_hidden": 64}}}}))
    check_recorded_run(tmp_path, {"settings": {"model": {"d_model": 128}, "head_hidden": 64}})
    with pytest.raises(ValueError, match="settings.head_hidden: 64 then, 32 now"):
        check_recorded_run(tmp_path, {"settings": {"model": {"d_model": 128}, "head_hidden": 32}})


def test_a_run_recorded_before_a_model_option_existed_compares_at_that_options_old_value(tmp_path):
    """A canonicalizer trained before the decoder could point had no pointer: resuming it with the
    pointer the presets now have is refused by name, and with --pointer off it is the same run."""
    from minitransformer.cli.run_folders import check_recorded_run
    (tmp_path / "config.json").write_text(json.dumps({"run": {"settings": {"model": {"d_model": 128}}}}))
    check_recorded_run(tmp_path, {"settings": {"model": {"d_model": 128, "pointer": False}}})
    with pytest.raises(ValueError, match="settings.model.pointer: False then, True now"):
        check_recorded_run(tmp_path, {"settings": {"model": {"d_model": 128, "pointer": True}}})
