"""How a training command chooses its ranks (``--ranks``): the plan, decided before any work."""
import argparse
from types import SimpleNamespace

import pytest

from minitransformer.cli import launch


def _args(kind="lm", ranks="auto", quick=False, backend=None):
    return SimpleNamespace(command="train", kind=kind, ranks=ranks, quick=quick, backend=backend)


def _mpi(missing=None):
    return lambda: missing


def test_auto_takes_two_single_thread_ranks_on_two_cores_where_it_can():
    plan = launch.plan(_args(), n_cores=2, mpi_missing=_mpi())
    assert (plan.ranks, plan.threads) == (2, 1) and plan.line().startswith("ranks: 2 data-parallel processes x 1")
    assert launch.plan(_args("seq2seq"), n_cores=8, mpi_missing=_mpi()).threads == 4


@pytest.mark.parametrize("args, cores, missing, why", [
    (_args(), 1, None, "one core"),
    (_args("property"), 2, None, "cannot run data-parallel"),
    (_args(quick=True), 2, None, "--quick"),
    (_args(backend="cupy"), 2, None, "on a GPU"),
    (_args(), 2, "mpi4py is not installed: pip install 'minitransformer[parallel]'", "mpi4py is not installed"),
])
def test_auto_falls_back_to_one_process_and_says_why(args, cores, missing, why, monkeypatch):
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    plan = launch.plan(args, n_cores=cores, mpi_missing=_mpi(missing))
    assert plan.ranks == 1 and why in plan.line(), plan.line()
    assert plan.threads == cores  # one process keeps every core for BLAS
    if cores > 1:  # unless the environment says otherwise
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
        assert launch.plan(args, n_cores=cores, mpi_missing=_mpi(missing)).threads == 1


def test_an_explicit_count_that_cannot_run_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match=r"--ranks 2: mpi4py is not installed.*pass --ranks 1"):
        launch.plan(_args(ranks=2), n_cores=2, mpi_missing=_mpi("mpi4py is not installed: pip install x"))
    with pytest.raises(ValueError, match="--ranks 3: train property cannot run data-parallel"):
        launch.plan(_args("property", ranks=3), n_cores=4, mpi_missing=_mpi())
    assert launch.plan(_args(ranks=1), n_cores=2, mpi_missing=_mpi("no mpi")).ranks == 1
    assert launch.plan(_args(ranks=3), n_cores=6, mpi_missing=_mpi()).threads == 2


@pytest.mark.parametrize("ranks", [3, 4, 64])
def test_more_ranks_than_cores_are_refused_naming_how_many_can_run(ranks):
    """Ranks beyond the cores only wait for each other (4 on 2 cores trained 11x slower): never started silently."""
    with pytest.raises(ValueError, match=rf"--ranks {ranks}: this process may use 2 cores.*pass --ranks 2 or fewer"):
        launch.plan(_args(ranks=ranks), n_cores=2, mpi_missing=_mpi())
    assert launch.plan(_args(ranks=2), n_cores=2, mpi_missing=_mpi()).ranks == 2


def test_the_ranks_option_reads_auto_or_a_positive_whole_number():
    assert launch.ranks_argument("auto") == "auto" and launch.ranks_argument(" AUTO ") == "auto"
    assert launch.ranks_argument("3") == 3
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError):
            launch.ranks_argument(bad)


def test_a_program_calling_main_with_ranks_is_told_to_use_mpiexec(tmp_path, capsys):
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    assert run_cli(main, ["train", "lm", "--quick", "--ranks", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--ranks 2, but 1 rank runs this command" in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_one_rank_trains_the_weights_of_the_run_where_mpi_is_absent(tmp_path):
    """``--ranks 1`` is the single process the command runs without MPI: the same weights, bit for
    bit, as the run in a Python that cannot import mpi4py."""
    import os
    import subprocess
    import sys

    import numpy as np
    blocked = tmp_path / "no_mpi" / "mpi4py"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('mpi4py is hidden for this test')\n")
    argv = ["train", "lm", "--quick", "--data", "druglike", "--samples", "10", "--pretrain-data", "none"]

    def run(out, *extra, path=None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p))
        done = subprocess.run([sys.executable, "-m", "minitransformer", *argv, *extra, "--out", out], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        with np.load(tmp_path / out / "last.npz") as z:
            return {k: z[k] for k in z.files if not k.startswith("__")}, done.stdout
    one, said = run("one", "--ranks", "1")
    plain, _ = run("plain", path=str(blocked.parent))
    hidden = subprocess.run([sys.executable, "-c", "import mpi4py"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(blocked.parent)))
    assert hidden.returncode != 0 and "hidden for this test" in hidden.stderr  # the second run had no MPI
    assert said.startswith("ranks: 1 process")
    assert one.keys() == plain.keys()
    for key in one:
        np.testing.assert_array_equal(one[key], plain[key], err_msg=f"{key}: --ranks 1 against the run without MPI")


def _command(tmp_path, argv, **variables):
    """``python -m minitransformer ARGV`` with ``variables`` added to a clean environment (no launcher's)."""
    import os
    import subprocess
    import sys
    from minitransformer.distributed import LAUNCHER_VARIABLES
    env = {k: v for k, v in os.environ.items() if k not in {n for r, s, c in LAUNCHER_VARIABLES for n in (r, s, *c)}
           and k != launch.LAUNCHED}
    return subprocess.run([sys.executable, "-m", "minitransformer", *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=dict(env, **variables))


@pytest.mark.parametrize("variables", [
    {"PMI_RANK": "1"}, {"PMIX_RANK": "1"}, {"PMI_RANK": "1", "PMI_SIZE": "2"}, {"OMPI_COMM_WORLD_RANK": "2"},
    {"PMI_RANK": "0", "PMI_SIZE": "4"}], ids=lambda v: ",".join(v))
def test_launcher_variables_with_no_launcher_behind_them_are_refused_before_any_work(tmp_path, variables):
    """A rank inherited from another job's environment neither silences the command nor drops its outputs."""
    done = _command(tmp_path, ["train", "lm", "--quick", "--out", "run"], **variables)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "--ranks 1" in done.stderr and next(iter(variables)) in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, said", [(["score", "missing.smi"], "missing.smi"),
                                        (["train", "lm", "--quick", "--bogus"], "--bogus"),
                                        (["sample", "--bogus"], "checkpoint")])
@pytest.mark.parametrize("variables", [{"PMIX_RANK": "1"}, {"PMI_RANK": "1", "PMI_SIZE": "2"}],
                         ids=lambda v: ",".join(v))
def test_an_inherited_rank_never_silences_a_usage_error(tmp_path, argv, said, variables):
    done = _command(tmp_path, argv, **variables)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and said in done.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_ranks_that_another_mpi_started_as_worlds_of_one_are_refused_once_naming_ranks_1(tmp_path, rank):
    """Open MPI's mpiexec starting an MPICH-built mpi4py: each process is a world of one, and the launcher's
    rank 0 says so in one line (the others exit alike, silent) instead of each running the whole command."""
    pytest.importorskip("mpi4py")
    done = _command(tmp_path, ["train", "lm", "--quick", "--out", "run"], OMPI_COMM_WORLD_RANK=str(rank),
                    OMPI_COMM_WORLD_SIZE="2", OMPI_MCA_ess_base_jobid="7", **{launch.LAUNCHED: "2"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if rank == 0:
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        assert "world of 1" in lines[0] and "--ranks 1" in lines[0] and "another MPI" in lines[0]
    else:
        assert lines == [], done.stderr
    assert not (tmp_path / "run").exists()


def test_the_commands_own_rank_variable_alone_is_refused_naming_it(tmp_path):
    done = _command(tmp_path, ["train", "lm", "--quick", "--out", "run"], **{launch.LAUNCHED: "2"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{launch.LAUNCHED}=2 is set, but no mpiexec started this process" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_announced_world_needs_a_rank_a_size_that_holds_it_and_a_launcher(monkeypatch):
    from minitransformer.distributed import LAUNCHER_VARIABLES, announced_world, launcher_rank
    for rank_var, size_var, connections in LAUNCHER_VARIABLES:
        for name in (rank_var, size_var, *connections):
            monkeypatch.delenv(name, raising=False)
    assert announced_world() is None and launcher_rank() == 0
    monkeypatch.setenv("PMI_RANK", "1")
    assert announced_world() is None and launcher_rank() == 0  # a rank alone
    monkeypatch.setenv("PMI_SIZE", "2")
    assert announced_world() is None  # no launcher connected
    monkeypatch.setenv("PMI_FD", "9")
    assert announced_world() == (1, 2) and launcher_rank() == 1
    monkeypatch.setenv("PMI_SIZE", "1")
    assert announced_world() is None  # a rank the world cannot hold
