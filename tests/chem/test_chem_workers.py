"""RDKit work in worker processes gives exactly what it gives in this process."""
import numpy as np
import pytest

from minitransformer.chem import workers
from minitransformer.chem.datasets.lm_data import RandomizedEpochs, rewrite_smiles
from minitransformer.chem.datasets.vocab import Vocab

pytest.importorskip("rdkit")
MOLECULES = ["CC(=O)Oc1ccccc1C(=O)O", "c1ccc2[nH]ccc2c1", "CCN(CC)CC", "OC(=O)c1ccccc1O", "CCOC(=O)C",
             "Cn1cnc2c1c(=O)n(C)c(=O)n2C"] * 40


@pytest.fixture
def in_workers(monkeypatch):
    """Everything above 10 molecules goes to two worker processes, in chunks of 50."""
    import minitransformer.chem.datasets.lm_data as lm_data
    monkeypatch.setattr(workers, "MIN_PARALLEL", 10)
    monkeypatch.setattr(lm_data, "RANDOM_CHUNK", 50)
    monkeypatch.setattr(lm_data, "REWRITE_CHUNK", 50)
    monkeypatch.setenv("MINITRANSFORMER_WORKERS", "2")
    yield
    workers.shutdown()


def _serial(monkeypatch):
    import minitransformer.chem.datasets.lm_data as lm_data
    monkeypatch.setattr(lm_data, "RANDOM_CHUNK", 50)
    monkeypatch.setenv("MINITRANSFORMER_WORKERS", "1")


def test_random_writings_are_the_same_in_workers(monkeypatch):
    vocab = Vocab.build(MOLECULES + [s.upper() for s in MOLECULES])
    _serial(monkeypatch)
    here = [RandomizedEpochs(MOLECULES, vocab, seed=3, p=p, kekule_form=k)(2) for p in (1.0, 0.5) for k in (0, 1)]
    with monkeypatch.context() as m:
        m.setattr(workers, "MIN_PARALLEL", 10)
        m.setenv("MINITRANSFORMER_WORKERS", "2")
        there = [RandomizedEpochs(MOLECULES, vocab, seed=3, p=p, kekule_form=k)(2) for p in (1.0, 0.5)
                 for k in (0, 1)]
        assert workers._POOL["executor"] is not None, "the work went to worker processes"
    workers.shutdown()
    assert here == there
    assert here[0] != RandomizedEpochs(MOLECULES, vocab, seed=3)(3), "another epoch, other writings"


def test_rewriting_is_the_same_in_workers(in_workers):
    got, dropped = rewrite_smiles(MOLECULES, "kekule")
    assert workers._POOL["executor"] is not None and dropped == 0
    workers.shutdown()
    workers.MIN_PARALLEL = 10**9  # (restored by the fixture's monkeypatch)
    assert rewrite_smiles(MOLECULES, "kekule") == (got, 0) and workers._POOL["executor"] is None


def test_a_bad_worker_count_is_named(monkeypatch):
    monkeypatch.setenv("MINITRANSFORMER_WORKERS", "many")
    with pytest.raises(ValueError, match="MINITRANSFORMER_WORKERS='many'"):
        workers.worker_count()
    monkeypatch.setenv("MINITRANSFORMER_WORKERS", "0")
    assert workers.worker_count() == 1


def test_ranks_that_share_the_random_writing_get_what_one_process_writes(monkeypatch, two_ranks):
    """Each rank of a data-parallel run writes every other chunk and gathers the rest: the same
    strings as one process (each chunk draws from its own stream)."""
    _serial(monkeypatch)  # chunks of 50: five of them
    vocab = Vocab.build(MOLECULES)
    alone = RandomizedEpochs(MOLECULES, vocab, seed=4)(1)

    together, shares = two_ranks(lambda rank: RandomizedEpochs(MOLECULES, vocab, seed=4, share=rank)(1))
    assert together == alone and sorted(shares[0]) == [0, 2, 4] and sorted(shares[1]) == [1, 3]
