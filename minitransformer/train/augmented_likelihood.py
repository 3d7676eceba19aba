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
(logits -> one number per sequence) and :func:`augmented_likelihood_forward`
(the agent's, the prior's and the scores -> the loss).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer.backend import xp
from minitransformer.nn.softmax import log_softmax

__all__ = ["sequence_log_likelihood_forward", "sequence_log_likelihood_backward",
           "augmented_likelihood_forward", "augmented_likelihood_backward"]


class SequenceLogLikelihoodCache(NamedTuple):
    """What :func:`sequence_log_likelihood_backward` needs."""

    p: object  # (B, T, V) softmax of the logits: the gradient is onehot - p
    targets: object  # (B, T) the next tokens (pad positions hold pad_id)
    keep: object  # (B, T) 1.0 where the target is a real token, 0.0 at padding


def sequence_log_likelihood_forward(logits, targets, pad_id: int):
    r""":math:`\log p(x_b) = \sum_t \log \mathrm{softmax}(z_{b,t})[x_{b,t+1}]` over the non-pad targets.

    Args:
        logits: (B, T, V) the model's logits for positions 0..T-1.
        targets: (B, T) the next token at each position; ``pad_id`` where there is none.
        pad_id: the padding token, whose positions add nothing.

    Returns:
        ``(logp, cache)``: logp (B,), one log-likelihood per sequence.
    """
    logp_tokens = log_softmax(logits, axis=-1)  # (B, T, V)
    keep = (targets != pad_id).astype(logits.dtype)  # (B, T)
    picked = xp.take_along_axis(logp_tokens, targets[..., None], axis=-1)[..., 0]  # (B, T)
    logp = (picked * keep).sum(axis=1)  # (B,)
    return logp, SequenceLogLikelihoodCache(xp.exp(logp_tokens), targets, keep)


def sequence_log_likelihood_backward(dlogp, cache: SequenceLogLikelihoodCache):
    r"""dlogits (B, T, V) :math:`= \partial L / \partial \log p(x_b) \cdot (\mathrm{onehot}(x_{b,t+1})
    - \mathrm{softmax}(z_{b,t}))` at the kept positions, exactly 0 at padding. dlogp: (B,)."""
    p, targets, keep = cache
    onehot = xp.arange(p.shape[-1]) == targets[..., None]  # (B, T, V) bool
    return (onehot - p) * (dlogp[:, None] * keep)[..., None]  # (B, T, V) weighted per sequence, 0 at padding


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
