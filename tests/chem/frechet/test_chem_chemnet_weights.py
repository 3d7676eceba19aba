"""Finding and fetching ChemNet's weights: places searched, pip download by name and version,
checksums, offline.

A stand-in wheel holds a stand-in weights file; the module's checksums are pinned to them by
monkeypatching and ``pip`` is a patched ``subprocess.run``, so nothing here touches the network.
"""
import hashlib
import io
import zipfile

import pytest
from chem_helpers import serve_pip

from minitransformer.chem.frechet import chemnet_weights as cw
from minitransformer.chem.datasets.download import ChecksumError, DownloadError
from minitransformer.chem.frechet.torch_file import TorchFileError

WEIGHTS = b"stand-in weights"


def _wheel(weights=WEIGHTS):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(cw.MEMBER, weights)
        archive.writestr("fcd_torch/__init__.py", "")
    return buffer.getvalue()


WHEEL = _wheel()


@pytest.fixture
def pinned(monkeypatch, tmp_path):
    """Checksums pinned to the stand-ins; an empty cache; no MINITRANSFORMER_DATA; no network."""
    monkeypatch.setattr(cw, "WHEEL_SHA256", hashlib.sha256(WHEEL).hexdigest())
    monkeypatch.setattr(cw, "WEIGHTS_SHA256", hashlib.sha256(WEIGHTS).hexdigest())
    monkeypatch.delenv("MINITRANSFORMER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "minitransformer" / "chemnet"


def _pip(monkeypatch, payload=WHEEL, fail=False):
    return serve_pip(monkeypatch, cw.WHEEL_NAME, payload, fail)


def test_pip_fetches_the_wheel_and_only_the_weights_are_kept(pinned, monkeypatch):
    pip = _pip(monkeypatch)
    path = cw.find_chemnet_weights()
    assert path == pinned / cw.WEIGHTS_NAME and path.read_bytes() == WEIGHTS
    assert [p.name for p in pinned.iterdir()] == [cw.WEIGHTS_NAME]  # the wheel and the temporary folder are gone
    assert "fcd_torch==1.0.7" in pip[0] and "--no-deps" in pip[0]
    assert cw.find_chemnet_weights() == path and len(pip) == 1  # found in the cache the second time


def test_the_wheels_are_fetched_by_name_not_by_address():
    """ChemNet's and MOSES's wheels come from ``pip download NAME==VERSION``: no address in their code."""
    import inspect

    from minitransformer.chem.datasets import moses
    for module in (cw, moses):
        assert "http" not in inspect.getsource(module), module.__name__
        assert not [name for name in vars(module) if "URL" in name], module.__name__


def test_offline_is_one_line_naming_the_wheel_and_where_to_put_it(pinned, monkeypatch):
    _pip(monkeypatch, fail=True)
    with pytest.raises(DownloadError) as err:
        cw.find_chemnet_weights()
    message = str(err.value)
    assert "\n" not in message and f"pip download {cw.PACKAGE} --no-deps" in message and str(pinned) in message
    assert "No matching distribution" in message and cw.WHEEL_NAME in message
    assert not pinned.exists() or list(pinned.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="not on this machine"):
        cw.find_chemnet_weights(download=False)


def test_a_damaged_download_leaves_nothing_behind(pinned, monkeypatch):
    _pip(monkeypatch, payload=WHEEL[:-10] + b"0123456789")
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        cw.find_chemnet_weights()
    assert list(pinned.iterdir()) == []


def test_files_placed_by_hand_are_found_and_verified(pinned, monkeypatch, tmp_path):
    _pip(monkeypatch, fail=True)
    data = tmp_path / "data"
    (data / "chemnet").mkdir(parents=True)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(data))
    (data / cw.WHEEL_NAME).write_bytes(WHEEL)  # a wheel in $MINITRANSFORMER_DATA: its weights go to the cache
    assert cw.find_chemnet_weights() == pinned / cw.WEIGHTS_NAME
    (data / "chemnet" / cw.WEIGHTS_NAME).write_bytes(WEIGHTS)  # the file itself, found first
    assert cw.find_chemnet_weights() == data / "chemnet" / cw.WEIGHTS_NAME
    (data / "chemnet" / cw.WEIGHTS_NAME).write_bytes(b"other weights")
    with pytest.raises(ChecksumError, match="delete it and run again"):
        cw.find_chemnet_weights()


def test_a_file_with_other_layers_is_refused(monkeypatch, tmp_path):
    import numpy as np
    layers = [("Conv1d", ({"weight": np.zeros((16, 35, 4), np.float32)}, {"stride": 2},
                          {"activation": "selu", "padding": "same"}))] * 4
    monkeypatch.setattr(cw, "read_torch_tensors", lambda path: layers)
    with pytest.raises(TorchFileError, match="not the ChemNet v0.13 weights file"):
        cw.load_chemnet_weights(tmp_path / "x.pt")
