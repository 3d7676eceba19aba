"""roc_auc / multilabel_roc_auc: hand-computed cases with ties, brute-force pair
counts, monotone invariance, masks, single-class labels, validation."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.roc_auc import multilabel_roc_auc, roc_auc

SETTINGS = settings(max_examples=60, deadline=None)


def _brute_force_auc(y, s):
    """Mean over all (positive, negative) pairs of 1[s+ > s-] + 1/2 1[s+ = s-]."""
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (pos.size * neg.size)


def _assert_auc(name, got, expected, tol=1e-12):
    """Scalar comparison whose message names the quantity and the error."""
    assert isinstance(got, float), f"{name}: expected a Python float, got {type(got).__name__}"
    same = (math.isnan(got) and math.isnan(expected)) or abs(got - expected) <= tol
    assert same, f"{name}: got {got!r}, expected {expected!r} (error {abs(got - expected):.3g})"


# -- hand-computed cases -------------------------------------------------------------
def test_perfect_reversed_and_constant_scores():
    y = [0, 1, 0, 1, 1]
    _assert_auc("perfect", roc_auc(y, [0.1, 0.8, 0.2, 0.9, 0.7]), 1.0)
    _assert_auc("reversed", roc_auc(y, [0.9, 0.2, 0.8, 0.1, 0.3]), 0.0)
    _assert_auc("all tied", roc_auc(y, [0.4] * 5), 0.5)


def test_small_hand_worked_example():
    # positives 0.35 and 0.8, negatives 0.1 and 0.4: of the 4 pairs only (0.35, 0.4) is lost
    _assert_auc("y=[0,0,1,1], s=[0.1,0.4,0.35,0.8]", roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]), 0.75)


def test_ties_across_classes_hand_worked():
    # y = [0, 1, 0, 1, 1], s = [0.2, 0.5, 0.5, 0.9, 0.2]: negatives at 0.2 and 0.5.
    #   positive 0.5: beats the negative 0.2 (1), ties the negative 0.5 (1/2)  -> 1.5
    #   positive 0.9: beats both                                              -> 2
    #   positive 0.2: ties the negative 0.2 (1/2), loses to 0.5 (0)           -> 0.5
    # U = 4 of n1 * n0 = 3 * 2 = 6 pairs: AUC = 2/3.
    # Average ranks agree: sorted 0.2, 0.2 | 0.5, 0.5 | 0.9 get ranks 1.5, 1.5 | 3.5, 3.5 | 5,
    # the positives' rank sum is R1 = 3.5 + 5 + 1.5 = 10 and U = R1 - 3 * 4 / 2 = 4.
    _assert_auc("ties across classes", roc_auc([0, 1, 0, 1, 1], [0.2, 0.5, 0.5, 0.9, 0.2]), 2 / 3)


def test_signed_zeros_and_infinite_scores_rank_as_numbers():
    # -0.0 == 0.0 is a tie; -inf and inf are ordinary extreme scores
    _assert_auc("signed zeros", roc_auc([0, 1], [-0.0, 0.0]), 0.5)
    _assert_auc("infinities", roc_auc([0, 1, 0, 1], [-np.inf, np.inf, 0.0, 1.0]), 1.0)


def test_accepts_bool_float_and_device_inputs(any_backend):
    y, s = np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])
    for yy in (y.astype(bool), y.astype(np.float32), backend.asarray(y)):
        _assert_auc(f"labels as {type(yy).__name__}", roc_auc(yy, backend.asarray(s)), 0.75)
    _assert_auc("integer scores", roc_auc(y, [1, 4, 3, 8]), 0.75)


def test_mask_ignores_whatever_the_missing_entries_hold():
    y = np.array([0, np.nan, 0, 1, -1.0, 1])
    s = np.array([0.1, np.nan, 0.4, 0.35, 5.0, 0.8])
    mask = np.array([1, 0, 1, 1, 0, 1], dtype=bool)
    _assert_auc("masked", roc_auc(y, s, mask), 0.75)
    _assert_auc("masked with 0/1 ints", roc_auc(y, s, mask.astype(int)), 0.75)


# -- properties ----------------------------------------------------------------------
labels_and_scores = st.integers(2, 40).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 1), min_size=n, max_size=n).filter(lambda v: 0 < sum(v) < len(v)),
    st.lists(st.integers(-3, 3), min_size=n, max_size=n),  # a small range: many ties
))


@SETTINGS
@given(data=labels_and_scores)
def test_agrees_with_brute_force_pair_count(data):
    y, s = (np.array(v) for v in data)
    _assert_auc(f"AUC of y={y.tolist()}, s={s.tolist()}", roc_auc(y, s), _brute_force_auc(y, s))
    _assert_auc("float scores", roc_auc(y, s / 7.0), _brute_force_auc(y, s))


@SETTINGS
@given(n=st.integers(2, 60), seed=st.integers(0, 2**31 - 1))
def test_agrees_with_brute_force_on_continuous_scores(n, seed):
    g = np.random.default_rng(seed)
    y = g.integers(0, 2, n)
    y[:2] = [0, 1]
    s = np.round(g.standard_normal(n), 1)  # some ties, some not
    _assert_auc(f"AUC (seed {seed}, n {n})", roc_auc(y, s), _brute_force_auc(y, s))


@SETTINGS
@given(data=labels_and_scores)
def test_invariant_under_increasing_transforms_and_symmetric(data):
    y, s = (np.array(v) for v in data)
    auc = roc_auc(y, s)
    for name, t in [("2s - 7", 2 * s - 7), ("s**3", s.astype(np.float64) ** 3),
                    ("exp(s/4)", np.exp(s / 4.0)), ("sigmoid(s)", 1 / (1 + np.exp(-s.astype(float))))]:
        _assert_auc(f"AUC after {name}", roc_auc(y, t), auc)
    _assert_auc("AUC of -s", roc_auc(y, -s), 1.0 - auc)
    _assert_auc("AUC with classes swapped", roc_auc(1 - y, s), 1.0 - auc)


# -- errors --------------------------------------------------------------------------
def test_single_class_raises():
    with pytest.raises(ValueError, match=r"needs both classes, got 3 positive\(s\) and 0 negative\(s\)"):
        roc_auc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"got 0 positive\(s\) and 2 negative\(s\)"):
        roc_auc([0, 1, 0], [0.1, 0.2, 0.3], mask=[1, 0, 1])
    with pytest.raises(ValueError, match=r"got 0 positive\(s\) and 0 negative\(s\) among 0"):
        roc_auc([], [])


def test_malformed_inputs_raise():
    with pytest.raises(ValueError, match=r"y_true of shape \(3,\) and scores of shape \(2,\) differ"):
        roc_auc([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"must be 1-D.*use multilabel_roc_auc"):
        roc_auc(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"y_true must hold only 0 and 1 where present, got 2 at \[1\]"):
        roc_auc([0, 2, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"got 0\.5 at \[2\]"):
        roc_auc([0, 1, 0.5], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"got nan at \[1\]; mark missing labels with mask="):
        roc_auc([0, np.nan, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"scores must not be NaN where a label is present, got NaN at \[0\]"):
        roc_auc([0, 1], [np.nan, 0.2])
    with pytest.raises(ValueError, match=r"mask of shape \(2,\) does not match"):
        roc_auc([0, 1, 1], [0.1, 0.2, 0.3], mask=[1, 1])
    with pytest.raises(ValueError, match=r"mask must be boolean or hold only 0 and 1, got 3 at \[2\]"):
        roc_auc([0, 1, 1], [0.1, 0.2, 0.3], mask=[1, 1, 3])
    with pytest.raises(ValueError, match="scores must hold real numbers"):
        roc_auc([0, 1], ["a", "b"])


# -- multi-label ---------------------------------------------------------------------
def test_multilabel_with_a_masked_and_a_single_class_column():
    nan = np.nan
    y = np.array([
        [0, 0, 1, nan],
        [0, 1, 1, 0],
        [1, 0, 1, nan],
        [1, 1, nan, 1],
        [nan, 0, 0, 0],
    ])
    s = np.array([
        [0.1, 0.3, 0.9, 0.0],
        [0.4, 0.3, 0.8, 0.5],
        [0.35, 0.6, 0.7, 9.0],
        [0.8, 0.2, 0.6, 0.5],
        [nan, 0.5, 0.5, 0.2],
    ])
    mask = ~np.isnan(y)
    mask[4, 2] = False  # masks the only negative of column "c": one class left
    res = multilabel_roc_auc(y, s, mask, names=["a", "b", "c", "d"])
    # a: the hand-worked 0.75 case (row 4 masked). b: positives 0.3, 0.2 vs negatives 0.3, 0.6, 0.5
    #    -> (0.3: tie 1/2) + (0.2: 0) = 0.5 of 6 pairs. d: positive 0.5 vs negatives 0.5, 0.2 -> 1.5 of 2.
    expected = {"a": 0.75, "b": 0.5 / 6, "c": math.nan, "d": 0.75}
    assert list(res["per_label"]) == ["a", "b", "c", "d"]
    for name, value in expected.items():
        _assert_auc(f"per_label[{name!r}]", res["per_label"][name], value)
    _assert_auc("mean", res["mean"], (0.75 + 0.5 / 6 + 0.75) / 3)
    assert res["n_scored"] == 3
    assert res["skipped"] == {"c": "only positives (3 present)"}
    assert res["n_pos"] == {"a": 2, "b": 2, "c": 3, "d": 1}
    assert res["n_neg"] == {"a": 2, "b": 3, "c": 0, "d": 2}


def test_multilabel_default_names_and_nothing_scored():
    y = np.array([[1, 0], [1, 0]])
    res = multilabel_roc_auc(y, np.zeros((2, 2)), mask=np.array([[1, 0], [1, 0]]))
    assert list(res["per_label"]) == ["label_0", "label_1"]
    assert res["skipped"] == {"label_0": "only positives (2 present)", "label_1": "no labels present"}
    assert res["n_scored"] == 0 and math.isnan(res["mean"])


def test_multilabel_columns_match_roc_auc():
    g = np.random.default_rng(7)
    y = g.integers(0, 2, (30, 5))
    s = np.round(g.standard_normal((30, 5)), 1)
    mask = g.random((30, 5)) < 0.7
    res = multilabel_roc_auc(y, s, mask)
    for k in range(5):
        _assert_auc(f"column {k}", res["per_label"][f"label_{k}"], roc_auc(y[:, k], s[:, k], mask[:, k]))


def test_multilabel_errors_name_the_label():
    y, s = np.array([[0, 1], [1, 2]]), np.zeros((2, 2))
    with pytest.raises(ValueError, match=r"y_true\[:, 1\] \('tox'\) must hold only 0 and 1 where present, "
                                         r"got 2 at \[1\]"):
        multilabel_roc_auc(y, s, names=["ok", "tox"])
    with pytest.raises(ValueError, match=r"names must be 2 distinct names.*got 3"):
        multilabel_roc_auc(y, s, names=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"names must be 2 distinct names.*\(1 distinct\)"):
        multilabel_roc_auc(y, s, names=["a", "a"])
    with pytest.raises(ValueError, match=r"must both have shape \(N, K\), got \(2, 2\) and \(2, 3\)"):
        multilabel_roc_auc(y, np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"scores\[:, 0\] \('label_0'\) must not be NaN"):
        multilabel_roc_auc(np.array([[0, 1], [1, 0]]), np.array([[np.nan, 0], [0, 0]]))


def test_bootstrap_interval_holds_the_mean_auc_and_narrows_with_more_molecules():
    from minitransformer.roc_auc import bootstrap_mean_auc
    rng = np.random.default_rng(0)

    def data(n):
        y = (rng.random((n, 3)) < 0.3).astype(float)  # (n, 3)
        s = y + rng.standard_normal((n, 3))  # informative scores: AUC about 0.76
        y[rng.random((n, 3)) < 0.1] = np.nan
        return y, s

    y, s = data(300)
    full = multilabel_roc_auc(y, s, mask=~np.isnan(y))["mean"]
    small = bootstrap_mean_auc(y, s, mask=~np.isnan(y), resamples=300)
    assert small["low"] < full < small["high"]
    y2, s2 = data(3000)
    large = bootstrap_mean_auc(y2, s2, mask=~np.isnan(y2), resamples=300)
    assert large["std"] < 0.5 * small["std"]  # 10x the molecules: about 1/sqrt(10) the spread
    assert bootstrap_mean_auc(y, s, mask=~np.isnan(y), resamples=50, seed=3) == \
        bootstrap_mean_auc(y, s, mask=~np.isnan(y), resamples=50, seed=3)
    with pytest.raises(ValueError, match="resamples must be >= 2"):
        bootstrap_mean_auc(y, s, resamples=1)
    one_class = bootstrap_mean_auc(np.zeros((5, 2)), rng.random((5, 2)), resamples=20)  # no draw has a mean
    assert one_class["low"] is None and one_class["std"] is None and one_class["used"] == 0
