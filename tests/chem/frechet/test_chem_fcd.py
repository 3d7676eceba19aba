"""The Fréchet ChemNet Distance: the formula, the reference implementation's values, the cache.

:data:`FCD_TORCH` holds what ``fcd_torch`` 1.0.7 (the code MOSES runs, PyTorch 2.13 on the
CPU, SciPy 1.17, RDKit 2026.09) printed for pairs of real molecule sets, computed outside
this repository. The sets are cut from the data files the same way here.
"""
import os

import numpy as np
import pytest
import scipy.linalg

from minitransformer.chem.frechet import fcd as fcd_module
from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit
from minitransformer.chem.frechet.fcd import (FCDJudge, FCDStatistics, fcd, fcd_judge_or_note, fcd_statistics,
                                      frechet_distance, reference_statistics)
from minitransformer.chem.datasets.moses import read_moses_file

# (set a, set b) -> FCD by fcd_torch. tox21 sets: the molecules of tox21.csv.gz that RDKit parses, in
# file order, rows [start, stop); moses sets: the first n molecules of a split.
FCD_TORCH = {
    (("tox21", 0, 1000), ("tox21", 1000, 2000)): 2.635400782620266,
    (("tox21", 2000, 2100), ("tox21", 1000, 2000)): 15.284762419121932,  # 100 molecules: a singular covariance
    (("moses", "test", 2000), ("moses", "test_scaffolds", 2000)): 5.040577217928757,
    (("moses", "train", 2000), ("moses", "test", 2000)): 3.50639518856309,
    (("tox21", 0, 1000), ("moses", "test", 2000)): 21.539829631841855,
}


def _stats(rng, d=6, n=50):
    x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    return FCDStatistics(mu=x.mean(axis=0), sigma=np.cov(x, rowvar=False), n=n)


def test_frechet_distance_equals_the_matrix_square_root_form():
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = _stats(rng), _stats(rng)
        root = scipy.linalg.sqrtm(a.sigma @ b.sigma).real
        want = np.sum((a.mu - b.mu) ** 2) + np.trace(a.sigma) + np.trace(b.sigma) - 2 * np.trace(root)
        assert frechet_distance(a, b) == pytest.approx(want, rel=1e-9)
        assert frechet_distance(a, b) == pytest.approx(frechet_distance(b, a), rel=1e-9)


def test_frechet_distance_special_cases():
    rng = np.random.default_rng(1)
    a = _stats(rng)
    assert abs(frechet_distance(a, a)) < 1e-9
    shifted = FCDStatistics(mu=a.mu + 3.0, sigma=a.sigma, n=a.n)
    assert frechet_distance(a, shifted) == pytest.approx(9.0 * len(a.mu), rel=1e-9)
    one = FCDStatistics(mu=np.array([1.0]), sigma=np.array([[4.0]]), n=2)  # 1-D: (m1-m2)^2 + (s1-s2)^2
    two = FCDStatistics(mu=np.array([-1.0]), sigma=np.array([[9.0]]), n=2)
    assert frechet_distance(one, two) == pytest.approx(4.0 + 1.0)


def _cut(spec, tox21_valid, moses_dir):
    if spec[0] == "tox21":
        return tox21_valid[spec[1]:spec[2]]
    return read_moses_file(moses_dir / f"{spec[1]}.csv.gz", limit=spec[2])


@pytest.fixture(scope="module")
def tox21_valid(tox21_smiles):
    with quiet_rdkit():
        return [s for s in tox21_smiles if mol_from_smiles(s) is not None]


@pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                    reason="ChemNet does not use the kernel sets: checked once, in the fast-kernel pass")
def test_fcd_equals_the_reference_implementation_on_real_sets(chemnet, tox21_valid, moses_dir):
    stats = {}  # each set through ChemNet once (about 12,000 molecules, 15 s)
    for (a, b), want in FCD_TORCH.items():
        for spec in (a, b):
            if spec not in stats:
                stats[spec] = fcd_statistics(_cut(spec, tox21_valid, moses_dir), net=chemnet)
        got = frechet_distance(stats[a], stats[b])
        assert got == pytest.approx(want, rel=1e-4), f"FCD of {a} against {b}: {got} instead of fcd_torch's {want}"


def test_invalid_samples_are_left_out_and_two_are_needed(chemnet):
    ref = fcd_statistics(["CCO", "CCN", "c1ccccc1", "CC(=O)O"], net=chemnet)
    assert ref.n == 4
    with_junk = fcd(["CCO", "", "C1CC", "c1ccccc1", "not a smiles"], ref, net=chemnet)
    assert with_junk == pytest.approx(fcd(["CCO", "c1ccccc1"], ref, net=chemnet), rel=1e-12)
    assert fcd(["CCO", "C1CC", ""], ref, net=chemnet) is None
    with pytest.raises(ValueError, match="at least two valid molecules"):
        fcd_statistics(["CCO"], net=chemnet)


def test_the_judge_scores_samples_and_real_molecules_against_each_reference(chemnet, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    real = ["CCO", "CCN", "CCC", "CCCl", "c1ccccc1", "CC(=O)O", "OCCO", "CNC"]
    refs = {"a": ["CCOC", "CCCN", "c1ccncc1", "CC(=O)N"], "b": ["CCCCCC", "CCCCO", "CCCCN", "CCOCC", "CCSCC"]}
    judge = FCDJudge(refs, real, seed=3, net=chemnet, progress=False)
    floor, n = judge.floor(5)
    assert n == 5 and set(floor) == {"a", "b"}
    assert FCDJudge(refs, real, seed=3, net=chemnet, progress=False).floor(5) == (floor, 5), "the seed fixes it"
    assert judge.floor(50)[1] == 8, "all the real molecules, when there are fewer"
    order = np.random.default_rng(3).permutation(len(real))
    by_hand = fcd([real[i] for i in order[:5]], refs["a"], net=chemnet)  # the same five, read afresh
    assert judge.floor(5)[0]["a"] == pytest.approx(by_hand, rel=1e-9), "larger floors share the smaller's molecules"
    assert FCDJudge(refs, ["CCO", "junk"], net=chemnet, progress=False).floor(5) == ({}, 0), "one valid: no floor"
    assert FCDJudge(refs, None, net=chemnet, progress=False).floor(5) == ({}, 0)
    samples = ["CCO", "c1ccccc1", "CCOCC", "junk"]
    scores = judge(samples)
    assert scores["a"] == pytest.approx(fcd(samples, refs["a"], net=chemnet), rel=1e-9)
    assert scores["b"] == pytest.approx(fcd(samples, refs["b"], net=chemnet), rel=1e-9)
    assert judge(["CCO", "junk"]) == {"a": None, "b": None}


def test_without_weights_fcd_is_n_a_with_the_reason(monkeypatch):
    from minitransformer.chem.datasets.download import DownloadError

    def offline(download=True):
        raise DownloadError("could not fetch ChemNet's weights (...); offline? download https://... and put it ...")
    monkeypatch.setattr(fcd_module, "default_chemnet", offline)
    judge, note = fcd_judge_or_note({"ref": ["CCO", "CCN"]}, ["CCC", "CCCl"])
    assert judge is None and note.startswith("FCD not computed: could not fetch ChemNet's weights") and "\n" not in note


def test_reference_statistics_are_cached_by_content(chemnet, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    computed = []
    real = fcd_module.fcd_statistics
    monkeypatch.setattr(fcd_module, "fcd_statistics", lambda *a, **k: computed.append(a[0]) or real(*a, **k))
    mols = ["CCO", "CCN", "c1ccccc1"]
    first = reference_statistics(mols, net=chemnet, progress=False)
    again = reference_statistics(mols, net=chemnet, progress=False)
    assert len(computed) == 1 and np.array_equal(first.sigma, again.sigma) and again.n == 3
    reference_statistics(mols[::-1], net=chemnet, progress=False)  # other content (order included): computed
    assert len(computed) == 2
    (cached,) = [p for p in (tmp_path / "minitransformer" / "fcd").iterdir() if p.name.startswith(
        fcd_module._cache_key(mols))]
    cached.write_bytes(b"damaged")
    assert np.array_equal(reference_statistics(mols, net=chemnet, progress=False).mu, first.mu)
    assert len(computed) == 3
    # a whole file under the name that is another set's, or whose numbers were edited, is not read as these
    other = fcd_module.cache_path(mols[::-1])
    for damage in ("foreign", "edited", "no checksum"):
        if damage == "foreign":
            cached.write_bytes(other.read_bytes())
        elif damage == "edited":
            fcd_module.write_cached(cached, first, mols)
            with np.load(cached) as z:
                arrays = {k: z[k] for k in z.files}
            arrays["mu"] = arrays["mu"] + 1.0
            np.savez(cached, **arrays)
        else:
            np.savez(cached, mu=first.mu, sigma=first.sigma, n=np.array(first.n))
        assert np.array_equal(reference_statistics(mols, net=chemnet, progress=False).mu, first.mu), damage
    assert len(computed) == 6


def test_reference_features_on_disk_are_read_only_when_whole_and_theirs(tmp_path, monkeypatch):
    from minitransformer.chem.judge import fragments
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    reference = ("CCO", "c1ccccc1CCN", "CC(=O)Nc1ccc(O)cc1", "C1CC1C(=O)O")
    other = ("CCN", "c1ccncc1")
    features = fragments.ReferenceFeatures.compute(reference)
    path = fragments.cache_path(reference)
    path.parent.mkdir(parents=True)
    features.save(path, reference)
    assert fragments.ReferenceFeatures.cached(reference).n_valid == 4
    fragments.ReferenceFeatures.compute(other).save(path, other)  # another set's file under this name
    assert fragments.ReferenceFeatures.cached(reference) is None
    features.save(path, reference)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["weights"] = arrays["weights"] * 2  # edited numbers
    np.savez_compressed(path, **arrays)
    assert fragments.ReferenceFeatures.cached(reference) is None


@pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                    reason="ChemNet does not use the kernel sets: checked once, in the fast-kernel pass")
def test_the_score_command_reports_the_fcd_fcd_torch_gives_for_the_same_files(chemnet, tox21_valid, tmp_path,
                                                                               monkeypatch, capsys):
    """`score SAMPLES --reference FILE` gives FCD(samples, the whole reference), as MOSES and fcd_torch do (it
    once gave the FCD against a random half of the reference: 1.80 where fcd_torch gives 1.25)."""
    import json

    import minitransformer.chem.judge.filters as filters
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    monkeypatch.setattr(filters, "default_filters", lambda download=True: (None, "no alert files in this test"))
    (a, b), want = next(iter(FCD_TORCH.items()))  # 1,000 Tox21 molecules against the next 1,000
    samples, reference = tmp_path / "samples.smi", tmp_path / "reference.smi"
    samples.write_text("\n".join(_cut(a, tox21_valid, None)) + "\n")
    reference.write_text("\n".join(_cut(b, tox21_valid, None)) + "\n")
    capsys.readouterr()
    assert run_cli(main, ["score", str(samples), "--reference", str(reference), "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fcd"] == pytest.approx(want, abs=1e-3) and result["fcd_reference_n"] == 1000
    assert result["fcd_floor_n"] == 500 and result["fcd_floor_reference_n"] == 500 and result["fcd_floor"] > 0
    assert "split with seed 42" in result["notes"]["fcd"]
