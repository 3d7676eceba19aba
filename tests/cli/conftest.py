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


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Small untrained checkpoints as the training commands write them: ``{"lm": DecoderLM, "s2s": Seq2Seq,
    "property": Encoder with 3 outputs}`` paths (with a vocabulary), and ``"bare"``: a DecoderLM without
    one. Milliseconds to make."""
    from minitransformer.chem import Vocab
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.models import DecoderLM, DecoderLMConfig, Seq2Seq
    from minitransformer.models.seq2seq import Seq2SeqConfig
    vocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N", "CCCl", "C#N"])
    ids = dict(pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=0)
    small = dict(d_model=16, n_heads=2, d_ff=32, max_len=40)
    folder = tmp_path_factory.mktemp("checkpoints")
    paths = {"lm": folder / "lm.npz", "s2s": folder / "s2s.npz", "bare": folder / "bare.npz",
             "property": folder / "property.npz"}
    lm = DecoderLM(DecoderLMConfig(len(vocab), n_layers=1, **small, **ids))
    save_checkpoint(paths["lm"], lm, vocab=vocab)
    save_checkpoint(paths["bare"], lm)
    s2s = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), n_enc_layers=1, n_dec_layers=1, share_embeddings=True,
                                tie_embeddings=True, **small, **ids))
    save_checkpoint(paths["s2s"], s2s, vocab=vocab)
    from minitransformer.models import PropertyModel, PropertyModelConfig
    pvocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N", "CCCl", "C#N"], extras=(Vocab.CLS, Vocab.MASK))
    model = PropertyModel(PropertyModelConfig(vocab_size=len(pvocab), pad_id=pvocab.pad_id, n_outputs=3, n_layers=1,
                                              **dict(small, seed=0)))
    save_checkpoint(paths["property"], model, vocab=pvocab, extra={"run": {"tasks": ["NR-AR", "SR-p53", "X"]}})
    return paths


@pytest.fixture
def no_work(monkeypatch):
    """Make the first step of real work in every demo fail loudly, so a test can show that
    a bad argument was refused before any work started."""
    import minitransformer.chem.datasets.lm_data as lm_data
    import minitransformer.chem.datasets.properties as properties
    import minitransformer.chem.datasets.seq2seq_data as seq2seq_data

    class WorkStarted(Exception):
        pass

    def refuse(*args, **kwargs):
        raise WorkStarted("work started before the arguments were checked")
    for module, name in ((lm_data, "prepare_smiles"), (seq2seq_data, "prepare_pairs"),
                         (properties, "load_labelled")):
        monkeypatch.setattr(module, name, refuse)
    return WorkStarted


@pytest.fixture(scope="session")
def atomic_spy():
    """``with atomic_spy() as written:`` -> the names of the files written through
    ``minitransformer.atomic.atomic_write`` meanwhile (checkpoints included)."""
    import contextlib

    @contextlib.contextmanager
    def spy():
        import minitransformer.atomic as atomic
        import minitransformer.checkpoint.files as checkpoint
        written, real = [], atomic.atomic_write

        def recording(path, *args, **kwargs):
            written.append(Path(path).name)
            return real(path, *args, **kwargs)
        with pytest.MonkeyPatch.context() as mp:
            for module in (atomic, checkpoint):  # checkpoint/files.py holds its own name for it
                if getattr(module, "atomic_write", None) is real:
                    mp.setattr(module, "atomic_write", recording)
            yield written
    return spy


@pytest.fixture(scope="session")
def finished_molecules_run(tmp_path_factory, load_demo):
    """A finished quick run of the molecules demo (drug-like data, no pretraining, 10 samples):
    (the demo module, the run folder). Tests that change the folder must copy it first."""
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    from minitransformer.cli import run_cli
    demo = load_demo("molecules")
    out = tmp_path_factory.mktemp("finished") / "run"
    argv = ["--quick", "--quiet", "--data", "druglike", "--pretrain-data", "none", "--samples", "10", "--out", str(out)]
    assert run_cli(demo.main, argv) == 0
    return demo, out


@pytest.fixture(scope="session")
def molecules(load_demo):
    """The module ``demos/molecules.py`` (``main`` runs ``minitransformer train lm``)."""
    return load_demo("molecules")


@pytest.fixture(scope="session")
def finished_run(finished_molecules_run):
    """The run folder of :func:`finished_molecules_run` (tests that change it copy it first)."""
    return finished_molecules_run[1]
