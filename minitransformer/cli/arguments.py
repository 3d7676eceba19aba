"""Reading a command line: every argument is checked before any work starts.

A typo in ``--temperature`` should cost a second, not an hour of training
followed by a crash at sampling time. So each option gets a ``type=`` function
that refuses a bad value while argparse parses the command line:

* :func:`int_at_least`, :func:`number` and :func:`seed`: integers and finite
  floats within bounds (no negative counts, no NaN, no seed NumPy cannot take);
* :func:`existing_file` and :func:`data_source`: an input that exists, is a
  readable file and not a folder, or one of the named built-in data sets;
* :func:`output_file` and :func:`run_folder`: somewhere an output can go.

:class:`ArgumentParser` reports the refusal as one line and exits with status 2.
:func:`add_common_arguments` and :func:`add_resume_argument` add the options all
demos share, and :func:`demo_main` is the ``main`` they have in common: it
dispatches a subcommand or parses the training options and trains.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from minitransformer import atomic, backend
from minitransformer.cli.errors import BackendUnavailable, one_line


class Auto(str):
    """The type of :data:`AUTO`, so that a file named "auto" is still a file."""


AUTO = Auto("auto")  # ``--resume`` without a path: the run folder's own last checkpoint
SEED_MAX = 2 ** 32 - 1
DATA_SUFFIXES = (".csv", ".csv.gz", ".smi", ".smi.gz", ".txt", ".txt.gz")


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are one line: ``error: <prog>: <what>``."""

    def error(self, message):  # noqa: D102 (argparse's hook)
        from minitransformer.cli import ranks
        if not ranks.is_follower():  # under mpiexec every rank meets the same error: rank 0 says it
            sys.stderr.write(f"error: {self.prog}: {one_line(message)} (see {self.prog} --help)\n")
        sys.exit(2)


def _parse_number(text: str, kind):
    try:
        value = kind(text.strip())
    except (TypeError, ValueError, AttributeError):
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    return value


def int_at_least(lo: int, hi: int | None = None, why: str = "") -> Callable[[str], int]:
    """``type=`` for an integer option with a lower bound (``--epochs``: 1, ``--examples``: 0) and,
    for counts that hold everything in memory, an upper one (``why`` says what it protects)."""
    def parse(text: str) -> int:
        value = _parse_number(text, int)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be at most {hi:,}, got {text}{f' ({why})' if why else ''}")
        return value
    parse.__name__ = f"integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
    return parse


#: The bounds of the size options: each far above any run that fits a machine, low enough that a typo (an
#: extra zero or three) is refused in one line before any work instead of failing hours or gigabytes later.
MAX_EPOCHS = 100_000
MAX_BATCH = 8192
MAX_WIDTH = 8192  # --d-model, --head-hidden: a layer of D x D weights
MAX_LAYERS = 128
MAX_MOLECULES = 20_000_000  # --pretrain-limit, --pretrain-mix: molecules held in memory
MAX_MINUTES = 525_600  # a year: --max-minutes, --pretrain-minutes
MAX_STEPS = 1_000_000  # optimize --steps

#: The most molecules one command draws or judges: the samples are held in memory (a
#: million SMILES is about 100 MB) and judged together; run the command again for more.
MAX_SAMPLES = 1_000_000


def seed(text: str) -> int:
    """``type=`` for ``--seed``: an integer from 0 to 2**32 - 1 (what NumPy's generators take)."""
    value = _parse_number(text, int)
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a random seed must be an integer from 0 to {SEED_MAX}, got {text!r}")
    return value


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
           hi_open: bool = False) -> Callable[[str], float]:
    """``type=`` for a finite float within bounds: ``number(0, lo_open=True)`` is ``> 0``,
    ``number(0, 1, hi_open=True)`` is ``[0, 1)``. NaN and infinities are refused."""
    if lo is not None and hi is not None:
        want = f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    elif lo is not None:
        want = f"a number {'>' if lo_open else '>='} {lo:g}"
    elif hi is not None:
        want = f"a number {'<' if hi_open else '<='} {hi:g}"
    else:
        want = "a finite number"

    def parse(text: str) -> float:
        value = _parse_number(text, float)
        ok = math.isfinite(value)
        if ok and lo is not None:
            ok = value > lo if lo_open else value >= lo
        if ok and hi is not None:
            ok = value < hi if hi_open else value <= hi
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
        return value
    parse.__name__ = want
    return parse


def _file_problem(text: str, what: str) -> str | None:
    """Why ``text`` is not a readable file (None when it is one)."""
    if not text.strip():
        return f"the {what} path is empty"
    path = Path(text)
    if path.is_dir():
        return f"{text} is a folder, not a {what}; give the path of the file inside it"
    if not path.exists():
        resolved = path.resolve()
        return f"no such {what}: {text}" + (f" (resolved: {resolved})" if str(resolved) != text else "")
    if not path.is_file():
        return f"{text} is not a regular file"
    if not os.access(path, os.R_OK):
        return f"{text} is not readable (permission denied)"
    return None


def smiles_text(text: str) -> str:
    """A SMILES given on the command line: refused before any work when no parser should see it
    (:func:`~minitransformer.chem._rdkit.smiles_problem`: too long, not SMILES characters)."""
    from minitransformer.chem._rdkit import MAX_SMILES_CHARS, smiles_problem
    problem = smiles_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"the SMILES has {problem}" if problem.startswith("characters") else
                                         f"the SMILES is {problem}; give one molecule of at most "
                                         f"{MAX_SMILES_CHARS:,} characters")
    return text


def existing_file(what: str = "file") -> Callable[[str], str]:
    """``type=`` for an input file (``--checkpoint``): it exists, is a file, is readable."""
    def parse(text: str) -> str:
        problem = _file_problem(text, what)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text
    parse.__name__ = what
    return parse


def data_source(names: Sequence[str] = ("tox21", "druglike"), suffixes: Sequence[str] = DATA_SUFFIXES,
                refused: dict | None = None) -> Callable[[str], str]:
    """``type=`` for ``--data``: one of ``names`` (any case; returned in lower case) or an
    existing file whose name ends in one of ``suffixes``. ``refused`` maps names that
    cannot serve to the reason why."""
    names, suffixes, refused = tuple(names), tuple(suffixes), dict(refused or {})
    choices = ", ".join(names)

    def parse(text: str) -> str:
        if text.strip().lower() in refused:
            raise argparse.ArgumentTypeError(refused[text.strip().lower()])
        if text.strip().lower() in names:
            return text.strip().lower()
        problem = _file_problem(text, "data file")
        if problem:
            raise argparse.ArgumentTypeError(f"{problem}; give {choices} or the path of a "
                                             f"{'/'.join(suffixes)} file")
        if not text.lower().endswith(suffixes):
            raise argparse.ArgumentTypeError(f"{text}: unknown file type; expected one of {', '.join(suffixes)}")
        return text
    parse.__name__ = "data source"
    return parse


def input_file(what: str = "file") -> Callable[[str], str]:
    """``type=`` for an input that may also be ``-``, standard input."""
    readable = existing_file(what)

    def parse(text: str) -> str:
        return text if text == "-" else readable(text)
    parse.__name__ = what
    return parse


def output_file(text: str) -> str:
    """``type=`` for an output file (``sample --out``): not empty, not a folder, its folder
    not a file. Whether it may be overwritten is :func:`refuse_overwrite`'s question."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the output file name is empty")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name (e.g. {path / 'out.smi'})")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder")
    _check_writable(text, next(p for p in (*path.absolute().parents,) if p.exists()))
    return text


def _check_writable(text: str, folder: Path) -> None:
    """Refuse now, not after the work, an output no file can be written beside: ``folder`` is the
    nearest existing one on its path, where a file (or the folders still missing) must be made."""
    import tempfile
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{text}: cannot write in {folder} ({err.strerror or err}); "
                                         "give an output in a folder you can write to") from None


def run_folder(text: str) -> str:
    """``type=`` for ``--out`` of a training run: a folder (created if needed), not a file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the run folder name is empty")
    path = Path(text)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{p} is a file, not a folder; give a folder for the run's outputs")
    return text


def refuse_overwrite(path: str | os.PathLike | None, force: bool, option: str = "--out", inputs=()) -> None:
    """Refuse (FileExistsRefusal, exit status 2) to replace the user's file without ``--force``,
    and with it one of ``inputs``, the files the command reads (ValueError)."""
    if path is None:
        return
    same = [str(f) for f in inputs if f not in (None, "-") and Path(f).is_file() and Path(path).is_file()
            and os.path.samefile(f, path)]
    if same:
        raise ValueError(f"{option} {path} is the file this command reads ({same[0]}); give another {option}")
    if not force and Path(path).exists():
        raise atomic.FileExistsRefusal(f"{path} already exists; pass --force to overwrite it, or give "
                                       f"another {option}")


def add_command(subparsers, name: str, help: str, example: str, description: str | None = None):
    """A subcommand's parser: ``help`` in the list of commands, ``description`` (default:
    ``help``) on top of its own ``--help``, and ``example`` (one or more command lines) below."""
    return subparsers.add_parser(name, help=help, description=description or help,
                                 epilog="example:\n" + "\n".join(f"  {line}" for line in example.splitlines()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


def add_common_arguments(parser: argparse.ArgumentParser, out: str,
                         data_names: Sequence[str] = ("tox21", "druglike"),
                         data_suffixes: Sequence[str] = DATA_SUFFIXES,
                         data_refused: dict | None = None,
                         data_default: str = "Tox21 if found, else druglike") -> argparse.ArgumentParser:
    """Add the options every training command understands; ``out`` is the default run folder.
    ``data_*`` say what ``--data`` accepts (see :func:`data_source`) and what it defaults to."""
    parser.add_argument("--data", default=None, type=data_source(data_names, data_suffixes, data_refused),
                        help=f"{', '.join(data_names)}, or a {'/'.join(data_suffixes)} file "
                             f"(default: {data_default})")
    parser.add_argument("--quick", action="store_true",
                        help="tiny model, 400 molecules, 2 epochs: a smoke test that takes seconds")
    parser.add_argument("--epochs", type=int_at_least(1, MAX_EPOCHS), default=None,
                        help="override the preset's number of epochs")
    parser.add_argument("--lr", type=number(0, lo_open=True), default=None,
                        help="override the peak learning rate (train property: of the fine-tuning; its "
                             "pretraining has its own)")
    parser.add_argument("--weight-decay", type=number(0, 1), default=None,
                        help="override AdamW's decoupled weight decay, 0 to 1 (every phase; presets with AdamW only)")
    parser.add_argument("--batch-size", type=int_at_least(1, MAX_BATCH, "a batch is held in memory at once"),
                        default=None, help="override the batch size")
    parser.add_argument("--max-minutes", type=number(0, MAX_MINUTES), default=None,
                        help="training time budget (the preset's by default; 0 = no limit); what a pretraining "
                             "phase leaves, and never under 1 minute, goes to the main phase")
    parser.add_argument("--out", default=out, type=run_folder,
                        help=f"run folder, created if needed (default: {out}); a folder holding another run "
                             "needs --resume or --force")
    parser.add_argument("--force", action="store_true",
                        help="start afresh in a run folder that holds an earlier run (its files are moved to "
                             "old-YYYYmmdd-HHMMSS/ inside it first)")
    add_resume_argument(parser, help="continue the run in --out (same data and options as before): alone, from its "
                                     "latest checkpoint (last.npz, or pretrain/last.npz when it stopped while "
                                     "pretraining); or from the checkpoint named")
    parser.add_argument("--backend", default=None, choices=list(backend.BACKENDS)[:2],
                        help="numpy (default) or cupy")
    from minitransformer.cli.launch import ranks_argument
    parser.add_argument("--ranks", type=ranks_argument, default="auto", metavar="N|auto",
                        help="data-parallel processes to train with (auto: 2 on a machine with 2 or more cores, "
                             "where MPI is installed and the command can; 1: one process); the command starts "
                             "them itself")
    parser.add_argument("--seed", type=seed, default=0, help=f"random seed, 0 to {SEED_MAX} (default: 0)")
    parser.add_argument("--plot-attention", action="store_true",
                        help="also write attention heatmaps of a test example to the run folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def add_resume_argument(parser: argparse.ArgumentParser, help: str) -> argparse.ArgumentParser:
    """``--resume [CHECKPOINT]``: alone, the run folder's own last checkpoint (:data:`AUTO`)."""
    checkpoint = existing_file("checkpoint")

    def parse(text: str) -> str:  # argparse passes the const through ``type`` too
        return text if isinstance(text, Auto) else checkpoint(text)
    parse.__name__ = "checkpoint"
    parser.add_argument("--resume", nargs="?", const=AUTO, default=None, type=parse,
                        metavar="CHECKPOINT", help=help)
    return parser


def use_backend(args: argparse.Namespace) -> None:
    """Refuse a bad ``MINITRANSFORMER_KERNELS`` or ``MINITRANSFORMER_BACKEND`` (read at import, where
    they could only warn), then switch the array backend when the user asked for one with ``--backend``."""
    from minitransformer import kernels
    if kernels.ENVIRONMENT_PROBLEM:
        raise ValueError(kernels.ENVIRONMENT_PROBLEM)
    problem = backend.ENVIRONMENT_PROBLEM
    if problem is not None and not getattr(args, "backend", None):
        raise problem if isinstance(problem, ValueError) else BackendUnavailable(str(problem))
    if getattr(args, "backend", None):
        try:
            backend.use(args.backend)
        except (ImportError, RuntimeError) as err:
            raise BackendUnavailable(str(err)) from err


def check_phase_budget(pretrain_seconds: float | None, total_seconds: float | None) -> None:
    """Refuse a pretraining budget that leaves the fine-tuning (the rest of ``--max-minutes``,
    at least a minute) less than a minute: the second phase would stop almost at once."""
    if pretrain_seconds is None or total_seconds is None or total_seconds - pretrain_seconds >= 60:
        return
    minutes = lambda seconds: f"{seconds / 60:g}"  # noqa: E731
    raise ValueError(f"--pretrain-minutes {minutes(pretrain_seconds)} leaves the fine-tuning less than a minute "
                     f"of the {minutes(total_seconds)}-minute budget (pretraining counts against --max-minutes); "
                     f"raise --max-minutes, e.g. to {minutes(pretrain_seconds + 660)}")


def max_time(args: argparse.Namespace, preset_seconds: float | None) -> float | None:
    """The training time budget in seconds: ``--max-minutes`` (0 = none) or the preset's."""
    if args.max_minutes is None:
        return preset_seconds
    if not (args.max_minutes >= 0 and math.isfinite(args.max_minutes)):
        raise ValueError(f"--max-minutes must be a finite number >= 0 (0 = no limit), got {args.max_minutes}")
    return args.max_minutes * 60 if args.max_minutes > 0 else None
