"""RDKit's 2D descriptors and their scale: the centred empirical CDF of the training molecules."""
import json

import numpy as np
import pytest

from minitransformer.chem.descriptors import LEVELS, DescriptorScale, compute_descriptors, descriptor_names


def test_descriptors_are_rdkits_values_and_an_unparsable_molecule_has_none():
    names = descriptor_names()
    values = compute_descriptors(["CCO", "c1ccccc1O", "not a molecule"])
    assert values.shape == (3, len(names)) and len(names) > 150
    weight = values[:, names.index("MolWt")]
    np.testing.assert_allclose(weight[:2], [46.069, 94.113], atol=1e-3)
    assert np.isnan(values[2]).all()
    assert values[1, names.index("NumAromaticRings")] == 1


def test_a_molecule_met_before_is_computed_once_and_gives_the_same_row(monkeypatch):
    from minitransformer.chem import descriptors
    monkeypatch.setattr(descriptors, "_MEMO", {})
    computed = []
    real = descriptors._descriptor_rows
    monkeypatch.setattr(descriptors, "_descriptor_rows", lambda chunk: computed.extend(chunk) or real(chunk))
    first = compute_descriptors(["CCO", "CCN", "CCO"])
    again = compute_descriptors(["CCN", "c1ccccc1", "CCO"])
    assert computed == ["CCO", "CCN", "c1ccccc1"], "each SMILES computed once"
    np.testing.assert_array_equal(again[[0, 2]], first[[1, 0]])
    np.testing.assert_array_equal(again, real(["CCN", "c1ccccc1", "CCO"]))
    again[:] = 0.0  # a caller's copy: the next call still reads RDKit's values
    np.testing.assert_array_equal(compute_descriptors(["CCO"]), first[:1])
    monkeypatch.setattr(descriptors, "_MEMO_SIZE", 3)
    compute_descriptors(["CCC", "CCCl"])  # the memo is full: computed, not kept
    assert set(descriptors._MEMO) == {"CCO", "CCN", "c1ccccc1"}
    assert compute_descriptors([]).shape == (0, len(descriptor_names()))


def test_the_scale_places_a_value_in_the_training_distribution():
    rng = np.random.default_rng(0)
    train = np.stack([rng.lognormal(size=2000), rng.integers(0, 3, 2000).astype(float),
                      np.full(2000, 7.0)], axis=1)  # (N, 3): skewed, tied, constant
    scale = DescriptorScale.fit(train, ["skewed", "tied", "constant"])
    x = scale.transform(np.array([[np.median(train[:, 0]), 1.0, 7.0],
                                  [train[:, 0].min() - 1, -5.0, 100.0],
                                  [train[:, 0].max() + 1e6, 9.0, np.nan],
                                  [np.nan, np.inf, 0.0]]))
    assert x.dtype == np.float32 and x.shape == (4, 3)
    assert abs(x[0, 0]) < 0.02  # the median sits in the middle
    assert x[1, 0] == -0.5 and x[2, 0] == 0.5  # beyond the training range: the ends
    assert x[1, 1] == -0.5 and x[2, 1] == 0.5
    assert -0.5 < x[0, 1] < 0.5  # a tied value reads the middle of its levels, not an end
    assert (x[:, 2] == 0).all()  # a constant descriptor carries nothing
    assert x[3, 0] == 0 and x[3, 1] == 0  # no value: the median
    # the fraction of training values below a point, to within one level
    for q in (0.1, 0.3, 0.7, 0.9):
        v = np.quantile(train[:, 0], q)
        assert abs(scale.transform(np.array([[v, 1.0, 7.0]]))[0, 0] + 0.5 - q) < 1.0 / (LEVELS - 1)


def test_the_scale_survives_json_and_refuses_a_damaged_one():
    train = np.random.default_rng(1).standard_normal((300, 2))
    scale = DescriptorScale.fit(train, ["a", "b"])
    back = DescriptorScale.from_json(json.loads(json.dumps(scale.to_json())))
    x = np.random.default_rng(2).standard_normal((50, 2))
    assert np.array_equal(back.transform(x), scale.transform(x))  # exactly: a saved model reads as its run did
    d = scale.to_json()
    d["quantiles"] = d["quantiles"][:1]
    with pytest.raises(ValueError, match="damaged"):
        DescriptorScale.from_json(d)
    with pytest.raises(ValueError, match="one column per name"):
        DescriptorScale.fit(train, ["a"])
