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
    from minitransformer.chem.pmo_tasks import CELECOXIB, get_task
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
    ({"components": [{"name": "pmo"}]}, "unknown PMO task None"),
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
