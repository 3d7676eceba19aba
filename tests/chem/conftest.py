"""Fixtures for the chemistry tests, which follow the package's rooms: ``datasets/``, ``judge/``,
``frechet/``, ``goals/``, ``grammar/``, and here the modules of ``chem`` itself.

The real Tox21 file is used only when the environment variable
``MINITRANSFORMER_DATA`` names a directory that holds ``tox21.csv.gz`` (CI sets
it); otherwise the tests that need it are skipped. No path is hard-coded.
"""
import os
import sys
from pathlib import Path

import pytest

# The tests of every room of ``minitransformer.chem`` (one folder each, as the package has them) share
# ``chem_helpers``, beside this file.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tox21_path() -> Path:
    root = os.environ.get("MINITRANSFORMER_DATA")
    if not root:
        pytest.skip("MINITRANSFORMER_DATA is not set; the Tox21 checks need the real file")
    path = Path(root) / "tox21.csv.gz"
    if not path.is_file():
        pytest.skip(f"{path} does not exist")
    return path


@pytest.fixture(scope="session")
def tox21_smiles(tox21_path) -> list:
    from minitransformer.chem.datasets.data import read_smiles

    return read_smiles(tox21_path)


@pytest.fixture(scope="session")
def moses_dir() -> Path:
    """``$MINITRANSFORMER_DATA/moses`` with the three MOSES files, or the test is skipped."""
    root = os.environ.get("MINITRANSFORMER_DATA")
    folder = Path(root) / "moses" if root else None
    if folder is None or not all((folder / f"{s}.csv.gz").is_file() for s in ("train", "test", "test_scaffolds")):
        pytest.skip("the MOSES files are not in $MINITRANSFORMER_DATA/moses")
    return folder
