"""Beam search with the GNMT length penalty, over the decoding state of
:mod:`minitransformer.generate.decode`."""
from __future__ import annotations

import math
import numbers

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.softmax import log_softmax
from minitransformer.generate.decode import (
    eval_mode, setup_decoding, ban_specials, check_finite_rows, decode_step_logits, init_decode_state,
)


# ---------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------
def gnmt_length_penalty(length, alpha: float):
    r"""GNMT length penalty :math:`\mathrm{lp}(L) = \big((5 + L)/6\big)^\alpha`.

    A finished hypothesis is ranked by :math:`\log p(y)/\mathrm{lp}(|y|)`. Log-
    probabilities only decrease as tokens are added, so raw scores favour short
    outputs; :math:`\alpha > 0` compensates (:math:`\alpha = 0`: no normalisation,
    :math:`\alpha = 1`: roughly per-token averaging). ``length`` may be a number
    or an array.
    """
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src=None, batch_size=None, prompt=None, beam_size: int = 5,
                length_penalty: float = 0.6, max_len=None, n_best: int = 1, use_cache: bool = True):
    r"""Batched beam search with the GNMT length penalty.

    Each batch item keeps ``K = beam_size`` live hypotheses; the B items' beams
    are the N = B*K rows of one batch (row ``b*K + k`` is beam ``k`` of item
    ``b``), so one model call per step serves all of them.

    One step, for item :math:`b` with live raw scores :math:`s_k = \log p(y^{(k)})`:

    1. Expand: every live hypothesis :math:`k` and token :math:`v` gives a
       candidate of score :math:`s_k + \log\mathrm{softmax}(z^{(k)})_v`: a
       (K, V) table, flattened to K*V per item (PAD and BOS excluded).
    2. Select the K best candidates (the first step expands only beam 0, so the
       beams start distinct). Candidate ``j = k*V + v`` has parent ``k = j // V``
       and token ``v = j % V``. The decoding state follows the parents through
       ``reorder_state``.
    3. Candidates ending in EOS leave the beam and join the item's finished set,
       ranked by :math:`\hat s = s/\mathrm{lp}(L)` where :math:`L` counts the
       generated tokens including EOS (not the prefix); the set keeps the K
       best. The other selected candidates are the new live beam (for that step
       it may hold fewer than K; the next expansion refills it).
    4. An item is done when it has no live hypothesis, or when it holds K
       finished ones and the worst of them beats the best any live hypothesis
       could still reach. Since further tokens only lower :math:`s \le 0`, that
       bound is exact: :math:`s_{\text{best}}/\mathrm{lp}(L_{\max})` for
       :math:`\alpha \ge 0` (the penalty grows with length) and
       :math:`s_{\text{best}}/\mathrm{lp}(L+1)` for :math:`\alpha < 0`. Done items'
       beams are frozen (score :math:`-\infty`). The loop stops when all items
       are done or the rows reach ``max_len``; then any still-live hypotheses
       compete, unfinished, with the finished ones (scored at their length).

    With ``beam_size=1`` this is exactly :func:`greedy`: the single candidate
    is the argmax; if it is EOS the beam empties and the item is done.

    Args:
        model, src, batch_size, prompt, max_len, use_cache: as in :func:`greedy`.
        beam_size: K >= 1 hypotheses per item.
        length_penalty: :math:`\alpha` of :func:`gnmt_length_penalty` (GNMT used 0.6 to 0.7).
        n_best: how many hypotheses to return per item, 1 <= n_best <= K.

    Returns:
        ``(ids, scores)``: host ``numpy`` arrays ``ids`` int64 (B, n_best, T_out),
        laid out as in :func:`greedy`, and ``scores`` float64 (B, n_best), the
        length-normalised log-probabilities :math:`\log p(y)/\mathrm{lp}(L)`, best
        first. Entries of an item with fewer than n_best hypotheses are all-PAD
        rows with score :math:`-\infty`.
    """
    alpha, lp = length_penalty, gnmt_length_penalty
    if isinstance(beam_size, bool) or not isinstance(beam_size, numbers.Integral) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if isinstance(n_best, bool) or not isinstance(n_best, numbers.Integral) \
            or not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be an int in [1, beam_size={beam_size}], got {n_best!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number, got {alpha!r}")
    alpha = float(alpha)
    src, prefix, max_len = setup_decoding(model, batch_size, src, prompt, max_len)
    cfg = model.config
    B, P = prefix.shape
    if B == 0:  # no source: nothing to decode (the arrays keep their documented axes)
        return backend.to_numpy(xp.zeros((0, n_best, P), dtype=xp.int64)), backend.to_numpy(xp.zeros((0, n_best)))
    K = int(beam_size)
    N = B * K
    L = max_len
    items = xp.arange(B)  # (B,)
    ninf = -xp.inf

    ids = xp.full((N, L), cfg.pad_id, dtype=xp.int64)  # (N, L), row b*K + k = beam k of item b
    ids[:, :P] = xp.repeat(prefix, K, axis=0)
    live = xp.full((B, K), ninf, dtype=xp.float64)  # (B, K) raw log-probs; -inf = no hypothesis
    live[:, 0] = 0.0
    fin_ids = xp.full((B, K, L), cfg.pad_id, dtype=xp.int64)  # (B, K, L) finished hypotheses
    fin_score = xp.full((B, K), ninf, dtype=xp.float64)  # (B, K) their normalised scores, sorted
    done = xp.zeros((B,), dtype=bool)  # (B,)
    t = P
    with eval_mode(model):
        state = init_decode_state(model, src, use_cache)
        state.reorder(xp.repeat(items, K))  # B rows -> N rows (Seq2Seq: reuse the one encoding)
        while t < L:
            logits = decode_step_logits(state, ids[:, :t])  # (N, V)
            check_finite_rows(logits, t)
            V = logits.shape[1]
            logp = ban_specials(log_softmax(logits.astype(xp.float64)), cfg)  # (N, V)
            cand = (live.reshape(N, 1) + logp).reshape(B, K * V)  # (B, K*V)
            top = xp.argsort(-cand, axis=1, kind="stable")[:, :K]  # (B, K), best first
            top_score = xp.take_along_axis(cand, top, axis=1)  # (B, K)
            parent, token = top // V, top % V  # (B, K) each
            rows = (items[:, None] * K + parent).reshape(N)  # (N,) parent row of each new row
            alive = xp.isfinite(top_score)  # (B, K)
            is_eos = alive & (token == cfg.eos_id)  # (B, K)
            ids = ids[rows]  # (N, L), prefixes follow their parents
            ids[:, t] = xp.where(alive, token, cfg.pad_id).reshape(N)
            state.reorder(rows)
            gen_len = t + 1 - P  # generated tokens so far, EOS included

            # finished set: keep the K best of (old finished, new EOS candidates)
            pool_score = xp.concatenate(
                [fin_score, xp.where(is_eos, top_score / lp(gen_len, alpha), ninf)], axis=1)  # (B, 2K)
            pool_ids = xp.concatenate([fin_ids, ids.reshape(B, K, L)], axis=1)  # (B, 2K, L)
            keep = xp.argsort(-pool_score, axis=1, kind="stable")[:, :K]  # (B, K)
            fin_score = xp.take_along_axis(pool_score, keep, axis=1)  # (B, K)
            fin_ids = xp.take_along_axis(pool_ids, keep[:, :, None], axis=1)  # (B, K, L)

            live = xp.where(is_eos, ninf, top_score)  # (B, K)
            t += 1
            best_live = live.max(axis=1)  # (B,)
            bound_len = (L - P) if alpha >= 0 else gen_len + 1
            bound = best_live / lp(bound_len, alpha)  # (B,) best normalised score still reachable
            done = done | ~xp.isfinite(best_live) | (fin_score[:, K - 1] >= bound)  # (B,)
            live = xp.where(done[:, None], ninf, live)  # (B, K): done items are frozen
            if bool(done.all()):
                break

    # Items cut off by max_len: their live hypotheses compete unfinished.
    open_score = xp.where(xp.isfinite(live), live / lp(t - P, alpha), ninf)  # (B, K)
    pool_score = xp.concatenate([fin_score, open_score], axis=1)  # (B, 2K)
    pool_ids = xp.concatenate([fin_ids, ids.reshape(B, K, L)], axis=1)  # (B, 2K, L)
    best = xp.argsort(-pool_score, axis=1, kind="stable")[:, :n_best]  # (B, n_best)
    scores = xp.take_along_axis(pool_score, best, axis=1)  # (B, n_best)
    out = xp.take_along_axis(pool_ids, best[:, :, None], axis=1)  # (B, n_best, L)
    out = xp.where(xp.isfinite(scores)[:, :, None], out, cfg.pad_id)  # (B, n_best, L)
    if cfg.pad_id != cfg.eos_id:
        t_out = int((out != cfg.pad_id).sum(axis=2).max())  # longest returned row
    else:
        t_out = t
    return backend.to_numpy(out[:, :, :t_out]), backend.to_numpy(scores)
