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

_STATE = {"dp": None}


def start():
    """Join the ranks if started by mpiexec with several; silence a follower's output."""
    from minitransformer import distributed
    if _STATE["dp"] is None and distributed.world_size() > 1:
        dp = distributed.DataParallel()
        _STATE["dp"] = dp
        if not dp.is_writer:
            sys.stdout = open(os.devnull, "w")  # progress and results come from rank 0 only
    return _STATE["dp"]


def current():
    """The DataParallel of this command, or None (one process)."""
    return _STATE["dp"]


def is_follower() -> bool:
    """True on every rank but 0 of a data-parallel command; before the ranks have joined
    (:func:`start`), on every process mpiexec started but the first."""
    from minitransformer import distributed
    dp = _STATE["dp"]
    return distributed.launcher_rank() > 0 if dp is None else not dp.is_writer


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
