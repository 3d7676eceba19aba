"""The fingerprint: what a run was trained on, so that a resume can be checked.

A checkpoint records ``meta["fingerprint"]``, ``{name: "sha256:<hex>"}``: one hash
per entry of the ``fingerprint`` dict given to
:func:`~minitransformer.checkpoint.save_checkpoint` (the data settings: file, split,
seed, max length ...) and, whenever a vocabulary is saved, one for ``"vocab"``.
Each entry is hashed on its own, so a mismatch can be named. On resume,
:func:`check_fingerprint` compares the checkpoint's hashes with the run's and
refuses another vocabulary of the same size, or other data, instead of silently
training on. Checkpoints written before fingerprints existed have none and are not
checked.
"""
from __future__ import annotations

import hashlib
import json

from minitransformer.checkpoint.contents import Checkpoint, CheckpointError, json_default, one_line


class FingerprintMismatch(CheckpointError):
    """A checkpoint was written for another vocabulary or other data settings."""


def _hash(value, name: str) -> str:
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=json_default)
    except (TypeError, ValueError) as err:
        raise ValueError(f"fingerprint entry {name!r} must be JSON data (numbers, strings, lists, dicts): "
                         f"{one_line(err)}") from None
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint_hashes(fingerprint: dict | None = None, vocab=None) -> dict:
    """``{name: "sha256:<hex>"}`` for each entry of ``fingerprint`` (JSON data, e.g. the
    data settings) and, if a ``vocab`` is given (anything with ``to_json()``, or JSON
    data), for ``"vocab"``. Each entry is hashed on its own (canonical JSON, sorted
    keys), so a mismatch can be named."""
    if fingerprint is not None and not isinstance(fingerprint, dict):
        raise ValueError(f"fingerprint must be a dict of named settings, got {type(fingerprint).__name__}")
    out = {str(k): _hash(v, str(k)) for k, v in (fingerprint or {}).items()}
    if vocab is not None and "vocab" not in out:
        out["vocab"] = _hash(vocab.to_json() if hasattr(vocab, "to_json") else vocab, "vocab")
    return out


def check_fingerprint(ckpt: Checkpoint, hashes: dict, where="the checkpoint") -> None:
    """Refuse (:class:`FingerprintMismatch`) if ``hashes`` (from :func:`fingerprint_hashes`)
    differ from what ``ckpt`` recorded. An entry the checkpoint records must be given
    and equal; entries it does not record (an older checkpoint has none) are not checked."""
    recorded = ckpt.meta.get("fingerprint") or {}
    problems = []
    for name in sorted(recorded):
        if name not in hashes:
            problems.append(f"this run gives no {name}")
        elif hashes[name] != recorded[name]:
            problems.append(f"{name} differs (checkpoint {str(recorded[name])[:19]}..., this run "
                            f"{hashes[name][:19]}...)")
    if problems:
        raise FingerprintMismatch(
            f"cannot resume from {where}: it was written for other data or another vocabulary ("
            + "; ".join(problems) + "). Resume with the same data and vocabulary settings, or start a fresh "
            "run (another output folder, without resume)")


def model_sha256(ckpt: Checkpoint) -> str:
    """The sha256 of what a model read from ``ckpt`` is: its type, configuration and vocabulary,
    then each weight's name, dtype, shape and bytes in name order. Two checkpoints of the same model
    give the same digest though their files differ (the record of when and where a run was made);
    another weight, even by one bit, gives another."""
    import numpy as np
    h = hashlib.sha256(json.dumps([ckpt.meta.get(k) for k in ("model_type", "config", "vocab")],
                                  sort_keys=True, default=json_default).encode())
    for name in sorted(ckpt.weights):
        w = np.ascontiguousarray(ckpt.weights[name])  # (any shape)
        h.update(f"{name}:{w.dtype.str}:{w.shape}".encode())
        h.update(w.tobytes())
    return h.hexdigest()
