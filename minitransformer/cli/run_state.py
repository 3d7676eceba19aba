"""What the demo is doing right now, so that Ctrl-C can say where it stopped.

A KeyboardInterrupt carries no information, yet the user who pressed Ctrl-C
wants to know two things: how far training got, and which file to resume from.
The module-level :data:`PROGRESS` records what is needed to answer:

* which command runs (``"train"`` or a subcommand such as ``sample``),
* which phase (``"pretrain"`` or ``"train"``) and whether it is inside ``fit``,
* the trainer (its epoch, step and position within the epoch),
* the run folder, and whether this demo can resume at all.

:func:`run_fit` keeps the record up to date around
:func:`minitransformer.train.fit`; :func:`interrupt_message` turns it into one
line. The "last good checkpoint" is read from the checkpoint's own metadata
(:func:`saved_meta`), never guessed from file times.
"""
from __future__ import annotations

from pathlib import Path

from minitransformer.atomic import parse_json


class _Progress:
    """What the demo is doing, for the Ctrl-C message: the phase, its trainer, its folder."""

    def __init__(self):
        self.reset()

    def reset(self, command: str | None = None):
        self.command = command  # "train" for a training run, else a subcommand's name
        self.phase = None  # "pretrain" / "train" once training started
        self.training = False  # inside fit (or interrupted inside it)
        self.trainer = None
        self.out_dir = None  # the folder of the phase being trained (OUT, or OUT/pretrain)
        self.resumable = False
        self.run_dir = None  # the run folder (--out) and where --resume looks in it
        self.resume_places = ()
        self.saved_note = None  # a command other than train: what it has saved so far and how to go on


PROGRESS = _Progress()


def _track(trainer, epoch, metrics):
    """A fit callback: remember the trainer (so Ctrl-C can name its epoch and step)."""
    PROGRESS.trainer = trainer
    return None


def run_fit(phase: str, model, task, optimizer, train_data, val_data=None, *, config, callbacks=(), parallel=None,
            **kwargs):
    """:func:`minitransformer.train.fit` for a command (``parallel``: its data-parallel ranks, or
    None): Ctrl-C during training ends the command (KeyboardInterrupt, reported by :func:`run_cli`
    with the epoch, step and last good checkpoint) instead of going on to evaluation and sampling."""
    from minitransformer.train import fit
    kwargs["extra_meta"] = {"phase": phase, **(kwargs.get("extra_meta") or {})}  # names the rows of history.csv
    PROGRESS.phase, PROGRESS.training, PROGRESS.trainer = phase, True, None
    PROGRESS.out_dir = Path(config.out_dir) if config.out_dir else None
    trainer = fit(model, task, optimizer, train_data, val_data, config=config,
                  callbacks=list(callbacks) + [_track], parallel=parallel, **kwargs)
    PROGRESS.trainer = trainer
    if trainer.stop_reason == "interrupted":
        raise KeyboardInterrupt
    PROGRESS.training = False
    return trainer


def _saved_state(path: Path) -> dict | None:
    """The trainer state (epoch, step) stored in a checkpoint, or None if unreadable."""
    meta = saved_meta(path)
    state = meta.get("trainer") if meta else None
    return state if isinstance(state, dict) else None


def resume_point(run_dir: Path | None, places) -> Path | None:
    """The checkpoint ``--resume`` continues from: the first of ``places`` (paths inside the run
    folder, latest phase first: ``last.npz``, ``pretrain/last.npz``) that holds a readable training
    state, each followed by the ``best.npz`` beside it, should that ``last.npz`` have been lost (a
    full disk on the first save). The command's --resume and the Ctrl-C message both ask this, so
    they always agree."""
    if run_dir is None:
        return None
    for name in [n for p in places for n in (p, str(Path(p).with_name("best.npz")))]:
        if _saved_state(run_dir / name) is not None:
            return run_dir / name
    return None


def _last_good(out: Path | None) -> tuple[str, int | None]:
    """('path (end of epoch K)' or 'none saved yet', K) for the run folder ``out``."""
    if out is None:
        return "none (nothing is saved)", None
    for name in ("last.npz", "best.npz"):
        state = _saved_state(out / name)
        if state is not None:
            return f"{out / name} (end of epoch {state.get('epoch')}, step {state.get('step')})", state.get("epoch")
    return "none saved yet", None


def interrupt_message() -> str:
    """One line for Ctrl-C: where it stopped and what was kept."""
    p = PROGRESS
    if p.command != "train":
        return f"interrupted; {p.saved_note}" if p.saved_note else "interrupted; no file was written"
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
            elif t.batch_index == 0 and done > 0:
                where = f"at the end of epoch {done} (step {step}), after its checkpoint was saved"
            else:
                where = f"at epoch {done + 1} (step {step})"
        else:  # interrupted before the first epoch ended
            where = f"at epoch {(saved_epoch or 0) + 1}"
        point = resume_point(p.run_dir, p.resume_places) if p.resumable else None
        if point is not None and saved_epoch is None:  # nothing of this phase yet: an earlier phase's
            state = _saved_state(point) or {}
            checkpoint = f"{point} (end of epoch {state.get('epoch')}, step {state.get('step')})"
        hint = f"; continue with --resume (from {point})" if point is not None else ""
        return f"interrupted {what} {where}; last good checkpoint: {checkpoint}{hint}"
    ended = f" (epoch {t.epoch}, step {t.step})" if t is not None else ""
    hint = "; rerun with --resume to evaluate again" if p.resumable else ""
    return (f"interrupted after training{ended}, while evaluating or writing results; "
            f"last good checkpoint: {checkpoint}{hint}")


def saved_meta(path: Path) -> dict | None:
    """The JSON metadata of a checkpoint (without loading its arrays), None if unreadable."""
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = parse_json(z["__meta__"].tobytes().decode("utf-8"))
        return meta if isinstance(meta, dict) else None
    except Exception:  # missing, half-written, not a checkpoint: nothing to compare
        return None
