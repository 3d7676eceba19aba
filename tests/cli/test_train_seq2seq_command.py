"""End-to-end: ``minitransformer train seq2seq`` (run as its demo, ``demos/canonicalize.py``, runs it):
the paired data, a ``--quick`` run, clear errors."""
import json
import math

import numpy as np
import pytest

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")

from minitransformer.chem import canonical, randomize_smiles, read_smiles  # noqa: E402
from minitransformer.cli import run_cli  # noqa: E402
from minitransformer.chem.datasets.data import druglike_path  # noqa: E402
from minitransformer.chem.datasets.seq2seq_data import PairEpochs, prepare_pairs  # noqa: E402
from minitransformer.molecules.canonicalization import COLUMNS


def _quiet(*_):
    pass


# --------------------------------------------------------------------------- the data
@pytest.fixture(scope="module")
def splits():
    return prepare_pairs("druglike", seed=3, limit=200, log=_quiet)


def test_pairs_are_fresh_each_epoch_and_deterministic_in_seed_and_epoch(splits):
    epochs = PairEpochs(splits.train, splits.vocab, seed=3, max_tokens=128)
    e0, e1 = epochs(0), epochs(1)
    assert len(e0) == len(splits.train)
    assert [t for _, t in e0] == [t for _, t in e1]  # the targets stay
    assert sum(s0 != s1 for (s0, _), (s1, _) in zip(e0, e1)) > 0.9 * len(e0)  # the sources change
    again = PairEpochs(splits.train, splits.vocab, seed=3, max_tokens=128)
    assert again(1) == e1 and again(0) == e0  # same (seed, epoch), same pairs, in any order of calls
    assert PairEpochs(splits.train, splits.vocab, seed=4, max_tokens=128)(0) != e0
    fixed = PairEpochs(splits.train, splits.vocab, seed=3, max_tokens=128, fresh=False)  # --augment fixed
    assert fixed(0) == e0 and fixed(7) == e0  # one random source per molecule, every epoch


def test_sources_are_valid_smiles_of_the_target_molecule(splits):
    vocab = splits.vocab
    for src, tgt in PairEpochs(splits.train, vocab, seed=3, max_tokens=128)(5):
        assert vocab.unk_id not in src and len(src) <= 128
        target = vocab.decode(tgt)
        assert canonical(target) == target  # the target is the canonical SMILES
        assert canonical(vocab.decode(src)) == target  # the source writes the same molecule
    for sources, targets in ((splits.val_src, splits.val), (splits.test_src, splits.test)):
        assert len(sources) == len(targets)
        assert all(canonical(s) == t for s, t in zip(sources, targets))
        assert sum(s != t for s, t in zip(sources, targets)) > 0.9 * len(targets)  # randomized, not copies


def test_fixed_sources_do_not_depend_on_the_call(splits):
    again = prepare_pairs("druglike", seed=3, limit=200, log=_quiet)
    assert again.test_src == splits.test_src and again.val_src == splits.val_src
    assert again.vocab == splits.vocab


def test_no_test_molecule_is_trained_on_even_under_another_spelling(tmp_path):
    # 40 molecules, each written twice: once as in the file, once as a random SMILES.
    rng = np.random.default_rng(0)
    base = [s for s in read_smiles(druglike_path(), header=False)[:40]]
    rows = base + [randomize_smiles(s, rng) for s in base]
    path = tmp_path / "twice.smi"
    path.write_text("\n".join(rows) + "\n")
    data = prepare_pairs(str(path), seed=1, log=_quiet)
    assert data.duplicates == 40
    assert len(data.train) + len(data.val) + len(data.test) == 40
    assert not set(data.test) & set(data.train) and not set(data.val) & set(data.train)
    assert not set(data.test) & set(data.val)


# --------------------------------------------------------------------------- end to end
WRITTEN = []  # files the quick run wrote through minitransformer.atomic


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, load_demo, atomic_spy):
    out = tmp_path_factory.mktemp("canonicalize")
    demo = load_demo("canonicalize")
    # RDKit's drug-like set ships with RDKit, so this runs without Tox21 or a network.
    with atomic_spy() as written:
        code = demo.main(["--quick", "--data", "druglike", "--out", str(out), "--quiet", "--plot-attention"])
    assert code == 0
    WRITTEN[:] = written
    return demo, out


def test_every_output_is_written_atomically(quick_run):
    """No file of the run is written in place (a full disk cannot truncate it)."""
    _, out = quick_run
    on_disk = {p.name for p in out.iterdir() if p.name != ".lock"}  # the lock: O_EXCL, not a result
    assert on_disk <= set(WRITTEN), f"written in place: {sorted(on_disk - set(WRITTEN))}"


def test_quick_run_writes_every_output(quick_run):
    demo, out = quick_run
    for name in ("metrics.json", "history.json", "history.csv", "provenance.json", "config.json", "best.npz",
                 "last.npz", "predictions.tsv",
                 "curves.png", "attention_cross.png", "attention_copy.png"):
        path = out / name
        assert path.exists() and path.stat().st_size > 0, f"missing or empty output: {name}"
    for png in ("curves.png", "attention_cross.png", "attention_copy.png"):  # the preset's decoder points
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    m = json.loads((out / "metrics.json").read_text())
    lines = (out / "predictions.tsv").read_text().splitlines()
    assert len(lines) == m["n_test"] + 1
    assert lines[0].split("\t") == list(COLUMNS)
    assert all(len(line.split("\t")) == len(COLUMNS) for line in lines)


def test_quick_run_metrics_are_fractions(quick_run):
    _, out = quick_run
    m = json.loads((out / "metrics.json").read_text())
    for key in ("greedy_top1", "greedy_valid", "greedy_same_molecule", "greedy_other_string",
                "beam_top1", "beam_top5", "beam_valid", "beam_same_molecule", "beam_other_string",
                "beam_valid_all", "beam_first_valid_top1", "greedy_top1_no_stereo", "greedy_top1_not_copies"):
        assert 0.0 <= m[key] <= 1.0, f"{key} = {m[key]} is not in [0, 1]"
    assert m["augmentation"] == "each training molecule's source is a fresh random SMILES every epoch"
    # breakdowns over subsets: None when the subset is empty (the drug-like set has no stereo)
    assert m["n_test_stereo"] == 0 and m["greedy_top1_stereo"] is None
    assert all(v is None or 0.0 <= v <= 1.0 for v in m["greedy_top1_by_length"].values())
    assert m["greedy_top1"] <= m["greedy_same_molecule"] <= m["greedy_valid"]
    assert m["beam_top1"] <= m["beam_top5"]
    assert m["n_test"] > 0 and math.isfinite(m["wall_time_s"])
    history = json.loads((out / "history.json").read_text())
    assert len(history) == m["epochs"] >= 1
    assert all(0.0 <= h["val_exact"] <= 1.0 and math.isfinite(h["val_loss"]) for h in history)


def test_translate_command_reads_the_checkpoint(quick_run, capsys):
    demo, out = quick_run
    assert demo.main(["translate", str(out / "best.npz"), "--beam", "2", "OCC(C)c1ccccc1"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("OCC(C)c1ccccc1\t")


# --------------------------------------------------------------------------- bad input
def test_missing_data_file_is_a_clear_error(tmp_path, capsys, load_demo):
    demo = load_demo("canonicalize")
    argv = ["--quick", "--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o"), "--quiet"]
    assert run_cli(demo.main, argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope.csv" in err and "Traceback" not in err


def test_bad_translate_input_is_a_clear_error(quick_run, tmp_path, capsys):
    demo, out = quick_run
    assert run_cli(demo.main, ["translate", str(tmp_path / "none.npz"), "CCO"]) == 2
    assert run_cli(demo.main, ["translate", str(out / "best.npz"), "C1CC"]) == 2
    err = capsys.readouterr().err
    assert "none.npz" in err and "C1CC" in err


def test_quick_run_on_moses_pairs_also_reports_tox21(tmp_path, capsys):
    import os
    from minitransformer.chem.datasets.moses import find_moses
    from minitransformer.cli.main import main
    try:
        find_moses("train", download=False), find_moses("test", download=False)
    except (OSError, ValueError):
        pytest.skip("the MOSES files are not on this machine ($MINITRANSFORMER_DATA/moses)")
    if not os.environ.get("MINITRANSFORMER_DATA"):
        pytest.skip("Tox21 is needed too ($MINITRANSFORMER_DATA)")
    out = tmp_path / "run"
    assert run_cli(main, ["train", "seq2seq", "--quick", "--quiet", "--data", "moses", "--out", str(out),
                          "--examples", "0"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    from minitransformer.cli.train_seq2seq import QUICK
    assert 0 < m["n_test"] <= QUICK["limit"], "a quick run decodes no more test molecules than it trains on"
    assert 0.0 <= m["greedy_top1"] <= 1.0
    tox = m["tox21"]
    assert tox["n_test"] > tox["n_skipped_unknown_tokens"] >= 0 and 0.0 <= tox["greedy_top1"] <= 1.0
    assert "Tox21 test molecules: greedy top-1" in capsys.readouterr().out


def _seq2seq_recipe(argv):
    from minitransformer.cli.main import build_parser
    from minitransformer.cli.train_seq2seq import resolve_recipe
    return resolve_recipe(build_parser().parse_args(["train", "seq2seq", *argv]))


def test_the_pointer_and_the_limit_reach_the_recipe_and_a_recurrent_model_refuses_the_pointer():
    assert _seq2seq_recipe(["--pointer", "on", "--limit", "5000"]).model.pointer is True
    assert _seq2seq_recipe(["--limit", "5000"]).limit == 5000
    assert _seq2seq_recipe(["--pointer", "off"]).model.pointer is False
    with pytest.raises(ValueError, match="--pointer needs --model transformer"):
        _seq2seq_recipe(["--model", "rnn", "--pointer", "on"])


def test_the_validation_exact_match_reads_molecules_spread_over_the_whole_set():
    from minitransformer.cli.train_seq2seq import spread_evenly
    picks = spread_evenly(10_000, 200)
    assert len(picks) == 200 and picks[0] == 0 and picks[-1] == 9_999
    assert max(b - a for a, b in zip(picks, picks[1:])) < 60
    assert spread_evenly(5, 200) == [0, 1, 2, 3, 4] and spread_evenly(100, 0) == []
