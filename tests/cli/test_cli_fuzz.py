"""Property test of the demos' command lines: whatever the arguments, the
answer is an exit status in {0, 1, 2}, never a traceback, and an error is one line.

Argument lists are drawn from each command's known options with good and bad values
(negative, zero, NaN, infinite, huge, words, random text, missing files, folders,
existing output files, a folder that holds a run). Each list runs in-process through
:func:`~minitransformer.cli.run_cli`; the first step of real work (loading the
data, sampling, decoding) is replaced by ``SystemExit(0)``, so an example costs
milliseconds and shows what the checks before any work let through.
"""
import contextlib
import io
import os
import shutil

import pytest

hypothesis = pytest.importorskip("hypothesis")
pytest.importorskip("rdkit")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from minitransformer.cli import run_cli  # noqa: E402
import minitransformer.cli.sample as cli_sample
import minitransformer.molecules.canonicalization as canonicalization

SETTINGS = settings(max_examples=200, deadline=None, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

INTS = st.one_of(st.sampled_from(["0", "1", "2", "3", "-1", "-7", "10", "4294967295", "4294967296",
                                  "999999999999999999999", "1.5", "1e3", "nan", "inf", "two", "", " 4 "]),
                 st.integers(-1000, 1000).map(str))
FLOATS = st.one_of(st.sampled_from(["0", "0.0", "0.5", "1", "1.0", "0.999", "-0.1", "-1", "2", "nan", "NaN",
                                    "inf", "-inf", "1e308", "1e-320", "1e999", "hot", "", "0x10"]),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr))
NOISE = st.text(max_size=8)


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_checkpoints):
    """Files the arguments may name: good, empty, damaged, missing, folders, outputs."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "good.smi").write_text("CCCCCCCCCCO\nc1ccccc1CCCCO\nCCN(CC)C(=O)c1ccccc1\n")
    (root / "labels.csv").write_text("smiles,y\nCCCCCCCCCCO,1\nc1ccccc1CCCCO,0\n")
    (root / "empty.smi").write_text("")
    (root / "bad.csv.gz").write_bytes(b"not gzip")
    (root / "odd.xlsx").write_text("x")
    (root / "a folder.smi").mkdir()
    (root / "exists.smi").write_text("keep\n")
    (root / "garbage.npz").write_bytes(b"PK\x03\x04 truncated")
    paths = {name: str(root / name) for name in ("good.smi", "labels.csv", "empty.smi", "bad.csv.gz", "odd.xlsx",
                                                 "a folder.smi", "exists.smi", "garbage.npz")}
    paths.update(missing=str(root / "missing.smi"), oldrun=str(root / "oldrun"), newrun=str(root / "runs" / "new"),
                 file_as_folder=str(root / "exists.smi" / "sub"), lm=str(tiny_checkpoints["lm"]),
                 s2s=str(tiny_checkpoints["s2s"]), bare=str(tiny_checkpoints["bare"]))
    return root, paths


def reset_world(root):
    """Undo what an example may have changed (``--force`` moves a run folder's files aside)."""
    old = root / "oldrun"
    shutil.rmtree(old, ignore_errors=True)
    old.mkdir()
    (old / "config.json").write_text('{"run": {}}\n')
    (old / "best.npz").write_bytes(b"old")
    (root / "exists.smi").write_text("keep\n")


def path_values(paths, *names):
    return st.sampled_from([paths[n] for n in names]) | NOISE


def option_lists(options: dict, flags=(), positional=None):
    """Argument lists: a random subset of ``options`` (some as ``--opt=value``), flags, repeats."""
    pair = st.sampled_from(sorted(options)).flatmap(
        lambda opt: st.tuples(st.just(opt), options[opt], st.booleans()))
    pieces = st.lists(pair, max_size=6).map(
        lambda ps: [tok for opt, value, joined in ps for tok in ([f"{opt}={value}"] if joined and opt.startswith("--")
                                                                 else [opt, value])])
    flag_lists = st.lists(st.sampled_from(list(flags)), max_size=3, unique=True) if flags else st.just([])
    rest = positional if positional is not None else st.just([])
    return st.tuples(pieces, flag_lists, rest).map(lambda t: t[0] + t[1] + t[2])


def training_options(paths, demo):
    data_names = ["druglike", "tox21", "TOX21", "none"]
    options = {
        "--data": st.sampled_from(data_names) | path_values(paths, "good.smi", "labels.csv", "empty.smi",
                                                            "bad.csv.gz", "odd.xlsx", "a folder.smi", "missing"),
        "--out": path_values(paths, "oldrun", "newrun", "exists.smi", "a folder.smi", "file_as_folder"),
        "--epochs": INTS, "--max-minutes": FLOATS, "--seed": INTS, "--backend": st.sampled_from(["numpy", "cupy",
                                                                                                  "torch"]),
        "--lr": FLOATS, "--batch-size": INTS,
    }
    flags = ["--quick", "--quiet", "--plot-attention", "--force", "--help"]
    if demo == "molecules":
        options.update({"--preset": st.sampled_from(["default", "tomczak", "big"]), "--augment": FLOATS,
                        "--form": st.sampled_from(["as-is", "canonical", "kekule", "smiles"]),
                        "--dropout": FLOATS, "--samples": INTS, "--temperature": FLOATS,
                        "--pretrain-data": st.sampled_from(data_names) | path_values(paths, "good.smi", "missing"),
                        "--pretrain-epochs": INTS, "--pretrain-mix": INTS,
                        "--resume": path_values(paths, "lm", "garbage.npz", "missing", "a folder.smi")})
        flags.append("--resume")
    elif demo == "canonicalize":
        options.update({"--preset": st.sampled_from(["default", "big"]), "--dropout": FLOATS,
                        "--label-smoothing": FLOATS, "--examples": INTS,
                        "--resume": path_values(paths, "s2s", "garbage.npz", "missing", "a folder.smi")})
        flags.append("--resume")
    else:
        options.update({"--split": st.sampled_from(["random", "scaffold", "other"]), "--pretrain-epochs": INTS,
                        "--augment": FLOATS, "--tta": INTS})
        flags.append("--pretrain")
    return option_lists(options, flags)


def sample_options(paths):
    options = {"--checkpoint": path_values(paths, "lm", "lm", "s2s", "bare", "garbage.npz", "missing", "a folder.smi"),
               "-n": INTS, "--temperature": FLOATS, "--seed": INTS,
               "--out": path_values(paths, "exists.smi", "missing", "a folder.smi", "file_as_folder"),
               "--backend": st.sampled_from(["numpy", "cupy"])}
    return option_lists(options, ["--force", "--help"]).map(lambda a: ["sample"] + a)


def translate_options(paths):
    options = {"--checkpoint": path_values(paths, "s2s", "s2s", "lm", "garbage.npz", "missing", "a folder.smi"),
               "--beam": INTS, "--out": path_values(paths, "exists.smi", "missing", "a folder.smi"),
               "--backend": st.sampled_from(["numpy", "cupy"])}
    smiles = st.lists(st.sampled_from(["CCO", "c1ccccc1", "C1CC", "", "xyz", "CC(=O)O", "[Na+]"]) | NOISE,
                      max_size=3)
    return option_lists(options, ["--force", "--help"], positional=smiles).map(lambda a: ["translate"] + a)


@pytest.fixture
def stop_before_work(monkeypatch):
    """The first step of real work exits 0: the arguments passed every check before it."""
    import minitransformer.backend as backend
    import minitransformer.chem.datasets.lm_data as lm_data
    import minitransformer.chem.datasets.properties as properties
    import minitransformer.chem.datasets.seq2seq_data as seq2seq_data

    def passed(*args, **kwargs):
        raise SystemExit(0)
    for module, name in ((lm_data, "prepare_smiles"), (seq2seq_data, "prepare_pairs"),
                         (properties, "load_labelled")):
        monkeypatch.setattr(module, name, passed)
    monkeypatch.setattr(backend, "use", lambda name: None)  # never switch the backend of the test session
    return passed


def check(main, argv, root):
    reset_world(root)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(root)  # a relative path drawn from the noise (--out -) lands here, not in the checkout
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(main, argv)
    finally:
        os.chdir(cwd)
    text = err.getvalue()
    assert code in (0, 1, 2), f"exit status {code} for {argv}: {text}"
    assert "Traceback" not in text, f"a traceback for {argv}:\n{text}"
    if code != 0:
        lines = text.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error"), f"not one error line for {argv}:\n{text}"
        assert "unexpected" not in lines[0], f"an unexpected error for {argv}: {lines[0]}"
    assert (root / "exists.smi").read_text() == "keep\n", f"a user's file was overwritten by {argv}"


@pytest.mark.parametrize("name", ["molecules", "canonicalize", "tox21_property"])
def test_training_command_lines(name, load_demo, world, stop_before_work):
    demo = load_demo(name)
    root, paths = world

    @SETTINGS
    @given(training_options(paths, name))
    def run(argv):
        check(demo.main, argv, root)
    run()


def test_sample_command_lines(load_demo, world, stop_before_work, monkeypatch):
    demo = load_demo("molecules")
    monkeypatch.setattr(cli_sample, "sample_smiles", stop_before_work)
    root, paths = world

    @SETTINGS
    @given(sample_options(paths))
    def run(argv):
        check(demo.main, argv, root)
    run()


def test_translate_command_lines(load_demo, world, stop_before_work, monkeypatch):
    demo = load_demo("canonicalize")
    monkeypatch.setattr(canonicalization, "translate", stop_before_work)
    root, paths = world

    @SETTINGS
    @given(translate_options(paths))
    def run(argv):
        check(demo.main, argv, root)
    run()
