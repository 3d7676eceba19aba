"""Writing and reading a checkpoint file: one ``.npz`` archive, never pickled.

Every entry of the archive is a plain numeric array: ``weights/<param name>`` for the
model's weights, ``optim/<param name>/<slot>`` for the optimizer's state (Adam's
``m``, ``v`` ...), ``average/<param name>`` for a running average of the weights
(a run trained with one), and ``__meta__``, the UTF-8 bytes of a JSON object (format
version, model type and config, vocabulary, optimizer scalars, RNG state,
fingerprint, whatever the trainer adds, and ``entries``, the names of all the
arrays, so that a damaged entry name is caught).

:func:`save_checkpoint` refuses NaN or infinity before writing anything, then writes
atomically (a temporary file in the same folder, flushed, renamed over the target):
a crash mid-write leaves the old file as it was.

:func:`load_checkpoint` trusts nothing in the file. It checks, each step before the
next: the zip directory (entry names and declared sizes, against
:mod:`~minitransformer.checkpoint.limits`, before one byte is inflated), the
metadata, every array's ``.npy`` header (plain numbers whose size is exactly the
entry's), and only then reads the arrays, with ``allow_pickle=False``, and checks
that they are finite. Anything wrong is one :class:`CheckpointError` line naming the
file and the problem.
"""
from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np

from minitransformer.atomic import atomic_write, parse_json
from minitransformer.checks import is_number, is_whole
from minitransformer.checkpoint import limits
from minitransformer.checkpoint.contents import (
    META_ENTRY, FORMAT_VERSION, Checkpoint, CheckpointError, NonFiniteCheckpoint, check_finite, json_default,
    one_line, first_non_finite,
)
from minitransformer.checkpoint.earlier_layouts import upgrade
from minitransformer.checkpoint.fingerprint import fingerprint_hashes


def save_checkpoint(path, model, optimizer=None, vocab=None, extra: dict | None = None,
                    fingerprint: dict | None = None, average: tuple[dict, dict] | None = None) -> Path:
    """Write ``model`` (and optionally the optimizer, vocabulary and ``extra`` JSON
    metadata) to ``path`` atomically. Returns the path.

    ``average``: a running average of the weights, ``(scalars, {name: array})``
    (:meth:`~minitransformer.train.weight_average.WeightAverage.state`), kept as
    ``average/<param name>`` entries and ``meta["average"]``.

    ``fingerprint`` (a dict of JSON data, e.g. the data settings) is stored hashed,
    with the vocabulary's hash, as ``meta["fingerprint"]`` (:func:`fingerprint_hashes`).

    A weight, optimizer state or weight average holding NaN or infinity raises
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
    if average is not None:
        scalars, averaged = average
        averaged = {name: np.asarray(a) for name, a in averaged.items()}
        bad = bad or first_non_finite(averaged, "weight average")
        meta["average"] = dict(scalars)
        arrays.update({f"average/{name}": a for name, a in averaged.items()})
    if bad is not None:
        raise NonFiniteCheckpoint(
            f"refusing to write {path}: non-finite values ({bad[1]}) in {bad[0]}; a checkpoint must "
            "hold finite numbers only (the file as it was, if any, is kept)", bad[0])
    if extra:
        meta.update(extra)
    meta["entries"] = sorted(arrays)  # the table of contents: a damaged entry name cannot go unnoticed
    blob = json.dumps(meta, default=json_default).encode("utf-8")
    arrays[META_ENTRY] = np.frombuffer(blob, dtype=np.uint8)

    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def _corrupt(path, err) -> CheckpointError:
    return CheckpointError(f"{path} is truncated or corrupted ({type(err).__name__}: {one_line(err)}); use an "
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
    limits.check_archive_size(path, total, path.stat().st_size)
    members = {}
    for info in infos:
        if not info.filename.endswith(".npy"):
            raise CheckpointError(f"{path} is not a minitransformer checkpoint (its entry {info.filename!r} "
                                  "is not an array)")
        members[info.filename[:-len(".npy")]] = info
    if META_ENTRY not in members:
        shown = sorted(members)
        raise CheckpointError(
            f"{path} is not a minitransformer checkpoint (it has no {META_ENTRY} entry; "
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
        meta = parse_json(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path}: its metadata is not valid JSON ({one_line(err)})") from err
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


_TRAINER_KEYS = {"epoch": "int", "batch": "int", "step": "int", "best": "number or null",
                 "best_epoch": "int or null", "bad_epochs": "int", "history": "list"}


def _meta_problem(meta: dict) -> str | None:
    """What is wrong with the structure of a checkpoint's metadata entries (None if nothing):
    each entry that restoring or resuming reads later is checked here, so a crafted file fails now."""
    if "model_rng" in meta:
        rng = meta["model_rng"]
        if not (isinstance(rng, dict) and is_whole(rng.get("seed")) and is_whole(rng.get("counter"))):
            return f"its metadata entry 'model_rng' is {str(rng)[:80]!r}, not {{'seed': int, 'counter': int}}"
    if "trainer" in meta:
        st = meta["trainer"]
        if not isinstance(st, dict):
            return f"its metadata entry 'trainer' is a {type(st).__name__}, not a JSON object"
        for key, kind in _TRAINER_KEYS.items():
            v = st.get(key, ...)
            ok = {"int": is_whole(v) and v >= 0, "number or null": v is None or is_number(v),
                  "int or null": v is None or is_whole(v), "list": isinstance(v, list)}[kind]
            if not ok:
                got = "missing" if v is ... else repr(v)[:40]
                return f"its metadata entry 'trainer' has {key} {got}, not {kind if kind != 'int' else 'an int >= 0'}"
    vocab = meta.get("vocab")
    if vocab is not None:
        if not isinstance(vocab, (dict, list)):
            return f"its metadata entry 'vocab' is a {type(vocab).__name__}, not a JSON object"
        tokens = vocab if isinstance(vocab, list) else vocab.get("tokens")
        if isinstance(vocab, dict) and "format" in vocab and tokens is None:
            return "its metadata entry 'vocab' has no 'tokens' list"
        if tokens is not None:
            if not (isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)):
                return "its metadata entry 'vocab' has 'tokens' that are not a list of strings"
            # a serialized vocabulary object (it names its format) must be the model's; free-form JSON is the user's
            problem = "format" in vocab and _vocab_size_problem(len(tokens), meta.get("config"))
            if problem:
                return problem
        recorded = (meta.get("fingerprint") or {}).get("vocab") if isinstance(meta.get("fingerprint"), dict) else None
        # a serialized vocabulary (it names its format: lists and strings, which JSON keeps exactly) must be
        # the one whose checksum was saved beside it; free-form JSON is the user's, as above
        if isinstance(recorded, str) and isinstance(vocab, dict) and "format" in vocab \
                and fingerprint_hashes(None, vocab)["vocab"] != recorded:
            return ("its vocabulary is not the one it was saved with (its tokens do not match the checksum recorded "
                    "beside them): the file was edited")
    return None


def _vocab_size_problem(n: int, config) -> str | None:
    """A recorded vocabulary whose size is not the model's vocabulary size."""
    if not isinstance(config, dict):
        return None  # the config's own checks say what is wrong with it
    if is_whole(config.get("vocab_size")):
        sizes = {config["vocab_size"]}
    elif is_whole(config.get("tgt_vocab_size")):
        src, tgt = config.get("src_vocab_size"), config["tgt_vocab_size"]
        sizes = {tgt} if config.get("share_embeddings") or src == tgt else {src, tgt}
    else:
        return None
    if n not in sizes:
        return (f"its vocabulary has {n} tokens but its model config's vocabulary size is "
                f"{' or '.join(map(str, sorted(sizes)))}; the file is corrupted or forged: use an earlier checkpoint")
    return None


def read_checkpoint(path, before_arrays=None) -> Checkpoint:
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
        meta_info = members.pop(META_ENTRY)
        _guarded(path, _header, path, zf, meta_info)
        meta = _parse_meta(path, _guarded(path, _read_array, zf, meta_info.filename))
        problem = _meta_problem(meta)
        if problem:
            raise CheckpointError(f"{path}: {problem}")
        if "entries" in meta and sorted(members) != sorted(meta["entries"]):  # (older files have no list)
            missing = sorted(set(meta["entries"]) - set(members))
            unexpected = sorted(set(members) - set(meta["entries"]))
            raise CheckpointError(f"{path} is corrupted: its entries do not match its table of contents (missing "
                                  f"{missing[:3]}, unexpected {unexpected[:3]}); use an earlier checkpoint")
        try:  # an earlier version's layout, read as today's (earlier_layouts.py)
            meta, rename = upgrade(meta)
        except CheckpointError as err:
            raise CheckpointError(f"{path}: {err}") from None
        members = {k: v for k, v in members.items()
                   if k.startswith(("weights/", "optim/", "average/"))}  # others: ignored
        if rename is not None:  # its weights under today's names; its optimizer state is not carried over
            members = {"weights/" + rename(k[len("weights/"):]): v for k, v in members.items()
                       if k.startswith("weights/") and rename(k[len("weights/"):]) is not None}
        headers = {k: _guarded(path, _header, path, zf, info) for k, info in members.items()}
        for k in sorted(headers):
            if headers[k][1].kind != "f":  # weights, optimizer state and average are floating point
                kind = {"weights": "weight", "optim": "optimizer state"}.get(k.split("/")[0], "weight average")
                raise CheckpointError(f"{path}: {kind} {k.split('/', 1)[1]} holds {headers[k][1]} values, not "
                                      "floating point; the file is corrupted or forged: use an earlier checkpoint")
        shapes = {k: h[0] for k, h in headers.items()}
        if before_arrays is not None:
            before_arrays(meta, {k[len("weights/"):]: v for k, v in shapes.items() if k.startswith("weights/")})
        data = {k: _guarded(path, _read_array, zf, info.filename) for k, info in members.items()}
    weights = {k[len("weights/"):]: v for k, v in data.items() if k.startswith("weights/")}
    optim = {k[len("optim/"):]: v for k, v in data.items() if k.startswith("optim/")}
    averaged = {k[len("average/"):]: v for k, v in data.items() if k.startswith("average/")}
    check_finite(path, weights, optim, averaged)
    return Checkpoint(weights=weights, meta=meta, optim_arrays=optim, path=path, average_arrays=averaged)


def load_checkpoint(path) -> Checkpoint:
    """Read and validate a checkpoint file (nothing is applied to any model).

    Raises FileNotFoundError for a missing file and :class:`CheckpointError` (one line)
    for anything else wrong with it: not a checkpoint, truncated or corrupted, too large
    (the limits of the module notes), pickled objects, a newer format, NaN or infinite
    weights or optimizer state (:class:`NonFiniteCheckpoint`).
    """
    return read_checkpoint(path)
