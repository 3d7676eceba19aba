r"""Steering a language model toward a score: REINVENT's augmented-likelihood loss.

A trained language model, the *prior*, gives every sequence :math:`x` a
log-likelihood :math:`\log p_\text{prior}(x)`. A copy of it, the *agent*, is
fine-tuned so that its own log-likelihood moves toward the prior's plus the
score :math:`S(x) \in [0, 1]` of the sequence, scaled by :math:`\sigma`
(Olivecrona et al., "Molecular de-novo design through deep reinforcement
learning", J. Cheminform. 2017):

.. math::

    L = \frac{1}{B} \sum_{b=1}^{B} \bigl( \underbrace{\log p_\text{prior}(x_b)
        + \sigma S(x_b)}_{\text{target } y_b} - \log p_\text{agent}(x_b) \bigr)^2 .

Sequences the score likes are pulled up, the others pushed down, and the
prior's term keeps the agent close to what it learnt (valid, varied SMILES).

**The backward is the cross-entropy's with one weight per sequence.** The
sequence log-likelihood is a sum over its tokens,
:math:`\log p(x) = \sum_t \log \mathrm{softmax}(z_t)[x_{t+1}]`, so

.. math::

    \frac{\partial \log p(x)}{\partial z_t} = \mathrm{onehot}(x_{t+1}) - \mathrm{softmax}(z_t),
    \qquad
    \frac{\partial L}{\partial \log p_\text{agent}(x_b)} = -\frac{2}{B}\,(y_b - \log p_\text{agent}(x_b)),

and the gradient of the logits is :math:`w_b\,(\mathrm{softmax}(z_t) - \mathrm{onehot}(x_{t+1}))`
with :math:`w_b = \frac{2}{B}(y_b - \log p_\text{agent}(x_b))`: the token
cross-entropy's gradient, weighted per sequence. Padding positions get exactly
zero. Two kernel pairs, each gradient-checked: :func:`sequence_log_likelihood_forward`
(logits -> one number per sequence: the token cross-entropy's kernels, summed per
sequence) and :func:`augmented_likelihood_forward` (the agent's, the prior's and
the scores -> the loss).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer.backend import xp
from minitransformer.nn.softmax import cross_entropy_backward, cross_entropy_forward

__all__ = ["sequence_log_likelihood_forward", "sequence_log_likelihood_backward",
           "augmented_likelihood_forward", "augmented_likelihood_backward"]


def sequence_log_likelihood_forward(logits, targets, pad_id: int):
    r""":math:`\log p(x_b) = \sum_t \log \mathrm{softmax}(z_{b,t})[x_{b,t+1}]` over the non-pad targets:
    minus the per-token cross-entropy (:func:`~minitransformer.nn.softmax.cross_entropy_forward`,
    ``reduction="none"``, padding ignored), summed over each sequence.

    Args:
        logits: (B, T, V) the model's logits for positions 0..T-1.
        targets: (B, T) the next token at each position; ``pad_id`` where there is none.
        pad_id: the padding token, whose positions add nothing.

    Returns:
        ``(logp, cache)``: logp (B,), one log-likelihood per sequence; the cache is the
        cross-entropy's.
    """
    nll_tokens, cache = cross_entropy_forward(logits, targets, ignore_index=pad_id, reduction="none")  # (B, T)
    return -nll_tokens.sum(axis=1), cache  # (B,)


def sequence_log_likelihood_backward(dlogp, cache):
    r"""dlogits (B, T, V) :math:`= \partial L / \partial \log p(x_b) \cdot (\mathrm{onehot}(x_{b,t+1})
    - \mathrm{softmax}(z_{b,t}))`, exactly 0 at padding: the cross-entropy's backward with the
    per-token upstream gradient :math:`-\partial L / \partial \log p(x_b)`. dlogp: (B,)."""
    T = cache.shape[1]
    return cross_entropy_backward(xp.repeat(-dlogp[:, None], T, axis=1), cache)  # (B, T, V)


class AugmentedLikelihoodCache(NamedTuple):
    """What :func:`augmented_likelihood_backward` needs."""

    gap: object  # (B,) y_b - log p_agent(x_b): the target minus the agent's log-likelihood


def augmented_likelihood_forward(agent_logp, prior_logp, scores, sigma: float):
    r"""REINVENT's loss :math:`\frac1B \sum_b (\log p_\text{prior}(x_b) + \sigma S(x_b) - \log p_\text{agent}(x_b))^2`.

    Args:
        agent_logp: (B,) the agent's log-likelihoods (the only input with a gradient).
        prior_logp: (B,) the prior's, computed without a gradient.
        scores: (B,) each sequence's score in [0, 1] (0 for an invalid or repeated one).
        sigma: the score's weight :math:`\sigma > 0`: the larger, the harder the agent is pulled
            toward the score and away from the prior.

    Returns:
        ``(loss, cache)``: the loss, a 0-d array.
    """
    gap = prior_logp + sigma * scores - agent_logp  # (B,)
    return (gap * gap).mean(), AugmentedLikelihoodCache(gap)


def augmented_likelihood_backward(dloss, cache: AugmentedLikelihoodCache):
    r""":math:`\partial L / \partial \log p_\text{agent}(x_b) = -\frac{2}{B}\,\mathrm{gap}_b \cdot` dloss. Returns (B,)."""
    (gap,) = cache
    return (-2.0 / gap.shape[0]) * dloss * gap  # (B,)
