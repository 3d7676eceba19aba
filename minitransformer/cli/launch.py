"""``--ranks``: a training command starts its own data-parallel ranks, as ``torchrun`` does.

On a CPU, two single-thread processes that share each batch train faster than one
process with two BLAS threads: a small model's step is mostly Python dispatch between
small operations, which a second thread does not share and a second process does
(``benchmarks/RESULTS.md``, "2 processes x 1 thread": 1.14-1.34x on 2 cores). The
ranks are the data-parallel training of :mod:`minitransformer.distributed`, proven to
train as one process does (the loss is normalised over the global batch), so
``minitransformer train lm`` with no options runs as ranks where that is possible:

* ``--ranks auto`` (the default): 2 ranks on a machine with 2 or more cores, when the
  command can run data-parallel (``train lm`` and ``train seq2seq``, not ``train
  property``, not ``--quick``, whose seconds would go on starting MPI), mpi4py and an
  ``mpiexec`` are installed, and the backend is NumPy; otherwise one process, and the
  first line says why;
* ``--ranks N``: N ranks, each with ``cores // N`` BLAS threads (refused in one line
  where they cannot run, or where N is more than the cores); ``--ranks 1``: one process, as before.

:func:`launch` decides before any work (the command line is checked first) and, to
start ranks, replaces this process by ``mpiexec -n N python -m minitransformer ...``
with the same arguments: Ctrl-C, SIGTERM, ``--resume`` and the one run per folder
behave as under an ``mpiexec`` the user typed. ``MINITRANSFORMER_RANKS`` in the ranks'
environment says they were started this way.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Sequence

from minitransformer.cli.ranks import LAUNCHED  # the variable the started ranks carry

#: The training commands whose loss is a sum over tokens, so that ranks can share a batch.
DATA_PARALLEL_KINDS = ("lm", "seq2seq")
#: What ``--ranks auto`` starts on a machine with at least this many cores (measured on 2).
AUTO_RANKS = 2


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a training command runs: ``ranks`` processes of ``threads`` BLAS threads each, and why."""

    ranks: int
    threads: int
    why: str

    def line(self) -> str:
        """The first line of a training run."""
        if self.ranks == 1:
            return f"ranks: 1 process, {self.threads} BLAS thread{'s' * (self.threads != 1)} ({self.why})"
        return (f"ranks: {self.ranks} data-parallel processes x {self.threads} BLAS thread"
                f"{'s' * (self.threads != 1)} ({self.why}; --ranks 1 for one process)")


def find_mpiexec() -> str | None:
    """``mpiexec`` beside this Python (a virtual environment with MPICH's wheel) or on PATH."""
    return shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def _mpi_missing() -> str | None:
    """Why ranks cannot start here (mpi4py or mpiexec missing), or None."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed: pip install 'minitransformer[parallel]'"
    if find_mpiexec() is None:
        return "no mpiexec beside this Python or on PATH: pip install mpich"
    return None


def plan(args, n_cores: int | None = None, mpi_missing=_mpi_missing) -> Plan:
    """The ranks and threads of the training command ``args`` (parsed); a ValueError (exit
    status 2) for a ``--ranks N`` that cannot run here, naming why and what to do."""
    from minitransformer.cpus import blas_threads_asked, usable_cpus
    n_cores = usable_cpus() if n_cores is None else n_cores
    one_process = blas_threads_asked() or n_cores  # a single process's BLAS threads
    asked = getattr(args, "ranks", "auto")
    if asked != "auto":
        if asked > 1:
            refusal = _refusal(args, mpi_missing)
            if refusal:
                raise ValueError(f"--ranks {asked}: {refusal}; pass --ranks 1 (or leave --ranks out)")
        if asked > n_cores:
            raise ValueError(f"--ranks {asked}: this process may use {n_cores} core{'s' * (n_cores != 1)}, and ranks "
                             "beyond one a core only share them and wait for each other (4 ranks on 2 cores trained "
                             f"11 times slower than 2); pass --ranks {n_cores} or fewer, or leave --ranks out")
        return Plan(asked, one_process if asked == 1 else max(1, n_cores // asked), "--ranks")
    if n_cores < 2:
        return Plan(1, 1, "one core")
    refusal = _refusal(args, mpi_missing, auto=True)
    if refusal:
        return Plan(1, one_process, refusal)
    return Plan(AUTO_RANKS, max(1, n_cores // AUTO_RANKS),
                f"{n_cores} cores: two single-thread processes train faster than one with two threads")


def _refusal(args, mpi_missing, auto: bool = False) -> str | None:
    """Why this command cannot run as ranks (None: it can)."""
    if args.kind not in DATA_PARALLEL_KINDS:
        return f"train {args.kind} cannot run data-parallel (its loss is not a sum over tokens)"
    if getattr(args, "backend", None) == "cupy" or os.environ.get("MINITRANSFORMER_BACKEND", "") == "cupy":
        return "ranks are for CPU cores; on a GPU one process runs"
    if auto and args.quick:
        return "--quick: starting MPI would take longer than the run"
    return mpi_missing()


def launch(args, argv: Sequence[str]) -> None:
    """For a ``train`` command started without mpiexec: print its plan and, for more than one
    rank, replace this process by mpiexec starting the ranks (this call then never returns)."""
    from minitransformer.distributed import launched_by_mpiexec
    if getattr(args, "command", None) != "train" or os.environ.get(LAUNCHED) or launched_by_mpiexec():
        return  # another command, or a rank: the plan was printed by the process that started it
    chosen = plan(args)
    print(chosen.line(), flush=True)
    if chosen.ranks == 1:
        return
    threads = str(chosen.threads)
    root = Path(__file__).resolve().parents[2]  # a checkout run without installing: the ranks need it on the path
    checkout = (root / "setup.cfg").is_file()
    path = os.pathsep.join(p for p in (str(root) if checkout else "", os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
               MINITRANSFORMER_THREADS=threads, MINITRANSFORMER_WORKERS=threads, PYTHONPATH=path,
               **{LAUNCHED: str(chosen.ranks)})
    mpiexec = find_mpiexec()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(mpiexec, [mpiexec, "-n", str(chosen.ranks), sys.executable, "-m", "minitransformer", *argv], env)


def check_world(args) -> None:
    """Refuse a ``--ranks N`` that the ranks running this command do not match (a program that
    calls ``main`` directly, or ``mpiexec -n M`` with another N): one line, exit status 2."""
    from minitransformer.cli.ranks import check_world_formed
    from minitransformer.distributed import world_size
    check_world_formed()  # first: a world that did not form as launched
    running = world_size()
    asked = getattr(args, "ranks", "auto")
    if asked == "auto":
        return
    if asked != running:
        raise ValueError(f"--ranks {asked}, but {running} rank{'s run' if running != 1 else ' runs'} this command: the "
                         f"minitransformer command starts its ranks itself (under mpiexec -n M, pass --ranks M "
                         "or leave --ranks out)")


def ranks_argument(text: str):
    """``type=`` of ``--ranks``: ``auto`` or a whole number >= 1."""
    import argparse
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {text!r}")
    return value
