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
    """The ``minitransformer`` script (and ``python -m minitransformer``)."""
    try:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except (ValueError, OSError):  # not the main thread: nothing to guard
        pass
    from minitransformer.cli.main import console as run
    signal.signal(signal.SIGINT, signal.default_int_handler)
    run()
