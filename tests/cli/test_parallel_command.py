"""``mpiexec -n 2 minitransformer train ...``: one data-parallel run, whose files and
output are rank 0's, and whose errors are one line with rank 0's exit status.
Skipped without mpi4py or mpiexec (CI installs them with the [parallel] extra)."""
from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="needs mpi4py (pip install 'minitransformer[parallel]')")
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
pytestmark = [
    pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on PATH or beside this Python (pip install mpich)"),
    pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                       reason="the command under mpiexec is checked once, in the fast-kernel pass"),
]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MINITRANSFORMER_THREADS="1")
    env.pop("MINITRANSFORMER_DEBUG", None)
    return env


def _mpi(cwd: Path, *argv: str):
    return subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minitransformer", *argv], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


def test_train_lm_on_two_ranks_writes_once_and_prints_once(tmp_path):
    args = ["train", "lm", "--quick", "--data", "druglike", "--out", "run", "--samples", "30"]
    done = _mpi(tmp_path, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("last.npz", "best.npz", "history.csv", "samples.smi", "metrics.json", "provenance.json"):
        assert (tmp_path / "run" / name).is_file(), name
    assert done.stdout.count("model: ") == 1, done.stdout  # rank 0 alone prints
    assert not [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith("old-")]
    assert len((tmp_path / "run" / "samples.smi").read_text().splitlines()) == 30
    # the folder is claimed once, by rank 0: a second run is refused with one line, status 2
    again = _mpi(tmp_path, *args)
    assert again.returncode == 2 and again.stderr.count("error:") == 1 and "already holds a run" in again.stderr
    # and --resume continues it on both ranks
    resumed = _mpi(tmp_path, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_train_property_is_refused_before_work(tmp_path):
    done = _mpi(tmp_path, "train", "property", "--quick", "--out", "prop")
    assert done.returncode == 2 and done.stderr.count("error:") == 1, done.stderr
    assert "cannot run data-parallel" in done.stderr and not (tmp_path / "prop").exists()


def test_an_error_on_rank_0_outside_training_stops_every_rank(tmp_path):
    """Only rank 0 writes, so only rank 0 can fail to write config.json (here a folder
    stands in its way). The other rank, already waiting in training's first all-reduce,
    must be stopped too: one error line, a non-zero status, no hang."""
    args = ["train", "lm", "--quick", "--data", "druglike", "--out", "run", "--samples", "30"]
    assert _mpi(tmp_path, *args).returncode == 0
    (tmp_path / "run" / "config.json").unlink()
    (tmp_path / "run" / "config.json").mkdir()
    (tmp_path / "run" / "config.json" / "x").write_text("in the way")
    done = _mpi(tmp_path, *args, "--resume")
    assert done.returncode != 0 and "config.json" in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("error: ") == 1, done.stderr[-2000:]


@pytest.mark.parametrize("sig, status, said", [(signal.SIGINT, 130, ""), (signal.SIGTERM, 143, "terminated (SIGTERM): ")])
def test_a_signal_to_mpiexec_during_training_stops_every_rank_at_one_step(tmp_path, sig, status, said):
    """mpiexec hands Ctrl-C (or SIGTERM) to every rank, each at its own moment; they agree on
    one step to stop at, and the command ends as in one process: the exit status of the
    signal, one line from rank 0 naming the checkpoint to resume from, and --resume works."""
    argv = [MPIEXEC, "-n", "2", sys.executable, "-m", "minitransformer", "train", "lm", "--quick", "--epochs", "400",
            "--data", "druglike", "--out", "run", "--samples", "10"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    history = tmp_path / "run" / "history.json"
    deadline = time.monotonic() + 300
    while not history.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # phase 2 has ended an epoch: training is under way
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    lines = [line for line in err.splitlines() if not line.startswith("[mpiexec@")]  # mpiexec's own notice
    assert proc.returncode == status, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith(said + "interrupted training at "), err[-2000:]
    assert "continue with --resume" in lines[0] and "error" not in err, err[-2000:]
    assert not list((tmp_path / "run").glob(".*.tmp")) and not (tmp_path / "run" / ".lock").exists()
    resumed = subprocess.run(argv + ["--resume", "--max-minutes", "0.01"], cwd=tmp_path, env=_env(),
                             capture_output=True, text=True, timeout=600)  # a short new time budget: ends soon
    assert resumed.returncode == 0, resumed.stderr[-2000:]


def test_a_diverged_run_under_mpiexec_says_so_once(tmp_path):
    """Every rank computes the same loss and stops at the same step: rank 0 alone reports it,
    every rank ends normally (no MPI_Abort), and the status is 1 as in one process."""
    done = _mpi(tmp_path, "train", "lm", "--quick", "--data", "druglike", "--out", "run", "--lr", "1e308")
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count("error:") == 1 and "non-finite" in done.stderr, done.stderr[-2000:]
    assert "MPI_Abort" not in done.stderr and "rank 1" not in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "run" / ".lock").exists()


def test_a_bad_argument_under_mpiexec_is_one_line(tmp_path):
    """Every rank parses the same command line and fails alike, before the ranks join:
    rank 0 alone says so (as mpiexec announced the ranks), and no rank waits."""
    done = _mpi(tmp_path, "train", "lm", "--quick", "--out", "run", "--lr", "-1")
    assert done.returncode == 2 and done.stderr.count("error:") == 1 and "--lr" in done.stderr, done.stderr
    done = _mpi(tmp_path, "train", "lm", "--quick", "--out", "run", "--data", str(tmp_path / "none.smi"))
    assert done.returncode == 2 and done.stderr.count("error:") == 1 and "none.smi" in done.stderr, done.stderr
