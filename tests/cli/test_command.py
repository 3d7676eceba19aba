"""The `minitransformer` command: every subcommand end to end on small data.

Each test runs ``main`` in-process through ``run_cli`` (the same path as the
installed script, without starting Python again), except the two that check
``python -m minitransformer`` itself.
"""
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from minitransformer import __version__
from minitransformer.cli import run_cli
from minitransformer.cli.main import COMMANDS, main

pytest.importorskip("rdkit")

ROOT = Path(__file__).resolve().parents[2]


def run(argv, capsys):
    """(exit status, captured output) of ``minitransformer ARGV``; the capture starts empty."""
    capsys.readouterr()
    code = run_cli(main, [str(a) for a in argv])
    return code, capsys.readouterr()


def error_line(captured) -> str:
    """The one line a failed command wrote on stderr (no traceback, no second line)."""
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{captured.err}"
    return lines[0]


def test_help_lists_every_command_and_each_has_an_example(capsys):
    code, out = run(["--help"], capsys)
    assert code == 0
    for name in ("train", "sample", "translate", "predict", "score", "attention", "info"):
        assert f"\n    {name}" in out.out, f"{name} missing from --help"
    assert "examples:" in out.out
    for argv in (["train", "lm"], ["train", "property"], ["train", "seq2seq"],
                 *[[c] for c in COMMANDS if not c.startswith("train_")]):
        code, out = run([*argv, "--help"], capsys)
        assert code == 0 and "example:\n  minitransformer " + " ".join(argv) in out.out, argv


def test_version(capsys):
    code, out = run(["--version"], capsys)
    assert code == 0 and out.out.strip() == f"minitransformer {__version__}"


def test_no_command_and_unknown_command_are_one_line_usage_errors(capsys):
    code, out = run([], capsys)
    assert code == 2 and "required: COMMAND" in error_line(out)
    code, out = run(["fly"], capsys)
    assert code == 2 and "invalid choice: 'fly'" in error_line(out)


def test_python_dash_m_runs_the_command(tmp_path):
    done = subprocess.run([sys.executable, "-m", "minitransformer", "--version"], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip() == f"minitransformer {__version__}"
    bad = subprocess.run([sys.executable, "-m", "minitransformer", "sample", str(tmp_path / "none.npz")],
                         capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no such checkpoint" in bad.stderr
    assert "Traceback" not in bad.stderr


# --------------------------------------------------------------------------- sample
@pytest.mark.parametrize("argv, timeout", [(["train", "lm", "--quick"], 8), (["train", "--help"], 8),
                                            (["sample", "run/"], 22), (["translate", "x"], 22), ([], 22)])
def test_the_command_starts_itself_with_the_blas_timeout_of_its_work(argv, timeout):
    """Training runs with idle BLAS threads asleep at once, decoding with them spinning
    about 1.5 ms (the measured choice of minitransformer/fast/engine/parallel.py)."""
    from minitransformer.cli.main import blas_thread_timeout
    from minitransformer.fast.engine import parallel
    assert blas_thread_timeout(argv) == timeout
    assert {parallel.TRAINING_THREAD_TIMEOUT, parallel.DECODING_THREAD_TIMEOUT} == {8, 22}


def test_the_relaunched_command_sees_the_timeout_and_a_users_value_is_kept(tmp_path):
    """The command starts itself again with the variable set (the new process's environment
    is printed instead of starting it); a value set by the user is kept, with no restart."""
    import os
    probe = ("import os, sys; os.execve = lambda exe, args, env: (print('restart', env['OPENBLAS_THREAD_TIMEOUT']), "
             "sys.exit(0)); from minitransformer.cli.main import _relaunch_with_prompt_blas_threads as r; "
             "r(sys.argv[1:]); print('kept', os.environ['OPENBLAS_THREAD_TIMEOUT'])")
    for user, argv, expected in ((None, ["train", "lm"], "restart 8"), (None, ["sample"], "restart 22"),
                                 ("5", ["train"], "kept 5")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
        if user is not None:
            env["OPENBLAS_THREAD_TIMEOUT"] = user
        env["PYTHONPATH"] = str(ROOT)
        out = subprocess.run([sys.executable, "-c", probe, *argv], env=env, capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == expected


def test_a_relaunch_that_cannot_exec_leaves_ctrl_c_unblocked(tmp_path):
    """Ctrl-C is held across the relaunch's exec; when the exec fails, the command goes on in
    this process with Ctrl-C and SIGTERM unblocked again."""
    import os
    probe = ("import os, signal, sys\n"
             "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # as a terminal starts it\n"
             "def refuse(*a): raise OSError('no exec here')\n"
             "os.execve = refuse\n"
             "from minitransformer.cli.main import _relaunch_with_prompt_blas_threads as r\n"
             "try: r(['train', 'lm'])\n"
             "except OSError as e: print('failed:', e)\n"
             "print('blocked', sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["failed: no exec here", "blocked []"]


def test_sample_writes_smi_and_csv_and_a_seed_repeats(tiny_checkpoints, tmp_path, capsys):
    smi, table = tmp_path / "a.smi", tmp_path / "a.csv"
    base = ["sample", tiny_checkpoints["lm"], "-n", "6", "--top-k", "3", "--top-p", "0.9", "--temperature", "0.8"]
    assert run([*base, "--out", smi], capsys)[0] == 0 and run([*base, "--out", table], capsys)[0] == 0
    lines = smi.read_text().splitlines()
    rows = list(csv.DictReader(table.open()))
    assert len(lines) == 6 and [r["smiles"] for r in rows] == lines  # the same seed: the same molecules
    assert all(r["valid"] in ("0", "1") and (r["valid"] == "1") == bool(r["canonical"]) for r in rows)
    code, out = run([*base, "--seed", "1"], capsys)
    assert code == 0 and len(out.out.splitlines()) == 6


def test_two_seeds_never_share_a_draw(tiny_checkpoints):
    """With rng = seed * 1000 + start, seed 1's 500 samples were lines 1001-1500 of seed 0's."""
    from minitransformer.molecules.sampling import load_generator, sample_smiles
    model, vocab = load_generator(tiny_checkpoints["lm"])
    zero = sample_smiles(model, vocab, 1500, seed=0, batch_size=500)
    one = sample_smiles(model, vocab, 500, seed=1, batch_size=500)
    assert one != zero[1000:1500] and one != zero[:500]
    assert sum(a == b for a, b in zip(one, zero[1000:1500])) < 100  # independent draws (a tiny model repeats some)
    assert sample_smiles(model, vocab, 500, seed=1, batch_size=500) == one  # and a seed still repeats


def test_sample_under_the_grammar_levels(tiny_checkpoints, capsys):
    """--grammar (syntax) and --grammar valence: every sample parses; a third level is a usage error."""
    Chem = pytest.importorskip("rdkit.Chem")
    from minitransformer.chem.judge.failures import failure_kind
    for level in (["--grammar"], ["--grammar", "valence"]):
        code, out = run(["sample", tiny_checkpoints["lm"], "-n", "30", *level], capsys)
        kinds = {failure_kind(s) for s in out.out.splitlines() if Chem.MolFromSmiles(s) is None}
        assert code == 0 and not kinds & {"empty", "unclosed ring", "parentheses", "syntax"}, kinds
    code, out = run(["sample", tiny_checkpoints["lm"], "--grammar", "strict"], capsys)
    assert code == 2 and "--grammar" in error_line(out)


def test_sample_says_how_many_samples_the_length_limit_cut(tiny_checkpoints, tmp_path, capsys):
    """With EOS made impossible every sample fills max_len - 1 positions and is cut; with EOS made
    certain none is, and nothing is said."""
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.molecules.sampling import load_generator
    for bias, said in ((-50.0, "12 reached the length limit (39 tokens) without ending"), (50.0, None)):
        model, vocab = load_generator(tiny_checkpoints["lm"])
        model.head.linear.bias.data[vocab.eos_id] += bias
        save_checkpoint(tmp_path / "m.npz", model, vocab=vocab)
        code, out = run(["sample", tmp_path / "m.npz", "-n", "12", "--out", tmp_path / f"s{bias}.smi"], capsys)
        assert code == 0, out.err
        assert (said in out.out) if said else "length limit" not in out.out, out.out


def test_the_length_limit_counts_a_marker_read_back_as_the_one_token_the_model_wrote():
    from minitransformer.chem.datasets.ring_marks import BAD_RING_MARK
    from minitransformer.chem.datasets.vocab import Vocab
    from minitransformer.cli.sample import reached_the_limit
    marked = Vocab.build(["C1CCCCC1"], rings="marked")
    # 8 tokens each: C 1 C C C C C 1' (the limit is max_len - 1 = 8), and C C C C C C C <ring mark>
    assert reached_the_limit(["C1CCCCC1", "CCCCCCC" + BAD_RING_MARK], 9, marked) == 2
    assert reached_the_limit(["C1CCCCC1", "CCCCCC" + BAD_RING_MARK], 10, marked) == 0
    left_open = "C1C" + BAD_RING_MARK  # no writing of the vocabulary: its SMILES tokens, 3, and the marker
    assert reached_the_limit([left_open], 5, marked) == 1 and reached_the_limit([left_open], 6, marked) == 0


def test_sample_refuses_an_unknown_output_type_before_work(tiny_checkpoints, tmp_path, capsys):
    assert run(["sample", tiny_checkpoints["lm"], "--out", tmp_path / "a.sdf"], capsys)[0] == 2
    assert not (tmp_path / "a.sdf").exists()


# --------------------------------------------------------------------------- translate
def test_translate_reads_a_file_and_reports_bad_lines_in_place(tiny_checkpoints, tmp_path, capsys):
    src = tmp_path / "in.smi"
    src.write_text("CCO first\nC1CC broken\nCC[Se]C unknown-token\nc1ccccc1\n")
    code, out = run(["translate", tiny_checkpoints["s2s"], "--input", src, "--beam", "1"], capsys)
    assert code == 0
    lines = [line.split("\t") for line in out.out.splitlines()]
    assert lines[0] == ["source", "prediction", "verdict"] and [r[0] for r in lines[1:]] == \
        ["CCO", "C1CC", "CC[Se]C", "c1ccccc1"]
    assert "RDKit cannot read" in lines[2][2] and "never saw: [Se]" in lines[3][2]
    assert lines[1][2] == "correct" or lines[1][2].startswith("differs from RDKit's CCO")


def test_translate_with_only_bad_input_is_an_error(tiny_checkpoints, capsys):
    code, out = run(["translate", tiny_checkpoints["s2s"], "C1CC"], capsys)
    assert code == 2 and "RDKit cannot read" in error_line(out)
    code, out = run(["translate", tiny_checkpoints["s2s"], "C C"], capsys)  # RDKit reads "C", a name after
    assert code == 2 and "it holds white space; give the SMILES alone" in error_line(out)


# --------------------------------------------------------------------------- predict
def test_predict_with_only_unreadable_molecules_is_an_error_and_writes_nothing(tiny_checkpoints, tmp_path, capsys):
    bad = tmp_path / "bad.smi"
    bad.write_text("C1CC\nnot-a-molecule\n")
    code, out = run(["predict", tiny_checkpoints["property"], bad, "--out", tmp_path / "p.csv"], capsys)
    line = error_line(out)
    assert code == 2 and "nothing to predict: 'C1CC': RDKit cannot read it (and 1 more" in line
    assert not (tmp_path / "p.csv").exists()


def test_predict_on_a_users_csv(tiny_checkpoints, tmp_path, capsys):
    mine = tmp_path / "mine.csv"
    mine.write_text("name,SMILES\nethanol,CCO\njunk,not-a-molecule\nbenzene,c1ccccc1\n")
    out = tmp_path / "p.csv"
    code, said = run(["predict", tiny_checkpoints["property"], mine, "--out", out, "--views", "2"], capsys)
    assert code == 0 and "1 of 3 molecules could not be read" in said.err
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["id", "smiles", "readable", "reason", "NR-AR", "SR-p53", "X"]
    assert [(r["id"], r["readable"]) for r in rows] == [("ethanol", "1"), ("junk", "0"), ("benzene", "1")]
    assert rows[1]["NR-AR"] == "" and "RDKit" in rows[1]["reason"]
    assert all(0 < float(rows[i][t]) < 1 for i in (0, 2) for t in ("NR-AR", "SR-p53", "X"))
    code, said = run(["predict", tiny_checkpoints["property"], mine, "--out", out], capsys)  # no --force
    assert code == 2 and "--force" in error_line(said)


def test_predict_reads_stdin_and_refuses_a_generator_checkpoint(tiny_checkpoints, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("CCO\nCCCl chloropropane\n"))
    code, out = run(["predict", tiny_checkpoints["property"], "-"], capsys)
    rows = list(csv.DictReader(io.StringIO(out.out)))
    assert code == 0 and [r["smiles"] for r in rows] == ["CCO", "CCCl"] and rows[1]["id"] == "chloropropane"
    monkeypatch.setattr(sys, "stdin", io.StringIO("CCO\n"))
    code, out = run(["predict", tiny_checkpoints["lm"], "-"], capsys)
    assert code == 2 and "PropertyModel" in error_line(out)


# --------------------------------------------------------------------------- score
def test_score_a_smiles_file_as_text_and_json(tmp_path, capsys, chemnet):
    samples, reference = tmp_path / "gen.smi", tmp_path / "train.smi"
    samples.write_text("CCO\nCCO\nc1ccccc1O\nnot-valid\nCC(=O)Nc1ccc(O)cc1\n")
    reference.write_text("CCO\nCCN\nc1ccccc1\nCC(=O)O\n")
    scores = tmp_path / "scores.json"
    code, out = run(["score", samples, "--reference", reference, "--json", scores], capsys)
    assert code == 0
    for word in ("validity", "uniqueness", "novelty", "IntDiv", "KL", "SNN", "FCD floor"):
        assert word in out.out, word
    d = json.loads(scores.read_text())
    assert d["fcd_reference_n"] == 4 and d["fcd_floor_n"] == d["fcd_floor_reference_n"] == 2
    assert d["fcd"] > 0 and d["fcd_floor"] > 0
    assert d["validity"] == pytest.approx(4 / 5) and d["uniqueness"] == pytest.approx(3 / 4)
    assert d["novelty"] == pytest.approx(2 / 3)  # CCO is in the reference
    code, out = run(["score", samples, "--json", "-"], capsys)
    assert code == 0, out.err
    assert json.loads(out.out)["novelty"] is None  # no reference: not a number
    d = json.loads(scores.read_text())
    assert "the floor: FCD of 2 reference molecules (all the valid ones the half holds, fewer than the 4 valid " \
           "samples)" in d["notes"]["fcd"], "a floor capped by the half says so"


def test_score_says_fcd_is_missing_for_want_of_valid_samples_not_of_reference(tmp_path, capsys, chemnet):
    samples, reference = tmp_path / "gen.smi", tmp_path / "train.smi"
    samples.write_text("CCO\nnot-valid\n")
    reference.write_text("".join(f"{'C' * k}O\n" for k in range(1, 11)))
    scores = tmp_path / "scores.json"
    code, out = run(["score", samples, "--reference", reference, "--json", scores], capsys)
    assert code == 0, out.err
    d = json.loads(scores.read_text())
    assert d["fcd"] is None and d["fcd_floor"] is None
    assert d["notes"]["fcd"] == "FCD not computed: fewer than two valid samples"


def test_score_refuses_a_reference_without_a_valid_molecule(tmp_path, capsys):
    samples, reference = tmp_path / "gen.smi", tmp_path / "words.smi"
    samples.write_text("CCO\nCCN\n")
    reference.write_text("hello world\nthe cat\n")
    code, said = run(["score", samples, "--reference", reference], capsys)
    assert code == 2 and "no valid molecule in it" in error_line(said) and said.out == ""


def test_score_against_moses_prints_the_benchmark_table(tmp_path, capsys, monkeypatch, chemnet):
    import minitransformer.chem.judge.filters as filters
    import minitransformer.chem.datasets.moses as moses
    splits = {"train": ["CCO", "c1ccccc1", "CC(=O)Nc1ccc(O)cc1", "CCN", "OCCO"], "test": ["c1ccc2ccccc2c1", "CCCO"],
              "test_scaffolds": ["c1ccc2[nH]ccc2c1", "C1CCNCC1"]}
    monkeypatch.setattr(moses, "load_moses", lambda split, download=True, limit=None: list(splits[split]))
    monkeypatch.setattr(filters, "default_filters", lambda download=True: (None, "no alert files in this test"))
    samples, scores = tmp_path / "gen.smi", tmp_path / "moses.json"
    samples.write_text("CCO\nc1ccc2ccccc2c1\nCCCCl\nC1CC\n")
    code, out = run(["score", samples, "--reference", "moses", "--json", scores], capsys)
    assert code == 0 and "| CharRNN | 0.9748 |" in out.out  # the published rows first
    ours = [line for line in out.out.splitlines() if "(4 samples)" in line]
    assert len(ours) == 1 and ours[0].split("|")[2].strip() == "0.7500"  # 3 of 4 valid
    d = json.loads(scores.read_text())
    assert d["valid"] == pytest.approx(3 / 4) and d["novelty"] == pytest.approx(2 / 3)  # CCO is in train
    assert d["scaf_test"] == pytest.approx(1.0) and d["filters"] is None and d["fcd_note"] is None
    assert d["fcd_test"] > 0 and d["fcd_testsf"] > 0 and d["fcd_floor"]["fcd_test"] > 0
    assert "| *3 MOSES training molecules (the FCD floor)* |" in out.out, "as many as valid samples, not 4 or 5"


# --------------------------------------------------------------------------- attention
@pytest.mark.parametrize("kind,names", [("lm", ["attention_decoder_self.png", "attention_decoder_self_molecule.png"]),
                                        ("s2s", ["attention_cross.png", "attention_encoder_self.png"]),
                                        ("property", ["attention_encoder_self.png"])])
def test_attention_draws_pngs_and_refuses_to_overwrite(kind, names, tiny_checkpoints, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "pics"
    assert run(["attention", tiny_checkpoints[kind], "CC(=O)N", "--out", out, "--heads", "mean"], capsys)[0] == 0
    for name in names:
        assert (out / name).read_bytes()[:4] == b"\x89PNG", name
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    code, said = run(["attention", tiny_checkpoints[kind], "CC(=O)N", "--out", out, "--scale", "row"], capsys)
    assert code == 2 and "--force" in error_line(said)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "refused before writing anything"
    assert run(["attention", tiny_checkpoints[kind], "CC(=O)N", "--out", out, "--force"], capsys)[0] == 0


# --------------------------------------------------------------------------- info
def test_info_describes_a_finished_run(finished_molecules_run, capsys):
    _, folder = finished_molecules_run
    code, out = run(["info", folder / "best.npz"], capsys)
    assert code == 0
    for word in ("DecoderLM", "vocabulary", "made by", "minitransformer train lm", "bare.validity=",
                 "valence.validity=", "valence.fcd_heldout=", "ran with backend numpy; kernels:"):
        assert word in out.out, word
    code, out = run(["info", folder / "best.npz", "--json"], capsys)
    d = json.loads(out.out)
    assert code == 0 and d["model"]["type"] == "DecoderLM" and d["model"]["parameters"] > 0
    assert d["provenance"]["seed"] == 0 and d["metrics"]["bare"]["n_samples"] == 10
    assert d["vocabulary"]["size"] == len(d["vocabulary"]["tokens"]) > 4


def test_info_reports_the_folders_results_only_for_the_checkpoint_they_belong_to(finished_molecules_run, tmp_path,
                                                                                capsys):
    """pretrain/last.npz was made by the run (provenance) but is not the model its metrics judge;
    a checkpoint of other data copied into the folder gets neither."""
    import shutil

    import numpy as np
    _, folder = finished_molecules_run
    if (folder / "pretrain" / "last.npz").is_file():
        d = json.loads(run(["info", folder / "pretrain" / "last.npz", "--json"], capsys)[1].out)
        assert d["metrics"] is None and d["provenance"] is not None
    copy = tmp_path / "run"
    shutil.copytree(folder, copy)
    with np.load(copy / "best.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes().decode())
    meta["run"]["data_sha256"] = "0123456789abcdef"  # trained on other molecules
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(copy / "other.npz", **arrays)
    d = json.loads(run(["info", copy / "other.npz", "--json"], capsys)[1].out)
    assert d["metrics"] is None and d["provenance"] is None
    d = json.loads(run(["info", copy / "best.npz", "--json"], capsys)[1].out)
    assert d["metrics"] is not None and d["provenance"] is not None


def test_attention_draws_an_aromatic_smiles_for_a_kekule_model(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.chem import Vocab
    from minitransformer.models import DecoderLM, DecoderLMConfig
    vocab = Vocab.build(["CC(=O)OC1=CC=CC=C1C(=O)O", "CCO"])  # Kekulé only: no 'c' token
    model = DecoderLM(DecoderLMConfig(len(vocab), d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=40,
                                      pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id))
    path = save_checkpoint(tmp_path / "kekule.npz", model, vocab=vocab)
    code, said = run(["attention", path, "CC(=O)Oc1ccccc1C(=O)O", "--out", tmp_path / "pics"], capsys)
    assert code == 0 and "drawing the same molecule as CC(=O)OC1=CC=CC=C1C(=O)O" in said.out
    assert (tmp_path / "pics" / "attention_decoder_self.png").is_file()
    code, said = run(["attention", path, "CC[Se]C", "--out", tmp_path / "other"], capsys)
    assert code == 2 and "never saw ([Se])" in error_line(said)


@pytest.mark.parametrize("forge", ["model type", "negative width", "wrong shape"])
def test_info_refuses_a_forged_checkpoint_that_sample_refuses(forge, tiny_checkpoints, tmp_path, capsys):
    """Info described forged checkpoints (and exited 0) that sample rejects."""
    import numpy as np
    with np.load(tiny_checkpoints["lm"]) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes().decode())
    if forge == "model type":
        meta["model_type"] = "os.system"
    elif forge == "negative width":
        meta["config"]["d_model"] = -32
    else:
        name = next(k for k in arrays if k != "__meta__" and arrays[k].ndim == 2)
        arrays[name] = np.zeros((3, 3), arrays[name].dtype)
        meta_entries = meta.get("arrays") or meta.get("entries")
        if isinstance(meta_entries, dict) and name in meta_entries:
            meta_entries[name]["shape"] = [3, 3]
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    forged = tmp_path / "forged.npz"
    np.savez(forged, **arrays)
    sampled = run(["sample", forged], capsys)
    described = run(["info", forged], capsys)
    assert sampled[0] == described[0] == 2
    line = described[1].err.strip()
    assert len(line.splitlines()) == 1 and str(forged) in line


def test_ranks_that_share_the_sampling_draw_what_one_process_draws(tiny_checkpoints, two_ranks):
    """Each batch draws from its own stream of the seed, so two ranks that split the batches
    (each drawing its share, then gathering) return exactly one process's molecules."""
    from minitransformer.molecules.sampling import load_generator, sample_smiles
    model, vocab = load_generator(tiny_checkpoints["lm"])
    alone = sample_smiles(model, vocab, 7, seed=3, batch_size=2)

    together, shares = two_ranks(lambda rank: sample_smiles(model, vocab, 7, seed=3, batch_size=2, parallel=rank))
    assert together == alone and len(shares[0]) == 2 and len(shares[1]) == 2  # batches 0, 4 / 2, 6 of 7


def _size_options():
    """(command, option, action) for every option of every command whose value is a count or a time."""
    from minitransformer.cli.main import build_parser

    def walk(parser, prefix):
        for action in parser._actions:
            if getattr(action, "choices", None) and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    yield from walk(sub, prefix + [name])
            elif action.option_strings and getattr(action.type, "__name__", "").startswith(
                    ("integer >=", "a number", "count_or_all")):
                yield " ".join(prefix), action.option_strings[-1], action
    return list(walk(build_parser(), []))


SIZE_OPTIONS = [(c, o, a) for c, o, a in _size_options() if not any(
    word in o for word in ("lr", "temperature", "sigma", "dropout", "augment", "smoothing", "top-p",
                           "top-fraction"))]


@pytest.mark.parametrize("command, option, action", SIZE_OPTIONS, ids=[f"{c} {o}" for c, o, _ in SIZE_OPTIONS])
def test_every_size_option_is_bounded_in_one_line_before_any_work(command, option, action):
    """A count or a time typed with three zeros too many is refused by the parser, not hours or gigabytes later."""
    import argparse
    with pytest.raises(argparse.ArgumentTypeError, match="at most|in \\["):
        action.type("1000000000000")


def test_the_size_options_are_found():
    found = {(c, o) for c, o, _ in SIZE_OPTIONS}
    assert {("train property", "--head-hidden"), ("train property", "--pretrain-limit"), ("train lm", "--d-model"),
            ("train lm", "--max-minutes"), ("optimize", "--steps"), ("sample", "--count")} <= found


def test_a_model_too_large_for_the_memory_is_refused_before_any_file_is_written(tmp_path, capsys, monkeypatch):
    """Refused after the model is built and before provenance.json: the same command then runs without --force."""
    from minitransformer import runtime
    out = tmp_path / "run"
    argv = ["train", "property", "--quick", "--data", "druglike-labelled.csv", "--out", str(out)]
    labelled = tmp_path / "druglike-labelled.csv"
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    smiles = read_smiles(druglike_path(), header=False)[:120]
    labelled.write_text("smiles,a\n" + "".join(f"{s},{int('N' in s)}\n" for s in smiles))
    argv[4] = str(labelled)
    monkeypatch.setattr(runtime, "available_memory", lambda: 10_000)
    code, said = run(argv, capsys)
    line = error_line(said)
    assert code == 2 and "weights: training them takes at least" in line and "--head-hidden" in line
    assert not any(p.is_file() for p in out.rglob("*")), "nothing written"
    monkeypatch.undo()
    code, said = run(argv + ["--quiet"], capsys)
    assert code == 0, said.err
