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
