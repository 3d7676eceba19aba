"""The installed ``minitransformer`` command's first step: nothing heavy is imported before a
Ctrl-C can be answered.

Importing the command (NumPy, RDKit, the layers) takes about a second. A Ctrl-C in that
second would otherwise end the program with a traceback from deep inside an import;
:func:`console` answers it with one line and exit status 130 (nothing was done yet), then
hands over to :func:`minitransformer.cli.main.console`, whose own handling of Ctrl-C
(:mod:`minitransformer.cli.errors`) says where the work stopped.
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame) -> None:
    try:
        print("interrupted while starting; nothing was done", file=sys.stderr, flush=True)
    finally:
        os._exit(130)


def console() -> None:
    """The ``minitransformer`` script (and ``python -m minitransformer``). A process started with
    SIGINT ignored (a background job of a script, ``nohup``) keeps ignoring it."""
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, _interrupted_while_starting)
    except (ValueError, OSError):  # not the main thread: nothing to guard
        previous = None
    from minitransformer.cli.main import console as run
    if previous is not None and previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)
    run()
