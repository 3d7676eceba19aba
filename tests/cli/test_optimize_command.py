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


def test_force_moves_every_record_of_the_earlier_run_aside(tiny_checkpoints, tmp_path, capsys):
    out = tmp_path / "run"
    assert _go(tiny_checkpoints["lm"], out, capsys, "--steps", "2")[0] == 0
    before = {name: (out / name).read_bytes() for name in ("scored.csv", "best.csv", "history.json", "last.npz")}
    code, said = _go(tiny_checkpoints["lm"], out, capsys, "--steps", "1", "--force")
    assert code == 0, said.err
    aside = [p for p in out.iterdir() if p.name.startswith("old-")]
    assert len(aside) == 1
    assert {name: (aside[0] / name).read_bytes() for name in before} == before, "the earlier run, whole"


@pytest.mark.parametrize("name", ["scored.csv", "best.csv"])
def test_a_folder_holding_a_record_is_not_written_over_without_force(tiny_checkpoints, tmp_path, capsys, name):
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text("my results\n")
    code, said = _go(tiny_checkpoints["lm"], out, capsys, "--steps", "1")
    assert code == 2 and "already holds a run" in error_line(said) and "--force" in error_line(said)
    assert (out / name).read_text() == "my results\n" and sorted(p.name for p in out.iterdir()) == [name]


def test_force_refuses_to_move_aside_the_prior_it_reads(tiny_checkpoints, tmp_path, capsys):
    """A prior that is the best.npz of the folder --force would clear: refused before anything moves."""
    import shutil
    out = tmp_path / "lm"
    out.mkdir()
    shutil.copy(tiny_checkpoints["lm"], out / "best.npz")
    code, said = _go(out / "best.npz", out, capsys, "--steps", "1", "--force")
    line = error_line(said)
    assert code == 2 and "--force would move" in line and "best.npz" in line and "another --out" in line
    assert sorted(p.name for p in out.iterdir()) == ["best.npz"], "nothing moved, nothing written"


def test_best_csv_lists_the_best_scored_molecules_even_without_replay(tiny_checkpoints, tmp_path, capsys):
    code, said = run(["optimize", tiny_checkpoints["lm"], "--score", "qed", "--batch-size", "8", "--steps", "3",
                      "--replay", "0", "--out", tmp_path / "r"], capsys)
    assert code == 0, said.err
    scored = {r["canonical"]: float(r["score"]) for r in csv.DictReader(open(tmp_path / "r" / "scored.csv"))
              if r["canonical"] and float(r["score"]) > 0}
    best = [(r["canonical"], float(r["score"])) for r in csv.DictReader(open(tmp_path / "r" / "best.csv"))]
    assert scored and [s for _, s in best] == sorted(scored.values(), reverse=True)[:len(best)]
    assert all(s == scored[c] for c, s in best) and len({c for c, _ in best}) == len(best)
    assert f"best: {best[0][1]:.4f} {best[0][0]}" in said.out.splitlines(), "the run's best, not 'no molecule scored'"


def test_augmented_memory_runs_and_resumes_exactly_from_the_command_line(tiny_checkpoints, tmp_path, capsys):
    lm = tiny_checkpoints["lm"]
    extra = ("--memory", "augmented", "--augment-rounds", "1")
    code, said = _go(lm, tmp_path / "straight", capsys, "--steps", "3", *extra)
    assert code == 0, said.err
    settings = json.loads((tmp_path / "straight" / "config.json").read_text())
    assert "augmented" in json.dumps(settings) and '"augment_rounds": 1' in json.dumps(settings)
    assert _go(lm, tmp_path / "halves", capsys, "--steps", "2", *extra)[0] == 0
    assert _go(lm, tmp_path / "halves", capsys, "--steps", "3", "--resume", *extra)[0] == 0
    assert (tmp_path / "halves" / "scored.csv").read_text() == (tmp_path / "straight" / "scored.csv").read_text()
    code, said = _go(lm, tmp_path / "halves", capsys, "--steps", "4", "--resume")  # another memory: refused
    assert code == 2 and "another --memory augmented (now replay), --augment-rounds 1 (now 2)" in error_line(said)
    config = (tmp_path / "halves" / "config.json").read_text()
    code, said = _go(lm, tmp_path / "halves", capsys, "--steps", "2", "--resume", *extra)  # fewer steps than taken
    assert code == 2 and "taken 3 steps already" in error_line(said) and "--steps above 3" in error_line(said)
    assert (tmp_path / "halves" / "config.json").read_text() == config, "nothing rewritten"


def test_a_resume_with_another_score_is_refused(tiny_checkpoints, tmp_path, capsys):
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "r", capsys, "--steps", "1")[0] == 0
    code, said = run(["optimize", lm, "--score", "qed,sa", "--batch-size", "8", "--out", tmp_path / "r",
                      "--steps", "2", "--resume"], capsys)
    assert code == 2 and "the saved run had another score;" in error_line(said)
    code, said = _go(lm, tmp_path / "r", capsys, "--steps", "2")
    assert code != 0 and "--resume" in error_line(said) and "--force" in error_line(said)


@pytest.mark.parametrize("argv, message", [
    (["--score", "qed,toxicity"], "unknown score component 'toxicity'"),
    (["--score", "forbid"], "component forbid: give the pattern (pattern = a SMARTS)"),
    (["--score", "missing.toml"], "score file not found"),
    (["--score", "score.yaml"], "score score.yaml: a score file is a .json or .toml file"),
    (["--score", "runs/scores"], "score runs/scores: a score file is a .json or .toml file"),
    (["--score", "user"], 'component user: give the function (function = "module:function")'),
    (["--score", "pmo:drd2"], "unknown PMO task 'drd2'"),
])
def test_bad_scores_are_refused_before_any_work(tiny_checkpoints, tmp_path, capsys, argv, message):
    code, said = run(["optimize", tiny_checkpoints["lm"], *argv, "--out", tmp_path / "o"], capsys)
    assert code == 2 and message in error_line(said)
    assert not (tmp_path / "o").exists(), "nothing was written"


@pytest.mark.parametrize("argv, message", [
    (["--augment-rounds", "3"], "--augment-rounds needs --memory augmented"),
    (["--replay", "0", "--replay-k", "5"], "--replay-k 5 is more than the memory holds (--replay 0: replay is off)"),
    (["--replay", "3", "--replay-k", "10"], "--replay-k 10 is more than the memory holds (--replay 3)"),
])
def test_a_setting_the_run_would_ignore_is_refused_before_any_work(tiny_checkpoints, tmp_path, capsys, argv,
                                                                   message):
    code, said = _go(tiny_checkpoints["lm"], tmp_path / "o", capsys, "--steps", "1", *argv)
    assert code == 2 and message in error_line(said)
    assert not (tmp_path / "o").exists(), "nothing was written"


def test_settings_left_out_take_their_defaults(tiny_checkpoints, tmp_path, capsys):
    assert _go(tiny_checkpoints["lm"], tmp_path / "o", capsys, "--steps", "1", "--replay", "5")[0] == 0
    settings = json.loads((tmp_path / "o" / "config.json").read_text())
    assert settings["replay_k"] == 10 and settings["augment_rounds"] == 2 and settings["replay"] == 5


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
    argv = ["optimize", tiny_checkpoints["lm"], "--score", spec, "--batch-size", "16", "--out", tmp_path / "run",
            "--quiet", "--steps", "4", "--grammar", "valence"]  # valid molecules, so a call, at every step
    code, said = run(argv, capsys)
    line = error_line(said)
    assert code == 1 and "the scoring function failed (RuntimeError: the assay server is down)" in line
    assert "steps 1-2 are saved" in line and "continue with --resume" in line
    assert "this is a bug" not in line
    rows = list(csv.DictReader(open(tmp_path / "run" / "scored.csv")))
    assert {r["step"] for r in rows} == {"1", "2"}, "the two finished steps are kept"
    monkeypatch.delenv("FLAKY_FAIL")
    code, said = run(argv + ["--resume"], capsys)
    assert code == 0, said.err
    rows = list(csv.DictReader(open(tmp_path / "run" / "scored.csv")))
    assert [r["step"] for r in rows][::16] == ["1", "2", "3", "4"]
    monkeypatch.delitem(sys.modules, "flaky_score", raising=False)


@pytest.mark.parametrize("code", ["0", "None", "'done'"])
def test_a_user_function_calling_sys_exit_is_a_runtime_failure_not_a_finished_run(tiny_checkpoints, tmp_path,
                                                                                   capsys, monkeypatch, code):
    """sys.exit() inside the scoring function, at its third call, or in its module as it loads: exit 1 in one
    line naming the component, never exit 0 with the run cut short."""
    name = f"exiting_score_{abs(hash(code))}"
    (tmp_path / f"{name}.py").write_text(
        "import sys\nCALLS = [0]\n"
        "def score(smiles):\n"
        "    CALLS[0] += 1\n"
        f"    if CALLS[0] == 3:\n        sys.exit({code})\n"
        "    return [0.5] * len(smiles)\n")
    (tmp_path / f"{name}_at_import.py").write_text(f"import sys\nsys.exit({code})\ndef score(s):\n    return s\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, out in ((name, "run"), (f"{name}_at_import", "early")):
        spec = tmp_path / f"{out}.json"
        spec.write_text(json.dumps({"components": [{"name": "user", "function": f"{module}:score"}]}))
        argv = ["optimize", tiny_checkpoints["lm"], "--score", spec, "--batch-size", "16", "--out", tmp_path / out,
                "--quiet", "--steps", "4", "--grammar", "valence"]
        status, said = run(argv, capsys)
        line = error_line(said)
        assert status == 1 and "component user" in line and "sys.exit" in line, (module, said.err)
        assert "this is a bug" not in line
        monkeypatch.delitem(sys.modules, module, raising=False)
    rows = list(csv.DictReader(open(tmp_path / "run" / "scored.csv")))
    assert {r["step"] for r in rows} == {"1", "2"}, "the two finished steps are kept"
    assert not (tmp_path / "early" / "scored.csv").exists()


# --------------------------------------------------------------------------- the run folder is one transaction
def _stop_at_checkpoint_of_step(monkeypatch, step, exc=KeyboardInterrupt):
    """Make writing last.npz at ``step`` fail with ``exc``: the records of that step are on disk, its checkpoint is not."""
    from minitransformer import checkpoint
    real = checkpoint.save_checkpoint

    def failing(path, *a, extra=None, **k):
        if extra and extra.get("steering", {}).get("t") == step:
            raise exc()
        return real(path, *a, extra=extra, **k)
    monkeypatch.setattr(checkpoint, "save_checkpoint", failing)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, lambda: OSError(28, "No space left on device")])
def test_a_stop_between_a_steps_records_and_its_checkpoint_loses_no_step(tiny_checkpoints, tmp_path, capsys,
                                                                        monkeypatch, exc):
    """The records are written first and last.npz last; --resume cuts the records back to the checkpoint and
    takes the step again, so the folder ends as a straight run's (the step was once lost, exit 0)."""
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "straight", capsys, "--steps", "4")[0] == 0
    with monkeypatch.context() as m:
        _stop_at_checkpoint_of_step(m, 3, exc)
        code, said = _go(lm, tmp_path / "cut", capsys, "--steps", "4")
    assert code in (1, 130), said.err
    assert "steps 1-2 are saved" in said.err and "--resume" in said.err, "the message says how to go on"
    rows = list(csv.DictReader(open(tmp_path / "cut" / "scored.csv")))
    assert {r["step"] for r in rows} == {"1", "2", "3"}, "the records of step 3 were written before its checkpoint"
    code, said = _go(lm, tmp_path / "cut", capsys, "--steps", "4", "--resume")
    assert code == 0, said.err
    for name in ("scored.csv", "history.json", "best.csv"):
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "straight" / name).read_text(), name


def test_ctrl_c_says_which_steps_were_saved_and_how_to_resume(tiny_checkpoints, tmp_path, capsys, monkeypatch):
    lm = tiny_checkpoints["lm"]
    with monkeypatch.context() as m:
        _stop_at_checkpoint_of_step(m, 3)
        code, said = _go(lm, tmp_path / "run", capsys, "--steps", "4")
    line = said.err.strip().splitlines()[-1]
    assert code == 130 and "steps 1-2 are saved" in line and "--resume" in line and "no file was written" not in line
    with monkeypatch.context() as m:
        _stop_at_checkpoint_of_step(m, 1)
        code, said = _go(lm, tmp_path / "early", capsys, "--steps", "4")
    assert code == 130 and "no step was saved yet" in said.err and "--force" in said.err


@pytest.mark.parametrize("damage, message", [
    (lambda out: (out / "history.json").write_text('{"step": 1}'), "history.json is not a list of steps"),
    (lambda out: (out / "history.json").write_text("[]"), "history.json records 0 of the 2 steps"),
    (lambda out: (out / "history.json").unlink(), "history.json is missing"),
    (lambda out: (out / "scored.csv").write_text("step,smiles\n"), "scored.csv does not start with the header"),
    (lambda out: (out / "scored.csv").write_text(
        "\n".join((out / "scored.csv").read_text().splitlines()[:-8]) + "\n"), "scored.csv holds 8 molecules"),
    (lambda out: (out / "scored.csv").write_text('step,smiles,canonical,score,qed\n"1,C\n'), "a quote"),
    (lambda out: (out / "history.json").write_text('[{"step": 1},\n'), "history.json is not valid JSON"),
])
def test_records_that_fall_short_of_the_checkpoint_are_refused_on_resume(tiny_checkpoints, tmp_path, capsys,
                                                                         damage, message):
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "run", capsys, "--steps", "2")[0] == 0
    damage(tmp_path / "run")
    code, said = _go(lm, tmp_path / "run", capsys, "--steps", "4", "--resume")
    line = error_line(said)
    assert code == 2 and message in line and "--force" in line and "this is a bug" not in line


def test_a_resume_with_nothing_left_to_do_still_cuts_the_records_back_to_the_checkpoint(tiny_checkpoints, tmp_path,
                                                                                     capsys):
    """Records that run past last.npz (a step stopped before its checkpoint) and --steps already reached:
    the records are cut back to the checkpoint's step all the same, as the run that stopped there."""
    import shutil
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "two", capsys, "--steps", "2")[0] == 0
    assert _go(lm, tmp_path / "run", capsys, "--steps", "2")[0] == 0
    shutil.copy(tmp_path / "run" / "last.npz", tmp_path / "step2.npz")
    assert _go(lm, tmp_path / "run", capsys, "--steps", "3", "--resume")[0] == 0
    shutil.copy(tmp_path / "step2.npz", tmp_path / "run" / "last.npz")  # step 3's records, step 2's checkpoint
    code, said = _go(lm, tmp_path / "run", capsys, "--steps", "2", "--resume")
    assert code == 0, said.err
    for name in ("scored.csv", "history.json", "best.csv"):
        assert (tmp_path / "run" / name).read_text() == (tmp_path / "two" / name).read_text(), name


def _forge(path, **steering):
    """last.npz with its steering state changed (keys given replace the saved ones)."""
    _edit_meta(path, lambda meta: meta["steering"].update(steering))


def _edit_meta(path, edit):
    """last.npz with ``edit(meta)`` applied to its metadata table."""
    import numpy as np

    from minitransformer.atomic import write_bytes
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes().decode())
    edit(meta)
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    import io
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes(path, buf.getvalue())


@pytest.mark.parametrize("steering, message", [
    ({"t": -3}, "step t=-3"),
    ({"t": "2"}, "step t='2'"),
    ({"t": 1.5}, "step t=1.5"),
    ({"rng": {"seed": -1, "counter": 0}}, "rng="),
    ({"rng": "x"}, "rng="),
    ({"memory": [[2.0, "CCO", [1, 2]]]}, "memory entry"),
    ({"memory": [[0.5, "CCO", [10**6]]]}, "memory entry"),
    ({"memory": {"a": 1}}, "memory is not a list"),
    ({"scaffold_counts": {"c1ccccc1": -1}}, "scaffold_counts"),
    ({"scaffold_counts": [1]}, "scaffold_counts"),
    ({"seen": "CCO"}, "seen is not a list"),
])
def test_a_forged_steering_state_is_refused_in_one_line(tiny_checkpoints, tmp_path, capsys, steering, message):
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "run", capsys, "--steps", "2")[0] == 0
    _forge(tmp_path / "run" / "last.npz", **steering)
    code, said = _go(lm, tmp_path / "run", capsys, "--steps", "4", "--resume")
    line = error_line(said)
    assert code == 2 and "steering state" in line and message in line and "this is a bug" not in line


def test_divergence_says_the_step_what_is_saved_and_what_to_change(tiny_checkpoints, tmp_path, capsys):
    code, said = _go(tiny_checkpoints["lm"], tmp_path / "run", capsys, "--steps", "3", "--sigma", "1e200")
    line = error_line(said)
    assert code == 1 and "diverged at step 1" in line and "--sigma" in line and "refusing to write" not in line
    assert not (tmp_path / "run" / "last.npz").exists(), "no non-finite agent was saved"


def test_resume_follows_the_score_files_contents_not_their_path(tiny_checkpoints, tmp_path, capsys, monkeypatch):
    """The same score file by another path resumes; a changed property checkpoint behind it is refused."""
    import shutil
    lm = tiny_checkpoints["lm"]
    shutil.copy(tiny_checkpoints["property"], tmp_path / "p.npz")
    (tmp_path / "q.toml").write_text('[[components]]\nname = "tox21"\ncheckpoint = "p.npz"\n'
                                     '[[components]]\nname = "qed"\n')
    monkeypatch.chdir(tmp_path)
    argv = ["optimize", lm, "--batch-size", "4", "--out", "run", "--quiet"]
    assert run([*argv, "--score", "q.toml", "--steps", "1"], capsys)[0] == 0
    code, said = run([*argv, "--score", "./q.toml", "--steps", "2", "--resume"], capsys)
    assert code == 0, said.err
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
    ckpt = load_checkpoint(tmp_path / "p.npz")
    model, _ = model_from_checkpoint(ckpt)
    next(iter(model.parameters())).data[...] += 0.5  # another model behind the same file name
    save_checkpoint(tmp_path / "p.npz", model, vocab=ckpt.vocab, extra={"run": ckpt.meta["run"]})
    code, said = run([*argv, "--score", str(tmp_path / "q.toml"), "--steps", "3", "--resume"], capsys)
    assert code == 2 and "the saved run had another score;" in error_line(said)


def test_hill_climbing_resumes_exactly_and_a_run_saved_before_the_setting_resumes_as_all_of_the_batch(
        tiny_checkpoints, tmp_path, capsys):
    lm = tiny_checkpoints["lm"]
    assert _go(lm, tmp_path / "straight", capsys, "--steps", "3", "--top-fraction", "0.5")[0] == 0
    assert _go(lm, tmp_path / "halves", capsys, "--steps", "2", "--top-fraction", "0.5")[0] == 0
    assert _go(lm, tmp_path / "halves", capsys, "--steps", "3", "--resume", "--top-fraction", "0.5")[0] == 0
    assert (tmp_path / "halves" / "scored.csv").read_text() == (tmp_path / "straight" / "scored.csv").read_text()
    code, said = _go(lm, tmp_path / "halves", capsys, "--steps", "4", "--resume")
    assert code == 2 and "another --top-fraction 0.5 (now 1.0)" in error_line(said), "another share of the batch: refused"
    assert _go(lm, tmp_path / "old", capsys, "--steps", "2")[0] == 0
    _edit_meta(tmp_path / "old" / "last.npz", lambda meta: meta["run"].pop("top_fraction"))  # as saved before it
    code, said = _go(lm, tmp_path / "old", capsys, "--steps", "3", "--resume")
    assert code == 0, said.err
    code, said = _go(lm, tmp_path / "old2", capsys, "--steps", "2", "--top-fraction", "0")
    assert code == 2 and "--top-fraction" in error_line(said)
