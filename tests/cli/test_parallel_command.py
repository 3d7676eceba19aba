"""``mpiexec -n 2 minitransformer train ...``: one data-parallel run, whose files and
output are rank 0's, and whose errors are one line with rank 0's exit status.
Skipped without mpi4py or mpiexec (CI installs them with the [parallel] extra)."""
from __future__ import annotations

import json
import os
import re
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
    # a resume with other settings is refused once, by rank 0
    refused = _mpi(tmp_path, *args, "--resume", "--lr", "0.01")
    assert refused.returncode == 2 and refused.stderr.count("error:") == 1, refused.stderr
    assert "settings.lr" in refused.stderr


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
    signal, one line from rank 0 naming the checkpoint to resume from; --resume trains the epochs left."""
    argv = [MPIEXEC, "-n", "2", sys.executable, "-m", "minitransformer", "train", "lm", "--quick", "--epochs", "25",
            "--data", "druglike", "--out", "run", "--samples", "10"]  # 25 epochs: seconds left when signalled
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
    if sig != signal.SIGINT:
        return  # how the run resumes does not depend on the signal that stopped it: checked once
    finished = len(json.loads(history.read_text()))
    resumed = subprocess.run(argv + ["--resume"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [row["epoch"] for row in json.loads(history.read_text())] == list(range(1, 26)), "every epoch once"
    first = int(re.search(r"^epoch (\d+):", resumed.stdout, re.M).group(1))
    assert first == finished + 1, "the resumed run starts after the last finished epoch"


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


def _own(cwd: Path, *argv: str):
    """The command as a user starts it, without mpiexec: it starts its ranks itself."""
    env = {k: v for k, v in _env().items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                        "MINITRANSFORMER_THREADS")}
    return subprocess.run([sys.executable, "-m", "minitransformer", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _weights(path: Path) -> dict:
    import numpy as np
    with np.load(path) as z:
        return {k: z[k] for k in z.files if not k.startswith("__")}


def test_the_command_starts_its_own_ranks_and_trains_as_mpiexec_does(tmp_path):
    """``--ranks 2`` without mpiexec: the first line says what runs, rank 0 alone prints and
    writes, provenance.json records two ranks, and the weights are those of the same run
    started with ``mpiexec -n 2`` (and, the loss being normalised over the global batch, of
    one process, to rounding)."""
    import numpy as np
    args = ["train", "lm", "--quick", "--data", "druglike", "--samples", "20", "--pretrain-data", "none"]
    own = _own(tmp_path, *args, "--ranks", "2", "--out", "own")
    assert own.returncode == 0, own.stderr[-3000:]
    assert own.stdout.startswith("ranks: 2 data-parallel processes x "), own.stdout[:300]
    assert own.stdout.count("model: ") == 1 and "2 data-parallel ranks, each:" in own.stdout
    import json
    assert json.loads((tmp_path / "own" / "provenance.json").read_text())["versions"]["runtime"]["ranks"] == 2
    typed = _mpi(tmp_path, *args, "--out", "typed")
    one = _own(tmp_path, *args, "--ranks", "1", "--out", "one")
    assert typed.returncode == 0 and one.returncode == 0, (typed.stderr + one.stderr)[-3000:]
    assert one.stdout.startswith("ranks: 1 process, ")
    a, b, c = (_weights(tmp_path / name / "last.npz") for name in ("own", "typed", "one"))
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, atol=1e-7, err_msg=f"{key}: own ranks vs mpiexec")
        np.testing.assert_allclose(a[key], c[key], rtol=2e-3, atol=2e-4, err_msg=f"{key}: 2 ranks vs 1 process")


def test_ranks_that_cannot_run_are_refused_before_work_and_auto_says_why_it_chose_one(tmp_path):
    done = _own(tmp_path, "train", "property", "--quick", "--ranks", "2", "--out", "prop")
    assert done.returncode == 2 and done.stderr.count("error:") == 1, done.stderr
    assert "--ranks 2: train property cannot run data-parallel" in done.stderr and not (tmp_path / "prop").exists()
    quick = _own(tmp_path, "train", "seq2seq", "--quick", "--out", "s2s", "--examples", "0")
    assert quick.returncode == 0, quick.stderr[-2000:]
    assert quick.stdout.splitlines()[0].startswith("ranks: 1 process") and "--quick" in quick.stdout.splitlines()[0]
