"""A long judging step says how far it got and how long it has left, on a terminal or in a log."""
import io

from minitransformer.chem import progress as progress_module


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_log_gets_lines_with_the_time_left_and_a_short_step_says_nothing(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(progress_module.time, "perf_counter", clock)
    log = io.StringIO()
    with progress_module.progress("ChemNet on MOSES test", 1000, stream=log) as update:
        clock.now = 1.0
        update(100)  # within QUIET_S: nothing yet
        clock.now = 10.0
        update(100)  # 200 of 1000 in 10 s: 40 s left
        clock.now = 20.0
        update(100)  # too soon after the last line
        clock.now = 45.0
        update(100)  # 400 of 1000 in 45 s: about 68 s left
    lines = log.getvalue().splitlines()
    assert lines == ["ChemNet on MOSES test: 200 of 1,000 mol (20 %), about 40 s left",
                     "ChemNet on MOSES test: 400 of 1,000 mol (40 %), about 68 s left"]
    quiet = io.StringIO()
    with progress_module.progress("short", 10, stream=quiet) as update:
        update(10)
    assert quiet.getvalue() == ""


def test_the_features_of_a_reference_are_the_same_in_chunks(monkeypatch):
    """ReferenceFeatures.compute works chunk by chunk (to report progress); the result is the one-pass one."""
    import numpy as np

    from minitransformer.chem.judge import fragments
    smiles = ["CCO", "c1ccccc1CCN", "xx", "CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1", "CCO", "C1CC1C(=O)O"] * 3
    whole = fragments.ReferenceFeatures.compute(smiles)
    monkeypatch.setattr(fragments, "CHUNK", 4)
    chunked = fragments.ReferenceFeatures.compute(smiles)
    assert chunked.n_valid == whole.n_valid == 18
    np.testing.assert_array_equal(chunked.fps, whole.fps)
    np.testing.assert_array_equal(chunked.weights, whole.weights)
    assert chunked.fragments == whole.fragments and chunked.scaffolds == whole.scaffolds
