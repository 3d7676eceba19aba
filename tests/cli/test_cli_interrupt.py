"""Ctrl-C ends a demo with one line that names the right epoch and step.

The trainer catches KeyboardInterrupt and returns; the demos used to carry on into
the next phase, evaluation and sampling as if training had finished (and a second
Ctrl-C gave a traceback). Now the command stops with exit status 130 and one line:
``interrupted training at epoch N (step S); last good checkpoint: <path> (end of
epoch K, step T)``. The epoch is the one that was running; an interrupt while the
end-of-epoch checkpoint is being written names that epoch, not the next one.
"""
import shutil

import pytest

from minitransformer.cli import run_cli
from cli_helpers import one_line_error  # noqa: E402
import minitransformer.cli.sample as cli_sample
import minitransformer.molecules.sampling as sampling

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")

# 400 drug-like molecules in --quick: 320 for training, 10 steps of 32 per epoch, 2 epochs
BASE = ["--quick", "--quiet", "--data", "druglike", "--pretrain-data", "none", "--samples", "10"]
STEPS_PER_EPOCH = 10


def interrupt_training_step(monkeypatch, k: int):
    """Ctrl-C in the ``k``-th training step (1-based): ``k - 1`` steps are done."""
    from minitransformer.train import tasks
    real, calls = tasks.LMTask.loss, []

    def loss(self, model, batch, rng=None):
        calls.append(1)
        if len(calls) == k:
            raise KeyboardInterrupt
        return real(self, model, batch, rng)
    monkeypatch.setattr(tasks.LMTask, "loss", loss)


def test_ctrl_c_mid_epoch_names_that_epoch_and_step(molecules, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    interrupt_training_step(monkeypatch, STEPS_PER_EPOCH + 3)
    assert run_cli(molecules.main, BASE + ["--out", str(out)]) == 130
    line = one_line_error(capsys)
    assert line.startswith(f"interrupted training at epoch 2 (step {STEPS_PER_EPOCH + 2});"), line
    assert f"last good checkpoint: {out / 'last.npz'} (end of epoch 1, step {STEPS_PER_EPOCH})" in line
    assert "--resume" in line
    assert not (out / "samples.smi").exists() and not (out / "metrics.json").exists(), \
        "an interrupted run does not go on to sampling"


def test_ctrl_c_while_the_epoch_checkpoint_is_written_names_that_epoch(molecules, tmp_path, capsys, monkeypatch):
    """Epoch 1 has ended (its metrics are in the history) but its checkpoint is not on disk yet."""
    import minitransformer.train.checkpointing as train  # where the trainer's save_checkpoint is looked up
    real = train.save_checkpoint

    def save(path, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(train, "save_checkpoint", save)
    out = tmp_path / "run"
    assert run_cli(molecules.main, BASE + ["--out", str(out)]) == 130
    line = one_line_error(capsys)
    assert line.startswith(f"interrupted training at the end of epoch 1 (step {STEPS_PER_EPOCH}), before its "
                           "checkpoint was saved;"), line
    assert "epoch 2" not in line and "last good checkpoint: none saved yet" in line
    monkeypatch.setattr(train, "save_checkpoint", real)


def test_ctrl_c_while_pretraining_stops_the_run(molecules, tmp_path, capsys, monkeypatch):
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    extra = tmp_path / "extra.smi"  # a small pretraining set: rewriting all 10,000 drug-like ones takes seconds
    extra.write_text("\n".join(read_smiles(druglike_path(), header=False)[-200:]) + "\n")
    out = tmp_path / "run"
    interrupt_training_step(monkeypatch, 3)
    argv = ["--quick", "--quiet", "--data", "druglike", "--pretrain-data", str(extra), "--out", str(out)]
    assert run_cli(molecules.main, argv) == 130
    line = one_line_error(capsys)
    assert line.startswith("interrupted pretraining at epoch 1 (step 2);"), line
    assert not (out / "config.json").exists() and not (out / "last.npz").exists(), \
        "Ctrl-C while pretraining must not start the second phase"


def test_ctrl_c_after_training_names_the_last_checkpoint(molecules, finished_molecules_run, tmp_path, capsys,
                                                        monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(finished_molecules_run[1], out)
    (out / "metrics.json").unlink()

    def sample(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(sampling, "sample_smiles", sample)
    assert run_cli(molecules.main, BASE + ["--out", str(out), "--resume"]) == 130  # trained already: samples at once
    line = one_line_error(capsys)
    assert line.startswith(f"interrupted after training (epoch 2, step {2 * STEPS_PER_EPOCH})"), line
    assert f"{out / 'last.npz'} (end of epoch 2, step {2 * STEPS_PER_EPOCH})" in line
    assert not (out / "metrics.json").exists()


def test_ctrl_c_before_training_and_in_a_subcommand(molecules, tmp_path, capsys, monkeypatch, tiny_checkpoints):
    import minitransformer.chem.datasets.lm_data as lm_data

    def stop(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(lm_data, "prepare_smiles", stop)
    assert run_cli(molecules.main, BASE + ["--out", str(tmp_path / "run")]) == 130
    assert one_line_error(capsys) == "interrupted before training started; nothing was saved"
    monkeypatch.setattr(cli_sample, "sample_smiles", stop)
    target = tmp_path / "s.smi"
    assert run_cli(molecules.main, ["sample", str(tiny_checkpoints["lm"]), "--out",
                                    str(target)]) == 130
    assert one_line_error(capsys) == "interrupted; no file was written" and not target.exists()


def test_a_second_sigterm_while_the_first_is_reported_is_noted_not_raised(capsys, monkeypatch):
    """``pkill`` or a batch system signals every process of a data-parallel run, some of them
    twice: a SIGTERM that arrives while the first is reported neither cuts the report short
    nor prints a traceback."""
    import os
    import signal
    import minitransformer.cli.errors as errors

    def report_with_a_second_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, mid-report
        return "interrupted at the last step"

    def main(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the first SIGTERM did not stop the command")

    monkeypatch.setattr(errors, "interrupt_message", report_with_a_second_sigterm)
    assert run_cli(main, []) == 143
    assert capsys.readouterr().err.strip() == "terminated (SIGTERM): interrupted at the last step"


def _as_from_a_terminal():
    """The child starts as a command typed at a terminal does: Ctrl-C at its default, not blocked. A
    test worker may hand on SIGINT ignored or blocked (whatever an earlier test left), and a command
    started with SIGINT ignored keeps ignoring it, by design (a background job, ``nohup``)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: The child writes to file descriptor {fd} that the interpreter has started (its own ``site`` imported:
#: a Ctrl-C before that is the interpreter's "Fatal Python error", before any of our code runs), then
#: runs the command as ``python -m minitransformer`` does.
_STARTED_THEN_RUN = ("import os, runpy; os.write({fd}, b'1'); os.close({fd}); "
                     "runpy.run_module('minitransformer', run_name='__main__', alter_sys=True)")


@pytest.mark.parametrize("delay", [0.15, 0.4, 0.8])
def test_ctrl_c_while_the_command_starts_is_one_line_and_status_130(tmp_path, delay):
    """A Ctrl-C during the first second of the command (its imports) is answered in one line, never
    with a traceback; the second is counted from the interpreter's start, which a loaded machine delays."""
    import os
    import select
    import signal
    import subprocess
    import sys
    import time
    env = {k: v for k, v in os.environ.items() if k != "MINITRANSFORMER_DEBUG"}
    started, child_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-c", _STARTED_THEN_RUN.format(fd=child_end), "train", "lm",
                                "--quick", "--out", str(tmp_path / "run")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                               preexec_fn=_as_from_a_terminal, pass_fds=(child_end,))
    os.close(child_end)
    try:
        ready, _, _ = select.select([started], [], [], 60)
        assert ready and os.read(started, 1) == b"1", "the child never started"
    finally:
        os.close(started)
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, (process.returncode, err[-2000:])
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]


def test_the_package_imports_nothing_heavy_until_it_is_used():
    """What lets the command answer an early Ctrl-C: ``import minitransformer`` loads no NumPy; its layers and
    optimizers come on first use."""
    import subprocess
    import sys
    code = ("import sys, minitransformer; assert 'numpy' not in sys.modules, 'numpy at import'; "
            "import minitransformer.console; assert 'numpy' not in sys.modules; "
            "print(minitransformer.nn.Linear.__name__, minitransformer.optim.Adam.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["Linear", "Adam"], done.stderr


def test_a_command_started_with_ctrl_c_ignored_keeps_ignoring_it(tmp_path):
    """A background job of a script (or nohup) starts with SIGINT ignored: the start-up guard leaves that alone."""
    import signal
    import subprocess
    import sys
    import time
    process = subprocess.Popen([sys.executable, "-m", "minitransformer", "train", "lm", "--quick", "--data",
                                "druglike", "--samples", "10", "--pretrain-data", "none", "--ranks", "1",
                                "--out", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    for delay in (0.3, 1.5):
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
