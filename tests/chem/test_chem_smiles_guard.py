"""One guard for every SMILES that reaches RDKit: strings RDKit would crash on, or hang on, never get there.

A 20,000-character SMILES makes RDKit's canonical writer crash the process (a
segmentation fault: no message, no traceback); a 1 MB one runs for many minutes
without answering Ctrl-C. The commands are run in a child process here, so that
a crash, should the guard ever fail, fails the test instead of killing pytest.
"""
import json
import subprocess
import sys

import pytest

from minitransformer.chem._rdkit import MAX_SMILES_CHARS, mol_from_smiles, parse_valid, smiles_problem
from minitransformer.chem.judge.failures import failure_counts, failure_kind

pytest.importorskip("rdkit")
CRASHES_RDKIT = "C" * 30_000  # over 20,000 atoms in a chain: RDKit's writer recurses once per atom


@pytest.mark.parametrize("text, problem", [
    (CRASHES_RDKIT, "longer than 2,000 characters (30,000)"),
    ("C" * (MAX_SMILES_CHARS + 1), "longer than 2,000 characters"),
    ("CCO\x00", "not printable ASCII"),
    ("CCé", "not printable ASCII"),
    ("CC\nO", "not printable ASCII"),
    (b"CCO", "not a string"),
])
def test_the_guard_names_the_problem(text, problem):
    assert problem in smiles_problem(text)
    assert mol_from_smiles(text) is None and mol_from_smiles(text, sanitize=False) is None


def test_molecules_up_to_the_limit_still_parse():
    assert smiles_problem("C" * MAX_SMILES_CHARS) is None and mol_from_smiles("C" * MAX_SMILES_CHARS) is not None
    assert smiles_problem("CC(=O)Oc1ccccc1C(=O)O") is None


def test_a_guarded_string_is_an_invalid_sample_of_its_own_kind():
    samples = ["CCO", CRASHES_RDKIT, "c1ccccc1", "C1CC"]
    assert len(parse_valid(samples)[0]) == 2
    assert failure_kind(CRASHES_RDKIT) == "unreadable"
    assert failure_counts(samples)["unreadable"] == 1 and failure_counts(samples)["unclosed ring"] == 1


def _command(*args, input_text=None):
    return subprocess.run([sys.executable, "-m", "minitransformer", *map(str, args)], capture_output=True,
                          text=True, timeout=300, input=input_text)


def test_score_counts_a_huge_line_as_an_invalid_sample(tmp_path):
    samples = tmp_path / "samples.smi"
    samples.write_text("CCO\n" + CRASHES_RDKIT + "\nc1ccccc1\n")
    done = _command("score", samples, "--reference", samples, "--json", "-")
    assert done.returncode == 0, done.stderr[-500:]
    result = json.loads(done.stdout)
    assert result["n_samples"] == 3 and result["n_valid"] == 2 and result["validity"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("command", ["attention", "translate"])
def test_a_huge_smiles_argument_is_a_usage_error_before_any_work(command, tmp_path):
    checkpoint = tmp_path / "never-read.npz"
    checkpoint.write_bytes(b"not even read: the SMILES is refused while the arguments are parsed")
    done = _command(command, checkpoint, CRASHES_RDKIT)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "longer than 2,000 characters (30,000)" in lines[0]
