"""The Encoder's auxiliary regression head (``n_aux``, head ``"mlm+aux"``): one pass gives the MLM
logits and the first token's regression, and backward adds both losses' gradients; checked whole
against finite differences, and its refusals."""
import numpy as np
import pytest

from minitransformer.checkpoint.limits import declared_parameters
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward, mse_backward, mse_forward
from minitransformer.gradcheck import check_module
from minitransformer.models import Encoder, EncoderConfig
from test_model_gradients import (  # noqa: E402
    ENC_BATCH, IGNORE, MLM_TARGETS, SMALL, V, _checked_names, _dev, _how, _perturb,
)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_encoder_mlm_and_auxiliary_heads_in_one_pass_gradcheck(any_backend, float64, tie):
    """head="mlm+aux": the masked tokens' cross-entropy plus the squared error of the first token's
    regression head, from one pass; every weight (the auxiliary head's, and those before the first
    token's state, which both losses reach) has the gradient of the finite differences of the sum."""
    cfg = EncoderConfig(vocab_size=V, n_layers=2, seed=8, n_aux=4, tie_embeddings=tie, **SMALL)
    model = Encoder(cfg)
    _perturb(model, seed=3)
    scored = MLM_TARGETS.copy()
    scored[0, 0] = 1  # the first token scored by both heads: its gradient must be their sum
    targets = _dev(scored)
    y = _dev(np.random.default_rng(7).standard_normal((3, 4)))  # (B, A)

    def loss_fn(outputs):
        logits, aux = outputs
        mlm, mlm_cache = cross_entropy_forward(logits, targets, ignore_index=IGNORE)
        sq, sq_cache = mse_forward(aux, y)
        return mlm + 0.7 * sq, (cross_entropy_backward(1.0, mlm_cache), mse_backward(0.7, sq_cache))
    report = check_module(model, _dev(ENC_BATCH), loss_fn, kwargs={"head": "mlm+aux"}, **_how())
    assert _checked_names(report) == {n for n, _ in model.named_parameters()}
    assert {"aux.weight", "aux.bias"} <= _checked_names(report)
    assert declared_parameters("Encoder", cfg.to_dict()) >= model.num_parameters()


def test_the_auxiliary_head_needs_the_mlm_head_and_a_model_without_it_has_no_such_head(float64):
    with pytest.raises(ValueError, match="n_aux=3 needs mlm_head=True"):
        EncoderConfig(vocab_size=V, n_aux=3, mlm_head=False, n_outputs=2, **SMALL)
    model = Encoder(EncoderConfig(vocab_size=V, n_layers=1, **SMALL))
    with pytest.raises(ValueError, match="no 'mlm\\+aux' head"):
        model(_dev(ENC_BATCH), head="mlm+aux")
