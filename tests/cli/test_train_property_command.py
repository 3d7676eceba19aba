"""End-to-end: ``minitransformer train property`` (run as its demo, ``demos/tox21_property.py``, runs it)
on a small labelled file: seeds, ensembles, encoders, descriptors, resumes."""
import json
import math
import shutil

import numpy as np
import pytest

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def labelled_csv(tmp_path_factory):
    """300 drug-like molecules (they ship with RDKit) with three labels read off the string, some missing."""
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    smiles = read_smiles(druglike_path(), header=False)[:300]
    rows = ["mol_id,smiles,aromatic_n,chlorine,carbonyl"]
    for i, s in enumerate(smiles):
        a = "" if i % 7 == 0 else str(int("n" in s))
        rows.append(f"m{i},{s},{a},{int('Cl' in s)},{int('=O' in s)}")
    path = tmp_path_factory.mktemp("data") / "labels.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


WRITTEN = []  # files the quick run wrote through minitransformer.atomic


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, labelled_csv, load_demo, atomic_spy):
    out = tmp_path_factory.mktemp("tox21_property")
    demo = load_demo("tox21_property")
    with atomic_spy() as written:
        code = demo.main(["--quick", "--pretrain", "--data", str(labelled_csv), "--out", str(out), "--quiet",
                          "--plot-attention"])
    assert code == 0
    WRITTEN[:] = written
    return demo, out


def test_every_output_is_written_atomically(quick_run):
    """No file of the run is written in place (a full disk cannot truncate it)."""
    _, out = quick_run
    on_disk = {p.name for p in out.iterdir() if p.is_file() and p.name != ".lock"}  # the run folder's lock: O_EXCL, not a file of results
    assert on_disk <= set(WRITTEN), f"written in place: {sorted(on_disk - set(WRITTEN))}"


def test_quick_run_writes_every_output(quick_run):
    _, out = quick_run
    for name in ("metrics.json", "history.json", "history.csv", "provenance.json", "config.json", "best.npz",
                 "predictions.csv", "curves.png", "attention_encoder_self.png", "pretrain/history.json"):
        path = out / name
        assert path.exists() and path.stat().st_size > 0, f"missing or empty output: {name}"
    for name in ("curves.png", "attention_encoder_self.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG", f"{name} is not a PNG"


def test_quick_run_metrics(quick_run):
    _, out = quick_run
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["test_auc"]) == {"aromatic_n", "chlorine", "carbonyl"}
    for key in ("test_auc_mean", "test_auc_mean_single_view", "val_auc_best"):
        assert 0.0 <= m[key] <= 1.0, f"{key} = {m[key]} is not in [0, 1]"
    probs, labels = np.load(out / "test_probabilities.npy"), np.load(out / "test_labels.npy")  # (N, 3) each
    by_hand = {}
    for k, name in enumerate(("aromatic_n", "chlorine", "carbonyl")):  # the field's AUC: pairs, ties one half
        pos, neg = probs[labels[:, k] == 1, k], probs[labels[:, k] == 0, k]
        by_hand[name] = np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg]) if len(pos) and len(neg) else None
    for name, value in m["test_auc"].items():
        assert value == pytest.approx(by_hand[name], abs=1e-12) if by_hand[name] is not None else value is None, name
    assert m["test_auc_mean"] == pytest.approx(np.mean([v for v in by_hand.values() if v is not None]), abs=1e-12)
    assert m["pretrain"] is True and m["pretrain_epochs"] == 1
    boot = m["test_auc_bootstrap"]  # the test set's own sampling noise
    assert 0.0 <= boot["low"] < boot["high"] <= 1.0 and boot["std"] > 0 and boot["resamples"] == 1000
    assert m["augmentation"].startswith("training: a fresh random SMILES of each training molecule every epoch")
    assert math.isfinite(m["wall_time_s"])
    history = json.loads((out / "history.json").read_text())
    assert len(history) == m["epochs"] >= 1 and all("val_auc" in h for h in history)


def test_predictions_file_lines_up_with_the_test_split(quick_run):
    _, out = quick_run
    lines = (out / "predictions.csv").read_text().splitlines()
    header = lines[0].split(",")
    assert header[:4] == ["smiles", "p_aromatic_n", "p_chlorine", "p_carbonyl"]
    probs = np.array([[float(v) for v in line.split(",")[1:4]] for line in lines[1:]])
    assert ((probs >= 0) & (probs <= 1)).all()


def test_label_sets_without_labels_or_files_are_clear_errors(tmp_path, capsys, load_demo):
    from minitransformer.cli import run_cli
    demo = load_demo("tox21_property")
    assert run_cli(demo.main, ["--quick", "--data", "druglike", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "no property labels" in capsys.readouterr().err
    assert run_cli(demo.main, ["--quick", "--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path)]) == 2
    assert "nope.csv" in capsys.readouterr().err


def test_pretraining_on_other_molecules_leaves_the_held_out_ones_out(labelled_csv, load_demo, tmp_path, capsys):
    demo = load_demo("tox21_property")
    out = tmp_path / "run"
    assert demo.main(["--quick", "--pretrain", "--pretrain-data", "druglike", "--pretrain-limit", "500",
                      "--data", str(labelled_csv), "--out", str(out), "--quiet"]) == 0
    said = capsys.readouterr().out
    assert "masked language model on 500 molecules" in said and "molecules removed" in said
    run = json.loads((out / "config.json").read_text())["run"]
    assert run["pretrain_data"] == "druglike" and run["pretrain_molecules"] == 500
    rows = [line.split(",")[0] for line in (out / "history.csv").read_text().splitlines()[1:]]
    assert rows[0] == "pretrain" and rows[-1] == "train"


def test_an_encoder_pretrained_once_is_fine_tuned_by_later_runs_and_refused_where_it_saw_held_out_molecules(
        labelled_csv, load_demo, tmp_path, capsys):
    """--pretrain on other molecules leaves the whole table out, so its encoder serves any split
    and seed: --encoder starts a run from its weights; an encoder that may have seen a split's
    held-out molecules, or another table's, is refused in one line."""
    from minitransformer.cli import run_cli
    demo = load_demo("tox21_property")
    first = tmp_path / "pretrained"
    assert demo.main(["--quick", "--pretrain", "--pretrain-data", "druglike", "--pretrain-limit", "500",
                      "--lr", "1e-12", "--data", str(labelled_csv), "--out", str(first), "--quiet"]) == 0
    with np.load(first / "pretrain" / "last.npz") as a, np.load(first / "best.npz") as b:
        # the pretraining trained the property model's own encoder: fine-tuning (a step of 1e-12) starts from it
        body = [k for k in a.files if k.startswith("weights/encoder.")]
        assert body and all(np.allclose(a[k], b[k], atol=1e-8) for k in body)
        assert json.loads(a["__meta__"].tobytes())["model_type"] == "MaskedLM"
        assert json.loads(b["__meta__"].tobytes())["model_type"] == "PropertyModel"
    run = json.loads((first / "config.json").read_text())["run"]
    assert run["pretrain_excludes_table"] is True and run["encoder"] is None
    encoder = first / "pretrain" / "last.npz"
    later = tmp_path / "later"
    assert demo.main(["--quick", "--quiet", "--encoder", str(encoder), "--split", "scaffold", "--seed", "3",
                      "--lr", "1e-12", "--head-hidden", "8", "--data", str(labelled_csv),
                      "--out", str(later)]) == 0
    assert "fine-tuning the pretrained encoder" in capsys.readouterr().out
    assert json.loads((later / "config.json").read_text())["run"]["encoder"] == str(encoder)
    with np.load(encoder) as a, np.load(later / "best.npz") as b:  # a step of 1e-12 leaves the body as loaded
        body = [k for k in a.files if k.startswith("weights/encoder.")]
        assert body and all(np.allclose(a[k], b[k], atol=1e-8) for k in body)
        assert not any(k.startswith("weights/head.proj") for k in b.files)
        assert b["weights/head.hidden.weight"].shape[1] == 8  # this run's head, on the encoder's body
        D, F = a["weights/encoder.ln_f.weight"].shape[0], len(json.loads((later / "config.json").read_text())["run"]
                                                                  ["descriptors"]["names"])
        assert b["weights/head.hidden.weight"].shape[0] == D + F  # [h_cls; descriptors]
    assert run_cli(demo.main, ["--quick", "--pretrain", "--encoder", str(encoder), "--data", str(labelled_csv),
                               "--out", str(tmp_path / "both")]) == 2
    assert "drop one of them" in capsys.readouterr().err
    from minitransformer.cli.main import main
    molecules = tmp_path / "m.smi"
    molecules.write_text("CCO\n")
    assert run_cli(main, ["predict", str(encoder), str(molecules)]) == 2, "a head that never saw a label"
    assert "saved while pretraining" in capsys.readouterr().err
    assert run_cli(main, ["predict", str(later / "best.npz"), str(molecules)]) == 0
    for fine_tuned in ("best.npz", "last.npz"):  # it learnt one split's labels: refused, its folder untouched
        assert run_cli(demo.main, ["--quick", "--encoder", str(first / fine_tuned), "--data", str(labelled_csv),
                                   "--out", str(later), "--force"]) == 2
        assert "saved after fine-tuning" in capsys.readouterr().err
    assert (later / "best.npz").exists() and not list(later.glob("old-*")), "refused before --force moved anything"
    own_split = tmp_path / "own_split"  # pretrained on the training split's molecules: refused
    assert demo.main(["--quick", "--pretrain", "--data", str(labelled_csv), "--out", str(own_split), "--quiet"]) == 0
    assert run_cli(demo.main, ["--quick", "--encoder", str(own_split / "pretrain" / "last.npz"), "--data",
                               str(labelled_csv), "--out", str(tmp_path / "refused")]) == 2
    assert "may have seen molecules a split holds out" in capsys.readouterr().err
    other = tmp_path / "other.csv"
    other.write_text("\n".join(labelled_csv.read_text().splitlines()[:-5]) + "\n")
    assert run_cli(demo.main, ["--quick", "--encoder", str(encoder), "--data", str(other),
                               "--out", str(tmp_path / "other_run")]) == 2
    assert "another labelled table" in capsys.readouterr().err


def _property_recipe(argv):
    from minitransformer.cli.main import build_parser
    from minitransformer.cli.train_property import resolve_recipe
    return resolve_recipe(build_parser().parse_args(["train", "property", *argv]))


def test_pretrain_defaults_to_moses_with_its_own_minutes_on_top_of_the_fine_tuning():
    r = _property_recipe(["--pretrain"])
    assert (r.pretrain_data, r.pretrain_limit, r.pretrain_epochs) == ("moses", 250_000, 1)
    assert r.pretrain_max_time == 15 * 60 and r.max_time == (11 + 15) * 60  # 11 minutes stay fine-tuning
    r = _property_recipe(["--pretrain", "--pretrain-data", "train"])
    assert (r.pretrain_epochs, r.pretrain_max_time, r.max_time) == (12, 5 * 60, 16 * 60)
    assert _property_recipe(["--pretrain", "--max-minutes", "30"]).max_time == 30 * 60  # the user's total
    assert _property_recipe(["--quick", "--pretrain"]).pretrain_data == "train"  # quick fetches nothing
    assert _property_recipe([]).max_time == 11 * 60 and _property_recipe([]).pretrain_epochs == 0


def test_pretraining_on_the_whole_set_is_asked_for_by_name():
    r = _property_recipe(["--pretrain", "--pretrain-limit", "all", "--pretrain-minutes", "0", "--max-minutes", "0"])
    assert (r.pretrain_data, r.pretrain_limit, r.pretrain_max_time, r.max_time) == ("moses", None, None, None)
    assert _property_recipe(["--pretrain", "--pretrain-limit", "5000"]).pretrain_limit == 5000


def test_without_moses_pretraining_falls_back_to_the_training_split(monkeypatch, capsys):
    import minitransformer.chem.datasets.lm_data as lm_data
    from minitransformer.chem.datasets.download import DownloadError
    from minitransformer.cli.train_property import pretraining_molecules

    def offline(data, **kw):
        raise DownloadError("could not download molsets-0.3.1-py3-none-any.whl. Offline? ...")
    monkeypatch.setattr(lm_data, "pretraining_smiles", offline)
    r, extra = pretraining_molecules(_property_recipe(["--pretrain"]), ["CCO"])
    assert extra == [] and (r.pretrain_data, r.pretrain_max_time, r.max_time) == ("train", 5 * 60, 16 * 60)
    assert "MOSES is not available" in capsys.readouterr().out
    with pytest.raises(DownloadError):
        pretraining_molecules(_property_recipe(["--pretrain", "--pretrain-data", "moses"]), ["CCO"])


def _numbers(out):
    """What a finished run learnt: its checkpoints' arrays, its history's losses and AUCs, its test AUC."""
    arrays = {}
    for name in ("last.npz", "best.npz", "pretrain/last.npz"):
        with np.load(out / name) as z:
            arrays.update({f"{name}:{k}": z[k] for k in z.files if not k.startswith("__")})
    rows = [{k: v for k, v in row.items() if k in ("phase", "epoch", "train_loss", "val_loss", "val_auc")}
            for row in json.loads((out / "history.json").read_text())]
    return arrays, rows, json.loads((out / "metrics.json").read_text())["test_auc"]


def test_a_stopped_run_resumed_in_each_phase_ends_exactly_as_a_straight_run(labelled_csv, load_demo, tmp_path,
                                                                            capsys, monkeypatch):
    """Ctrl-C after a pretraining epoch, --resume, Ctrl-C after a fine-tuning epoch, --resume:
    the same weights, optimizer state, history and test AUC as one run without a stop."""
    import minitransformer.train.trainer as trainer
    from minitransformer.cli import run_cli
    demo = load_demo("tox21_property")
    argv = ["--quick", "--quiet", "--pretrain", "--pretrain-epochs", "2", "--epochs", "3", "--data",
            str(labelled_csv)]
    assert run_cli(demo.main, argv + ["--out", str(tmp_path / "straight")]) == 0
    real = trainer.Trainer._write_history

    def stop_after(phase, epoch):
        def write(self):
            real(self)
            if self.extra_meta.get("phase") == phase and self.epoch == epoch:
                raise KeyboardInterrupt
        monkeypatch.setattr(trainer.Trainer, "_write_history", write)
    out = tmp_path / "stopped"
    stop_after("pretrain", 1)
    assert run_cli(demo.main, argv + ["--out", str(out)]) == 130
    assert "continue with --resume" in capsys.readouterr().err
    stop_after("train", 2)
    assert run_cli(demo.main, argv + ["--out", str(out), "--resume"]) == 130
    monkeypatch.undo()
    assert run_cli(demo.main, argv + ["--out", str(out), "--resume"]) == 0
    (a_arrays, a_rows, a_auc), (b_arrays, b_rows, b_auc) = _numbers(tmp_path / "straight"), _numbers(out)
    assert a_rows == b_rows and a_auc == b_auc
    assert a_arrays.keys() == b_arrays.keys()
    for key, value in a_arrays.items():
        assert np.array_equal(value, b_arrays[key]), f"{key} differs after two resumes"


def test_a_model_that_reads_descriptors_predicts_new_molecules_as_its_run_did(labelled_csv, load_demo, tmp_path):
    """--descriptors on: the head reads RDKit's descriptors, the checkpoint carries their scale,
    and `predict` gives the run's own test predictions back (same writings, same seed)."""
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.chem.descriptors import descriptor_names
    from minitransformer.molecules.predicting import PropertyPredictor
    demo = load_demo("tox21_property")
    out = tmp_path / "run"
    assert demo.main(["--quick", "--quiet", "--descriptors", "on", "--data", str(labelled_csv), "--out", str(out)]) == 0
    ckpt = load_checkpoint(out / "best.npz")
    assert ckpt.config["n_features"] == len(descriptor_names())
    assert ckpt.meta["run"]["descriptors"]["names"] == descriptor_names()
    lines = (out / "predictions.csv").read_text().splitlines()[1:]
    smiles = [line.split(",")[0] for line in lines]
    expected = np.array([[float(v) for v in line.split(",")[1:4]] for line in lines])  # (N, 3), 4 decimals
    predictor = PropertyPredictor.from_checkpoint(out / "best.npz")
    probs, ok, _ = predictor.predict(smiles, views=json.loads((out / "metrics.json").read_text())["tta"], seed=0)
    assert ok.all()
    np.testing.assert_allclose(probs, expected, atol=5.1e-5)
    # the features matter: reading all-zero descriptors moves the predictions
    predictor.descriptors = type(predictor.descriptors)(predictor.descriptors.names,
                                                        predictor.descriptors.quantiles * np.nan)
    moved, _, _ = predictor.predict(smiles, views=2, seed=0)
    assert np.abs(moved - probs).max() > 1e-4


def test_seeds_and_ensembles_report_the_mean_and_spread_of_what_each_seed_scored(labelled_csv, load_demo, tmp_path,
                                                                                   capsys):
    """--seeds 0,1 --ensemble 2: four runs; each seed's members share its split and their averaged
    probabilities are its score; the summary's mean and spread are those of the seeds' scores;
    --resume reads finished runs back instead of training them again."""
    from minitransformer.cli import run_cli
    from minitransformer.roc_auc import multilabel_roc_auc
    demo = load_demo("tox21_property")
    out = tmp_path / "seeds"
    argv = ["--quick", "--quiet", "--seeds", "0,1", "--ensemble", "2", "--data", str(labelled_csv), "--out", str(out)]
    assert demo.main(argv) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["ensemble"] == 2
    scores = []
    for seed in (0, 1):
        members = [out / f"seed-{seed}" / f"member-{k}" for k in (0, 1)]
        runs = [json.loads((m / "config.json").read_text())["run"] for m in members]
        assert [r["seed"] for r in runs] == [seed, seed + 1000] and {r["split_seed"] for r in runs} == {seed}
        labels = np.load(members[0] / "test_labels.npy")
        assert np.array_equal(labels, np.load(members[1] / "test_labels.npy"), equal_nan=True)
        p = [np.load(m / "test_probabilities.npy") for m in members]
        assert not np.allclose(p[0], p[1])  # two draws of the model
        scores.append(multilabel_roc_auc(labels, (p[0] + p[1]) / 2, mask=~np.isnan(labels))["mean"])
    assert summary["test_auc_per_seed"] == pytest.approx(scores, abs=1e-12)
    assert summary["test_auc_mean"] == pytest.approx(np.mean(scores))
    assert summary["test_auc_std"] == pytest.approx(np.std(scores, ddof=1))
    vals = []
    for seed in (0, 1):
        members = [out / f"seed-{seed}" / f"member-{k}" for k in (0, 1)]
        labels = np.load(members[0] / "val_labels.npy")
        p = np.mean([np.load(m / "val_probabilities.npy") for m in members], axis=0)
        vals.append(multilabel_roc_auc(labels, p, mask=~np.isnan(labels))["mean"])
    assert summary["val_auc_mean"] == pytest.approx(np.mean(vals))  # what chooses between recipes
    assert "mean over 2 seeds" in capsys.readouterr().out
    assert run_cli(demo.main, argv) == 2  # the folder holds these runs: --resume or --force
    assert "--resume" in capsys.readouterr().err
    assert demo.main(argv + ["--resume"]) == 0
    assert capsys.readouterr().out.count("finished earlier, read back") == 4
    assert json.loads((out / "metrics.json").read_text())["test_auc_per_seed"] == summary["test_auc_per_seed"]
    assert run_cli(demo.main, argv + ["--resume", "--descriptors", "off"]) == 2  # not averaged with another recipe
    assert "made with other data or settings" in capsys.readouterr().err
    for bad, said in ((["--seeds", "0,1000", "--ensemble", "2"], "two runs would be one model"),
                      (["--seeds", "4294967295", "--ensemble", "2"], "past"),
                      (["--seeds", "0,1", "--resume", str(out / "seed-0" / "member-0" / "last.npz")], "own folder")):
        assert run_cli(demo.main, ["--quick", "--data", str(labelled_csv), "--out", str(tmp_path / "x"), *bad]) == 2
        assert said in capsys.readouterr().err


def _relabelled(labelled_csv, folder, row: int = 5, column: int = 3):
    """``labelled_csv`` with one label of one molecule flipped: the same molecules, in the same order."""
    lines = labelled_csv.read_text().splitlines()
    cells = lines[row].split(",")
    cells[column] = "1" if cells[column] == "0" else "0"
    lines[row] = ",".join(cells)
    path = folder / "relabelled.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_seeds_resume_reads_back_only_runs_made_of_this_data_and_these_labels(labelled_csv, load_demo, tmp_path,
                                                                                capsys):
    """--seeds --resume compares each finished run's whole record with this command's, as a resume does:
    other molecules, one label changed, or other task names are refused, and nothing is averaged or written."""
    from minitransformer.cli import run_cli
    demo = load_demo("tox21_property")
    out = tmp_path / "seeds"
    argv = ["--quick", "--quiet", "--seeds", "0,1", "--out", str(out)]
    assert demo.main(argv + ["--data", str(labelled_csv)]) == 0
    summary = (out / "metrics.json").read_text()
    fewer = tmp_path / "fewer.csv"
    fewer.write_text("\n".join(labelled_csv.read_text().splitlines()[:250]) + "\n")
    renamed = tmp_path / "renamed.csv"
    renamed.write_text(labelled_csv.read_text().replace("carbonyl", "ketone", 1))
    for data, said in ((fewer, "data_sha256"), (_relabelled(labelled_csv, tmp_path), "labels_sha256"),
                       (renamed, "tasks")):
        assert run_cli(demo.main, argv + ["--data", str(data), "--resume"]) == 2, data
        captured = capsys.readouterr()
        assert said in captured.err and "finished earlier" not in captured.out, (data, captured.err)
        assert (out / "metrics.json").read_text() == summary  # no summary of runs on two tables
    shutil.rmtree(out / "seed-1")  # one seed missing: the finished one is still compared first
    assert run_cli(demo.main, argv + ["--data", str(fewer), "--resume"]) == 2
    assert "data_sha256" in capsys.readouterr().err and not (out / "seed-1").exists()
    assert demo.main(argv + ["--data", str(labelled_csv), "--resume"]) == 0  # its own data: read back, seed 1 trained
    assert "seed 0: finished earlier, read back" in capsys.readouterr().out
    for checkpoint in (out / "seed-0").rglob("*.npz"):  # removed to save space: config.json is the run's record
        checkpoint.unlink()
    assert demo.main(argv + ["--data", str(labelled_csv), "--resume"]) == 0
    assert "seed 0: finished earlier, read back" in capsys.readouterr().out
    assert run_cli(demo.main, argv + ["--data", str(fewer), "--resume"]) == 2
    assert "data_sha256" in capsys.readouterr().err


def test_a_resume_on_the_same_molecules_with_other_labels_is_refused(labelled_csv, load_demo, tmp_path, capsys):
    """The run record fingerprints the labels and task names, not only the SMILES: best.npz is never chosen by
    validation AUCs measured against two label sets."""
    from minitransformer.cli import run_cli
    demo = load_demo("tox21_property")
    out = tmp_path / "run"
    assert demo.main(["--quick", "--quiet", "--data", str(labelled_csv), "--out", str(out)]) == 0
    relabelled = _relabelled(labelled_csv, tmp_path)
    assert run_cli(demo.main, ["--quick", "--data", str(relabelled), "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "labels_sha256" in err and err.count("\n") == 1


def test_one_seed_given_with_seeds_is_the_seed_that_runs(labelled_csv, load_demo, tmp_path):
    demo = load_demo("tox21_property")
    out = tmp_path / "one"
    assert demo.main(["--quick", "--quiet", "--seeds", "3", "--data", str(labelled_csv), "--out", str(out)]) == 0
    assert json.loads((out / "seed-3" / "config.json").read_text())["run"]["seed"] == 3
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["seeds"] == [3] and summary["test_auc_std"] is None


def test_a_split_without_any_task_of_two_classes_is_refused_before_training(load_demo, tmp_path, capsys):
    """ROC-AUC needs a 0 and a 1 in some task: a table whose validation split cannot give one is a usage
    error found before any epoch, not a 'diverged' metric after the first."""
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    from minitransformer.cli import run_cli
    rows = ["smiles,rare"] + [f"{s},0" for s in read_smiles(druglike_path(), header=False)[:60]]
    data = tmp_path / "rare.csv"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    assert run_cli(load_demo("tox21_property").main, ["--quick", "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no task with both a 0 and a 1 label" in err, err
    assert not (out / "config.json").exists(), "refused before the run folder was written"


def test_a_run_refused_over_its_data_leaves_no_folder_behind(load_demo, tmp_path, capsys):
    from minitransformer.cli import run_cli
    data = tmp_path / "no_smiles.csv"
    data.write_text("name,active\naspirin,1\n")
    out = tmp_path / "new" / "run"
    assert run_cli(load_demo("tox21_property").main, ["--quick", "--data", str(data), "--out", str(out)]) == 2
    assert "smiles" in capsys.readouterr().err.lower()
    assert not out.exists(), "the folder the run made for its lock goes when nothing was written in it"


def test_a_model_with_the_graph_bias_pretrains_predicts_and_draws_as_its_run_did(labelled_csv, load_demo, tmp_path):
    """--graph 4: every block's attention reads the molecule's relations (pretraining included), the
    checkpoint says so, `predict` computes the graph of new molecules as the run did and gives its test
    predictions back, the `attention` pictures include the learned bias tables, and an old-style
    model without the graph is untouched by it."""
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.chem.graph import n_relations
    from minitransformer.cli.main import main
    from minitransformer.molecules.predicting import PropertyPredictor
    demo = load_demo("tox21_property")
    out = tmp_path / "run"
    assert demo.main(["--quick", "--quiet", "--pretrain", "--graph", "4", "--descriptors", "off", "--data",
                      str(labelled_csv), "--out", str(out)]) == 0
    ckpt = load_checkpoint(out / "best.npz")
    assert ckpt.config["graph_max_distance"] == 4
    tables = [k for k in ckpt.weights if k.endswith("graph_bias.table")]
    assert len(tables) == ckpt.config["n_layers"] and ckpt.weights[tables[0]].shape == (ckpt.config["n_heads"],
                                                                                       n_relations(4))
    pretrained = load_checkpoint(out / "pretrain" / "last.npz")
    moved = [k for k in pretrained.weights if k.endswith("graph_bias.table")]
    assert moved and not np.allclose(pretrained.weights[moved[0]], 0.0)
    lines = (out / "predictions.csv").read_text().splitlines()[1:]
    smiles = [line.split(",")[0] for line in lines]
    expected = np.array([[float(v) for v in line.split(",")[1:4]] for line in lines])  # (N, 3), 4 decimals
    predictor = PropertyPredictor.from_checkpoint(out / "best.npz")
    probs, ok, _ = predictor.predict(smiles, views=json.loads((out / "metrics.json").read_text())["tta"], seed=0)
    assert ok.all()
    np.testing.assert_allclose(probs, expected, atol=5.1e-5)
    pictures = tmp_path / "pictures"
    assert main(["attention", str(out / "best.npz"), smiles[0], "--out", str(pictures)]) == 0
    assert (pictures / "graph_bias.png").read_bytes()[:4] == b"\x89PNG"
    assert (pictures / "attention_encoder_self.png").stat().st_size > 0
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--quick", "--graph", "1", "--data", str(labelled_csv), "--out", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
