"""MLMDescriptorTask: the masked tokens' loss plus the weighted squared error of the descriptors,
from one pass; its gradients are the two tasks' gradients added; its data and its refusals."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.models import Encoder, EncoderConfig
from minitransformer.train.mlm_descriptors import UNIT_VARIANCE, DescriptorEpochs, MLMDescriptorTask
from minitransformer.train.tasks import MLMTask

PAD, BOS, EOS, MASK = 0, 1, 2, 3
V, A = 12, 5


def _examples():
    rng = np.random.default_rng(3)
    ids = [[BOS] + list(rng.integers(4, V, size=n)) + [EOS] for n in (9, 6, 11)]
    return [(x, rng.standard_normal(A)) for x in ids]


def _model():
    cfg = EncoderConfig(vocab_size=V, n_layers=1, d_model=8, n_heads=2, d_ff=12, max_len=16, n_aux=A, seed=4)
    return Encoder(cfg)


def _grads(model):
    return {n: backend.to_numpy(p.grad).copy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("weight", [0.0, 0.5, 2.0])
def test_the_loss_and_the_gradients_are_the_masked_tokens_plus_the_weighted_descriptor_error(float64, weight):
    examples = _examples()
    task = MLMDescriptorTask(MASK, V, n_targets=A, weight=weight, special_ids=(PAD, BOS, EOS))
    batch = task.collate(examples)
    model = _model()
    model.zero_grad()
    loss, n = task.loss(model, batch, np.random.default_rng(11))
    task.backward(model)
    both = _grads(model)

    plain = MLMTask(MASK, V, special_ids=(PAD, BOS, EOS))  # the same corruption from the same generator
    model.zero_grad()
    mlm, n_plain = plain.loss(model, batch[0], np.random.default_rng(11))
    plain.backward(model)
    tokens_only = _grads(model)
    corrupted, _ = plain._corrupt(batch[0], np.random.default_rng(11))
    pred = backend.to_numpy(model(backend.asarray(corrupted), head="mlm+aux")[1])  # (B, A)
    err = ((pred - batch[1]) ** 2).mean()
    assert n == n_plain > 0
    assert float(loss) == pytest.approx(float(mlm) + weight * err, rel=1e-12)
    aux_only = {k: both[k] - tokens_only[k] for k in both}
    if weight == 0:
        assert all(np.abs(v).max() < 1e-15 for v in aux_only.values())
        return
    # the auxiliary loss reaches its head and, through the first token's state, the body
    assert np.abs(aux_only["aux.weight"]).max() > 0 and np.abs(aux_only["blocks.0.ff.fc1.weight"]).max() > 0
    np.testing.assert_allclose(aux_only["aux.bias"], 2 * weight * (pred - batch[1]).sum(axis=0) / pred.size,
                               rtol=1e-9, atol=1e-15)


def test_bad_targets_are_refused_naming_the_example():
    task = MLMDescriptorTask(MASK, V, n_targets=A)
    examples = _examples()
    examples[1] = (examples[1][0], np.r_[examples[1][1][:-1], np.nan])
    with pytest.raises(ValueError, match=f"example 1 has targets of shape .* give every example {A} finite"):
        task.collate(examples)
    with pytest.raises(ValueError, match="n_targets must be >= 1"):
        MLMDescriptorTask(MASK, V, n_targets=0)


def test_validation_scores_the_masked_tokens_only(float64):
    task = MLMDescriptorTask(MASK, V, n_targets=A, special_ids=(PAD, BOS, EOS))
    plain = MLMTask(MASK, V, special_ids=(PAD, BOS, EOS))
    batch = task.collate(_examples())
    model = _model().eval()
    assert task.evaluate(model, [batch]) == plain.evaluate(model, [batch[0]])
    assert task.validation_tokens([batch]) == plain.validation_tokens([batch[0]]) > 0


def test_descriptors_are_computed_when_the_phase_starts_and_put_on_unit_variance(monkeypatch):
    pytest.importorskip("rdkit")
    import minitransformer.train.mlm_descriptors as module
    from minitransformer.chem import Vocab
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCN(CC)CC", "OC(=O)c1ccccc1C(=O)O", "ClCCl"] * 3
    calls = []
    real = module.descriptor_targets
    monkeypatch.setattr(module, "descriptor_targets", lambda s: calls.append(len(s)) or real(s))
    data = DescriptorEpochs(smiles, Vocab.build(smiles, extras=(Vocab.CLS, Vocab.MASK)), seed=0, max_tokens=40)
    assert calls == []  # a run resumed after its pretraining never computes them
    first = data(0)
    assert calls == [len(smiles)] and len(first) == len(smiles)
    targets = np.stack([t for _, t in first])  # (N, F)
    assert targets.dtype == np.float32 and np.isfinite(targets).all()
    assert np.abs(targets).max() <= UNIT_VARIANCE / 2 + 1e-6
    varied = targets.std(axis=0) > 0
    assert varied.sum() > 50 and abs(float(targets[:, varied].var(axis=0).mean()) - 1.0) < 0.3
    data(1)
    assert calls == [len(smiles)]  # once per run
