"""What a demo writes and prints: files that are never half-written, and tables.

Every output of a run goes through :mod:`minitransformer.atomic`: the bytes go
to a temporary file beside the target, which then replaces it in one step. A
full disk or Ctrl-C therefore leaves the old file as it was and no temporary
file behind. Here that is wrapped for the demos:

* :func:`write_json`, :func:`write_text`, :func:`write_bytes`: an OSError
  becomes a :class:`~minitransformer.cli.errors.WriteError` that names the
  file (exit status 1); JSON goes through :func:`json_safe` first, since JSON
  has no NaN;
* :func:`save_curves` and :func:`save_plot`: a figure is drawn in memory or in
  a scratch folder and only its finished bytes reach the run folder;
* :func:`print_table` and :func:`attention_example`: the summary table at the
  end of a run and the molecule chosen for attention maps.
"""
from __future__ import annotations

import io
import math
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from minitransformer import atomic
from minitransformer.cli import ranks
from minitransformer.cli.errors import WriteError


def json_safe(obj):
    """``obj`` with NaN and infinities as None (JSON has neither), NumPy scalars as Python
    numbers, tuples as lists and other objects (paths) as strings."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():
        obj = obj.item()  # a NumPy scalar or 0-d array
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)


def _guarded(path, write: Callable[[], Path]) -> Path:
    """Run ``write``; an OSError (other than a refusal or a folder) becomes a WriteError naming ``path``.
    In a data-parallel command only rank 0 writes (:mod:`minitransformer.cli.ranks`)."""
    if ranks.is_follower():
        return Path(path)
    try:
        return write()
    except (FileExistsError, IsADirectoryError):
        raise
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise WriteError(f"could not write {path}: {reason}; it was left as it was (an old file is intact, "
                         "no partial file remains)") from err


def write_json(path: str | Path, obj, overwrite: bool = True) -> Path:
    """Atomically write ``obj`` as indented JSON; NaN and infinities become null (see :func:`json_safe`)."""
    return _guarded(path, lambda: atomic.write_json(path, json_safe(obj), overwrite=overwrite))


def write_text(path: str | Path, text: str, overwrite: bool = True) -> Path:
    """Atomically write ``text`` (UTF-8); ``overwrite=False`` refuses to replace a file."""
    return _guarded(path, lambda: atomic.write_text(path, text, overwrite=overwrite))


def write_bytes(path: str | Path, data: bytes, overwrite: bool = True) -> Path:
    """Atomically write ``data``; ``overwrite=False`` refuses to replace a file."""
    return _guarded(path, lambda: atomic.write_bytes(path, data, overwrite=overwrite))


def save_curves(history, path: str | Path, **kwargs) -> Path:
    """:func:`minitransformer.viz.plots.plot_curves`, rendered in memory and written atomically."""
    from minitransformer.viz.plots import plot_curves
    buf = io.BytesIO()
    plot_curves(history, buf, **kwargs)
    return write_bytes(path, buf.getvalue())


def save_plot(path: str | Path, draw: Callable[[Path], object]) -> Path:
    """Call ``draw(target)`` (a plotting function that takes a file path) on a scratch file
    outside the run folder, then write its bytes atomically to ``path``."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="minitransformer-plot-") as tmp:
        target = Path(tmp) / path.name
        draw(target)
        data = target.read_bytes()
    return write_bytes(path, data)


#: The columns a summary fits (a normal terminal's 100), and the most its names take of them.
TABLE_WIDTH = 100
NAME_WIDTH = 40


def table_lines(rows: Sequence[tuple[str, str]], footer: str | None = None, width: int = TABLE_WIDTH) -> list[str]:
    """``(name, value)`` rows as aligned lines between two rules, none wider than ``width``: a long
    name wraps within its column (at most :data:`NAME_WIDTH` wide), a long value within the rest."""
    import textwrap
    names = min(max(len(name) for name, _ in rows), NAME_WIDTH)
    room = max(width - names - 2, 20)
    lines = []
    for name, value in rows:
        left = textwrap.wrap(name, names) or [""]
        right = textwrap.wrap(str(value), room, subsequent_indent="  ", break_on_hyphens=False) or [""]
        for k in range(max(len(left), len(right))):
            line = f"{left[k] if k < len(left) else '':<{names}}  {right[k] if k < len(right) else ''}"
            lines.append(line.rstrip())
    rule = "=" * min(width, max(len(line) for line in lines))
    out = ["", rule, *lines, rule]
    if footer:
        out += textwrap.wrap(footer, width, subsequent_indent="  ", break_on_hyphens=False)
    return out


def print_table(rows: Sequence[tuple[str, str]], footer: str | None = None) -> None:
    """Print ``(name, value)`` rows as an aligned table between two rules, within :data:`TABLE_WIDTH`
    columns (:func:`table_lines`)."""
    print("\n".join(table_lines(rows, footer)))


def attention_example(smiles: Sequence[str], lo: int = 20, hi: int = 45) -> str:
    """A molecule to draw attention maps for: the first with ``lo..hi`` characters (readable
    tick labels, yet long enough to show structure), else the longest of the first 50."""
    for s in smiles:
        if lo <= len(s) <= hi:
            return s
    return max(smiles[:50], key=len)


def format_duration(seconds: float) -> str:
    """A duration as a person reads it: ``0.4 s``, ``12 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def read_history(folder: str | Path) -> list:
    """The rows of ``folder/history.json`` (an earlier phase of the run), [] if there are none."""
    try:
        rows = atomic.parse_json((Path(folder) / "history.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def outputs_line(out: str | Path) -> str:
    """``outputs in OUT/: a b c``: the files the run left in its folder (checkpoints and
    folders of earlier phases included), for the end of a summary."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in Path(out).iterdir()
                   if not p.name.startswith((".", "old-")))
    return f"outputs in {out}/: {' '.join(names)}"
