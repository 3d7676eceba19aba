"""How a demo fails: one line on stderr and an exit status, never a traceback.

:func:`run_cli` wraps a demo's ``main``. Whatever goes wrong is sorted into one
of three kinds, and each kind has its own exit status:

* **2, a usage error**: the user can fix it by changing the command line - a
  bad argument, an input file that is missing, unreadable or not what it claims
  to be (any ``ValueError``, e.g. a damaged checkpoint), a file that would be
  overwritten without ``--force``;
* **1, a runtime error**: the command was right but the world was not - no
  network, a full disk (:class:`WriteError`), training diverged, the backend
  asked for is not installed (:class:`BackendUnavailable`), out of memory; an
  exception nobody expected also lands here, named by its type and flagged as a
  bug;
* **130, Ctrl-C**: the message comes from
  :func:`~minitransformer.cli.run_state.interrupt_message` and says where
  training stopped and which checkpoint is the last good one.

Setting ``MINITRANSFORMER_DEBUG=1`` re-raises instead, so a developer sees the
full traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import warnings
from typing import Callable, Sequence

from minitransformer.cli.run_state import interrupt_message

DEBUG_ENV = "MINITRANSFORMER_DEBUG"


class WriteError(RuntimeError):
    """A file could not be written (full disk, no permission, ...); the old file is intact."""


class BackendUnavailable(RuntimeError):
    """The array backend asked for with ``--backend`` cannot be used here."""


def one_line(message) -> str:
    """``message`` as one line: runs of whitespace, newlines included, become one space."""
    return " ".join(str(message).split())


def _describe(exc: BaseException) -> tuple[int, str]:
    """(exit status, one-line message) for an exception that reached :func:`run_cli`."""
    from minitransformer.chem.datasets.download import DownloadError
    from minitransformer.chem.judge.draw import DrawingUnavailable
    from minitransformer.chem.goals.objectives import ScoreFunctionFailed
    from minitransformer.train import TrainingDiverged
    text = one_line(exc) or type(exc).__name__
    if isinstance(exc, (FileExistsError, IsADirectoryError, NotADirectoryError, FileNotFoundError)):
        if exc.filename is not None and exc.strerror and text.startswith("[Errno"):  # raised by the OS
            kind = "is a folder, not a file" if isinstance(exc, IsADirectoryError) else exc.strerror
            text = f"{exc.filename}: {kind}"
        return 2, text
    if isinstance(exc, ValueError):  # bad input: data, checkpoint, SMILES (CheckpointError, UnicodeDecodeError)
        return 2, text
    if isinstance(exc, (WriteError, DownloadError, TrainingDiverged, BackendUnavailable, ScoreFunctionFailed,
                        DrawingUnavailable)):
        return 1, text
    if isinstance(exc, OSError):  # a full disk, no permission, an I/O error
        where = f"{exc.filename}: " if exc.filename else ""
        return 1, f"{where}{exc.strerror or text} ({type(exc).__name__}, errno {exc.errno})"
    if isinstance(exc, MemoryError):
        return 1, "out of memory; try a smaller --batch-size, a smaller model or fewer samples"
    if isinstance(exc, ImportError) and "pip install" in text:  # e.g. RDKit is missing
        return 1, text
    return 1, (f"unexpected {type(exc).__name__}: {text} (this is a bug; rerun with {DEBUG_ENV}=1 "
               "to see the traceback)")


# NumPy's floating-point warnings ("overflow encountered in cast", "invalid value
# encountered in ...") say nothing the trainer does not already report: it checks the
# loss and the gradients for non-finite values and stops with one line (exit status 1).
_FLOAT_WARNINGS = r"(overflow|invalid value|divide by zero|underflow) encountered"


def _quiet_floating_point(main, argv):
    """``main(argv)`` with NumPy's floating-point RuntimeWarnings off; other warnings pass."""
    import numpy as np
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        warnings.filterwarnings("ignore", message=_FLOAT_WARNINGS, category=RuntimeWarning)
        return main(argv)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch system's time limit), raised where the program is, like Ctrl-C:
    every ``finally`` and every cleanup runs, and the command reports it the same way."""


#: "seen": a SIGTERM arrived during this command (the trainer may re-raise it as Ctrl-C);
#: "stopping": the command is reporting how it ended, and a later SIGTERM is noted, not raised
#: (``pkill`` or a batch system signals every process of a data-parallel run, some of them twice).
_TERMINATED = {"seen": False, "stopping": False}


def _on_sigterm(signum, frame):
    _TERMINATED["seen"] = True
    if not _TERMINATED["stopping"]:
        raise Terminated()


def run_cli(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)`` and return its exit status; every failure becomes one line on stderr.

    Exit status 2: a usage error (bad argument, missing or unreadable input, a file
    that would be overwritten without ``--force``). 1: a runtime error (no network,
    full disk, training diverged) or an unexpected exception (named by its type;
    set ``MINITRANSFORMER_DEBUG=1`` for the traceback). 130: Ctrl-C, with the epoch
    and step it stopped at and the last good checkpoint; 143: SIGTERM, the same.
    The run folder's lock is released however it ends.
    """
    from minitransformer.cli.folder_lock import release_all
    debug = os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    _TERMINATED.update(seen=False, stopping=False)
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):  # not the main thread
        previous = None
    try:
        return _run(main, argv, debug)
    finally:
        release_all()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(main, argv, debug: bool) -> int:
    """:func:`run_cli` without the signal handling."""
    try:
        return _quiet_floating_point(main, argv)
    except SystemExit as exc:  # argparse (--help, or its one-line error)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(f"error: {one_line(exc.code)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        _TERMINATED["stopping"] = True
        if debug:
            raise
        from minitransformer.cli import ranks
        dp = ranks.current()
        terminated = isinstance(exc, Terminated) or _TERMINATED["seen"] or (dp is not None and dp.stopped_by == signal.SIGTERM)
        code = 143 if terminated else 130
        if not ranks.is_follower():  # under mpiexec, rank 0 alone says where it stopped
            try:
                sys.stdout.flush()
                print(("terminated (SIGTERM): " if terminated else "") + interrupt_message(), file=sys.stderr)
            except KeyboardInterrupt:  # a second Ctrl-C while reporting the first
                pass
        if dp is not None and not dp.stopped_by:  # not at a step every rank agreed on: one may wait forever
            _stop_other_ranks(code, wait_for_rank0=True)
        return code
    except Exception as exc:
        _TERMINATED["stopping"] = True
        if debug:
            raise
        from minitransformer.cli import ranks
        code, message = _describe(exc)
        everywhere = getattr(exc, "on_every_rank", False)  # every rank raised it at the same point
        if not ranks.is_follower():
            sys.stdout.flush()
            print(f"error: {message}", file=sys.stderr)
        elif not everywhere and ranks.current() is not None:  # (before the ranks join, all fail alike)
            dp = ranks.current()
            print(f"error: rank {dp.rank} of {dp.size}: {message}", file=sys.stderr)
        if not everywhere:
            _stop_other_ranks(code)
        return code


def _stop_other_ranks(code: int, wait_for_rank0: bool = False) -> None:
    """Under mpiexec (a data-parallel command), a rank that fails alone stops all of them:
    the others would otherwise wait forever for it in their next collective. Its run-folder
    lock goes first (MPI_Abort ends the process at once). A follower interrupted by Ctrl-C
    gives rank 0, interrupted too, a moment to say where the run stopped."""
    from minitransformer.cli import ranks
    from minitransformer.cli.folder_lock import release_all
    dp = ranks.current()
    if dp is not None and dp.size > 1:
        release_all()
        if wait_for_rank0 and not dp.is_writer:
            import time
            time.sleep(1.0)
        dp.abort(code)


def exit_for_good(code: int):
    """``sys.exit(code)`` for a demo script once :func:`run_cli` has returned: a Ctrl-C while
    the interpreter shuts down (worker threads joining) prints one line and exits 130
    instead of killing the process silently. Everything was already written."""
    def _on_sigint(signum, frame):
        try:
            print("interrupted while shutting down; everything was already written", file=sys.stderr)
            sys.stderr.flush()
        finally:
            os._exit(130)

    try:
        signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # not the main thread
        pass
    sys.exit(code)
