"""TrainConfig.loss_norm: with "epoch" every token of an epoch weighs the same in the updates,
whichever batch it lands in; with "batch" (a mean per batch) the tokens of a short example weigh
more when length-bucketed batches put it among short ones. The loss the history keeps is a mean
over the batch's tokens either way."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.optim import SGD
from minitransformer.train import TrainConfig, fit
from minitransformer.train.tasks import LMTask, Seq2SeqTask
from train_helpers import BOS, EOS, V, cfg, lm_model, mlm_model, mlm_task


class GradientSum(SGD):
    """Adds up the gradient of every step and leaves the weights where they are: all the
    epoch's gradients are then taken at the same weights, and their sum is comparable."""

    def __init__(self, model):
        super().__init__(model, lr=1e-3)
        self.model = model
        self.total = {name: np.zeros_like(p.data) for name, p in model.named_parameters()}

    def step(self):
        for name, p in self.model.named_parameters():
            self.total[name] += p.grad


def short_and_long(n_each=8, seed=0):
    """8 examples of 4 tokens, then 8 of 14: length-bucketed batches of 4 hold one length each
    (which examples share a batch then does not change a batch's token count)."""
    rng = np.random.default_rng(seed)
    make = lambda k: [BOS] + [int(t) for t in rng.integers(4, V, size=k)] + [EOS]  # noqa: E731
    return [make(2) for _ in range(n_each)] + [make(12) for _ in range(n_each)]


def summed_gradient(model, task, batches, divisors) -> dict:
    """Sum over ``batches`` of the gradient of each batch's summed token loss over its divisor."""
    total = {name: np.zeros_like(p.data) for name, p in model.named_parameters()}
    for batch, divisor in zip(batches, divisors):
        model.zero_grad()
        task.normaliser = divisor
        task.loss(model, task.collate(batch))
        task.backward(model)
        for name, p in model.named_parameters():
            total[name] += p.grad
    task.normaliser = None
    return total


def epoch_gradient(loss_norm: str, data) -> tuple[dict, object]:
    """The summed gradient of one epoch of ``fit`` (batches of 4, bucketed, no clipping) and the model."""
    model = lm_model(seed=3)
    opt = GradientSum(model)
    fit(model, LMTask(), opt, data, config=cfg(epochs=1, batch_size=4, clip=None, loss_norm=loss_norm))
    return opt.total, model


def largest_difference(a: dict, b: dict) -> tuple[float, str]:
    """(largest error relative to the tensor's largest entry, the tensor's name)."""
    return max((float(np.abs(a[n] - b[n]).max() / max(np.abs(b[n]).max(), 1e-300)), n) for n in a)


def test_with_epoch_norm_every_token_of_the_epoch_weighs_the_same():
    with backend.dtype_scope("float64"):
        data = short_and_long()
        got, model = epoch_gradient("epoch", data)
        tokens = sum(len(x) - 1 for x in data)
        # one batch of all the examples, its summed loss over the mean tokens of the epoch's 4 batches
        want = summed_gradient(model, LMTask(), [data], [tokens / 4])
    err, name = largest_difference(got, want)
    assert err < 1e-10, f"{name} differs by {err:.3g} relative (largest error)"


def test_with_batch_norm_each_batch_weighs_the_same_and_short_tokens_weigh_more():
    with backend.dtype_scope("float64"):
        data = short_and_long()
        got, model = epoch_gradient("batch", data)
        task = LMTask()
        # the short examples' summed loss over one short batch's 12 tokens, the long ones' over 52
        per_batch = summed_gradient(model, task, [data[:8], data[8:]], [4 * 3, 4 * 13])
        even = summed_gradient(model, task, [data], [sum(len(x) - 1 for x in data) / 4])
    err, name = largest_difference(got, per_batch)
    assert err < 1e-10, f"{name} differs from the mean per batch by {err:.3g} relative (largest error)"
    err, name = largest_difference(got, even)
    assert err > 1e-2, f"the mean per batch came out as the token-weighted sum ({name}: {err:.3g})"


def test_the_history_keeps_the_mean_loss_per_token_either_way():
    data = short_and_long()
    losses = {}
    for norm in ("batch", "epoch"):
        model = lm_model(seed=3)
        losses[norm] = fit(model, LMTask(), GradientSum(model), data,
                           config=cfg(epochs=1, batch_size=4, clip=None, loss_norm=norm)).step_losses
    np.testing.assert_allclose(losses["epoch"], losses["batch"], rtol=1e-5)


def test_example_tokens_are_the_targets_a_loss_scores():
    ex = [BOS, 5, 6, 7, EOS]
    lm = LMTask()
    assert lm.example_tokens(ex) == lm.scored_tokens(lm.collate([ex])) == 4
    s2s = Seq2SeqTask()
    pair = ([BOS, 5, EOS], [BOS, 6, 7, EOS])
    assert s2s.example_tokens(pair) == s2s.scored_tokens(s2s.collate([pair])) == 3


def test_epoch_norm_needs_a_task_that_counts_its_tokens():
    model = mlm_model()
    with pytest.raises(ValueError, match="loss_norm 'epoch' needs a task that counts"):
        fit(model, mlm_task(), SGD(model, lr=1e-3), short_and_long(), config=cfg(loss_norm="epoch"))


def test_an_unknown_loss_norm_is_refused():
    with pytest.raises(ValueError, match="TrainConfig.loss_norm must be one of"):
        TrainConfig(loss_norm="token")
