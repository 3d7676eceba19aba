r"""Data-parallel training over MPI: every rank holds the whole model, reads its own
shard of each global batch, and the ranks add up their gradients before the update.

One training step on rank :math:`r` of :math:`R`, with the global batch cut into
shards :math:`S_r` (see :meth:`DataParallel.shard`), is
:meth:`DataParallel.loss_and_gradients` (global token count, my share of the loss
and of the gradient, the all-reduce), then clipping and the optimizer's update as
in one process: the same update on every rank.

**Why the normalisation must be global.** The loss of the global batch is
:math:`L = \frac{1}{N}\sum_{r}\sum_{t \in S_r}\ell_t` with :math:`N = \sum_r N_r`
the scored (non-pad) tokens of all shards. Its gradient is the sum over ranks of
:math:`\frac{1}{N}\sum_{t\in S_r}\nabla\ell_t`: each rank divides its *sum* by the
global N, and the all-reduce adds. Had each rank taken its own mean
(divide by :math:`N_r`) and the ranks averaged, a shard with few tokens (short
molecules, much padding) would weigh as much as one with many, and 2 ranks with
B/2 would no longer train like 1 rank with B. The token counts are read from the
host batches, so finding N costs one tiny all-reduce of an integer and no device read.

Everything else follows from every rank starting equal and applying the same
update: the same seed builds the same weights, every rank plans the same global
batches (the plan's generator is seeded by (seed, epoch), not by rank), the
gradient buffers are equal after the all-reduce, so the clipping, the optimizer's
moments and its step counter stay equal too. Only rank 0 writes files and prints;
a checkpoint holds no rank or world size, so a run resumes at any world size.

The gradients travel in one flat buffer, in place (``MPI.IN_PLACE``): one message
per step, not one per tensor. ``mpi4py`` is an optional extra
(``pip install 'minitransformer[parallel]'``, with MPICH's wheel and its ``mpiexec``).

**On GPUs** (the CuPy backend) the same interface sums the device buffer with NCCL
(``cupy.cuda.nccl``): MPI starts the ranks and hands rank 0's NCCL id to the
others, each rank takes GPU ``rank % GPUs``, and the gradients never leave the
devices. (Not yet run on a GPU: no device was lent while it was written; see
``tests/test_gpu.py``, which exercises it with one rank where a GPU exists.)
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

import numpy as np

from minitransformer import backend
from minitransformer.optim.memory import flat_buffers  # the optimizer's buffers, when the fast set laid them out

#: Seconds a rank that stops every rank (:meth:`DataParallel.abort`) waits after flushing its
#: error line, to give mpiexec time to forward it before MPI_Abort ends the processes (a
#: heuristic: nothing tells a rank that its output has left the pipe).
ABORT_GRACE_S = 0.2


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise RuntimeError("data-parallel training needs mpi4py: pip install 'minitransformer[parallel]' "
                           "(mpi4py and MPICH), then start the ranks with mpiexec -n N ...") from err
    return MPI


def world_size() -> int:
    """Ranks in MPI's world, 1 when mpi4py is not installed or the program was not started by mpiexec."""
    import warnings
    try:
        with warnings.catch_warnings():  # mpi4py's own note on another MPI's launcher: the command says it in one line
            warnings.filterwarnings("ignore", message="suspicious MPI execution environment")
            from mpi4py import MPI
    except ImportError:
        return 1
    return MPI.COMM_WORLD.Get_size()


#: What each launcher announces in a process's environment: (rank variable, world-size variable,
#: the variables of which one holds its connection to the process). MPICH's Hydra sets PMI_* (with
#: PMI_FD or PMI_PORT), Open MPI OMPI_COMM_WORLD_*, a PMIx launcher PMIX_RANK beside Open MPI's size.
LAUNCHER_VARIABLES = (("PMI_RANK", "PMI_SIZE", ("PMI_FD", "PMI_PORT")),
                      ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                       ("PMIX_NAMESPACE", "PMIX_SERVER_URI", "PMIX_SERVER_URI2", "PMIX_SERVER_URI3",
                        "PMIX_SERVER_URI4", "PMIX_SERVER_URI21", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri")),
                      ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE", ("PMIX_NAMESPACE", "PMIX_SERVER_URI", "PMIX_SERVER_URI2",
                                                             "PMIX_SERVER_URI3", "PMIX_SERVER_URI4",
                                                             "PMIX_SERVER_URI21")))


def announced_world() -> tuple[int, int] | None:
    """(rank, size) as a launcher announced them in the environment, read without starting MPI;
    None unless a launcher announced a rank, a world that holds it and its connection to the
    process. A rank variable alone (inherited from another job's shell, say) announces nothing."""
    for rank_var, size_var, connections in LAUNCHER_VARIABLES:
        rank, size = os.environ.get(rank_var, "").strip(), os.environ.get(size_var, "").strip()
        if rank.isdigit() and size.isdigit() and int(rank) < int(size) and any(os.environ.get(c) for c in connections):
            return int(rank), int(size)
    return None


def launcher_rank() -> int:
    """This process's rank as a launcher announced it (:func:`announced_world`), 0 without one.
    Lets a command's argument errors, which every rank meets alike before the ranks join, be
    printed by rank 0 alone; once MPI runs, :func:`minitransformer.cli.ranks.start` checks
    the announcement against the world MPI actually formed."""
    world = announced_world()
    return 0 if world is None else world[0]


def rank_variables() -> dict:
    """The launcher variables set in this process's environment, by name (for a message)."""
    names = dict.fromkeys(name for rank, size, _ in LAUNCHER_VARIABLES for name in (rank, size))
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def launched_by_mpiexec() -> bool:
    """Whether mpiexec started this process (its environment says so), read without starting MPI."""
    return bool(rank_variables())


def map_shared(share, fn, items: list) -> list:
    """``fn(items)`` (a function of a list that returns one result per item), the work shared by
    data-parallel ranks: each rank maps every ``share.size``-th item, from its own ``share.rank``,
    and all gather; every rank returns the results of all items, in order. ``share`` is a
    :class:`DataParallel` (``rank``, ``size``, ``gather``), or None for one process. The result
    equals one process's when each item's result depends on the item alone."""
    if share is None:
        return list(fn(items))
    mine = list(range(share.rank, len(items), share.size))
    done = dict(zip(mine, fn([items[i] for i in mine])))
    results = [None] * len(items)
    for shared in share.gather(done):
        for i, result in shared.items():
            results[i] = result
    return results


class DataParallel:
    """The ranks of one data-parallel run (default: all of ``MPI.COMM_WORLD``).

    Attributes: ``rank`` (0 .. size-1), ``size``, ``allreduce_seconds`` (time spent
    adding up gradients so far, for the benchmarks)."""

    def __init__(self, comm=None):
        MPI = _mpi()
        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.allreduce_seconds = 0.0
        self._flat = None  # the flat gradient buffer, made on first use
        self._pending = 0  # a signal this rank noted during training, not yet agreed on
        self.stopped_by = 0  # the signal every rank agreed to stop on (0: none)
        self._nccl = _Nccl(self.comm, self.rank, self.size) if backend.name() == "cupy" else None

    @property
    def is_writer(self) -> bool:
        """Rank 0 writes checkpoints, histories and progress; the others stay quiet."""
        return self.rank == 0

    def shard(self, indices):
        """This rank's part of a global batch's example indices: contiguous, in order,
        sizes differing by at most one (rank r gets the r-th of ``np.array_split``).
        A rank may get none when the batch has fewer examples than there are ranks."""
        return np.array_split(np.asarray(indices), self.size)[self.rank]

    def from_rank0(self, value):
        """Rank 0's ``value`` (any picklable object), on every rank."""
        return self.comm.bcast(value, root=0)

    def gather(self, value) -> list:
        """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
        return self.comm.allgather(value)

    def sum_int(self, value: int) -> int:
        """The sum over ranks of a host integer (a token count)."""
        return int(self.comm.allreduce(int(value), op=self.MPI.SUM))

    def sum_float(self, value: float) -> float:
        """The sum over ranks of a host float (a loss), added in rank order on every rank."""
        return float(sum(self.comm.allgather(float(value))))

    def allreduce_gradients(self, model) -> None:
        """Replace every parameter's gradient by its sum over the ranks, in place.

        The gradients are copied into one flat buffer (made once, in the gradients'
        dtype), summed across the ranks in place with one ``Allreduce``, and copied
        back; where the optimizer's flat layout (``fast/engine/flat.py``) holds them all, its
        gradient buffer is summed as it is, with no copy. On CuPy the buffer lives on
        the device and NCCL sums it there."""
        params = [p for _, p in model.named_parameters()]
        layout = flat_buffers(params)
        if layout is not None:  # the optimizer's flat buffer holds them all: sum it as it is
            self._sum_in_place(layout.grad)  # its gaps are zeros on every rank, and stay so
            return
        sizes = [int(p.grad.size) for p in params]
        total = sum(sizes)
        dtype = params[0].grad.dtype
        if self._flat is None or self._flat.size != total or self._flat.dtype != dtype:
            self._flat = backend.xp.empty(total, dtype=dtype)  # (P,) every gradient, end to end
        flat, at = self._flat, 0
        for p, n in zip(params, sizes):
            flat[at:at + n] = p.grad.reshape(-1)
            at += n
        self._sum_in_place(flat)
        at = 0
        for p, n in zip(params, sizes):
            p.grad[...] = flat[at:at + n].reshape(p.grad.shape)
            at += n

    def _sum_in_place(self, flat) -> None:
        """``flat`` (P,) := its sum over the ranks, timed into ``allreduce_seconds``."""
        t0 = time.perf_counter()
        if self._nccl is not None:
            self._nccl.sum_in_place(flat)
        else:
            self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)
        self.allreduce_seconds += time.perf_counter() - t0

    def loss_and_gradients(self, model, task, batch, rng=None, normaliser: float | None = None):
        """The data-parallel part of a training step, on this rank's shard ``batch``
        (a host batch, or None when the global batch had no example for this rank).
        Leaves every rank holding the global batch's gradient; returns the global
        batch's loss and scored tokens (equal on every rank). The loss is the global
        batch's summed loss over ``normaliser`` (``TrainConfig.loss_norm`` "epoch"), or
        over its scored tokens (None: its mean)."""
        n_tok = 0 if batch is None else task.scored_tokens(batch)
        n_global = self.sum_int(n_tok)  # scored tokens of the global batch
        task.normaliser = n_global if normaliser is None else normaliser
        try:
            model.zero_grad()
            local = 0.0
            if batch is not None:
                local = float(task.loss(model, batch, rng)[0])  # my tokens' loss sum / the normaliser
                task.backward(model)  # my share of the global gradient
        finally:
            task.normaliser = None
        self.allreduce_gradients(model)  # every rank: the sum of the shares
        return self.sum_float(local), n_global

    # -- Ctrl-C and SIGTERM: every rank stops at the same step ------------------
    @contextlib.contextmanager
    def deferred_signals(self):
        """The training loop's context: Ctrl-C (SIGINT) and SIGTERM only note their arrival,
        and :meth:`stop_if_signalled`, called once per step, turns them into a
        KeyboardInterrupt on every rank at the same step.

        mpiexec hands Ctrl-C to every rank, but each sees it at its own moment: a rank that
        stops inside a step while another waits for it in the all-reduce would leave that
        one waiting forever. Leaving the block normally checks once more, so a signal that
        came during the last epoch's evaluation is not lost."""
        if self.size == 1 or threading.current_thread() is not threading.main_thread():
            yield
            return
        self._pending = 0
        previous = {s: signal.signal(s, self._note_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
            self.stop_if_signalled()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _note_signal(self, signum, frame):
        self._pending = int(signum)

    def stop_if_signalled(self) -> None:
        """Raise KeyboardInterrupt on every rank if any rank has noted a signal (one tiny all-reduce).
        ``stopped_by`` keeps the signal's number (SIGTERM wins over SIGINT), for the exit status."""
        signum = int(self.comm.allreduce(self._pending, op=self.MPI.MAX))
        if signum:
            self.stopped_by = signum
            raise KeyboardInterrupt

    # -- errors --------------------------------------------------------------------
    def run_or_abort(self, fn, same_on_every_rank: tuple = ()):
        """``fn()``; with several ranks, an error on this rank is printed with the rank
        and stops every rank (MPI_Abort), so none waits forever in the next all-reduce.

        Three kinds of error pass through instead, for the command to report once (rank 0):
        ``same_on_every_rank`` (e.g. a diverged loss: every rank computes the same loss and
        raises at the same point; marked ``err.on_every_rank = True``), KeyboardInterrupt
        (the command reports it and stops the ranks), and, printed by no one, an MPI error:
        it means another rank has gone, and that rank says why."""
        if self.size == 1:
            return fn()
        try:
            return fn()
        except same_on_every_rank as err:
            err.on_every_rank = True
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as err:
            if not isinstance(err, self.MPI.Exception):
                print(f"error: rank {self.rank} of {self.size}: {type(err).__name__}: {err} (stopping every rank)",
                      file=sys.stderr, flush=True)
            self.abort(1)
            raise

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int = 1) -> None:
        """Stop every rank (after this rank has said why): MPI_Abort, with this process's own
        output closed first, so that MPI's "application called MPI_Abort" line does not
        follow the one line that said why."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        # mpiexec forwards a rank's output from a pipe and tears every rank down when one
        # aborts; its line could be lost in between (CI saw an empty stderr once): wait a
        # little. A signal in the wait must not stop the abort (the other ranks would hang).
        with contextlib.suppress(BaseException):
            time.sleep(ABORT_GRACE_S)
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
        self.comm.Abort(code)


class _Nccl:
    """NCCL across the ranks' GPUs, bootstrapped by MPI (rank 0's unique id, broadcast)."""

    def __init__(self, comm, rank: int, size: int):
        import cupy
        from cupy.cuda import nccl
        cupy.cuda.Device(rank % cupy.cuda.runtime.getDeviceCount()).use()  # before any array is made
        uid = comm.bcast(nccl.get_unique_id() if rank == 0 else None, root=0)
        self.cupy, self.nccl = cupy, nccl
        self.comm = nccl.NcclCommunicator(size, uid, rank)

    def sum_in_place(self, flat) -> None:
        """flat (P,), a device array: replaced by its sum over the ranks, on the current stream."""
        kinds = {"float32": self.nccl.NCCL_FLOAT32, "float64": self.nccl.NCCL_FLOAT64}
        self.comm.allReduce(flat.data.ptr, flat.data.ptr, flat.size, kinds[str(flat.dtype)], self.nccl.NCCL_SUM,
                            self.cupy.cuda.get_current_stream().ptr)
