"""Command-line plumbing shared by the chemistry demos (``demos/*.py``).

The three demos (molecules, tox21_property, canonicalize) take the same basic
options and fail the same way on bad input, so that code lives here once.

Arguments are checked before any work starts
    :class:`ArgumentParser` reports a bad argument as one line on stderr (exit
    status 2), and the ``type=`` functions below (:func:`int_at_least`,
    :func:`number`, :func:`seed`, :func:`data_source`, :func:`existing_file`,
    :func:`output_file`, :func:`run_folder`) reject negative counts, NaN,
    missing files, folders given for files and so on while the command line is
    parsed: a bad ``--temperature`` is reported at once, not after training.

Errors are one line, never a traceback
    :func:`run_cli` runs a demo's ``main`` and turns every failure into one line
    on stderr: exit status 2 for usage errors (a bad argument, a missing or
    unreadable input file, a file that would be overwritten without ``--force``),
    1 for runtime errors (no network, a full disk, training diverged), 130 for
    Ctrl-C (naming the epoch and step it stopped at and the last good
    checkpoint). An unexpected exception is reported as one line naming its
    type; ``MINITRANSFORMER_DEBUG=1`` shows the traceback instead.

A run folder belongs to one run
    :func:`claim_run_folder` refuses an ``--out`` folder that holds another
    run's files unless ``--resume`` (checked by :func:`check_resume`: same data,
    vocabulary and settings) or ``--force`` (the old files move to
    ``old-YYYYmmdd-HHMMSS/`` first) is given.

Nothing is half-written
    :func:`write_json`, :func:`write_text`, :func:`write_bytes`,
    :func:`save_curves` and :func:`save_plot` write through
    :mod:`minitransformer.atomic`: a full disk or Ctrl-C leaves the old file as
    it was and no temporary file behind.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from minitransformer import atomic, backend

__all__ = ["ArgumentParser", "add_common_arguments", "add_resume_argument", "use_backend", "max_time", "run_cli",
           "write_json", "write_text", "write_bytes", "save_curves", "save_plot", "json_safe", "print_table",
           "attention_example", "demo_main", "int_at_least", "number", "seed", "data_source", "existing_file",
           "output_file", "run_folder", "refuse_overwrite", "claim_run_folder", "check_resume",
           "data_fingerprint", "run_fit", "WriteError", "BackendUnavailable", "DEBUG_ENV", "AUTO"]

DEBUG_ENV = "MINITRANSFORMER_DEBUG"


class _Auto(str):
    """The type of :data:`AUTO`, so that a file named "auto" is still a file."""


AUTO = _Auto("auto")  # ``--resume`` without a path: the run folder's own last checkpoint
SEED_MAX = 2 ** 32 - 1
DATA_SUFFIXES = (".csv", ".csv.gz", ".smi", ".smi.gz", ".txt", ".txt.gz")


class WriteError(RuntimeError):
    """A file could not be written (full disk, no permission, ...); the old file is intact."""


class BackendUnavailable(RuntimeError):
    """The array backend asked for with ``--backend`` cannot be used here."""


# --------------------------------------------------------------------------- parsing
class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are one line: ``error: <prog>: <what>``."""

    def error(self, message):  # noqa: D102 (argparse's hook)
        sys.stderr.write(f"error: {self.prog}: {_one_line(message)} (see {self.prog} --help)\n")
        sys.exit(2)


def _parse_number(text: str, kind):
    try:
        value = kind(text.strip())
    except (TypeError, ValueError, AttributeError):
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
    return value


def int_at_least(lo: int) -> Callable[[str], int]:
    """``type=`` for an integer option with a lower bound (``--epochs``: 1, ``--examples``: 0)."""
    def parse(text: str) -> int:
        value = _parse_number(text, int)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        return value
    parse.__name__ = f"integer >= {lo}"
    return parse


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
    return text


def run_folder(text: str) -> str:
    """``type=`` for ``--out`` of a training run: a folder (created if needed), not a file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the run folder name is empty")
    path = Path(text)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{p} is a file, not a folder; give a folder for the run's outputs")
    return text


def refuse_overwrite(path: str | os.PathLike | None, force: bool, option: str = "--out") -> None:
    """Refuse (FileExistsRefusal, exit status 2) to replace the user's file without ``--force``."""
    if path is not None and not force and Path(path).exists():
        raise atomic.FileExistsRefusal(f"{path} already exists; pass --force to overwrite it, or give "
                                       f"another {option}")


def add_common_arguments(parser: argparse.ArgumentParser, out: str,
                         data_names: Sequence[str] = ("tox21", "druglike"),
                         data_suffixes: Sequence[str] = DATA_SUFFIXES,
                         data_refused: dict | None = None) -> argparse.ArgumentParser:
    """Add the options every chemistry demo understands; ``out`` is the default run folder.
    ``data_*`` say what ``--data`` accepts (see :func:`data_source`)."""
    parser.add_argument("--data", default=None, type=data_source(data_names, data_suffixes, data_refused),
                        help=f"{', '.join(data_names)}, or a {'/'.join(data_suffixes)} file "
                             "(default: Tox21 if found, else druglike)")
    parser.add_argument("--quick", action="store_true", help="tiny model and data: a smoke test under a minute")
    parser.add_argument("--epochs", type=int_at_least(1), default=None, help="override the preset's number of epochs")
    parser.add_argument("--max-minutes", type=number(0), default=None,
                        help="training time budget (the preset's by default; 0 = no limit)")
    parser.add_argument("--out", default=out, type=run_folder,
                        help=f"run folder, created if needed (default: {out}); a folder holding another run "
                             "needs --resume or --force")
    parser.add_argument("--force", action="store_true",
                        help="start afresh in a run folder that holds an earlier run (its files are moved to "
                             "old-YYYYmmdd-HHMMSS/ inside it first)")
    parser.add_argument("--backend", default=None, choices=list(backend.BACKENDS)[:2],
                        help="numpy (default) or cupy")
    parser.add_argument("--seed", type=seed, default=0, help=f"random seed, 0 to {SEED_MAX} (default: 0)")
    parser.add_argument("--plot-attention", action="store_true",
                        help="also write attention heatmaps of a test example to the run folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def add_resume_argument(parser: argparse.ArgumentParser, help: str) -> argparse.ArgumentParser:
    """``--resume [CHECKPOINT]``: alone, the run folder's own last checkpoint (:data:`AUTO`)."""
    checkpoint = existing_file("checkpoint")

    def parse(text: str) -> str:  # argparse passes the const through ``type`` too
        return text if isinstance(text, _Auto) else checkpoint(text)
    parse.__name__ = "checkpoint"
    parser.add_argument("--resume", nargs="?", const=AUTO, default=None, type=parse,
                        metavar="CHECKPOINT", help=help)
    return parser


def use_backend(args: argparse.Namespace) -> None:
    """Switch the array backend when the user asked for one with ``--backend``."""
    if getattr(args, "backend", None):
        try:
            backend.use(args.backend)
        except (ImportError, RuntimeError) as err:
            raise BackendUnavailable(str(err)) from err


def max_time(args: argparse.Namespace, preset_seconds: float | None) -> float | None:
    """The training time budget in seconds: ``--max-minutes`` (0 = none) or the preset's."""
    if args.max_minutes is None:
        return preset_seconds
    if not (args.max_minutes >= 0 and math.isfinite(args.max_minutes)):
        raise ValueError(f"--max-minutes must be a finite number >= 0 (0 = no limit), got {args.max_minutes}")
    return args.max_minutes * 60 if args.max_minutes > 0 else None


# --------------------------------------------------------------------------- errors
def _one_line(message) -> str:
    return " ".join(str(message).split())


def _describe(exc: BaseException) -> tuple[int, str]:
    """(exit status, one-line message) for an exception that reached :func:`run_cli`."""
    from minitransformer.chem.download import DownloadError
    from minitransformer.train import TrainingDiverged
    text = _one_line(exc) or type(exc).__name__
    if isinstance(exc, (FileExistsError, IsADirectoryError, NotADirectoryError, FileNotFoundError)):
        if exc.filename is not None and exc.strerror and text.startswith("[Errno"):  # raised by the OS
            kind = "is a folder, not a file" if isinstance(exc, IsADirectoryError) else exc.strerror
            text = f"{exc.filename}: {kind}"
        return 2, text
    if isinstance(exc, ValueError):  # bad input: data, checkpoint, SMILES (CheckpointError, UnicodeDecodeError)
        return 2, text
    if isinstance(exc, (WriteError, DownloadError, TrainingDiverged, BackendUnavailable)):
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


def run_cli(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)`` and return its exit status; every failure becomes one line on stderr.

    Exit status 2: a usage error (bad argument, missing or unreadable input, a file
    that would be overwritten without ``--force``). 1: a runtime error (no network,
    full disk, training diverged) or an unexpected exception (named by its type;
    set ``MINITRANSFORMER_DEBUG=1`` for the traceback). 130: Ctrl-C, with the epoch
    and step it stopped at and the last good checkpoint.
    """
    debug = os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    try:
        return main(argv)
    except SystemExit as exc:  # argparse (--help, or its one-line error)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(f"error: {_one_line(exc.code)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if debug:
            raise
        sys.stdout.flush()
        print(_interrupt_message(), file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        code, message = _describe(exc)
        sys.stdout.flush()
        print(f"error: {message}", file=sys.stderr)
        return code


# --------------------------------------------------------------------------- progress and Ctrl-C
class _Progress:
    """What the demo is doing, for the Ctrl-C message: the phase, its trainer, its folder."""

    def __init__(self):
        self.reset()

    def reset(self, command: str | None = None):
        self.command = command  # "train" for a training run, else a subcommand's name
        self.phase = None  # "pretrain" / "train" once training started
        self.training = False  # inside fit (or interrupted inside it)
        self.trainer = None
        self.out_dir = None
        self.resumable = False


PROGRESS = _Progress()


def _track(trainer, epoch, metrics):
    """A fit callback: remember the trainer (so Ctrl-C can name its epoch and step)."""
    PROGRESS.trainer = trainer
    return None


def run_fit(phase: str, model, task, optimizer, train_data, val_data=None, *, config, callbacks=(), **kwargs):
    """:func:`minitransformer.train.fit` for a demo: Ctrl-C during training ends the
    command (KeyboardInterrupt, reported by :func:`run_cli` with the epoch, step and
    last good checkpoint) instead of going on to evaluation and sampling."""
    from minitransformer.train import fit
    PROGRESS.phase, PROGRESS.training, PROGRESS.trainer = phase, True, None
    PROGRESS.out_dir = Path(config.out_dir) if config.out_dir else None
    trainer = fit(model, task, optimizer, train_data, val_data, config=config,
                  callbacks=list(callbacks) + [_track], **kwargs)
    PROGRESS.trainer = trainer
    if trainer.stop_reason == "interrupted":
        raise KeyboardInterrupt
    PROGRESS.training = False
    return trainer


def _saved_state(path: Path) -> dict | None:
    """The trainer state (epoch, step) stored in a checkpoint, or None if unreadable."""
    meta = _saved_meta(path)
    state = meta.get("trainer") if meta else None
    return state if isinstance(state, dict) else None


def _last_good(out: Path | None) -> tuple[str, int | None]:
    """('path (end of epoch K)' or 'none saved yet', K) for the run folder ``out``."""
    if out is None:
        return "none (nothing is saved)", None
    for name in ("last.npz", "best.npz"):
        state = _saved_state(out / name)
        if state is not None:
            return f"{out / name} (end of epoch {state.get('epoch')}, step {state.get('step')})", state.get("epoch")
    return "none saved yet", None


def _interrupt_message() -> str:
    """One line for Ctrl-C: where it stopped and what was kept."""
    p = PROGRESS
    if p.command != "train":
        return "interrupted; no file was written"
    if p.phase is None:
        return "interrupted before training started; nothing was saved"
    checkpoint, saved_epoch = _last_good(p.out_dir)
    what = "pretraining" if p.phase == "pretrain" else "training"
    t = p.trainer
    if p.training:
        if t is not None:
            done, step = t.epoch, t.step  # epochs completed (saved or being saved), optimizer steps
            if t.batch_index == 0 and done > 0 and (saved_epoch is None or saved_epoch < done):
                where = f"at the end of epoch {done} (step {step}), before its checkpoint was saved"
            else:
                where = f"at epoch {done + 1} (step {step})"
        else:  # interrupted before the first epoch ended
            where = f"at epoch {(saved_epoch or 0) + 1}"
        hint = "; continue with --resume" if p.resumable and saved_epoch is not None else ""
        return f"interrupted {what} {where}; last good checkpoint: {checkpoint}{hint}"
    ended = f" (epoch {t.epoch}, step {t.step})" if t is not None else ""
    hint = "; rerun with --resume to evaluate again" if p.resumable else ""
    return (f"interrupted after training{ended}, while evaluating or writing results; "
            f"last good checkpoint: {checkpoint}{hint}")


# --------------------------------------------------------------------------- run folders
RUN_FILES = ("config.json", "metrics.json", "history.json", "best.npz", "last.npz", "samples.smi",
             "predictions.tsv", "predictions.csv", "curves.png", "molecules.png", "attention.png",
             "attention_cross.png", "pretrain")


def _run_files(out: Path) -> list[str]:
    """The names in ``out`` that a demo's run writes (an earlier run's outputs)."""
    if not out.is_dir():
        return []
    names = {p.name for p in out.iterdir()}
    return [n for n in RUN_FILES if n in names] + sorted(n for n in names if n.endswith(".npz")
                                                         and n not in RUN_FILES)


def _move_aside(out: Path, names: Sequence[str]) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest, k = out / f"old-{stamp}", 1
    while dest.exists():
        k += 1
        dest = out / f"old-{stamp}-{k}"
    dest.mkdir()
    for name in names:
        os.replace(out / name, dest / name)
    return dest


def claim_run_folder(out: str | os.PathLike, resume: str | None, force: bool,
                     resume_places: Sequence[str] | None = ("last.npz",)) -> Path | None:
    """Make ``out`` this run's folder, before any work starts; returns the checkpoint to resume from.

    * a new or empty folder (or one without any run's files): fine;
    * ``--resume``: continue the run in it (``resume`` is a checkpoint path, or :data:`AUTO`
      for the first of ``resume_places`` inside ``out``); :func:`check_resume` later
      compares its data, vocabulary and settings with this run's;
    * ``--force``: the earlier run's files move to ``out/old-YYYYmmdd-HHMMSS/`` first;
    * otherwise: FileExistsRefusal, naming both ways out.

    ``resume_places=None``: the demo cannot resume (only ``--force`` is offered).
    """
    out = Path(out)
    PROGRESS.out_dir, PROGRESS.resumable = out, resume_places is not None
    if resume is not None and force:
        raise ValueError("--resume and --force contradict each other: --resume continues the run in "
                         f"{out}, --force starts afresh (moving its files aside); pass one of them")
    if resume is not None:
        if resume_places is None:
            raise ValueError("this demo cannot resume a run; pass --force to start afresh")
        if not isinstance(resume, _Auto):
            return Path(resume)
        for place in resume_places:
            if (out / place).is_file():
                return out / place
        raise FileNotFoundError(f"--resume: {out} holds no checkpoint to resume from "
                                f"({' or '.join(resume_places)}); start the run without --resume")
    present = _run_files(out)
    if present and not force:
        shown = ", ".join(present[:4]) + (", ..." if len(present) > 4 else "")
        ways = "pass --resume to continue it, " if resume_places is not None else ""
        raise atomic.FileExistsRefusal(
            f"{out} already holds a run ({shown}); {ways}--force to start afresh (its files move to "
            f"{out / 'old-YYYYmmdd-HHMMSS'}/), or give another --out")
    if present:
        dest = _move_aside(out, present)
        print(f"--force: moved the earlier run's files ({', '.join(present)}) to {dest}/")
    return None


def data_fingerprint(*splits: Sequence[str]) -> str:
    """SHA-256 (first 16 hex digits) of the molecules of each split, in order: the same
    data in the same splits gives the same fingerprint."""
    h = hashlib.sha256()
    for split in splits:
        for s in split:
            h.update(s.encode("utf-8") + b"\n")
        h.update(b"\x00")
    return h.hexdigest()[:16]


_RESUME_IGNORES = ("settings.max_time",)  # a new time budget for the rest is fine


def _flat(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _differences(saved: dict, new: dict) -> list[str]:
    saved, new = _flat(json_safe(saved)), _flat(json_safe(new))
    return [f"{key}: {_short(saved[key])} then, {_short(new.get(key))} now" for key in saved
            if key not in _RESUME_IGNORES and new.get(key) != saved[key]]


def _vocab_difference(saved, new) -> str | None:
    old_tokens = list((saved or {}).get("tokens", []))
    new_tokens = list((new or {}).get("tokens", []))
    if saved is None or old_tokens == new_tokens:
        return None
    gone = [t for t in old_tokens if t not in set(new_tokens)]
    added = [t for t in new_tokens if t not in set(old_tokens)]
    detail = ", ".join(x for x in (f"new tokens {added[:5]}" if added else "",
                                   f"missing tokens {gone[:5]}" if gone else "") if x) or "another token order"
    return f"vocabulary: {len(old_tokens)} tokens then, {len(new_tokens)} now ({detail})"


def _saved_meta(path: Path) -> dict | None:
    """The JSON metadata of a checkpoint (without loading its arrays), None if unreadable."""
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["__meta__"].tobytes().decode("utf-8"))
        return meta if isinstance(meta, dict) else None
    except Exception:  # missing, half-written, not a checkpoint: nothing to compare
        return None


def check_resume(resume: str | os.PathLike, out: str | os.PathLike, run_info: dict, vocab) -> None:
    """Refuse (ValueError) to resume from a checkpoint, or into a folder, made with other
    data, another vocabulary or other settings; the message lists what differs.

    Compared with this run's ``run_info`` and ``vocab``: the run metadata and vocabulary
    of the checkpoint resumed from and of the checkpoints already in the run folder
    (``last.npz``, ``best.npz``, ``pretrain/*.npz``), and the folder's ``config.json``
    (its ``run`` entry). Keys a saved run lacks (older versions) and the time budget
    are not compared.
    """
    from minitransformer.checkpoint import load_checkpoint
    resume, out = Path(resume), Path(out)
    sources = [(resume, load_checkpoint(resume).meta)]  # a damaged one: CheckpointError, exit status 2
    seen = {resume.resolve()}
    for name in ("last.npz", "best.npz", "pretrain/last.npz", "pretrain/best.npz"):
        path = out / name
        if path.is_file() and path.resolve() not in seen:
            seen.add(path.resolve())
            meta = _saved_meta(path)
            if meta is not None:
                sources.append((path, meta))
    new_vocab = vocab.to_json() if hasattr(vocab, "to_json") else vocab
    problems = []
    for path, meta in sources:
        try:
            label = path.relative_to(out).as_posix()
        except ValueError:  # resuming from a checkpoint outside the run folder
            label = str(path)
        if isinstance(meta.get("run"), dict):
            problems += [f"{label}: {d}" for d in _differences(meta["run"], run_info)]
        vocab_diff = _vocab_difference(meta.get("vocab"), new_vocab)
        if vocab_diff:
            problems.append(f"{label}: {vocab_diff}")
    config = out / "config.json"
    if config.is_file():
        try:
            saved = json.loads(config.read_text(encoding="utf-8")).get("run")
        except (ValueError, AttributeError) as err:
            raise ValueError(f"{config} is not readable JSON ({err}); pass --force to start afresh") from None
        if isinstance(saved, dict):
            problems += [f"config.json: {d}" for d in _differences(saved, run_info)]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise ValueError(f"cannot resume {resume}: it or the run in {out} was made with other data or settings "
                         f"({shown}); resume with the options of that run, or pass --force to start afresh")


# --------------------------------------------------------------------------- writing
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
    """Run ``write``; an OSError (other than a refusal or a folder) becomes a WriteError naming ``path``."""
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
    """:func:`minitransformer.plots.plot_curves`, rendered in memory and written atomically."""
    from minitransformer.plots import plot_curves
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


# --------------------------------------------------------------------------- output
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
        PROGRESS.reset(command=argv[0])
        return subcommands[argv[0]](argv[1:])
    PROGRESS.reset(command="train")
    args = build_parser().parse_args(argv)
    use_backend(args)
    return train_command(args)
