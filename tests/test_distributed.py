"""Data-parallel training (minitransformer.distributed) equals one process.

Each test starts ``tests/distributed_run.py`` under ``mpiexec -n 2`` and as one plain
process, trains 10 steps of the global batch (8 examples of different lengths, so
every shard is padded differently) in float64, and compares every weight: at most
1e-12 relative to the tensor's largest entry. With 2 ranks, each rank reads 4 of
the 8 examples, and the loss is normalised by the token count of all 8: the same
loss and the same gradient as one process reading all 8. Skipped without mpi4py or
mpiexec (CI installs them with the [parallel] extra).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
RUN = HERE / "distributed_run.py"

pytest.importorskip("mpi4py", reason="data-parallel tests need mpi4py (pip install 'minitransformer[parallel]')")


def _mpiexec() -> str:
    found = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("no mpiexec on PATH or beside this Python (pip install mpich)")
    return found


def _run(ranks: int, *args, cwd: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MINITRANSFORMER_THREADS="1")
    cmd = [sys.executable, str(RUN), *map(str, args)]
    if ranks > 1:
        cmd = [_mpiexec(), "-n", str(ranks), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"


# The keys' bias has an exactly zero gradient (adding one vector to every key adds the
# same number to all logits of a query, which the softmax ignores), so its Adam steps
# are rounding noise over eps: at most lr * 1e-15 / eps = 3e-10 per step, 10 steps.
# Two correct runs that add in different orders move it differently within that.
KEY_BIAS_BOUND = 10 * 3e-3 * 1e-15 / 1e-8


def _parts(name: str, x):
    """A weight's parts to compare: a fused projection's bias (q | k | v) in three."""
    if name.endswith("qkv.bias"):
        n = x.shape[0] // 3
        return {f"{name}[q]": x[:n], f"{name}[k]": x[n:2 * n], f"{name}[v]": x[2 * n:]}
    return {name: x}


def _assert_same_weights(a: Path, b: Path, what: str) -> None:
    """Every weight within 1e-12 of the tensor's largest entry, but the keys' bias
    (zero gradient: see KEY_BIAS_BOUND), which must stay that close to 0 in both runs."""
    wa, wb = np.load(a), np.load(b)
    assert sorted(wa.files) == sorted(wb.files)
    worst = (0.0, None)
    for name in wa.files:
        assert wa[name].dtype == np.float64, f"{name} is {wa[name].dtype}: the comparison needs float64"
        for part, x in _parts(name, wa[name]).items():
            y = _parts(name, wb[name])[part]
            if part.endswith("[k]"):
                assert max(np.abs(x).max(), np.abs(y).max()) <= KEY_BIAS_BOUND, f"{what}: {part} is not noise"
                continue
            err = float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-300))
            worst = max(worst, (err, part))
    assert worst[0] <= 1e-12, f"{what}: {worst[1]} differs by {worst[0]:.3g} relative (largest error)"


@pytest.mark.parametrize("model", ["lm", "s2s"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_two_ranks_with_half_batches_equal_one_rank(tmp_path, model, smoothing):
    _run(1, model, 10, tmp_path / "one.npz", "--smoothing", smoothing, cwd=tmp_path)
    _run(2, model, 10, tmp_path / "two.npz", "--smoothing", smoothing, cwd=tmp_path)
    _assert_same_weights(tmp_path / "two.npz", tmp_path / "one.npz", f"{model}, smoothing {smoothing}")
    # and the weights moved: the comparison is not between two untrained models
    _run(1, model, 1, tmp_path / "start.npz", "--smoothing", smoothing, cwd=tmp_path)
    start, end = np.load(tmp_path / "start.npz"), np.load(tmp_path / "one.npz")
    assert max(float(np.abs(start[n] - end[n]).max()) for n in start.files) > 1e-3


@pytest.mark.parametrize("model", ["lm", "s2s"])
def test_two_ranks_divide_by_the_epochs_mean_tokens_as_one_rank(tmp_path, model):
    """TrainConfig.loss_norm "epoch": every rank divides its tokens' loss by the epoch's mean
    tokens per global batch (the plan is the same on every rank), so the ranks still make one
    process's steps; and those steps are not the mean-per-batch ones."""
    _run(1, model, 10, tmp_path / "one.npz", "--loss-norm", "epoch", cwd=tmp_path)
    _run(2, model, 10, tmp_path / "two.npz", "--loss-norm", "epoch", cwd=tmp_path)
    _assert_same_weights(tmp_path / "two.npz", tmp_path / "one.npz", f"{model}, loss_norm epoch")
    _run(1, model, 10, tmp_path / "batch.npz", cwd=tmp_path)
    epoch, batch = np.load(tmp_path / "one.npz"), np.load(tmp_path / "batch.npz")
    assert max(float(np.abs(epoch[n] - batch[n]).max()) for n in epoch.files) > 1e-6


def test_a_rank_without_examples_in_a_batch_still_joins_the_step(tmp_path):
    """41 examples in batches of 8: each epoch ends with a batch of one example, so on 2
    ranks rank 1 has none there; it adds a zero gradient and the weights still match."""
    _run(1, "lm", 14, tmp_path / "one.npz", "--examples", 41, cwd=tmp_path)
    _run(2, "lm", 14, tmp_path / "two.npz", "--examples", 41, cwd=tmp_path)
    _assert_same_weights(tmp_path / "two.npz", tmp_path / "one.npz", "41 examples")


def test_a_time_limit_stops_every_rank_at_the_same_step(tmp_path):
    """max_time is read from each rank's own clock; rank 0 starts 0.3 s late, so the
    ranks' clocks disagree. Rank 0's decision is every rank's: no rank waits forever
    for another in an all-reduce (the run finishes), and the ranks' weights agree."""
    _run(2, "lm", 100000, tmp_path / "timed.npz", "--max-time", 1.0, "--late", 0.3, "--epochs", 10000, cwd=tmp_path)
    steps = [(tmp_path / f"timed.npz.rank{r}.steps").read_text().split() for r in (0, 1)]
    assert steps[0] == steps[1] and steps[0][1] == "max_time", f"rank 0 stopped at {steps[0]}, rank 1 at {steps[1]}"


def test_dropout_ranks_draw_their_own_masks_and_stay_equal(tmp_path):
    """With dropout, each rank draws from RNG stream = its rank (checked in the run),
    and the all-reduced update keeps every rank's weights equal (checked bit for bit)."""
    _run(2, "lm", 6, tmp_path / "drop.npz", "--dropout", "0.2", cwd=tmp_path)
    assert (tmp_path / "drop.npz").is_file()


def test_resume_at_another_world_size_continues_exactly(tmp_path):
    """7 steps on 2 ranks (checkpoint mid-epoch), then 3 more on 1 rank, equal 10 on 1
    rank; and 7 on 1 rank then 3 on 2 ranks too."""
    _run(1, "lm", 10, tmp_path / "straight.npz", cwd=tmp_path)
    for first, second in ((2, 1), (1, 2)):
        out = tmp_path / f"run{first}{second}"
        _run(first, "lm", 7, tmp_path / "part.npz", "--out-dir", out, cwd=tmp_path)
        assert (out / "last.npz").is_file()
        _run(second, "lm", 10, tmp_path / f"resumed{first}{second}.npz", "--resume", out / "last.npz", cwd=tmp_path)
        _assert_same_weights(tmp_path / f"resumed{first}{second}.npz", tmp_path / "straight.npz",
                             f"{first} rank(s), then {second}")


def test_a_failing_rank_stops_every_rank_with_one_clear_line(tmp_path):
    """Rank 1 fails at its 4th step: both ranks stop at once (no hang in the next
    all-reduce), the error names the rank, and rank 0's folder holds only whole files."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MINITRANSFORMER_THREADS="1")
    cmd = [_mpiexec(), "-n", "2", sys.executable, str(RUN), "lm", "10", str(tmp_path / "w.npz"),
           "--out-dir", str(tmp_path / "run"), "--fail", "1", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode != 0
    assert "error: rank 1 of 2: RuntimeError: injected fault at step 4 (stopping every rank)" in done.stderr
    assert not (tmp_path / "w.npz").exists()
    leftovers = [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".") or p.suffix == ".tmp"] \
        if (tmp_path / "run").exists() else []
    assert leftovers == []


def test_the_launcher_rank_comes_from_mpich_open_mpi_or_pmix_and_is_0_without_mpiexec(monkeypatch):
    from minitransformer.distributed import LAUNCHER_VARIABLES, launcher_rank
    for rank_var, size_var, connections in LAUNCHER_VARIABLES:
        for name in (rank_var, size_var, *connections):
            monkeypatch.delenv(name, raising=False)
    assert launcher_rank() == 0
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_MCA_ess_base_jobid", "1")
    assert launcher_rank() == 3
    monkeypatch.setenv("PMI_RANK", "1")  # MPICH's names are read first
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setenv("PMI_FD", "9")
    assert launcher_rank() == 1
    monkeypatch.setenv("PMI_RANK", "x")  # not a number: the next launcher's
    assert launcher_rank() == 3
