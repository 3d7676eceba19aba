"""The per-epoch record of a run, as files a person or a spreadsheet can read.

The trainer keeps one dict per epoch (``Trainer.history``): the epoch, the
optimizer step, the learning rate, the mean training loss, the throughput, the
wall time since the phase started, and whatever the task and the callbacks
measured on the validation set. At every epoch end it writes them to the run
folder twice:

* ``history.json``: the list of dicts as they are (a NaN becomes ``null``);
* ``history.csv``: one row per epoch, the same columns in a fixed order, with a
  ``phase`` column so that a run with several phases (pretraining, then
  training) keeps them all in one table: the earlier phases' rows come first.
"""
from __future__ import annotations

import csv
import io
import math
from typing import Sequence

# The columns every run has, in this order; the rest follow in the order they first appear.
LEADING_COLUMNS = ("phase", "epoch", "step", "lr", "train_loss", "val_loss", "tokens_per_s", "time_s")


def json_rows(history: Sequence[dict]) -> list[dict]:
    """``history`` with NaN and infinities as None (strict JSON has neither)."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in h.items()}
            for h in history]


def csv_text(rows: Sequence[dict]) -> str:
    """The rows as CSV text: :data:`LEADING_COLUMNS` that occur, then the other keys.

    Nested values (a dict of per-assay numbers) are left out; a missing or
    non-finite value is an empty cell.
    """
    seen = []
    for row in rows:
        for key, value in row.items():
            if key not in seen and not isinstance(value, (dict, list, tuple)):
                seen.append(key)
    columns = [c for c in LEADING_COLUMNS if c in seen] + [c for c in seen if c not in LEADING_COLUMNS]
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                cells.append("")
            elif isinstance(v, float):
                cells.append(f"{v:.6g}")
            else:
                cells.append(v)
        writer.writerow(cells)
    return buf.getvalue()


def tagged(history: Sequence[dict], phase: str) -> list[dict]:
    """The rows of ``history`` with ``phase`` as their first entry."""
    return [{"phase": phase, **h} for h in history]
