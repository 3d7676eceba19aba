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


def test_every_judging_step_over_a_few_seconds_shows_its_progress(monkeypatch, capsys, chemnet):
    """Parsing, fingerprints, IntDiv, SNN, fragments, scaffolds, the KL descriptors and ChemNet each report how far
    they got (here every update, as a long step would), and a large set is announced before the work."""
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    from minitransformer.chem.frechet.fcd import FCDJudge
    from minitransformer.chem.judge import evaluation, similarity
    from minitransformer.chem.judge.evaluation import evaluate_samples
    monkeypatch.setattr(progress_module, "QUIET_S", 0.0)
    monkeypatch.setattr(progress_module, "LINE_EVERY_S", 0.0)
    monkeypatch.setattr(progress_module, "LARGE", 500)
    monkeypatch.setattr(similarity, "_BLOCK", 64)
    monkeypatch.setattr(evaluation, "PARSE_CHUNK", 100)
    smiles = read_smiles(druglike_path(), header=False)
    samples, reference = smiles[:600], smiles[1000:1600]
    judge = FCDJudge({"reference": reference}, smiles[2000:2700], net=chemnet, progress=False)
    capsys.readouterr()
    result = evaluate_samples(samples, reference, references={"reference": reference}, fcd_judge=judge,
                              filters=None)
    judge.floor(result["n_valid"])
    err = capsys.readouterr().err
    assert err.startswith("judging 600 samples: ") and "billion pairs" in err.splitlines()[0]
    for label in ("parsing 600 samples", "fingerprints of", "IntDiv over all", "SNN: ", "fragments of",
                  "scaffolds of", "KL: descriptors of", "ChemNet on 600 samples", "(the FCD floor)"):
        assert label in err, (label, err)
    assert result["intdiv1"] is not None and result["fcd"]["reference"] is not None


def test_the_similarity_blocks_hold_a_bounded_number_of_values_at_any_size():
    """IntDiv and SNN of 200,000 molecules once held 2,048 x 200,000 floats in each of several temporaries."""
    from minitransformer.chem.judge import similarity
    for n, m in ((10, None), (5_000, None), (200_000, None), (3, 1_000_000)):
        blocks = list(similarity._row_blocks(n, m))
        assert blocks[0].start == 0 and blocks[-1].stop == n
        assert all(b.stop - b.start <= similarity._BLOCK for b in blocks)
        assert max(b.stop - b.start for b in blocks) * (n if m is None else m) <= max(similarity._BLOCK_VALUES,
                                                                                       n if m is None else m)
