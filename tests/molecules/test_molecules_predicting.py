"""PropertyPredictor on a tiny untrained Encoder built as `minitransformer train property` builds it."""
import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.atomic import FileExistsRefusal  # noqa: E402
from minitransformer.checkpoint import save_checkpoint  # noqa: E402
from minitransformer.chem import Vocab  # noqa: E402
from minitransformer.molecules.predicting import (PropertyPredictor, read_user_smiles,  # noqa: E402
                                             view_probabilities, write_predictions_csv)
from minitransformer.models import Encoder, EncoderConfig, PropertyModel, PropertyModelConfig  # noqa: E402

TRAIN = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "OC(=O)c1ccccc1"]
TASKS = ["A", "B", "C"]


def _checkpoint(path, tasks=TASKS, max_len=24, n_outputs=3, extras=(Vocab.CLS, Vocab.MASK)):
    vocab = Vocab.build(TRAIN, extras=extras)
    options = dict(vocab_size=len(vocab), max_len=max_len, pad_id=vocab.pad_id, seed=0, d_model=16, n_heads=2,
                   n_layers=1, d_ff=32, norm="pre", tie_embeddings=True)
    model = PropertyModel(PropertyModelConfig(n_outputs=n_outputs, **options)) if n_outputs else \
        Encoder(EncoderConfig(**options))
    extra = {"run": {"tasks": tasks}} if tasks is not None else None
    return save_checkpoint(path, model, vocab=vocab, extra=extra)


@pytest.fixture
def predictor(tmp_path):
    return PropertyPredictor.from_checkpoint(_checkpoint(tmp_path / "m.npz"))


def test_predict_shapes_flags_and_reasons(predictor):
    smiles = ["CCO", "not-a-smiles", "", "C[Se]C", "c1ccccc1O" * 4, "CC(=O)Nc1ccc(O)cc1"]
    probs, ok, reasons = predictor.predict(smiles, views=3, seed=0)
    assert predictor.task_names == TASKS
    assert probs.shape == (6, 3) and ok.tolist() == [True, False, False, False, False, True]
    assert np.isnan(probs[~ok]).all() and ((probs[ok] > 0) & (probs[ok] < 1)).all()
    assert reasons[0] is None and reasons[5] is None
    assert "RDKit" in reasons[1] and reasons[2] == "empty SMILES"
    assert "[Se]" in reasons[3] and "vocabulary" in reasons[3]
    assert "max_len 24" in reasons[4]


def test_same_seed_same_output_and_views_matter(predictor):
    from minitransformer.molecules.predicting import view_ids
    smiles = ["CCO", "CC(=O)Nc1ccc(O)cc1", "OC(=O)c1ccccc1"]
    a = predictor.predict(smiles, views=4, seed=3)[0]
    assert np.array_equal(a, predictor.predict(smiles, views=4, seed=3)[0])
    one = predictor.predict(smiles, views=1, seed=3)[0]
    direct = view_probabilities(predictor.model, predictor.vocab, smiles, 1, 3, 24)[0]
    assert np.array_equal(one, direct)
    assert not np.allclose(a, one), "more views, another prediction"
    assert not np.allclose(a, predictor.predict(smiles, views=4, seed=4)[0]), "another seed, other writings"
    written = view_ids(smiles, predictor.vocab, 4, 3, 24)
    assert len({tuple(v[1]) for v in written}) > 1, "the acetaminophen views are not all one string"


def test_a_molecules_prediction_does_not_depend_on_its_neighbours(predictor):
    alone = predictor.predict(["CCO"], views=6, seed=2)[0]
    among = predictor.predict(["c1ccccc1O", "not a smiles", "CCN(CC)CC", "CCO"], views=6, seed=2)[0]
    np.testing.assert_allclose(among[3], alone[0], rtol=1e-5, atol=0)  # the same views; float32 batches differ


def test_views_average_to_the_prediction_and_view_0_is_the_string_as_written(predictor):
    from minitransformer.backend import to_numpy, xp
    smiles = ["CCO", "CC(=O)Nc1ccc(O)cc1", "OC(=O)c1ccccc1", "CCN(CC)CC"]
    views = view_probabilities(predictor.model, predictor.vocab, smiles, 4, 7, 24, batch_size=2)
    assert len(views) == 4 and all(v.shape == (4, 3) for v in views)
    for i, s in enumerate(smiles):  # one molecule at a time, no padding: the same numbers
        z = to_numpy(predictor.model(xp.asarray([predictor.vocab.encode(s, cls=True)])))[0]  # (K,)
        np.testing.assert_allclose(views[0][i], 1 / (1 + np.exp(-z)), rtol=1e-6, atol=1e-9)
    assert np.array_equal(np.mean(views, axis=0), predictor.predict(smiles, views=4, seed=7, batch_size=2)[0])


def test_task_names_fall_back_to_tox21(tmp_path):
    p = PropertyPredictor.from_checkpoint(_checkpoint(tmp_path / "m.npz", tasks=None, n_outputs=12))
    assert p.task_names[0] == "NR-AR" and p.task_names[-1] == "SR-p53" and len(p.task_names) == 12


@pytest.mark.parametrize("kind", ["no_head", "no_cls"])
def test_refuses_other_checkpoints(tmp_path, kind):
    path = tmp_path / f"{kind}.npz"
    if kind == "no_head":
        _checkpoint(path, n_outputs=0)
    else:
        _checkpoint(path, extras=())
    with pytest.raises(ValueError) as err:
        PropertyPredictor.from_checkpoint(path)
    message = str(err.value)
    assert str(path) in message and "\n" not in message and "PropertyModel" in message


def test_csv_round_trip_and_refuses_overwrite(tmp_path, predictor):
    src = tmp_path / "in.csv"
    src.write_text("Name,SMILES\nm1,CCO\nm2,xyz\n\nm3,OC(=O)c1ccccc1\n")
    ids, smiles = read_user_smiles(src)
    assert ids == ["m1", "m2", "m3"] and smiles == ["CCO", "xyz", "OC(=O)c1ccccc1"]
    probs, ok, reasons = predictor.predict(smiles, views=2)
    out = tmp_path / "pred.csv"
    write_predictions_csv(out, ids, smiles, probs, ok, reasons, predictor.task_names)
    import csv
    rows = list(csv.DictReader(out.open()))
    assert [r["id"] for r in rows] == ids and [r["readable"] for r in rows] == ["1", "0", "1"]
    assert rows[1]["A"] == "" and rows[1]["reason"] == reasons[1]
    assert abs(float(rows[0]["B"]) - probs[0, 1]) < 1e-4
    with pytest.raises(FileExistsRefusal):
        write_predictions_csv(out, ids, smiles, probs, ok, reasons, predictor.task_names)
    write_predictions_csv(out, None, smiles, probs, ok, reasons, predictor.task_names, overwrite=True)
    assert out.read_text().startswith("smiles,readable,reason,A,B,C\n")


def test_read_smi_gz_and_stdin(tmp_path, monkeypatch):
    import gzip
    import io
    path = tmp_path / "x.smi.gz"
    path.write_bytes(gzip.compress(b"SMILES\nCCO ethanol\n\n#CC note\nc1ccccc1\n"))
    # every line after the header is a sample: the blank one is empty, "#CC" a broken one
    assert read_user_smiles(path) == (["ethanol", "", "note", ""], ["CCO", "", "#CC", "c1ccccc1"])
    monkeypatch.setattr("sys.stdin", io.StringIO("id,smiles\na,CCO\n"))
    assert read_user_smiles("-") == (["a"], ["CCO"])
    monkeypatch.setattr("sys.stdin", io.StringIO("CCO one\nCCN\n"))
    assert read_user_smiles("-") == (["one", ""], ["CCO", "CCN"])
