"""How a long judging step shows that it is working, and how long it has left.

Judging can take minutes (ChemNet over a reference set that is not cached yet,
the fingerprints and fragments of 176,000 test molecules). :func:`progress` gives
such a step a way to report: on a terminal a bar with its rate and time left
(``tqdm``); elsewhere (a log file, a batch job) one line when the estimate is
first known and one every :data:`LINE_EVERY_S` seconds, each with the share done
and the time left, measured as the step goes. A step that ends within
:data:`QUIET_S` seconds prints nothing.
"""
from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["progress", "tracked", "size_warning", "LINE_EVERY_S", "QUIET_S", "LARGE"]

LINE_EVERY_S = 30.0  # seconds between two progress lines when standard error is no terminal
QUIET_S = 5.0  # a step that ends sooner says nothing
LARGE = 50_000  # samples from which judging warns, before it starts, of its size


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class _Lines:
    """The line reporter: ``update(n)`` after each ``n`` items done."""

    def __init__(self, label: str, total: int, unit: str, stream):
        self.label, self.total, self.unit, self.stream = label, total, unit, stream
        self.done, self.start, self.last = 0, time.perf_counter(), None

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        elapsed = now - self.start
        if elapsed < QUIET_S or self.done >= self.total or (self.last is not None and now - self.last < LINE_EVERY_S):
            return
        left = elapsed / self.done * (self.total - self.done)
        print(f"{self.label}: {self.done:,} of {self.total:,} {self.unit} ({100 * self.done / self.total:.0f} %), "
              f"about {_minutes(left)} left", file=self.stream, flush=True)
        self.last = now


@contextlib.contextmanager
def progress(label: str, total: int, unit: str = "mol", stream=None):
    """A context yielding ``update(n)``: a bar on a terminal, else lines with the time left (module docstring)."""
    stream = stream if stream is not None else sys.stderr
    if hasattr(stream, "isatty") and stream.isatty():
        from tqdm.auto import tqdm
        with tqdm(total=total, desc=label, unit=unit, leave=False, file=stream) as bar:
            yield bar.update
        return
    yield _Lines(label, total, unit, stream).update


def tracked(label: str | None, items, total: int | None = None, unit: str = "mol", every: int = 256):
    """Iterate over ``items`` (any iterable: nothing is copied), showing the progress of the loop as
    :func:`progress` does (``label`` None: nothing shown); ``total`` defaults to ``len(items)``."""
    if label is None:
        yield from items
        return
    total = len(items) if total is None else total
    with progress(label, total, unit) as update:
        done = 0
        for item in items:
            yield item
            done += 1
            if done % every == 0:
                update(every)
        update(done % every)


def size_warning(n: int, stream=None) -> None:
    """One line on standard error, before judging ``n`` samples begins, when ``n`` is large
    (:data:`LARGE`): what grows with it, so that a long silence is never a surprise."""
    if n < LARGE:
        return
    stream = stream if stream is not None else sys.stderr
    print(f"judging {n:,} samples: every metric reads each of them (a few milliseconds a molecule and core), "
          f"and IntDiv compares all {n * n / 1e9:,.1f} billion pairs, so this takes many minutes; each step shows "
          "its progress and the time it has left", file=stream, flush=True)
