"""Constrained decoding: a rule outside the model that bans some next tokens.

A *constraint* follows every row while :func:`~minitransformer.generate.sample`
or :func:`~minitransformer.generate.greedy` writes it, and before each step says
which tokens may not come next. The banned tokens get the logit
:math:`-\\infty`, so the step chooses among the others, with their
probabilities renormalised (and temperature, top-k and top-p applied among the
allowed tokens only). This changes the model's distribution: it is a feature
of the sampler, switched on per call, never a repair of finished samples.

The interface (any object with these three methods; :class:`Constraint`
documents it):

``start(prefix, max_len)``
    A new batch: ``prefix`` is the host int array (B, P) every row starts from
    (BOS, or a prompt), ``max_len`` the total length limit of a row.
``banned()``
    Host bool array (B, V): True where a token may not be the next one.
``advance(tokens)``
    The tokens (B,) just written (host ints); rows that already ended get PAD.

The decoding loop brings each step's tokens to the host (B integers) and the
mask to the device (B x V booleans): two small transfers per step, which cost
little next to the model on NumPy and a few microseconds per step on CuPy.

A row whose every token is banned (after PAD and BOS are banned too) is given
EOS back, so it ends instead of crashing the draw. A constraint that plans
ahead, as :class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar` does,
never reaches that case except when ``max_len`` leaves no room at all.
"""
from __future__ import annotations

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp


class Constraint:
    """The interface of a decoding constraint (subclassing it is optional)."""

    def start(self, prefix: np.ndarray, max_len: int) -> None:
        """Begin a batch: ``prefix`` (B, P) host ints, rows at most ``max_len`` long."""
        raise NotImplementedError

    def banned(self) -> np.ndarray:
        """(B, V) host bool array: True where the token may not come next."""
        raise NotImplementedError

    def advance(self, tokens: np.ndarray) -> None:
        """Record the tokens (B,) host ints just written (PAD for rows that had ended)."""
        raise NotImplementedError


def apply_constraint(scores, constraint, cfg):
    """Set the logits of the tokens ``constraint`` bans to -inf, in place.

    scores: (B, V) device logits with PAD and BOS already at -inf. A row left
    with no allowed token gets EOS back (its logit is restored), so every row
    still has something to choose (EOS is never banned by ``ban_specials``).
    Returns ``scores``.
    """
    banned = np.array(constraint.banned(), dtype=bool)  # (B, V), host
    if banned.shape != tuple(scores.shape):
        raise ValueError(f"constraint.banned() has shape {banned.shape}, expected {tuple(scores.shape)}")
    specials = [i for i in (cfg.pad_id, getattr(cfg, "bos_id", None)) if i is not None and i != cfg.eos_id]
    dead = (banned | np.isin(np.arange(banned.shape[1]), specials)).all(axis=1)  # (B,)
    banned[dead, cfg.eos_id] = False  # nothing left: let the row end
    scores[xp.asarray(banned)] = -xp.inf  # (B, V), one host->device copy per step
    return scores


def start_constraint(constraint, prefix, max_len) -> None:
    """``constraint.start`` with the prefix brought to the host."""
    constraint.start(np.asarray(backend.to_numpy(prefix)), int(max_len))


def advance_constraint(constraint, tok) -> None:
    """``constraint.advance`` with the step's tokens (B,) brought to the host."""
    constraint.advance(np.asarray(backend.to_numpy(tok)))
