"""Command-line plumbing shared by the chemistry demos (``demos/*.py``).

The three demos (molecules, tox21_property, canonicalize) take the same basic
options and fail the same way on bad input, so that code lives here once:

* :func:`add_common_arguments` adds ``--data``, ``--quick``, ``--out``,
  ``--backend``, ``--seed``, ``--max-minutes``, ``--plot-attention`` and ``--quiet``;
* :func:`run_cli` runs a demo's ``main`` and turns the errors a user can cause
  (a missing file, a CSV without a smiles column, a damaged checkpoint, ...)
  into one clear line on stderr and exit status 2, instead of a traceback;
* :func:`write_json` and :func:`print_table` write the run folder's JSON files
  and the summary table every demo ends with.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Sequence

from minitransformer import backend

__all__ = ["add_common_arguments", "use_backend", "max_time", "run_cli", "write_json", "print_table",
           "attention_example", "demo_main"]


def add_common_arguments(parser: argparse.ArgumentParser, out: str) -> argparse.ArgumentParser:
    """Add the options every chemistry demo understands; ``out`` is the default run folder."""
    parser.add_argument("--data", default=None,
                        help="tox21, druglike, or a .csv/.csv.gz/.smi file (default: Tox21 if found, else druglike)")
    parser.add_argument("--quick", action="store_true", help="tiny model and data: a smoke test under a minute")
    parser.add_argument("--epochs", type=int, default=None, help="override the preset's number of epochs")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="training time budget (the preset's by default; 0 = no limit)")
    parser.add_argument("--out", default=out, help=f"run folder, created if needed (default: {out})")
    parser.add_argument("--backend", default=None, choices=list(backend.BACKENDS)[:2],
                        help="numpy (default) or cupy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot-attention", action="store_true",
                        help="also write attention heatmaps of a test example to the run folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def use_backend(args: argparse.Namespace) -> None:
    """Switch the array backend when the user asked for one with ``--backend``."""
    if getattr(args, "backend", None):
        backend.use(args.backend)


def max_time(args: argparse.Namespace, preset_seconds: float | None) -> float | None:
    """The training time budget in seconds: ``--max-minutes`` (0 = none) or the preset's."""
    if args.max_minutes is None:
        return preset_seconds
    if args.max_minutes < 0:
        raise ValueError(f"--max-minutes must be >= 0 (0 = no limit), got {args.max_minutes}")
    return args.max_minutes * 60 if args.max_minutes > 0 else None


def run_cli(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; an input error prints ``error: ...`` on stderr and returns 2."""
    from minitransformer.checkpoint import CheckpointError
    try:
        return main(argv)
    except (FileNotFoundError, ValueError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def write_json(path: str | Path, obj) -> Path:
    """Write ``obj`` as indented JSON (non-JSON values such as paths become strings)."""
    path = Path(path)
    path.write_text(json.dumps(obj, indent=1, default=str))
    return path


def print_table(rows: Sequence[tuple[str, str]], footer: str | None = None) -> None:
    """Print ``(name, value)`` rows as an aligned table between two rules."""
    width = max(len(name) for name, _ in rows)
    rule = "=" * (width + 40)
    print("\n" + rule)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print(rule)
    if footer:
        print(footer)


def attention_example(smiles: Sequence[str], lo: int = 20, hi: int = 45) -> str:
    """A molecule to draw attention maps for: the first with ``lo..hi`` characters (readable
    tick labels, yet long enough to show structure), else the longest of the first 50."""
    for s in smiles:
        if lo <= len(s) <= hi:
            return s
    return max(smiles[:50], key=len)


def demo_main(argv, build_parser, train_command, subcommands: dict | None = None) -> int:
    """A demo's ``main``: ``argv[0]`` may name a subcommand (e.g. ``sample``), which gets
    the remaining arguments; otherwise parse the training options, choose the backend
    and train. ``argv=None`` reads ``sys.argv``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and subcommands and argv[0] in subcommands:
        return subcommands[argv[0]](argv[1:])
    args = build_parser().parse_args(argv)
    use_backend(args)
    return train_command(args)
