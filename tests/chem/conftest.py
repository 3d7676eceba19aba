"""Fixtures for the chemistry tests.

The real Tox21 file is used only when the environment variable
``MINITRANSFORMER_DATA`` names a directory that holds ``tox21.csv.gz`` (CI sets
it); otherwise the tests that need it are skipped. No path is hard-coded.
"""
import os
from pathlib import Path

import pytest


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
    from minitransformer.chem.data import read_smiles

    return read_smiles(tox21_path)
