"""A score as a user writes it (inline names, JSON, TOML), with every mistake refused in one line before work."""
import json
import sys

import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.molecules.objective_spec import objective_from_spec  # noqa: E402

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"


def test_inline_names_take_each_components_own_transform():
    objective = objective_from_spec("qed,sa")
    assert [c.name for c in objective.components] == ["qed", "sa"] and objective.mean == "geometric"
    sa = objective.components[1]
    assert (sa.kind, sa.low, sa.high) == ("reverse_sigmoid", 2.5, 4.5)
    scores, parts = objective([ASPIRIN, "xx"])
    assert 0 < scores[0] <= 1 and scores[1] == 0.0 and set(parts) == {"qed", "sa"}


def test_a_json_and_a_toml_file_give_the_same_objective(tmp_path):
    spec = {"mean": "arithmetic", "components": [
        {"name": "similarity", "query": ASPIRIN, "radius": 2, "bits": 1024,
         "transform": {"kind": "step", "low": 0.5, "high": 1.0}},
        {"name": "forbid", "pattern": "[N+](=O)[O-]", "weight": 2}]}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    (tmp_path / "s.toml").write_text(
        'mean = "arithmetic"\n[[components]]\nname = "similarity"\nquery = "CC(=O)Oc1ccccc1C(=O)O"\nradius = 2\n'
        'bits = 1024\ntransform = {kind = "step", low = 0.5, high = 1.0}\n'
        '[[components]]\nname = "forbid"\npattern = "[N+](=O)[O-]"\nweight = 2\n')
    a = objective_from_spec(str(tmp_path / "s.json"))([ASPIRIN, "CCO", "C[N+](=O)[O-]"])[0]
    b = objective_from_spec(str(tmp_path / "s.toml"))([ASPIRIN, "CCO", "C[N+](=O)[O-]"])[0]
    np.testing.assert_array_equal(a, b)
    assert a[0] == pytest.approx(1.0) and a[1] == pytest.approx(2 / 3), "CCO: not similar, nothing forbidden"


def test_a_users_function_is_loaded_by_module_and_name(tmp_path, monkeypatch):
    (tmp_path / "my_scores.py").write_text("def length(smiles):\n    return [min(len(s), 10) / 10 for s in smiles]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    objective = objective_from_spec({"components": [{"name": "user", "function": "my_scores:length"}]})
    assert objective(["CCO", "xx"])[0].tolist() == [0.3, 0.0]
    sys.modules.pop("my_scores", None)


def test_the_tox21_component_reads_a_property_checkpoint(tmp_path):
    from test_molecules_predicting import _checkpoint  # the tiny property model of those tests (same folder)
    path = _checkpoint(tmp_path / "p.npz")
    objective = objective_from_spec({"components": [{"name": "tox21", "checkpoint": str(path), "assays": ["A"]}]})
    scores, _ = objective(["CCO", "xx"])
    assert 0 < scores[0] < 1 and scores[1] == 0.0
    with pytest.raises(ValueError, match=r"does not predict \['Z'\]"):
        objective_from_spec({"components": [{"name": "tox21", "checkpoint": str(path), "assays": ["Z"]}]})


def test_a_pmo_task_is_a_component_inline_and_in_a_file():
    from minitransformer.chem.goals.pmo_tasks import CELECOXIB, get_task
    smiles = [CELECOXIB, ASPIRIN, "xx"]
    inline = objective_from_spec("pmo:celecoxib_rediscovery,qed")
    assert [c.params.get("task") for c in inline.components] == ["celecoxib_rediscovery", None]
    scores, parts = inline(smiles)
    np.testing.assert_allclose(parts["pmo"][:2], get_task("celecoxib_rediscovery")(smiles[:2]))
    assert parts["pmo"][0] == 1.0 and scores[2] == 0.0
    alone, _ = objective_from_spec({"components": [{"name": "pmo", "task": "median1"}]})(smiles)
    np.testing.assert_allclose(alone, get_task("median1")(smiles))


@pytest.mark.parametrize("spec, message", [
    ("qed,toxicity", "unknown score component 'toxicity'"),
    ({"components": [{"name": "qed", "colour": "red"}]}, r"unknown key\(s\) \['colour'\]"),
    ({"components": []}, "at least one component"),
    ({"components": [{"name": "smarts", "pattern": "c1ccc("}]}, "is not a valid SMARTS"),
    ({"components": [{"name": "user", "function": "no_such_module_here:f"}]}, "cannot load no_such_module_here:f"),
    ({"components": [{"name": "user", "function": "justaname"}]}, "must be written module:function"),
    ({"components": [{"name": "tox21"}]}, "give the checkpoint"),
    ({"mean": "harmonic", "components": [{"name": "qed"}]}, "mean must be"),
    ("pmo:drd2", "unknown PMO task 'drd2'"),
    ({"components": [{"name": "pmo"}]}, "component pmo: give the task"),
    ("qed:0.5", "only pmo takes a value inline"),
])
def test_mistakes_are_refused_in_one_line(spec, message):
    with pytest.raises(ValueError, match=message):
        objective_from_spec(spec)


def test_a_broken_file_is_named(tmp_path):
    (tmp_path / "bad.json").write_text("{components: [")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        objective_from_spec(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="score file not found"):
        objective_from_spec(str(tmp_path / "missing.toml"))


# --------------------------------------------------------------------------- the schema: every value checked
def _one(**entry):
    return {"components": [entry]}


@pytest.mark.parametrize("spec, message", [
    # weights: each finite and > 0, and their sum finite (two of 1e308 overflow to inf)
    ({"components": [{"name": "qed", "weight": 1e308}, {"name": "sa", "weight": 1e308}]}, "weights add up to inf"),
    (_one(name="qed", weight=float("nan")), "weight must be a finite number > 0"),
    (_one(name="qed", weight=True), "weight must be a finite number > 0"),
    (_one(name="qed", weight="2"), "weight must be a finite number > 0"),
    # transform parameters
    (_one(name="mw", transform={"kind": "sigmoid", "low": 1, "high": 2, "k": float("nan")}), "k must be a finite"),
    (_one(name="mw", transform={"kind": "sigmoid", "low": 1, "high": 2, "k": -1}), "k must be a finite number > 0"),
    (_one(name="mw", transform={"kind": "sigmoid", "low": 1, "high": 2, "k": "x"}), "k must be a finite"),
    (_one(name="mw", transform={"low": 1, "high": 2, "width": -3}), "width must be a finite number > 0"),
    (_one(name="mw", transform={"low": 1, "high": 2, "width": float("nan")}), "width must be a finite"),
    (_one(name="mw", transform={"kind": "step", "low": float("-inf"), "high": 2}), "low must be a finite"),
    (_one(name="mw", transform={"kind": "step", "low": 1, "high": float("inf")}), "high must be a finite"),
    (_one(name="mw", transform={"kind": "step", "low": "1", "high": 2}), "low must be a finite"),
    (_one(name="mw", transform={"kind": "none"}), "its values are not in \\[0, 1\\]"),
    (_one(name="logp", transform={"kind": "none"}), "its values are not in \\[0, 1\\]"),
    (_one(name="qed", transform={"low": 0.2}), "low has no effect with kind 'none'"),
    (_one(name="mw", transform={"kind": "step", "low": 1, "high": 2, "k": 3}), "k has no effect with kind 'step'"),
    (_one(name="mw", transform={"kind": "shout"}), "unknown kind 'shout'"),
    (_one(name="mw", transform=[1, 2]), "transform must be a table"),
    # similarity's fingerprint
    (_one(name="similarity", query=ASPIRIN, bits=2.7), "bits must be a whole number"),
    (_one(name="similarity", query=ASPIRIN, bits=-1), "bits must be a whole number"),
    (_one(name="similarity", query=ASPIRIN, bits=2), "bits must be a whole number"),
    (_one(name="similarity", query=ASPIRIN, radius=10**20), "radius must be a whole number"),
    (_one(name="similarity", query=ASPIRIN, radius=-1), "radius must be a whole number"),
    (_one(name="similarity", query=ASPIRIN, radius=True), "radius must be a whole number"),
    (_one(name="similarity", query=123), "query must be a non-empty string"),
    # names, nulls, strings, keys that belong to another component
    (_one(name=["qed"]), "unknown score component \\['qed'\\]"),
    (_one(name=None), "unknown score component None"),
    (_one(name="qed", weight=None), "weight is null"),
    (_one(name="user", function=None), "function is null"),
    (_one(name="tox21", checkpoint=5), "checkpoint must be a non-empty string"),
    (_one(name="tox21", checkpoint="x.npz", views=0), "views must be a whole number from 1"),
    (_one(name="tox21", checkpoint="x.npz", assays="NR-AR"), "assays must be a non-empty list"),
    (_one(name="qed", radius=2), "component qed: unknown key\\(s\\) \\['radius'\\]"),
    ({"mean": None, "components": [{"name": "qed"}]}, "mean must be"),
    ({"components": ["qed"]}, "component 1 must be a table"),
    ({"components": {"name": "qed"}}, "at least one component"),
])
def test_every_value_of_a_score_is_checked_before_work(spec, message):
    from minitransformer.molecules.objective_spec import check_spec
    with pytest.raises(ValueError, match=message):
        check_spec(spec)
    with pytest.raises(ValueError, match=message):
        objective_from_spec(spec)


def test_large_weights_weigh_as_their_ratios():
    """Weights are shares: 1e300 and 3e300 weigh as 1 and 3 (the mean of scaled weights once overflowed)."""
    small = objective_from_spec({"mean": "arithmetic", "components": [{"name": "qed", "weight": 1},
                                                                    {"name": "sa", "weight": 3}]})
    large = objective_from_spec({"mean": "arithmetic", "components": [{"name": "qed", "weight": 1e300},
                                                                    {"name": "sa", "weight": 3e300}]})
    smiles = [ASPIRIN, "CCO", "c1ccccc1CCN"]
    np.testing.assert_allclose(large(smiles)[0], small(smiles)[0], rtol=1e-12)
    assert len(set(np.round(small(smiles)[0], 6))) == 3, "the molecules score differently"


@pytest.mark.parametrize("suffix, text", [
    (".json", "[" * 100_000 + "]" * 100_000),
    (".json", '{"components": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    (".toml", "a = " + "[" * 100_000 + "]" * 100_000),
])
def test_a_score_file_nested_too_deep_is_refused_in_one_line(tmp_path, suffix, text):
    path = tmp_path / f"deep{suffix}"
    path.write_text(text)
    with pytest.raises(ValueError, match="deep" + suffix.replace(".", r"\.")):
        objective_from_spec(str(path))


def test_a_score_file_that_is_not_a_file_or_not_text_is_named(tmp_path):
    import os
    (tmp_path / "folder.toml").mkdir()
    with pytest.raises(ValueError, match="folder.toml is a folder"):
        objective_from_spec(str(tmp_path / "folder.toml"))
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(ValueError, match="pipe.json is not a regular file"):
        objective_from_spec(str(tmp_path / "pipe.json"))
    (tmp_path / "latin1.toml").write_bytes('[[components]]\nname = "qéd"\n'.encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.toml, line 2: not UTF-8"):
        objective_from_spec(str(tmp_path / "latin1.toml"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="list.json: a score file holds a table"):
        objective_from_spec(str(tmp_path / "list.json"))


def test_the_fingerprint_follows_contents_not_paths(tmp_path, monkeypatch):
    """The same score by two paths has one fingerprint; a changed property checkpoint or user module changes it."""
    from minitransformer.molecules.objective_spec import score_fingerprint
    from test_molecules_predicting import _checkpoint
    _checkpoint(tmp_path / "p.npz")
    (tmp_path / "fp_scores.py").write_text("def f(smiles):\n    return [0.5] * len(smiles)\n")
    (tmp_path / "q.toml").write_text('[[components]]\nname = "tox21"\ncheckpoint = "p.npz"\n'
                                     '[[components]]\nname = "user"\nfunction = "fp_scores:f"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    first = score_fingerprint("q.toml")
    assert score_fingerprint("./q.toml") == first == score_fingerprint(str(tmp_path / "q.toml"))
    assert "p.npz" not in json.dumps(first), "the checkpoint is recorded by its contents"
    (tmp_path / "fp_scores.py").write_text("def f(smiles):\n    return [0.25] * len(smiles)\n")
    assert score_fingerprint("q.toml") != first, "the user's module changed"
    (tmp_path / "fp_scores.py").write_text("def f(smiles):\n    return [0.5] * len(smiles)\n")
    assert score_fingerprint("q.toml") == first
    _checkpoint(tmp_path / "p.npz", max_len=30)
    assert score_fingerprint("q.toml") != first, "the property model changed"


def test_a_whole_number_too_large_for_a_float_is_refused():
    with pytest.raises(ValueError, match="weight must be a finite number > 0"):
        check = objective_from_spec({"components": [{"name": "qed", "weight": 10**400}]})
        check([ASPIRIN])
