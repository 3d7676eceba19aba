"""A run folder belongs to one run.

A training demo writes its outputs (``config.json``, ``last.npz``,
``samples.smi``, ...) into ``--out``. Running it again into the same folder
would mix two runs' files, so :func:`claim_run_folder` decides, before any
work starts, what may happen to a folder that already holds a run:

* without a flag it is refused, and the message names both ways out;
* ``--resume`` continues the run in it; :func:`check_resume` then compares the
  data (:func:`data_fingerprint`), the vocabulary and the settings recorded in
  the checkpoints and ``config.json`` with this run's, and refuses with the
  list of differences (only the time budget may change);
* ``--force`` starts afresh after moving the earlier run's files, and only
  those, into ``old-YYYYmmdd-HHMMSS/`` inside the folder.

First of all the folder is locked for this run
(:mod:`minitransformer.cli.folder_lock`), so two runs never write one folder,
and the temporary files a killed run left there are swept away.
"""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Sequence

from minitransformer import atomic
from minitransformer.cli import ranks
from minitransformer.cli.arguments import Auto
from minitransformer.cli.outputs import json_safe
from minitransformer.cli.run_state import PROGRESS, resume_point, saved_meta


RUN_FILES = ("config.json", "metrics.json", "history.json", "history.csv", "provenance.json", "best.npz",
             "last.npz", "samples.smi", "samples_valence.smi", "samples_syntax.smi", "moses_table.md",
             "predictions.tsv", "predictions.csv", "test_probabilities.npy", "val_probabilities.npy",
             "test_labels.npy", "val_labels.npy", "scored.csv", "best.csv", "curves.png", "molecules.png",
             "attention.png", "attention_cross.png", "pretrain")


def _run_files(out: Path) -> list[str]:
    """The names in ``out`` that a demo's run writes (an earlier run's outputs)."""
    if not out.is_dir():
        return []
    names = {p.name for p in out.iterdir()}
    return [n for n in RUN_FILES if n in names] + sorted(
        n for n in names if n not in RUN_FILES and (n.endswith(".npz") or (n.startswith("attention") and
                                                                           n.endswith(".png"))))


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
                     resume_places: Sequence[str] = ("last.npz",), reads: Sequence = ()) -> Path | None:
    """Make ``out`` this run's folder, before any work starts; returns the checkpoint to resume from.

    * a new or empty folder (or one without any run's files): fine;
    * ``--resume``: continue the run in it (``resume`` is a checkpoint path, or :data:`AUTO`
      for the first of ``resume_places`` inside ``out``); :func:`check_resume` later
      compares its data, vocabulary and settings with this run's;
    * ``--force``: the earlier run's files move to ``out/old-YYYYmmdd-HHMMSS/`` first, unless
      one of them is (or holds) a file the command ``reads`` (paths, or anything else, skipped): refused;
    * otherwise: FileExistsRefusal, naming both ways out.

    In a data-parallel command rank 0 claims the folder and tells the other ranks.
    """
    return ranks.on_rank0(lambda: _claim(Path(out), resume, force, resume_places, reads))


def _claim(out: Path, resume, force: bool, resume_places, reads=()) -> Path | None:
    """:func:`claim_run_folder` in one process."""
    from minitransformer.cli.folder_lock import lock_run_folder, sweep_temporary_files
    PROGRESS.out_dir, PROGRESS.resumable = out, True
    PROGRESS.run_dir, PROGRESS.resume_places = out, tuple(resume_places)
    if resume is not None and force:
        raise ValueError("--resume and --force contradict each other: --resume continues the run in "
                         f"{out}, --force starts afresh (moving its files aside); pass one of them")
    if isinstance(resume, Auto) and not out.is_dir():  # refused before the lock would make the folder
        raise FileNotFoundError(f"--resume: there is no folder {out} to resume a run from; give the --out of the "
                                "run to continue, or start the run without --resume")
    lock_run_folder(out)
    sweep_temporary_files(out)
    if resume is not None:
        if not isinstance(resume, Auto):
            return Path(resume)
        point = resume_point(out, resume_places)
        if point is not None:
            return point
        instead = ("pass --force to start afresh (its files move aside)" if _run_files(out) else
                   "start the run without --resume")
        raise FileNotFoundError(f"--resume: {out} holds no checkpoint to resume from "
                                f"({' or '.join(resume_places)}); {instead}")
    present = _run_files(out)
    if present and not force:
        shown = ", ".join(present[:4]) + (", ..." if len(present) > 4 else "")
        raise atomic.FileExistsRefusal(
            f"{out} already holds a run ({shown}); pass --resume to continue it, --force to start afresh (its files move to "
            f"{out / 'old-YYYYmmdd-HHMMSS'}/), or give another --out")
    moved = [(out / name).resolve() for name in present]
    files = [Path(p) for p in reads if isinstance(p, (str, os.PathLike)) and Path(p).is_file()]
    held = [str(path) for path in files if any(path.resolve().is_relative_to(m) for m in moved)]
    if held:
        raise ValueError(f"--force would move {held[0]} aside with the earlier run in {out}, and this command reads "
                         "it; copy it out of the folder first, or give another --out")
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


def labels_fingerprint(tasks: Sequence[str], *labels) -> str:
    """SHA-256 (first 16 hex digits) of the task names and of each split's label table ((N, K),
    NaN = missing): the same molecules with one label changed give another fingerprint."""
    import json

    import numpy as np
    h = hashlib.sha256(json.dumps(list(tasks)).encode("utf-8"))
    for table in labels:
        table = np.asarray(table, dtype=np.float64)  # (N, K)
        h.update(f"{table.shape}".encode())
        h.update(np.where(np.isnan(table), -1.0, table).tobytes())
    return h.hexdigest()[:16]


#: What a resumed run may change: its time budget (and the phases' budgets a time plan derives from it)
#: and its sample count.
_RESUME_IGNORES = ("settings.max_time", "settings.fine_tune_time", "settings.time_budget",
                   "settings.pretrain_max_time", "settings.samples",
                   "settings.data")  # (the data as named: its molecules' digest is what is compared)


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


#: Settings since removed, at the value that did nothing: a run that recorded them there is the same run.
_REMOVED_AT_DEFAULT = {"settings.pretrain_descriptors": 0.0, "settings.model.pooling": "cls"}


#: Settings since moved, by their old place: a run that recorded one there is compared at its new place.
_MOVED = {"settings.model.head_hidden": "settings.head_hidden"}


#: Settings added since, at the value a run made before them had: a run that lacks one is compared at it.
_ADDED_AT = {"settings.model.pointer": False}


def _differences(saved: dict, new: dict) -> list[str]:
    saved, new = _flat(json_safe(saved)), _flat(json_safe(new))
    saved = {_MOVED.get(key, key): value for key, value in saved.items()}
    if any(key.startswith("settings.model.") for key in saved):  # a model recorded without a later option
        saved = {**{key: value for key, value in _ADDED_AT.items() if key in new}, **saved}
    return [f"{key}: {_short(saved[key])} then, {_short(new.get(key))} now" for key in saved
            if key not in _RESUME_IGNORES and new.get(key) != saved[key]
            and not (key not in new and _REMOVED_AT_DEFAULT.get(key, ...) == saved[key])]


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


def _listed(problems: list[str]) -> str:
    """The first five differences, and how many more there are."""
    return "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")


def _record_differences(out: Path, run_info: dict) -> list[str]:
    """What differs between ``run_info`` and the run record of ``out/config.json``."""
    config = out / "config.json"
    try:
        saved = atomic.parse_json(config.read_text(encoding="utf-8")).get("run")
    except (OSError, ValueError, AttributeError) as err:
        raise ValueError(f"{config} is not readable JSON ({err}); pass --force to start afresh") from None
    return [f"config.json: {d}" for d in _differences(saved, run_info)] if isinstance(saved, dict) else []


def check_recorded_run(out: str | os.PathLike, run_info: dict) -> None:
    """Refuse (ValueError) a finished run in ``out`` whose record (``config.json``'s ``run``: data, labels,
    settings ...) differs from ``run_info``, or that holds no record: for a run read back whose
    checkpoints were removed, as :func:`check_resume` compares one that has them."""
    out = Path(out)
    if not (out / "config.json").is_file():
        raise ValueError(f"{out} holds no config.json, so the run in it cannot be shown to be this command's; "
                         "start afresh with --force")
    problems = _record_differences(out, run_info)
    if problems:
        raise ValueError(f"cannot read back the run in {out}: it was made with other data or settings "
                         f"({_listed(problems)}); use the options of that run, or pass --force to start afresh")


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
            meta = saved_meta(path)
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
    if (out / "config.json").is_file():
        problems += _record_differences(out, run_info)
    if problems:
        raise ValueError(f"cannot resume {resume}: it or the run in {out} was made with other data or settings "
                         f"({_listed(problems)}); resume with the options of that run, or pass --force to start afresh")
