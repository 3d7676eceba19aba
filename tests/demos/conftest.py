"""Shared fixture for the demo tests: import a script from ``demos/`` as a module."""
import importlib.util
from pathlib import Path

import pytest

DEMOS = Path(__file__).resolve().parents[2] / "demos"


@pytest.fixture(scope="session")
def load_demo():
    """``load_demo("molecules")`` -> the module ``demos/molecules.py`` (freshly executed)."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"{name}_demo", DEMOS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
