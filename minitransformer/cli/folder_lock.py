"""One run at a time in a run folder: a lock file, and the leftovers of a killed run swept away.

Two ``train`` commands started a second apart with the same ``--out`` both
passed the folder check (neither had written anything yet) and then wrote over
each other's files. :func:`lock_run_folder` closes that gap: it creates
``OUT/.lock`` with ``O_CREAT | O_EXCL`` (the one file-system operation that
exactly one of two racing processes wins), holding the holder's process id,
host and start time. The loser gets a one-line error naming the holder. A lock
whose process is gone (SIGKILL, a crash, a power cut) is stale: it is taken
over, and said so. The lock is released when the command ends
(:func:`release_all`, called by :func:`~minitransformer.cli.errors.run_cli`,
and at interpreter exit); a folder the lock created, and that holds nothing
else by then (the command was refused before writing), goes with it.

:func:`sweep_temporary_files` removes what a killed run can leave behind: the
temporary files of :func:`~minitransformer.atomic.atomic_write`
(``.NAME.XXXX.tmp`` beside the file being written), which only a killed
process leaves, since every other exit removes its own. Holding the lock, no
other process can be writing them.
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import time
from pathlib import Path

LOCK_NAME = ".lock"
_HELD: set = set()
_MADE: set = set()  # the run folders that taking a lock created


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _holder(lock: Path) -> dict | None:
    try:
        info = json.loads(lock.read_text(encoding="utf-8"))
        return info if isinstance(info, dict) else None
    except (OSError, ValueError, RecursionError):
        return None


def lock_run_folder(out: Path, log=print) -> Path:
    """Take ``out/.lock`` for this process (creating ``out``), or raise FileExistsError naming the
    live holder. A stale lock (its process is gone, or it is this process's own from an earlier
    command) is taken over."""
    if not out.exists():
        _MADE.add(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(lock)
            if holder is None and time.time() - _mtime(lock) < 5:
                time.sleep(0.2)  # being written by a process that has just won the race
                continue
            pid = holder.get("pid") if holder else None
            same_host = holder is not None and holder.get("host") == me["host"]
            if isinstance(pid, int) and same_host and pid != me["pid"] and _alive(pid):
                raise FileExistsError(f"{out} is in use by another run (process {pid}, started "
                                      f"{holder.get('started')}); wait for it to finish, or give another --out")
            if holder is not None and not same_host:
                raise FileExistsError(f"{out} is locked by a run on {holder.get('host')} (process {pid}); if no "
                                      f"run is writing there, delete {lock} and try again")
            if pid != me["pid"]:
                log(f"{out}: taking over the lock of a run that is gone (process {pid})")
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        _HELD.add(lock)
        return lock
    raise FileExistsError(f"{out}: could not take its lock {lock}; if no run is writing there, delete it")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def release_all() -> None:
    """Remove every lock this process holds (the end of a command, or interpreter exit), and a
    run folder the lock created that is empty without it."""
    for lock in list(_HELD):
        holder = _holder(lock)
        if holder is None or holder.get("pid") == os.getpid():
            lock.unlink(missing_ok=True)
        _HELD.discard(lock)
        if lock.parent in _MADE:
            _MADE.discard(lock.parent)
            try:
                lock.parent.rmdir()  # only if empty: a run that wrote anything keeps its folder
            except OSError:
                pass


atexit.register(release_all)


def sweep_temporary_files(out: Path, log=print) -> list[Path]:
    """Remove the temporary files of :func:`~minitransformer.atomic.atomic_write` that a killed
    run left in ``out`` and the folders of its phases (one level down); say so; return them."""
    folders = [out] + [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(("old-", "."))] \
        if out.is_dir() else []
    found = [p for folder in folders for p in folder.glob(".*.tmp") if p.is_file()]
    for path in found:
        path.unlink(missing_ok=True)
    if found:
        log(f"removed {len(found)} temporary file{'s' * (len(found) != 1)} left by an interrupted run: "
            + ", ".join(str(p.relative_to(out)) for p in found))
    return found
