"""The demos' command line fails with one clear line, never a traceback.

Exit status 2: a usage error (bad argument, missing or unreadable input, a file that would
be overwritten); 1: a runtime error (offline, full disk) or an unexpected exception; every
argument is checked before any work starts (the ``no_work`` fixture fails the first step
of real work).
"""
import pathlib
import urllib.error

import pytest

from minitransformer.cli import run_cli
from cli_helpers import one_line_error  # noqa: E402
import minitransformer.cli.sample as cli_sample
import minitransformer.molecules.canonicalization as canonicalization

pytest.importorskip("rdkit")


@pytest.fixture(scope="module")
def demos(load_demo):
    return {name: load_demo(name) for name in ("molecules", "canonicalize", "tox21_property")}


BAD_TRAINING_ARGUMENTS = [  # (demo, arguments, words the message must contain)
    ("molecules", ["--batch-size", "0"], ["--batch-size", ">= 1"]),
    ("molecules", ["--epochs", "0"], ["--epochs", ">= 1"]),
    ("molecules", ["--samples", "0"], ["--samples", ">= 1"]),
    ("molecules", ["--samples", "1000000000"], ["--samples", "at most 1,000,000"]),
    ("molecules", ["--temperature", "0"], ["--temperature", "> 0"]),
    ("molecules", ["--temperature", "nan"], ["--temperature", "nan"]),
    ("molecules", ["--temperature", "inf"], ["--temperature"]),
    ("molecules", ["--temperature", "hot"], ["--temperature", "'hot'"]),
    ("molecules", ["--lr", "-0.001"], ["--lr", "> 0"]),
    ("molecules", ["--lr=-1e-3"], ["--lr", "> 0"]),
    ("molecules", ["--dropout", "1"], ["--dropout", "[0, 1)"]),
    ("molecules", ["--augment", "1.5"], ["--augment", "[0, 1]"]),
    ("molecules", ["--max-minutes", "-5"], ["--max-minutes", "[0, 525600]"]),
    ("molecules", ["--max-minutes", "1e308"], ["--max-minutes", "[0, 525600]"]),
    ("molecules", ["--max-minutes", "nan"], ["--max-minutes"]),
    ("molecules", ["--seed", "-1"], ["--seed", "from 0 to 4294967295"]),
    ("molecules", ["--seed", "1.5"], ["--seed", "integer"]),
    ("molecules", ["--pretrain-epochs", "-1"], ["--pretrain-epochs", ">= 0"]),
    ("molecules", ["--pretrain-mix", "-3"], ["--pretrain-mix", ">= 0"]),
    ("molecules", ["--preset", "nope"], ["--preset", "nope"]),
    ("molecules", ["--bogus-option"], ["--bogus-option"]),
    ("canonicalize", ["--examples", "-1"], ["--examples", ">= 0"]),
    ("canonicalize", ["--label-smoothing", "1"], ["--label-smoothing"]),
    ("canonicalize", ["--batch-size", "-4"], ["--batch-size"]),
    ("tox21_property", ["--tta", "0"], ["--tta", ">= 1"]),
    ("tox21_property", ["--batch-size", "0"], ["--batch-size"]),
    ("tox21_property", ["--data", "druglike"], ["no property labels"]),
]


@pytest.mark.parametrize("name,args,words", BAD_TRAINING_ARGUMENTS)
def test_bad_training_arguments_are_refused_before_any_work(name, args, words, demos, tmp_path, capsys, no_work):
    argv = ["--quick", "--quiet", "--data", "druglike", "--out", str(tmp_path / "run")] + args
    if name == "tox21_property" and "--data" not in args:
        csv = tmp_path / "labels.csv"
        csv.write_text("smiles,y\nCCO,1\n")
        argv[argv.index("druglike")] = str(csv)
    assert run_cli(demos[name].main, argv) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: ")
    for word in words:
        assert word in line, f"{word!r} not in {line!r}"
    assert not (tmp_path / "run").exists(), "nothing may be created for a refused command"


def test_data_paths_are_checked_while_parsing(demos, tmp_path, capsys, no_work):
    folder = tmp_path / "mols.smi"
    folder.mkdir()
    main = demos["molecules"].main
    base = ["--quick", "--quiet", "--out", str(tmp_path / "run")]
    assert run_cli(main, base + ["--data", str(folder)]) == 2
    assert "is a folder" in one_line_error(capsys), "a folder is not 'not found'"
    assert run_cli(main, base + ["--data", str(tmp_path / "nope.smi")]) == 2
    assert "no such data file" in one_line_error(capsys)
    odd = tmp_path / "mols.xlsx"
    odd.write_text("x")
    assert run_cli(main, base + ["--data", str(odd)]) == 2
    assert "unknown file type" in one_line_error(capsys)
    assert run_cli(main, base + ["--data", "druglike", "--pretrain-data", str(tmp_path / "gone.smi")]) == 2
    assert "--pretrain-data" in one_line_error(capsys)
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("x")
    assert run_cli(main, ["--quick", "--data", "druglike", "--out", str(not_a_folder)]) == 2
    assert "is a file, not a folder" in one_line_error(capsys)


def test_degenerate_data_files_are_one_line_errors(demos, tmp_path, capsys):
    main = demos["molecules"].main
    empty = tmp_path / "empty.smi"
    empty.write_text("")
    assert run_cli(main, ["--quick", "--quiet", "--data", str(empty), "--out", str(tmp_path / "a"),
                          "--pretrain-data", "none"]) == 2
    line = one_line_error(capsys)
    assert "empty.smi" in line and "no SMILES" in line
    junk = tmp_path / "junk.smi"
    junk.write_text("C1CCCCCCCCCC\nnot_a_smiles_at_all\n")
    assert run_cli(main, ["--quick", "--quiet", "--data", str(junk), "--out", str(tmp_path / "b"),
                          "--pretrain-data", "none"]) == 2
    line = one_line_error(capsys)
    assert "junk.smi" in line and "not parsed by RDKit: 2" in line
    latin = tmp_path / "latin.smi"
    latin.write_bytes(b"CCCCCCCCCCO\nCC\xe9CCCCCCCCO\n")
    assert run_cli(main, ["--quick", "--quiet", "--data", str(latin), "--out", str(tmp_path / "c"),
                          "--pretrain-data", "none"]) == 2
    line = one_line_error(capsys)
    assert "latin.smi" in line and "line 2" in line
    gz = tmp_path / "bad.csv.gz"
    gz.write_bytes(b"not gzip")
    assert run_cli(main, ["--quick", "--quiet", "--data", str(gz), "--out", str(tmp_path / "d"),
                          "--pretrain-data", "none"]) == 2
    assert "bad.csv.gz" in one_line_error(capsys)


BAD_SUBCOMMAND_ARGUMENTS = [
    ("molecules", ["sample", "{lm}", "-n", "0"], ["-n", ">= 1"]),
    ("molecules", ["sample", "{lm}", "-n", "-5"], ["-n"]),
    ("molecules", ["sample", "{lm}", "-n", "1000000000"], ["-n", "at most 1,000,000", "another --seed"]),  # 25.2
    ("molecules", ["sample", "{lm}", "--temperature", "0"], ["--temperature", "> 0"]),
    ("molecules", ["sample", "{lm}", "--temperature", "-1"], ["--temperature"]),
    ("molecules", ["sample", "{lm}", "--seed", "-1"], ["--seed", "from 0"]),
    ("molecules", ["sample", "{folder}"], ["is a folder"]),
    ("molecules", ["sample", "{folder}/nope.npz"], ["no such checkpoint"]),
    ("molecules", ["sample", "{lm}", "--out", "{folder}"], ["is a folder"]),
    ("molecules", ["sample", "{s2s}"], ["Seq2Seq", "DecoderLM"]),
    ("molecules", ["sample", "{bare}"], ["no vocabulary"]),
    ("canonicalize", ["translate", "{s2s}", "--beam", "0", "CCO"], ["--beam", ">= 1"]),
    ("canonicalize", ["translate", "{s2s}", "--beam", "100000", "CCO"], ["--beam", "at most 64"]),
    ("canonicalize", ["translate", "{folder}", "CCO"], ["is a folder"]),
    ("canonicalize", ["translate", "{lm}", "CCO"], ["Seq2Seq"]),
]


@pytest.mark.parametrize("name,args,words", BAD_SUBCOMMAND_ARGUMENTS)
def test_bad_subcommand_arguments_are_one_line_errors(name, args, words, demos, tiny_checkpoints, tmp_path,
                                                      capsys, monkeypatch):
    demo = demos[name]

    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the arguments were checked")
    monkeypatch.setattr(*((cli_sample, "sample_smiles") if name == "molecules" else (canonicalization, "translate")),
                        no_decoding)
    folder = tmp_path / "folder"
    folder.mkdir()
    paths = dict(tiny_checkpoints, folder=folder)
    argv = [a.format(**paths) for a in args]
    assert run_cli(demo.main, argv) == 2
    line = one_line_error(capsys)
    for word in words:
        assert word in line, f"{word!r} not in {line!r}"


def test_sample_refuses_to_overwrite_without_force_before_sampling(demos, tiny_checkpoints, tmp_path, capsys,
                                                                   monkeypatch):
    demo = demos["molecules"]
    target = tmp_path / "mine.smi"
    target.write_text("my precious molecules\n")
    calls = []
    real = cli_sample.sample_smiles
    monkeypatch.setattr(cli_sample, "sample_smiles", lambda *a, **k: calls.append(1) or real(*a, **k))
    argv = ["sample", str(tiny_checkpoints["lm"]), "-n", "3", "--out", str(target)]
    assert run_cli(demo.main, argv) == 2
    line = one_line_error(capsys)
    assert "already exists" in line and "--force" in line
    assert target.read_text() == "my precious molecules\n" and not calls, "refused before sampling"
    assert run_cli(demo.main, argv + ["--force"]) == 0
    assert len(target.read_text().splitlines()) == 3


def test_an_output_that_cannot_be_written_is_refused_before_sampling(demos, tiny_checkpoints, tmp_path, capsys,
                                                                      monkeypatch):
    """A folder where no file can be made (no permission; root may write anywhere, so the refusal
    is simulated where the probe makes its file): one line before the work, not after it."""
    import errno
    import tempfile
    locked = tmp_path / "locked"
    locked.mkdir()
    real = tempfile.TemporaryFile

    def refused(*args, dir=None, **kwargs):
        if dir is not None and pathlib.Path(dir) == locked:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(*args, dir=dir, **kwargs)
    monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    calls = []
    monkeypatch.setattr(cli_sample, "sample_smiles", lambda *a, **k: calls.append(1))
    for out in (locked / "x.smi", locked / "new" / "deeper" / "x.smi"):
        assert run_cli(demos["molecules"].main, ["sample", str(tiny_checkpoints["lm"]), "-n", "3",
                                                 "--out", str(out)]) == 2
        line = one_line_error(capsys)
        assert f"cannot write in {locked} (Permission denied)" in line and not calls, line
    assert sorted(locked.iterdir()) == [], "no folder made"


def test_translate_out_refuses_to_overwrite_without_force(demos, tiny_checkpoints, tmp_path, capsys):
    demo = demos["canonicalize"]
    target = tmp_path / "mine.tsv"
    target.write_text("keep me\n")
    argv = ["translate", str(tiny_checkpoints["s2s"]), "--beam", "1", "--out", str(target),
            "CCO", "c1ccccc1"]
    assert run_cli(demo.main, argv) == 2
    assert "--force" in one_line_error(capsys) and target.read_text() == "keep me\n"
    assert run_cli(demo.main, argv + ["--force"]) == 0
    assert [line.split("\t")[0] for line in target.read_text().splitlines()] == ["source", "CCO", "c1ccccc1"]


def test_offline_tox21_is_one_line_saying_where_to_put_the_file(demos, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MINITRANSFORMER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    for name in ("molecules", "tox21_property"):
        code = run_cli(demos[name].main, ["--quick", "--quiet", "--data", "tox21", "--out", str(tmp_path / name)])
        assert code == 1, "no network is a runtime error"
        line = one_line_error(capsys)
        assert "tox21.csv.gz" in line and str(tmp_path / "cache" / "minitransformer" / "tox21.csv.gz") in line
        assert "MINITRANSFORMER_DATA" in line


@pytest.mark.parametrize("error", [IndexError("list index out of range"), TypeError("unsupported operand"),
                                   KeyError("x"), ZeroDivisionError("division by zero")])
def test_unexpected_errors_are_one_line_naming_the_type(error, demos, tmp_path, capsys, monkeypatch):
    import minitransformer.chem.datasets.lm_data as lm_data

    def broken(*args, **kwargs):
        raise error
    monkeypatch.setattr(lm_data, "prepare_smiles", broken)
    argv = ["--quick", "--quiet", "--data", "druglike", "--out", str(tmp_path / "run")]
    assert run_cli(demos["molecules"].main, argv) == 1
    line = one_line_error(capsys)
    assert type(error).__name__ in line and "MINITRANSFORMER_DEBUG=1" in line
    monkeypatch.setenv("MINITRANSFORMER_DEBUG", "1")
    with pytest.raises(type(error)):  # the traceback, for whoever asked for it
        run_cli(demos["molecules"].main, argv)


def test_multi_line_messages_become_one_line(demos, tmp_path, capsys, monkeypatch):
    import minitransformer.chem.datasets.lm_data as lm_data

    def broken(*args, **kwargs):
        raise ValueError("first line\n  second line\nthird")
    monkeypatch.setattr(lm_data, "prepare_smiles", broken)
    assert run_cli(demos["molecules"].main, ["--quick", "--data", "druglike", "--out", str(tmp_path / "r")]) == 2
    assert "first line second line third" in one_line_error(capsys)


def test_help_is_not_an_error(demos, capsys):
    assert run_cli(demos["molecules"].main, ["--help"]) == 0
    assert "--temperature" in capsys.readouterr().out
    assert run_cli(demos["molecules"].main, ["sample", "--help"]) == 0


@pytest.mark.parametrize("variable, value, status, words", [
    ("MINITRANSFORMER_KERNELS", "bogus", 2, ["MINITRANSFORMER_KERNELS='bogus'", "'reference' or 'fast'"]),
    ("MINITRANSFORMER_BACKEND", "bogus", 2, ["MINITRANSFORMER_BACKEND='bogus'", "numpy or cupy"]),
    ("MINITRANSFORMER_BACKEND", "cupy", 1, ["MINITRANSFORMER_BACKEND='cupy'", "CuPy"]),
])
def test_a_bad_environment_variable_is_one_line_and_help_still_works(variable, value, status, words, tmp_path):
    """Read at import, where they could only raise a traceback; now the command says them."""
    import os
    import subprocess
    import sys
    if value == "cupy":
        pytest.importorskip("numpy")  # (CuPy with a GPU would make this a working setting)
        try:
            import cupy  # noqa: F401
            pytest.skip("CuPy is installed here")
        except ImportError:
            pass
    env = dict(os.environ, **{variable: value})
    command = [sys.executable, "-m", "minitransformer"]
    done = subprocess.run(command + ["score", "-"], input="CCO\n", capture_output=True, text=True, env=env,
                          timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    helped = subprocess.run(command + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: minitransformer") and not helped.stderr


def test_predict_bounds_its_views_before_any_work(tiny_checkpoints, tmp_path, capsys):
    """--views 1000000 once ran on for ever."""
    from minitransformer.cli.main import main
    molecules = tmp_path / "x.smi"
    molecules.write_text("CCO\n")
    assert run_cli(main, ["predict", str(tiny_checkpoints["property"]), str(molecules), "--views", "1000000"]) == 2
    line = one_line_error(capsys)
    assert "--views" in line and "at most 256" in line


@pytest.mark.parametrize("command", ["predict", "score"])
def test_an_output_that_is_the_input_is_refused_even_with_force(command, tiny_checkpoints, tmp_path, capsys):
    from minitransformer.cli.main import main
    molecules = tmp_path / "x.smi"
    molecules.write_text("CCO\nc1ccccc1\n")
    argv = (["predict", str(tiny_checkpoints["property"]), str(molecules), "--out", str(tmp_path / "." / "x.smi")]
            if command == "predict" else ["score", str(molecules), "--json", str(molecules)])
    assert run_cli(main, argv + ["--force"]) == 2
    line = one_line_error(capsys)
    assert "is the file this command reads" in line and "give another" in line
    assert molecules.read_text() == "CCO\nc1ccccc1\n"


class _RankZeroOfTwo:
    """Stands in for rank 0 of a two-rank data-parallel command; records MPI_Abort."""
    rank, size, is_writer, stopped_by = 0, 2, True, None

    def __init__(self):
        self.aborted = []

    def abort(self, code):
        self.aborted.append(code)


def test_train_property_under_mpiexec_is_refused_by_rank_0_without_mpi_abort(tmp_path, capsys, monkeypatch):
    """Every rank refuses ``train property`` at the same point, so rank 0 says why and ends
    normally: MPI_Abort would tear mpiexec down and could lose that line (CI saw it lost)."""
    from minitransformer.cli import ranks
    from minitransformer.cli.main import main
    dp = _RankZeroOfTwo()
    monkeypatch.setitem(ranks._STATE, "dp", dp)
    monkeypatch.chdir(tmp_path)
    status = run_cli(main, ["train", "property", "--quick", "--out", "prop"])
    message = one_line_error(capsys)
    assert status == 2 and "cannot run data-parallel" in message, message
    assert dp.aborted == [] and not (tmp_path / "prop").exists()
