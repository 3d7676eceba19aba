"""The statistics MOSES ships for its test sets: read through a restricted unpickler, pinned by checksum, and
used for MOSES's two test sets instead of minutes of ChemNet and RDKit each (a `--quick` run once spent ten
minutes there)."""
import collections
import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "datasets"))  # the MOSES stand-in files, beside their own tests
from test_chem_moses import FILES, SMILES, STATS, pinned, stats_npz  # noqa: E402, F401  (pinned: a fixture)

from minitransformer.chem.datasets import moses

from minitransformer.chem.frechet import fcd
from minitransformer.chem.judge import moses_stats

from minitransformer.chem.judge import fragments


class _Boom:
    """Unpickling this runs ``os.system``: what a forged statistics file would do to an unrestricted reader."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_the_shipped_statistics_are_read_as_arrays_and_counts_only(tmp_path):
    path = tmp_path / "test_stats.npz"
    path.write_bytes(stats_npz(np.ones(512), np.eye(512), n=2, fragments={"[1*]C": 3}, scaffolds={"c1ccccc1": 1}))
    mu, sigma, fps, frag, scaf, weights = moses_stats.read_shipped(path, 2)
    assert mu.dtype == sigma.dtype == np.float64 and (mu == 1.0).all() and (sigma == np.eye(512)).all()
    assert fps.shape == (2, 1024) and frag == collections.Counter({"[1*]C": 3}) and scaf["c1ccccc1"] == 1
    assert weights.tolist() == [100.0, 101.0]


@pytest.mark.parametrize("payload", ["boom", "fcd shape", "fps shape", "not a zip", "no FCD", "bad counts"])
def test_a_forged_or_wrong_statistics_file_is_refused_and_runs_nothing(tmp_path, payload):
    marker = tmp_path / "ran"
    path = tmp_path / "test_stats.npz"
    data = {"boom": lambda: stats_npz(np.zeros(512), np.eye(512), evil=_Boom(marker)),
            "fcd shape": lambda: stats_npz(np.zeros(3), np.eye(3)),
            "fps shape": lambda: stats_npz(np.zeros(512), np.eye(512), n=3),
            "not a zip": lambda: b"PK\x03\x04 not really",
            "no FCD": lambda: stats_npz(np.zeros(512), np.eye(512)).replace(b"FCD", b"XYZ"),
            "bad counts": lambda: stats_npz(np.zeros(512), np.eye(512), fragments={"C": -1})}[payload]()
    path.write_bytes(data)
    with pytest.raises(ValueError, match="test_stats.npz"):
        moses_stats.read_shipped(path, 1)
    assert not marker.exists(), "the forged pickle ran code"


def test_moses_test_sets_take_the_shipped_statistics_not_chemnet_or_rdkit(pinned, monkeypatch, capsys):
    """The molecules' hash names the shipped file, and the test sets every MOSES judgement reads come with it
    in the caches: neither ChemNet nor the fragmenter runs on the set."""
    folder = pinned.parent.parent / "env" / "moses"
    folder.mkdir(parents=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(folder.parent))
    test = moses.load_moses("test", download=False)
    monkeypatch.setattr(moses_stats, "SHIPPED", {moses.molecules_sha256(test): ("test_stats.npz", len(test))})
    monkeypatch.setattr(fragments, "DISK_CACHE_MIN", 1)

    class NoNet:
        def activations(self, *a, **k):
            raise AssertionError("ChemNet ran on a set whose statistics MOSES ships")

    def no_compute(reference):
        raise AssertionError("the fragmenter ran on a set whose features MOSES ships")
    monkeypatch.setattr(fragments.ReferenceFeatures, "compute", staticmethod(no_compute))
    from minitransformer.chem.judge.moses_report import moses_references
    assert moses_references(download=False)["test"] == test  # every MOSES judgement takes its test sets here
    stats = fcd.reference_statistics(test, "MOSES test", net=NoNet(), progress=False)
    assert stats.n == len(test) and (stats.mu == 1.0).all() and (stats.sigma == np.eye(512)).all()
    features = fragments.reference_features(tuple(test))
    assert features.n_valid == 2 and features.fps.shape == (2, 1024) and features.fragments == {"[1*]C": 2}
    assert features.weights.tolist() == [100.0, 101.0]
    fragments.reference_features.cache_clear()
    (folder / "test_stats.npz").write_bytes(STATS["test_scaffolds_stats.npz"])  # a changed file: checksum fails
    monkeypatch.setattr(moses, "SHA256", {**moses.SHA256, "test_stats.npz": hashlib.sha256(b"x").hexdigest()})
    for path in (fcd.cache_path(test), fragments.cache_path(tuple(test))):
        path.unlink()
    capsys.readouterr()
    assert moses_stats.seed_caches(test, download=False) is False
    said = capsys.readouterr().err
    assert "test_stats.npz cannot be had" in said and "checksum mismatch" in said and "computing them" in said


def test_another_set_is_not_served_shipped_statistics(pinned):
    assert moses_stats.seed_caches(SMILES["train"]) is False
    assert set(moses.SHA256) >= {name for name, _ in moses_stats.SHIPPED.values()}
