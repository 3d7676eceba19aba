"""The FCD statistics MOSES ships: read through a restricted unpickler, pinned by checksum, and used for
MOSES's two test sets instead of four minutes of ChemNet each (a `--quick` run once spent ten minutes there)."""
import io
import os
import pickle

import numpy as np
import pytest
from test_chem_moses import FILES, STATS, pinned, stats_npz  # noqa: F401  (pinned: a fixture)

from minitransformer.chem import fcd, moses, moses_stats


class _Boom:
    """Unpickling this runs ``os.system``: what a forged statistics file would do to an unrestricted reader."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_the_shipped_statistics_are_read_as_arrays_only(tmp_path):
    path = tmp_path / "test_stats.npz"
    path.write_bytes(STATS["test_stats.npz"])
    mu, sigma = moses_stats.read_shipped_fcd(path)
    assert mu.dtype == sigma.dtype == np.float64 and (mu == 1.0).all() and (sigma == np.eye(512)).all()
    path.write_bytes(stats_npz(np.zeros(512), np.eye(512), Frag={"frag": __import__("collections").Counter(C=3)}))
    assert moses_stats.read_shipped_fcd(path)[0].sum() == 0.0, "a Counter beside the FCD entry is fine"


@pytest.mark.parametrize("payload", ["boom", "shape", "not a zip", "no FCD"])
def test_a_forged_or_wrong_statistics_file_is_refused_and_runs_nothing(tmp_path, payload):
    marker = tmp_path / "ran"
    path = tmp_path / "test_stats.npz"
    data = {"boom": lambda: stats_npz(np.zeros(512), np.eye(512), evil=_Boom(marker)),
            "shape": lambda: stats_npz(np.zeros(3), np.eye(3)),
            "not a zip": lambda: b"PK\x03\x04 not really",
            "no FCD": lambda: stats_npz(np.zeros(512), np.eye(512)).replace(b"FCD", b"XYZ")}[payload]()
    path.write_bytes(data)
    with pytest.raises(ValueError, match="test_stats.npz"):
        moses_stats.read_shipped_fcd(path)
    assert not marker.exists(), "the forged pickle ran code"


def test_moses_test_sets_take_the_shipped_statistics_not_chemnet(pinned, monkeypatch, capsys):
    """The molecules' cache key names the shipped file; ChemNet never runs on the set."""
    import hashlib
    folder = pinned.parent.parent / "env" / "moses"
    folder.mkdir(parents=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(folder.parent))
    test = moses.load_moses("test", download=False)
    monkeypatch.setattr(moses_stats, "SHIPPED", {fcd._cache_key(test): ("test_stats.npz", len(test))})

    class NoNet:
        def activations(self, *a, **k):
            raise AssertionError("ChemNet ran on a set whose statistics MOSES ships")
    stats = fcd.reference_statistics(test, "MOSES test", net=NoNet(), progress=False)
    assert stats.n == len(test) and (stats.mu == 1.0).all() and (stats.sigma == np.eye(512)).all()
    cached = fcd.reference_statistics(test, "MOSES test", net=NoNet(), progress=False)
    assert (cached.sigma == stats.sigma).all(), "read from the cache the second time"
    (folder / "test_stats.npz").write_bytes(STATS["test_scaffolds_stats.npz"])  # a changed file: checksum fails
    monkeypatch.setattr(moses, "SHA256", {**moses.SHA256, "test_stats.npz": hashlib.sha256(b"x").hexdigest()})
    capsys.readouterr()
    assert moses_stats.shipped_statistics(fcd._cache_key(test), download=False) is None
    said = capsys.readouterr().err
    assert "test_stats.npz cannot be had" in said and "checksum mismatch" in said and "computing them" in said


def test_another_set_is_not_served_shipped_statistics():
    assert moses_stats.shipped_statistics("0" * 64) is None
    assert set(moses.SHA256) >= {name for name, _ in moses_stats.SHIPPED.values()}
