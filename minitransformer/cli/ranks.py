"""``mpiexec -n R minitransformer train ...``: the command as one data-parallel run.

Every rank runs the same command on the same data. Training is shared
(:mod:`minitransformer.distributed`: each rank reads its shard of every batch);
everything around it is rank 0's: only rank 0 claims the run folder (the others
learn the outcome from it), writes files and prints. The other ranks (*followers*)
run with their standard output closed and every write of :mod:`.outputs` skipped,
and each training phase ends with all ranks waiting for rank 0's checkpoints, so
a follower never reads a file rank 0 is still writing. An error inside training
on any rank stops all of them (see :func:`minitransformer.train.fit`).

Started without mpiexec (or with one rank), nothing here changes anything.
"""
from __future__ import annotations

import os
import sys

#: The environment variable the ranks ``--ranks N`` starts carry (the number of ranks), so none starts more.
LAUNCHED = "MINITRANSFORMER_RANKS"
#: dp: the ranks joined (None: one process); joined: MPI's world was checked; may_run_as_ranks: the
#: command may run as ranks (``train``), so that before the ranks join only rank 0 reports its errors
_STATE = {"dp": None, "joined": False, "may_run_as_ranks": True}


def expect(command: str | None) -> None:
    """Say which command runs (the first word of the command line): only ``train`` runs as ranks,
    so any other command is never a follower, whatever its environment says."""
    _STATE["may_run_as_ranks"] = command in (None, "train")


def start():
    """Join the ranks if started by mpiexec with several; silence a follower's output.

    A process trusts the rank its launcher announced only inside a world of the size it was
    launched for: one that MPI started alone (an ``mpiexec`` of another MPI than mpi4py's,
    which starts every process as a world of one, or a rank variable inherited from another
    job) is refused in one line, before any work, instead of running the whole command as a
    silent follower or as a rank of a world that is not there."""
    from minitransformer import distributed
    check_world_formed()
    size = distributed.world_size()
    if _STATE["dp"] is None and size > 1:
        dp = distributed.DataParallel()
        _STATE["dp"] = dp
        if not dp.is_writer:
            sys.stdout = open(os.devnull, "w")  # progress and results come from rank 0 only
    return _STATE["dp"]


def check_world_formed(size: int | None = None) -> None:
    """Refuse (ValueError, exit status 2) a process whose environment announces another world
    than the one MPI forms: launcher variables with no launcher behind them (checked before MPI
    starts, which such variables can make abort), or a world of another ``size`` than ``--ranks
    N``'s launch (``MINITRANSFORMER_RANKS``) or the launcher announced (``size``: MPI's world,
    read here when not given)."""
    from minitransformer import distributed
    variables = distributed.rank_variables()
    asked = os.environ.get(LAUNCHED, "").strip()
    announced = distributed.announced_world()
    named = ([(LAUNCHED, asked)] if asked else []) + list(variables.items())
    said = ", ".join(f"{name}={value}" for name, value in named)
    if variables and announced is None:
        _STATE["joined"] = True  # no launcher: this process is alone, and says so itself
        raise ValueError(f"this process carries MPI launcher variables ({said}) but no launcher started it: they "
                         "come from another job's environment; unset them and run with --ranks 1 (or leave --ranks "
                         "out)")
    size = distributed.world_size() if size is None else size
    _STATE["joined"] = True  # MPI has formed the world: from here on it, not the environment, tells ranks apart
    expected = (int(asked) if asked.isdigit() else None) or (announced[1] if announced else None)
    if expected is None or expected == size:
        return
    if announced is None:  # MINITRANSFORMER_RANKS alone: set by hand, or inherited from a run of the command
        raise ValueError(f"{LAUNCHED}={asked} is set, but no mpiexec started this process (MPI runs it alone): the "
                         "command sets it for the ranks it starts itself; unset it")
    _STATE["joined"] = False  # each process is alone: the launcher's rank 0 alone says why, as before the ranks join
    raise ValueError(f"this process was started by an mpiexec as rank {announced[0]} of {expected} ({said}), but MPI "
                     f"runs it in a world of {size}: that mpiexec belongs to another MPI than mpi4py's; start the "
                     "command without mpiexec (it starts its own ranks; --ranks 1 for one process), or with "
                     "mpi4py's own mpiexec (pip install mpich)")


def current():
    """The DataParallel of this command, or None (one process)."""
    return _STATE["dp"]


def side_by_side() -> int:
    """The number of ranks (1: one process), once every rank has reached this point (a barrier):
    a time plan's probe then measures the ranks side by side, as they will train."""
    dp = _STATE["dp"]
    if dp is None:
        return 1
    dp.barrier()
    return dp.size


def is_follower() -> bool:
    """True on every rank but 0 of a data-parallel command. Before the ranks have joined
    (:func:`start`), on every process a launcher announced as a rank above 0 of a world of
    several (:func:`minitransformer.distributed.announced_world`); once MPI has formed the
    world, only its ranks above 0: a process alone in its world is never a follower."""
    from minitransformer import distributed
    dp = _STATE["dp"]
    if dp is not None:
        return not dp.is_writer
    return not _STATE["joined"] and _STATE["may_run_as_ranks"] and distributed.launcher_rank() > 0


def on_rank0(fn):
    """Run ``fn()`` on rank 0 only and hand its result (or its error) to every rank.
    A follower whose rank 0 failed stops quietly with status 0, so that the error
    line and the exit status mpiexec reports are rank 0's alone; since every rank
    knows, rank 0 ends normally (``on_every_rank``) instead of stopping the others."""
    dp = _STATE["dp"]
    if dp is None:
        return fn()
    result, error = None, None
    if dp.is_writer:
        try:
            result = fn()
        except BaseException as err:  # handed on below, then raised here as it was
            error = err
    shared = dp.from_rank0((result, error is not None))
    if error is not None:
        if isinstance(error, Exception):
            error.on_every_rank = True
        raise error
    if shared[1]:
        raise SystemExit(0)
    return shared[0]
