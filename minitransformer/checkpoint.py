"""Safe checkpoints: one ``.npz`` file, never pickled, written atomically.

Layout of the archive (every entry a plain numeric array):

* ``weights/<param name>``: the model's weights (host float arrays);
* ``optim/<param name>/<slot>``: optimizer state arrays (Adam's ``m``, ``v`` ...);
* ``__meta__``: UTF-8 JSON bytes (a uint8 array) holding the format version, the
  model type and config, the vocabulary, the optimizer's scalars, the RNG state and
  whatever the trainer adds (epoch, step, best metric, ...).

Reading uses ``numpy.load(allow_pickle=False)``, so a file carrying pickled objects
is refused, never executed. Every array is read and checked before anything is
applied: a truncated file, a foreign file, a newer format, or weights of another
architecture raise :class:`CheckpointError` and leave the model untouched.
Writes go to a temporary file in the same folder, are flushed to disk, and then
renamed over the target, so a crash mid-write never destroys the old checkpoint.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minitransformer.atomic import atomic_write

FORMAT_VERSION = 1
_META = "__meta__"


class CheckpointError(ValueError):
    """A checkpoint could not be read or does not fit; the message says why and what to do."""


@dataclass
class Checkpoint:
    """The contents of a checkpoint file, all on the host."""

    weights: dict
    meta: dict
    optim_arrays: dict = field(default_factory=dict)

    @property
    def model_type(self) -> str | None:
        return self.meta.get("model_type")

    @property
    def config(self) -> dict | None:
        return self.meta.get("config")

    @property
    def vocab(self):
        return self.meta.get("vocab")

    def optimizer_state(self) -> dict | None:
        """The optimizer's ``state_dict`` (scalars from the JSON, arrays from the archive)."""
        scalars = self.meta.get("optimizer")
        if scalars is None:
            return None
        sd = dict(scalars)
        state: dict = {}
        for key, arr in self.optim_arrays.items():
            name, slot = key.rsplit("/", 1)
            state.setdefault(name, {})[slot] = arr
        for name in scalars.get("state_names", []):
            state.setdefault(name, {})
        sd["state"] = state
        sd.pop("state_names", None)
        return sd


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"checkpoint metadata: {type(obj).__name__} is not JSON-serialisable")


def save_checkpoint(path, model, optimizer=None, vocab=None, extra: dict | None = None) -> Path:
    """Write ``model`` (and optionally the optimizer, vocabulary and ``extra`` JSON
    metadata) to ``path`` atomically. Returns the path."""
    path = Path(path)
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    meta = {"format_version": FORMAT_VERSION, "model_type": type(model).__name__}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        meta["config"] = config.to_dict()
    if getattr(model, "rng", None) is not None:
        meta["model_rng"] = model.rng.state_dict()
    if vocab is not None:
        meta["vocab"] = vocab.to_json() if hasattr(vocab, "to_json") else vocab
    if optimizer is not None:
        sd = optimizer.state_dict()
        scalars = {k: v for k, v in sd.items() if k != "state"}
        scalars["state_names"] = sorted(sd["state"])
        meta["optimizer"] = scalars
        for name, slots in sd["state"].items():
            for slot, arr in slots.items():
                arrays[f"optim/{name}/{slot}"] = np.asarray(arr)
    if extra:
        meta.update(extra)
    blob = json.dumps(meta, default=_json_default).encode("utf-8")
    arrays[_META] = np.frombuffer(blob, dtype=np.uint8)

    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def load_checkpoint(path) -> Checkpoint:
    """Read and validate a checkpoint file (nothing is applied to any model)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":  # np.load would call any non-zip file "pickled data"
        if b"PK\x03\x04".startswith(magic):
            raise CheckpointError(f"{path} is truncated or corrupted ({len(magic)} bytes); use an earlier "
                                  "checkpoint (the trainer keeps best.npz and last.npz)")
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (it is not an .npz archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            if _META not in names:
                raise CheckpointError(
                    f"{path} is not a minitransformer checkpoint (it has no {_META} entry; "
                    f"its entries are {names[:8]}{' ...' if len(names) > 8 else ''})"
                )
            data = {name: z[name] for name in names}  # reads (and CRC-checks) every entry now
    except CheckpointError:
        raise
    except ValueError as err:
        if "pickle" in str(err).lower():
            raise CheckpointError(
                f"{path} contains pickled Python objects; refusing to load it (checkpoints are read "
                "with allow_pickle=False because unpickling can run arbitrary code)"
            ) from err
        raise CheckpointError(f"{path} is not a readable checkpoint: {err}") from err
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as err:
        raise CheckpointError(
            f"{path} is truncated or corrupted ({type(err).__name__}: {err}); use an earlier "
            "checkpoint (the trainer keeps best.npz and last.npz)"
        ) from err
    try:
        meta = json.loads(data.pop(_META).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: its metadata is not valid JSON ({err})") from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (its metadata is not a JSON object)")
    version = meta.get("format_version")
    if not isinstance(version, int):
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (no format version)")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written in checkpoint format {version}, but this minitransformer reads "
            f"formats up to {FORMAT_VERSION}; upgrade minitransformer to load it"
        )
    weights = {k[len("weights/"):]: v for k, v in data.items() if k.startswith("weights/")}
    optim = {k[len("optim/"):]: v for k, v in data.items() if k.startswith("optim/")}
    return Checkpoint(weights=weights, meta=meta, optim_arrays=optim)


def _model_classes():
    from minitransformer.models import (
        DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq, Seq2SeqConfig,
    )
    return {"DecoderLM": (DecoderLM, DecoderLMConfig), "Encoder": (Encoder, EncoderConfig),
            "Seq2Seq": (Seq2Seq, Seq2SeqConfig)}


def restore(model, ckpt: Checkpoint, optimizer=None) -> None:
    """Load weights (and optimizer state and RNG) into existing objects.

    Everything is checked first; on any mismatch a :class:`CheckpointError` lists
    the differing names and shapes and nothing has been changed.
    """
    own = dict(model.named_parameters())
    problems = []
    for n in sorted(set(own) - set(ckpt.weights)):
        problems.append(f"missing in checkpoint: {n} {tuple(own[n].shape)}")
    for n in sorted(set(ckpt.weights) - set(own)):
        problems.append(f"not in model: {n} {tuple(ckpt.weights[n].shape)}")
    for n in sorted(set(own) & set(ckpt.weights)):
        if tuple(own[n].shape) != tuple(ckpt.weights[n].shape):
            problems.append(f"shape of {n}: model {tuple(own[n].shape)}, checkpoint {tuple(ckpt.weights[n].shape)}")
    if ckpt.model_type and ckpt.model_type != type(model).__name__:
        problems.insert(0, f"model type: checkpoint {ckpt.model_type}, model {type(model).__name__}")
    if problems:
        raise CheckpointError("checkpoint does not fit this model (different architecture):\n  "
                              + "\n  ".join(problems))
    opt_state = ckpt.optimizer_state() if optimizer is not None else None
    if optimizer is not None and opt_state is None:
        raise CheckpointError("checkpoint has no optimizer state to restore")
    if optimizer is not None:
        try:
            optimizer.load_state_dict(opt_state)  # checks everything before it writes anything
        except ValueError as err:
            raise CheckpointError(f"checkpoint's optimizer state does not fit: {err}") from err
    model.load_state_dict(ckpt.weights)  # cannot fail now: names and shapes were checked above
    if "model_rng" in ckpt.meta and getattr(model, "rng", None) is not None:
        model.rng.load_state_dict(ckpt.meta["model_rng"])


def model_from_checkpoint(path_or_ckpt):
    """Build the model described by a checkpoint and load its weights.

    Returns ``(model, checkpoint)``; the model is in eval mode.
    """
    ckpt = path_or_ckpt if isinstance(path_or_ckpt, Checkpoint) else load_checkpoint(path_or_ckpt)
    classes = _model_classes()
    if ckpt.model_type not in classes:
        raise CheckpointError(f"checkpoint holds an unknown model type {ckpt.model_type!r}; "
                              f"known types: {sorted(classes)}")
    cls, cfg_cls = classes[ckpt.model_type]
    model = cls(cfg_cls.from_dict(ckpt.config))
    restore(model, ckpt)
    return model.eval(), ckpt


def average_checkpoints(paths) -> dict:
    """Average the weights of several checkpoints of one architecture (as the original
    transformer did with its last checkpoints). Returns {name: float array}; load it
    with ``model.load_state_dict``."""
    paths = list(paths)
    if not paths:
        raise ValueError("average_checkpoints: give at least one checkpoint path")
    total = None
    for p in paths:
        w = load_checkpoint(p).weights
        if total is None:
            total = {k: v.astype(np.float64) for k, v in w.items()}
            dtypes = {k: v.dtype for k, v in w.items()}
            continue
        if set(w) != set(total) or any(w[k].shape != total[k].shape for k in w):
            raise CheckpointError(f"average_checkpoints: {p} has a different architecture from {paths[0]}")
        for k in total:
            total[k] += w[k]
    return {k: (v / len(paths)).astype(dtypes[k]) for k, v in total.items()}
