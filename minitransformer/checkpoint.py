"""Safe checkpoints: one ``.npz`` file, never pickled, written atomically.

Layout of the archive (every entry a plain numeric array):

* ``weights/<param name>``: the model's weights (host float arrays);
* ``optim/<param name>/<slot>``: optimizer state arrays (Adam's ``m``, ``v`` ...);
* ``__meta__``: UTF-8 JSON bytes (a uint8 array) holding the format version, the
  model type and config, the vocabulary, the optimizer's scalars, the RNG state, the
  fingerprint (below), ``entries`` (the names of all the arrays, so that a damaged
  entry name is caught) and whatever the trainer adds (epoch, step, best metric, ...).

The fingerprint, ``meta["fingerprint"]``, is ``{name: "sha256:<hex>"}``: one hash
per entry of the ``fingerprint`` dict given to :func:`save_checkpoint` (data
settings: file, split, seed, max length ...) and, whenever a vocabulary is saved,
``"vocab"``, the hash of the vocabulary. :func:`check_fingerprint` compares a
checkpoint's with a run's, so that a resume with another vocabulary of the same size,
or other data, is refused instead of silently continuing. Checkpoints written before
fingerprints existed have none and are not checked.

Reading never unpickles (``allow_pickle=False``), so a file carrying pickled objects
is refused, never executed. Every array is read and checked before anything is
applied: a truncated file, a foreign file, a newer format, weights of another
architecture, or NaN/infinite values raise :class:`CheckpointError` (one line,
naming the file and the problem) and leave the model untouched.
Writes go to a temporary file in the same folder, are flushed to disk, and then
renamed over the target, so a crash mid-write never destroys the old checkpoint;
a model or optimizer state holding NaN or infinity is refused before anything is
written (:class:`NonFiniteCheckpoint`).

A checkpoint from an unknown source is read in an order that bounds the memory it
can make us allocate, each step before the next:

1. the zip directory: every entry's declared uncompressed size, and their total,
   against :data:`MAX_CHECKPOINT_BYTES` and :data:`MAX_COMPRESSION_RATIO` times the
   file's size (a zip bomb is refused before one byte is inflated);
2. the metadata, and (in :func:`model_from_checkpoint`) the model config: the
   parameter count it implies (:func:`declared_parameters`) against
   :data:`MAX_PARAMETERS`, before the model is built;
3. each array's header: its shape and dtype must be plain numbers and account
   exactly for the entry's size, and (in :func:`model_from_checkpoint`) the
   weights' shapes must be the model's, before any array is read.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minitransformer.atomic import atomic_write

FORMAT_VERSION = 1
_META = "__meta__"

# Limits on what a checkpoint may declare, checked before anything is allocated
# (module attributes: raise them here for a genuine checkpoint that exceeds them).
MAX_PARAMETERS = 2_000_000_000          # parameters implied by the model config
MAX_CHECKPOINT_BYTES = 64 * 2**30       # total uncompressed size of all entries
MAX_COMPRESSION_RATIO = 100             # uncompressed size / file size ...
MAX_UNCOMPRESSED_FLOOR = 256 * 2**20    # ... checked only above this total (small files may compress well)
_MAX_SIZE_FIELD = 2**40                 # no config size (d_model, max_len ...) is ever this large


class CheckpointError(ValueError):
    """A checkpoint could not be read or does not fit; the message says why and what to do."""


class NonFiniteCheckpoint(CheckpointError):
    """A model or optimizer state holds NaN or infinity: refused at save and at load.
    ``tensor`` names the first such tensor (``"weight <name>"`` or ``"optimizer state <name>/<slot>"``)."""

    def __init__(self, message: str, tensor: str):
        super().__init__(message)
        self.tensor = tensor


def first_non_finite(arrays: dict, kind: str) -> tuple[str, str] | None:
    """``(tensor, counts)`` for the first array (in name order) holding NaN or infinity,
    e.g. ``("weight head.linear.bias", "2 NaN, 0 inf among 13 values")``; None if all are finite."""
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            n_nan = int(np.isnan(a).sum())
            return f"{kind} {name}", f"{n_nan} NaN, {int((~np.isfinite(a)).sum()) - n_nan} inf among {a.size} values"
    return None


def _one_line(err) -> str:
    return " ".join(str(err).split())


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

    @property
    def fingerprint(self) -> dict:
        """``{name: "sha256:<hex>"}`` recorded at save time ({} for older checkpoints)."""
        return dict(self.meta.get("fingerprint") or {})

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


class FingerprintMismatch(CheckpointError):
    """A checkpoint was written for another vocabulary or other data settings."""


def _hash(value, name: str) -> str:
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)
    except (TypeError, ValueError) as err:
        raise ValueError(f"fingerprint entry {name!r} must be JSON data (numbers, strings, lists, dicts): "
                         f"{_one_line(err)}") from None
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


def check_fingerprint(ckpt: "Checkpoint", hashes: dict, where="the checkpoint") -> None:
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


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"checkpoint metadata: {type(obj).__name__} is not JSON-serialisable")


def save_checkpoint(path, model, optimizer=None, vocab=None, extra: dict | None = None,
                    fingerprint: dict | None = None) -> Path:
    """Write ``model`` (and optionally the optimizer, vocabulary and ``extra`` JSON
    metadata) to ``path`` atomically. Returns the path.

    ``fingerprint`` (a dict of JSON data, e.g. the data settings) is stored hashed,
    with the vocabulary's hash, as ``meta["fingerprint"]`` (:func:`fingerprint_hashes`).

    A weight or optimizer state holding NaN or infinity raises
    :class:`NonFiniteCheckpoint` (naming the first such tensor) before anything is
    written, so an existing file at ``path`` stays as it was."""
    path = Path(path)
    weights = model.state_dict()  # host copies
    bad = first_non_finite(weights, "weight")
    arrays = {f"weights/{k}": v for k, v in weights.items()}
    meta = {"format_version": FORMAT_VERSION, "model_type": type(model).__name__}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_dict"):
        meta["config"] = config.to_dict()
    if getattr(model, "rng", None) is not None:
        meta["model_rng"] = model.rng.state_dict()
    if vocab is not None:
        meta["vocab"] = vocab.to_json() if hasattr(vocab, "to_json") else vocab
    hashes = fingerprint_hashes(fingerprint, vocab)
    if hashes:
        meta["fingerprint"] = hashes
    if optimizer is not None:
        sd = optimizer.state_dict()
        scalars = {k: v for k, v in sd.items() if k != "state"}
        scalars["state_names"] = sorted(sd["state"])
        meta["optimizer"] = scalars
        slots_by_key = {f"{name}/{slot}": np.asarray(arr) for name, slots in sd["state"].items()
                        for slot, arr in slots.items()}
        bad = bad or first_non_finite(slots_by_key, "optimizer state")
        arrays.update({f"optim/{key}": arr for key, arr in slots_by_key.items()})
    if bad is not None:
        raise NonFiniteCheckpoint(
            f"refusing to write {path}: non-finite values ({bad[1]}) in {bad[0]}; a checkpoint must "
            "hold finite numbers only (the file as it was, if any, is kept)", bad[0])
    if extra:
        meta.update(extra)
    meta["entries"] = sorted(arrays)  # the table of contents: a damaged entry name cannot go unnoticed
    blob = json.dumps(meta, default=_json_default).encode("utf-8")
    arrays[_META] = np.frombuffer(blob, dtype=np.uint8)

    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def _corrupt(path, err) -> CheckpointError:
    return CheckpointError(f"{path} is truncated or corrupted ({type(err).__name__}: {_one_line(err)}); use an "
                           "earlier checkpoint (the trainer keeps best.npz and last.npz)")


def _guarded(path, fn, *args):
    """``fn(*args)``; any error other than our own CheckpointError (or running out of
    memory) means a damaged file, and becomes one CheckpointError line."""
    try:
        return fn(*args)
    except (CheckpointError, MemoryError):
        raise
    except Exception as err:
        raise _corrupt(path, err) from err


def _directory(path: Path, zf: zipfile.ZipFile) -> dict:
    """{entry name: ZipInfo}, checked from the zip directory alone (nothing is inflated)."""
    infos = zf.infolist()
    names = [info.filename for info in infos]
    if len(set(names)) != len(names):
        raise CheckpointError(f"{path} is not a valid checkpoint: it has repeated entries")
    total = sum(info.file_size for info in infos)
    if total > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"{path} declares {total:,} bytes uncompressed, above MAX_CHECKPOINT_BYTES={MAX_CHECKPOINT_BYTES:,} "
            "of minitransformer.checkpoint; if the file is genuine, raise that limit")
    size = path.stat().st_size
    if total > max(MAX_UNCOMPRESSED_FLOOR, MAX_COMPRESSION_RATIO * size):
        raise CheckpointError(
            f"{path} declares {total:,} bytes uncompressed in a file of {size:,} bytes (more than "
            f"MAX_COMPRESSION_RATIO={MAX_COMPRESSION_RATIO} times); refusing to unpack it (a zip bomb?)")
    members = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise CheckpointError(f"{path} is not a minitransformer checkpoint (its entry {info.filename!r} "
                                  "is not an array)")
        members[info.filename[:-len(".npy")]] = info
    if _META not in members:
        shown = sorted(members)
        raise CheckpointError(
            f"{path} is not a minitransformer checkpoint (it has no {_META} entry; "
            f"its entries are {shown[:8]}{' ...' if len(shown) > 8 else ''})")
    return members


def _header(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple, np.dtype]:
    """An entry's array shape and dtype, from its .npy header only; checked to be plain
    numbers whose size is exactly what the zip directory declares for the entry."""
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise CheckpointError(f"{path}: entry {info.filename} is in .npy format {version}, which is not read")
        header_bytes = f.tell()
    if dtype.hasobject:
        raise CheckpointError(
            f"{path} contains pickled Python objects (entry {info.filename}); refusing to load it (checkpoints "
            "are read with allow_pickle=False because unpickling can run arbitrary code)")
    if dtype.kind not in "biuf" or dtype.fields is not None:
        raise CheckpointError(f"{path}: entry {info.filename} holds {dtype} values, not plain numbers")
    data_bytes = math.prod(shape) * dtype.itemsize
    if header_bytes + data_bytes != info.file_size:
        raise CheckpointError(
            f"{path}: entry {info.filename} declares shape {shape} of {dtype} ({data_bytes:,} bytes) but the "
            f"archive holds {info.file_size - header_bytes:,} bytes for it; the file is corrupted or forged: "
            "use an earlier checkpoint")
    return tuple(shape), dtype


def _read_array(zf: zipfile.ZipFile, name: str) -> np.ndarray:
    """Read one entry (its size already checked); reading to its end verifies its CRC."""
    with zf.open(name) as f:
        arr = np.lib.format.read_array(f, allow_pickle=False)
        if f.read(1):
            raise CheckpointError(f"entry {name} has bytes after its array")
    return arr


def _parse_meta(path: Path, raw: np.ndarray) -> dict:
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: its metadata is not valid JSON ({_one_line(err)})") from err
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
    return meta


def _check_finite(where, weights: dict, optim_arrays: dict) -> None:
    bad = first_non_finite(weights, "weight") or first_non_finite(optim_arrays, "optimizer state")
    if bad is not None:
        raise NonFiniteCheckpoint(
            f"{where} holds non-finite values ({bad[1]}) in {bad[0]}; it was written after training "
            "diverged and cannot be used: use an earlier checkpoint", bad[0])


def _read(path, before_arrays=None) -> Checkpoint:
    """Read a checkpoint in the bounded order of the module notes. ``before_arrays(meta,
    weight_shapes)`` runs after the metadata and the headers are checked and before any
    array is read; it may raise CheckpointError."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder, not a checkpoint file; give the .npz file in it")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":  # a zip archive (.npz) starts so
        if b"PK\x03\x04".startswith(magic):
            raise CheckpointError(f"{path} is truncated or corrupted ({len(magic)} bytes); use an earlier "
                                  "checkpoint (the trainer keeps best.npz and last.npz)")
        raise CheckpointError(f"{path} is not a minitransformer checkpoint (it is not an .npz archive)")
    zf = _guarded(path, zipfile.ZipFile, path)
    with zf:
        members = _guarded(path, _directory, path, zf)
        meta_info = members.pop(_META)
        _guarded(path, _header, path, zf, meta_info)
        meta = _parse_meta(path, _guarded(path, _read_array, zf, meta_info.filename))
        if "entries" in meta and sorted(members) != sorted(meta["entries"]):  # (older files have no list)
            missing = sorted(set(meta["entries"]) - set(members))
            unexpected = sorted(set(members) - set(meta["entries"]))
            raise CheckpointError(f"{path} is corrupted: its entries do not match its table of contents (missing "
                                  f"{missing[:3]}, unexpected {unexpected[:3]}); use an earlier checkpoint")
        members = {k: v for k, v in members.items() if k.startswith(("weights/", "optim/"))}  # others: ignored
        shapes = {k: _guarded(path, _header, path, zf, info)[0] for k, info in members.items()}
        if before_arrays is not None:
            before_arrays(meta, {k[len("weights/"):]: v for k, v in shapes.items() if k.startswith("weights/")})
        data = {k: _guarded(path, _read_array, zf, info.filename) for k, info in members.items()}
    weights = {k[len("weights/"):]: v for k, v in data.items() if k.startswith("weights/")}
    optim = {k[len("optim/"):]: v for k, v in data.items() if k.startswith("optim/")}
    _check_finite(path, weights, optim)
    return Checkpoint(weights=weights, meta=meta, optim_arrays=optim)


def load_checkpoint(path) -> Checkpoint:
    """Read and validate a checkpoint file (nothing is applied to any model).

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` (one line)
    for anything else wrong with it: not a checkpoint, truncated or corrupted, too large
    (the limits of the module notes), pickled objects, a newer format, NaN or infinite
    weights or optimizer state (:class:`NonFiniteCheckpoint`).
    """
    return _read(path)


def _model_classes():
    from minitransformer.models import (
        DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq, Seq2SeqConfig,
    )
    return {"DecoderLM": (DecoderLM, DecoderLMConfig), "Encoder": (Encoder, EncoderConfig),
            "Seq2Seq": (Seq2Seq, Seq2SeqConfig)}


def _fit_problems(model, model_type, shapes: dict) -> list[str]:
    """Differences between a model and a checkpoint's weight names and shapes."""
    own = dict(model.named_parameters())
    problems = []
    for n in sorted(set(own) - set(shapes)):
        problems.append(f"missing in checkpoint: {n} {tuple(own[n].shape)}")
    for n in sorted(set(shapes) - set(own)):
        problems.append(f"not in model: {n} {tuple(shapes[n])}")
    for n in sorted(set(own) & set(shapes)):
        if tuple(own[n].shape) != tuple(shapes[n]):
            problems.append(f"shape of {n}: model {tuple(own[n].shape)}, checkpoint {tuple(shapes[n])}")
    if model_type and model_type != type(model).__name__:
        problems.insert(0, f"model type: checkpoint {model_type}, model {type(model).__name__}")
    return problems


def _does_not_fit(problems) -> CheckpointError:
    return CheckpointError("checkpoint does not fit this model (different architecture):\n  "
                           + "\n  ".join(problems))


def restore(model, ckpt: Checkpoint, optimizer=None) -> None:
    """Load weights (and optimizer state and RNG) into existing objects.

    Everything is checked first; on any mismatch a :class:`CheckpointError` lists
    the differing names and shapes and nothing has been changed. Non-finite weights
    (or optimizer state) are refused too, naming the tensor.
    """
    problems = _fit_problems(model, ckpt.model_type, {k: np.shape(v) for k, v in ckpt.weights.items()})
    if problems:
        raise _does_not_fit(problems)
    _check_finite("the checkpoint", ckpt.weights, ckpt.optim_arrays if optimizer is not None else {})
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


_SIZE_FIELDS = {  # config field -> smallest allowed value (fields a model's size grows with)
    "vocab_size": 1, "src_vocab_size": 1, "tgt_vocab_size": 1, "max_len": 1, "d_model": 1, "n_heads": 1,
    "d_head": 1, "d_ff": 0, "n_layers": 0, "n_enc_layers": 0, "n_dec_layers": 0, "n_outputs": 0,
}


def declared_parameters(model_type: str, config: dict) -> int:
    """An upper bound on the parameters (and position-table entries) of the model that
    ``config`` (a config's ``to_dict()``, e.g. from a checkpoint) describes, computed
    from its fields without building anything. Raises CheckpointError for a size field
    that is not a whole number in its range, or a missing one."""
    classes = _model_classes()
    if model_type not in classes:
        raise CheckpointError(f"unknown model type {model_type!r}; known types: {sorted(classes)}")
    if not isinstance(config, dict):
        raise CheckpointError(f"its model config is {type(config).__name__}, not a JSON object")
    fields = {f.name: f.default for f in dataclasses.fields(classes[model_type][1])}
    c = {**fields, **config}
    for name, low in _SIZE_FIELDS.items():
        if name not in fields or (name == "d_head" and c[name] is None):
            continue
        value = c[name]
        if value is dataclasses.MISSING:
            raise CheckpointError(f"its model config has no {name}")
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < _MAX_SIZE_FIELD:
            raise CheckpointError(f"its model config has {name}={value!r}; it must be a whole number "
                                  f">= {low} (and below {_MAX_SIZE_FIELD:,})")
    D, H, F, P = c["d_model"], c["n_heads"], c["d_ff"], c["max_len"]
    inner = H * (c["d_head"] if c.get("d_head") is not None else max(D // H, 1))
    attention = 4 * D * inner + 3 * inner + D  # qkv (D, 3 inner) and proj (inner, D), with biases
    block = attention + 2 * D * F + F + D + 4 * D  # + feed-forward and two LayerNorms

    def embedder(v):  # token table + positions (learned, or the fixed sinusoidal table)
        return v * D + P * D

    def head(v):  # counted untied: an upper bound
        return D * v + v

    if model_type == "DecoderLM":
        return embedder(c["vocab_size"]) + c["n_layers"] * block + 2 * D + head(c["vocab_size"])
    if model_type == "Encoder":
        return (embedder(c["vocab_size"]) + c["n_layers"] * block + 2 * D + head(c["vocab_size"])
                + (D + 1) * c["n_outputs"])
    return (embedder(c["src_vocab_size"]) + embedder(c["tgt_vocab_size"]) + c["n_enc_layers"] * block
            + c["n_dec_layers"] * (block + attention + 2 * D) + 4 * D + head(c["tgt_vocab_size"]))


def _build_model(meta: dict, where):
    """The model a checkpoint's metadata describes, its size bounded before it is built."""
    classes = _model_classes()
    model_type = meta.get("model_type")
    if model_type not in classes:
        raise CheckpointError(f"{where} holds an unknown model type {model_type!r}; "
                              f"known types: {sorted(classes)}")
    try:
        n = declared_parameters(model_type, meta.get("config"))
    except CheckpointError as err:
        raise CheckpointError(f"{where}: {err}") from None
    if n > MAX_PARAMETERS:
        raise CheckpointError(
            f"{where}: its {model_type} config declares about {n:,} parameters, above MAX_PARAMETERS="
            f"{MAX_PARAMETERS:,} of minitransformer.checkpoint; if the file is genuine, raise that limit")
    cls, cfg_cls = classes[model_type]
    try:
        config = cfg_cls.from_dict(meta["config"])
    except Exception as err:  # the config's own checks (ValueError, TypeError ...)
        raise CheckpointError(f"{where}: its model config is invalid ({_one_line(err)})") from err
    return cls(config)


def model_from_checkpoint(path_or_ckpt):
    """Build the model described by a checkpoint and load its weights.

    Returns ``(model, checkpoint)``; the model is in eval mode. From a path, the
    config is bounded (:data:`MAX_PARAMETERS`) before the model is built, and the
    weights' shapes are compared with the model's before any weight is read.
    """
    built = {}

    def build(meta, weight_shapes):
        model = _build_model(meta, path_or_ckpt)
        problems = _fit_problems(model, meta.get("model_type"), weight_shapes)
        if problems:
            raise _does_not_fit(problems)
        built["model"] = model

    if isinstance(path_or_ckpt, Checkpoint):
        ckpt = path_or_ckpt
        build(ckpt.meta, {k: np.shape(v) for k, v in ckpt.weights.items()})
    else:
        ckpt = _read(path_or_ckpt, before_arrays=build)
    model = built["model"]
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
