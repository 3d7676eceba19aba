"""ChemNet's published weights: find them, fetch them once, verify them, read them safely.

The weights that MOSES's FCD uses ship inside the wheel of the ``fcd_torch``
package (version 1.0.7, MIT licence, Insilico Medicine), as the file
``fcd_torch/ChemNet_v0.13_pretrained.pt``, written by PyTorch's ``torch.save``.
:func:`find_chemnet_weights` looks for that file (or the wheel) in, in order,

1. ``$MINITRANSFORMER_DATA/chemnet/``, then ``$MINITRANSFORMER_DATA/``;
2. the user cache, ``cache_dir()/chemnet/``;

and otherwise fetches the wheel into the cache with ``pip download fcd_torch==1.0.7
--no-deps`` (by name and version: the user's pip settings, mirrors and proxies apply,
and no address is written here). Only the weights file is kept. The wheel and the file are each pinned by their
SHA-256 (:data:`WHEEL_SHA256`, :data:`WEIGHTS_SHA256`); every copy goes
through :mod:`minitransformer.atomic` and is hashed as it is written, so a
broken download leaves nothing a later run would trust. Offline, the error
says in one line which file to put where.

:func:`load_chemnet_weights` reads the file with
:func:`~minitransformer.chem.frechet.torch_file.read_torch_tensors`, which rebuilds
tensors and refuses every other Python object (PyTorch is never imported),
checks that the layers are the ones :class:`~minitransformer.chem.frechet.chemnet.ChemNet`
computes, and names the arrays after them.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from minitransformer.atomic import atomic_write
from minitransformer.chem.frechet.chemnet import ChemNetWeights
from minitransformer.chem.datasets import download
from minitransformer.chem.datasets.download import ChecksumError, DownloadError, cache_dir, hashing_copy, sha256_of_file
from minitransformer.chem.frechet.torch_file import TorchFileError, read_torch_tensors

__all__ = ["WHEEL_NAME", "WHEEL_SHA256", "PACKAGE", "WEIGHTS_NAME", "WEIGHTS_SHA256", "find_chemnet_weights",
           "load_chemnet_weights", "chemnet_places"]

PACKAGE = "fcd_torch==1.0.7"
WHEEL_NAME = "fcd_torch-1.0.7-py3-none-any.whl"
WHEEL_SHA256 = "63a24aae88c554a7ba6422cffdef3ad7c1befec73f835b70ead04097a1ebed6f"
MEMBER = "fcd_torch/ChemNet_v0.13_pretrained.pt"
WEIGHTS_NAME = "ChemNet_v0.13_pretrained.pt"
WEIGHTS_SHA256 = "a36658cc7c94d3c728eacd7ed2d2f104753bb2fde742c2817daefe9533a28080"


def _cache() -> Path:
    return cache_dir() / "chemnet"


def chemnet_places() -> list[Path]:
    """The folders searched, in order: ``$MINITRANSFORMER_DATA/chemnet``, ``$MINITRANSFORMER_DATA``, the cache."""
    env = os.environ.get("MINITRANSFORMER_DATA")
    return ([Path(env) / "chemnet", Path(env)] if env else []) + [_cache()]


def _offline_hint() -> str:
    return (f"run `pip download {PACKAGE} --no-deps` where there is a network and put {WHEEL_NAME} (sha256 "
            f"{WHEEL_SHA256[:12]}...), or the file {WEIGHTS_NAME} inside it, in {_cache()} or in "
            "$MINITRANSFORMER_DATA/chemnet")


def _verified(path: Path, sha256: str) -> Path:
    got = sha256_of_file(path)
    if got != sha256:
        raise ChecksumError(f"checksum mismatch for {path}: sha256 {got}, expected {sha256}; the file is damaged "
                            "or another version: delete it and run again")
    return path


def _extract(wheel: Path) -> Path:
    """Copy the weights out of ``wheel`` into the cache, hashed as they are written."""
    with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as source:
        return atomic_write(_cache() / WEIGHTS_NAME, hashing_copy(source, WEIGHTS_SHA256, f"{MEMBER} in {wheel}"))


def _fetch(timeout: float) -> Path:
    """``pip download`` the wheel into a temporary folder of the cache, take the weights out, and
    delete the rest."""
    _cache().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=_cache()) as folder:
        try:
            wheel = download.pip_download(PACKAGE, WHEEL_NAME, Path(folder), timeout)
        except OSError as exc:
            raise DownloadError(f"could not fetch ChemNet's weights ({exc}); offline? {_offline_hint()}") from None
        return _extract(_verified(wheel, WHEEL_SHA256))


def find_chemnet_weights(download: bool = True, timeout: float = 120.0) -> Path:
    """The verified path of ChemNet's weights file (module docstring), fetched once if needed.

    Raises :class:`~minitransformer.chem.datasets.download.DownloadError` (or, with
    ``download=False``, FileNotFoundError) in one line that says where to put
    the wheel, and :class:`~minitransformer.chem.datasets.download.ChecksumError` for a
    damaged or different file.
    """
    for place in chemnet_places():
        if (place / WEIGHTS_NAME).is_file():
            return _verified(place / WEIGHTS_NAME, WEIGHTS_SHA256)
        if (place / WHEEL_NAME).is_file():
            return _extract(_verified(place / WHEEL_NAME, WHEEL_SHA256))
    if not download:
        raise FileNotFoundError(f"ChemNet's weights are not on this machine; {_offline_hint()}")
    return _fetch(timeout)


#: The layers of the published file: (kind, weight shapes, options) that ChemNet computes.
_LAYERS = (
    ("Conv1d", {"weight": (32, 35, 4)}, {"stride": 2, "activation": "selu", "padding": "same"}),
    ("Conv1d", {"weight": (32, 32, 4)}, {"stride": 2, "activation": "selu", "padding": "same"}),
    ("LSTM", {"weight_ih_l0": (512, 32), "weight_hh_l0": (512, 128), "bias_ih_l0": (512,),
              "bias_hh_l0": (512,)}, {"reverse": True, "last": False}),
    ("LSTM", {"weight_ih_l0": (2048, 128), "weight_hh_l0": (2048, 512), "bias_ih_l0": (2048,),
              "bias_hh_l0": (2048,)}, {"reverse": True, "last": True}),
)


def _check_layers(layers, path) -> None:
    """Refuse a file whose layers are not exactly :data:`_LAYERS` (wrong file, another version)."""
    def fail(what):
        raise TorchFileError(f"{path} is not the ChemNet v0.13 weights file ({what})")
    if not isinstance(layers, list) or len(layers) != len(_LAYERS):
        fail("not a list of four layers")
    for i, (layer, (kind, shapes, options)) in enumerate(zip(layers, _LAYERS)):
        try:
            got_kind, (state, kwargs, other) = layer
        except (TypeError, ValueError):
            fail(f"layer {i} is not (kind, (weights, options, options))")
        if got_kind != kind or {k: getattr(v, "shape", None) for k, v in state.items()} != shapes:
            fail(f"layer {i} is not a {kind} with weights {shapes}")
        merged = {**kwargs, **other}
        if any(merged.get(k) != v for k, v in options.items()) or merged.get("bias", False) or \
                merged.get("batch_first", True) is not True:
            fail(f"layer {i}'s options differ: {merged}")


def load_chemnet_weights(path: str | os.PathLike | None = None, download: bool = True) -> ChemNetWeights:
    """ChemNet's weights as arrays: read from ``path``, or from :func:`find_chemnet_weights`."""
    path = Path(path) if path is not None else find_chemnet_weights(download=download)
    layers = read_torch_tensors(path)
    _check_layers(layers, path)
    conv1, conv2, lstm1, lstm2 = (state for _, (state, _, _) in layers)
    return ChemNetWeights(
        conv1=conv1["weight"], conv2=conv2["weight"],
        lstm1_W_ih=lstm1["weight_ih_l0"], lstm1_W_hh=lstm1["weight_hh_l0"],
        lstm1_bias=lstm1["bias_ih_l0"] + lstm1["bias_hh_l0"],
        lstm2_W_ih=lstm2["weight_ih_l0"], lstm2_W_hh=lstm2["weight_hh_l0"],
        lstm2_bias=lstm2["bias_ih_l0"] + lstm2["bias_hh_l0"])
