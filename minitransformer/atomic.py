"""Writing files so that nothing is ever half-written or silently replaced.

Every file the project writes goes through :func:`atomic_write`: the content
goes to a temporary file in the same folder, is flushed and fsynced, and only
then replaces the target with ``os.replace`` (atomic on POSIX and Windows). A
full disk or Ctrl-C part way (or SIGTERM, which the command turns into the same
interrupt) leaves the old file as it was and no temporary file behind. Only
SIGKILL or a power cut can leave a ``.NAME.XXXX.tmp`` file; the next run in that
folder sweeps it away (:mod:`minitransformer.cli.folder_lock`).

``overwrite=False`` refuses to replace an existing file (the command line uses
it for the user's files unless ``--force`` is given).
"""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Callable

__all__ = ["atomic_write", "write_bytes", "write_text", "write_json", "parse_json", "FileExistsRefusal"]


class FileExistsRefusal(FileExistsError):
    """Raised instead of overwriting an existing file without permission."""


def _default_mode() -> int:
    """The permissions a plain ``open(path, "w")`` would give (0666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)


def _temporary_name(path: Path) -> str:
    """``.NAME.XXXXXXXX.tmp`` beside ``path``, eight random hex digits."""
    return str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")


def atomic_write(path, write: Callable, binary: bool = True, overwrite: bool = True,
                 check: Callable[[Path], None] | None = None) -> Path:
    """Create or replace ``path`` with what ``write(f)`` writes into an open file.

    Args:
        path: the target file; its folder is created if missing.
        write: called once with the temporary file, open for writing.
        binary: open it in binary (True) or text mode (UTF-8, False).
        overwrite: False refuses (FileExistsRefusal) when ``path`` exists already.
        check: called with the temporary file's path once it is complete and on disk,
            before it replaces ``path`` (a download's checksum): its error leaves ``path``
            untouched.

    Returns the path. On any error (or KeyboardInterrupt) the temporary file is
    removed, the error propagates, and ``path`` is untouched; an OSError that names
    no file (a full disk during ``write``) is raised again naming ``path``.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a file; give a file name")
    if not overwrite and path.exists():
        raise FileExistsRefusal(f"{path} already exists; pass --force to overwrite it, or choose another name")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:  # tmp is named before its file is made (not so with tempfile.mkstemp), so an
        # interrupt at any point, a SIGTERM as the file appears included, lets the except remove it
        for _ in range(100):
            tmp = _temporary_name(path)
            try:
                fd = os.open(tmp, _CREATE, 0o600)  # a new file, private until it is complete
                break
            except FileExistsError:  # another writer's name: draw again
                tmp = None
        else:
            raise FileExistsError(f"no free temporary name beside {path}; remove its .{path.name}.*.tmp files")
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if check is not None:
            check(Path(tmp))
        os.chmod(tmp, _default_mode())  # the temporary file was made private
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            raise type(exc)(exc.errno, exc.strerror or str(exc), str(path)) from exc  # name the file
        raise
    return path


def write_bytes(path, data: bytes, overwrite: bool = True) -> Path:
    """Atomically write ``data`` to ``path``."""
    return atomic_write(path, lambda f: f.write(data), binary=True, overwrite=overwrite)


def write_text(path, text: str, overwrite: bool = True) -> Path:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    return atomic_write(path, lambda f: f.write(text), binary=False, overwrite=overwrite)


def write_json(path, obj, overwrite: bool = True) -> Path:
    """Atomically write ``obj`` as indented JSON (paths and other objects as strings).
    NaN and infinities are refused: they are not JSON."""
    text = json.dumps(obj, indent=1, default=str, allow_nan=False)
    return write_text(path, text + "\n", overwrite=overwrite)


def parse_json(text: str | bytes):
    """``json.loads(text)``, with a document nested too deep for Python's parser (a forged
    checkpoint or config file) raised as the ValueError every caller already handles, not as
    a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested deeper than can be read (a damaged or forged file)") from None
