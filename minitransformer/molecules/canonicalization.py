"""Canonicalization as translation: decode SMILES into canonical SMILES and judge the result.

A molecule has many SMILES (one per starting atom and atom order) but exactly one
canonical SMILES (RDKit's). A Seq2Seq model reads any of them and writes the
canonical one; because that string is unique, success is an exact string match.
:func:`translate` decodes (greedy or beam search, with the KV cache),
:func:`judge` compares one prediction with the target, and
:func:`score_translations` turns the judged test set into rates: exact match
(top-1, and top-k for beam search), valid SMILES, and "same molecule, other
string" (a correct molecule written in a non-canonical way).
"""
from __future__ import annotations

MAX_TOKENS = 128  # the longest source or target, BOS and EOS included (the models' max_len)


def translate(model, vocab, sources, beam: int = 1, n_best: int = 1, batch_size: int = 128) -> list:
    """Decode SMILES strings with the KV cache; returns one list of ``n_best`` strings per source.

    ``beam=1`` is greedy decoding, otherwise beam search of width ``beam``. Sources are
    decoded in batches of similar length (less padding), results come back in input order.
    """
    import numpy as np
    from minitransformer.generate import beam_search, greedy
    from minitransformer.train.tasks import pad_batch
    encoded = [vocab.encode(s) for s in sources]
    order = np.argsort([len(e) for e in encoded], kind="stable")
    out = [None] * len(sources)
    rows = max(1, batch_size // beam)  # items per call; beam search decodes beam * rows rows
    for start in range(0, len(order), rows):
        idx = order[start:start + rows]
        src = pad_batch([encoded[i] for i in idx], vocab.pad_id)  # (b, S)
        max_len = min(src.shape[1] + 50, model.config.max_len)
        if beam == 1:
            ids = greedy(model, src=src, max_len=max_len)[:, None, :]  # (b, 1, T)
        else:
            ids, _ = beam_search(model, src=src, beam_size=beam, n_best=n_best, max_len=max_len)  # (b, n, T)
        for i, hyps in zip(idx, ids):
            out[i] = [vocab.decode(row) for row in hyps]
    return out


def has_stereo(smiles: str) -> bool:
    """Whether a SMILES writes stereochemistry (tetrahedral @ or double-bond / \\)."""
    return any(c in smiles for c in "@/\\")


LENGTH_BINS = ((0, 20), (20, 40), (40, MAX_TOKENS))  # target length in tokens, for the breakdown
COLUMNS = ("source", "target", "greedy", "greedy_correct", "greedy_same_molecule", "greedy_valid",
           "beam_top1", "beam_rank", "beam_valid", "beam_same_molecule", "beam_first_valid", "beam_top5")


def judge(source: str, target: str, greedy_out: str, beam_out: list) -> dict:
    """One test molecule: the predictions and how they compare with the canonical ``target``.

    ``*_same_molecule``: the prediction parses and RDKit canonicalizes it to ``target``
    (true for an exact match too). ``beam_rank``: 1..K where the target sits among the
    K beam hypotheses, 0 when it is not among them. ``beam_first_valid``: the most likely
    hypothesis that RDKit parses (the first one when none does), the answer of a beam
    search that knows which strings are SMILES (``beam_first_valid_correct``).
    """
    from minitransformer.chem import canonical
    g_canon = canonical(greedy_out) if greedy_out else None
    canons = [canonical(h) if h else None for h in beam_out]  # each hypothesis' molecule, None: not a SMILES
    b_canon = canons[0]
    first_valid = next((h for h, c in zip(beam_out, canons) if c is not None), beam_out[0])
    return {
        "source": source, "target": target, "greedy": greedy_out,
        "greedy_correct": int(greedy_out == target), "greedy_same_molecule": int(g_canon == target),
        "greedy_valid": int(g_canon is not None),
        "beam_top1": beam_out[0], "beam_rank": next((k + 1 for k, h in enumerate(beam_out) if h == target), 0),
        "beam_valid": int(b_canon is not None), "beam_same_molecule": int(b_canon == target),
        "beam_valid_all": sum(c is not None for c in canons) / len(beam_out),
        "beam_first_valid": first_valid, "beam_first_valid_correct": int(first_valid == target),
        "beam_top5": " ".join(beam_out),
    }


def score_translations(rows: list) -> dict:
    """Test metrics from :func:`judge` rows; every rate is a fraction of the test molecules
    (of a subset, for the stereo and length breakdowns: None when the subset is empty)."""
    import numpy as np
    from minitransformer.chem import tokenize

    def rate(key, keep=None):
        values = np.array([r[key] for r in rows], dtype=np.float64)  # (N,)
        values = values if keep is None else values[keep]
        return float(values.mean()) if values.size else None  # None: no such molecule in the test set

    rank = np.array([r["beam_rank"] for r in rows])  # (N,)
    stereo = np.array([has_stereo(r["target"]) for r in rows])  # (N,) bool
    copy = np.array([r["source"] == r["target"] for r in rows])  # (N,) bool: the source is already canonical
    length = np.array([len(tokenize(r["target"])) for r in rows])  # (N,) target tokens
    m = {
        "n_test": len(rows), "n_test_stereo": int(stereo.sum()), "n_test_copies": int(copy.sum()),
        "greedy_top1": rate("greedy_correct"), "greedy_valid": rate("greedy_valid"),
        "greedy_same_molecule": rate("greedy_same_molecule"),
        "beam_top1": float((rank == 1).mean()), "beam_top5": float((rank > 0).mean()),
        "beam_valid": rate("beam_valid"), "beam_valid_all": rate("beam_valid_all"),
        "beam_same_molecule": rate("beam_same_molecule"),
        "beam_first_valid_top1": rate("beam_first_valid_correct"),
        "greedy_top1_stereo": rate("greedy_correct", stereo),
        "greedy_top1_no_stereo": rate("greedy_correct", ~stereo),
        "greedy_top1_not_copies": rate("greedy_correct", ~copy),
    }
    # "same molecule, other string": a valid SMILES of the right molecule that is not the canonical one
    m["greedy_other_string"] = m["greedy_same_molecule"] - m["greedy_top1"]
    m["beam_other_string"] = m["beam_same_molecule"] - m["beam_top1"]
    m["greedy_top1_by_length"] = {f"{lo}-{hi - 1} tokens": rate("greedy_correct", (length >= lo) & (length < hi))
                                  for lo, hi in LENGTH_BINS}
    return m


def exact_match_callback(vocab, sources, targets):
    """A :func:`~minitransformer.train.fit` callback: greedy exact match on fixed validation pairs."""
    def val_exact(trainer, epoch, metrics):
        out = translate(trainer.model, vocab, sources)
        return {"val_exact": sum(o[0] == t for o, t in zip(out, targets)) / len(targets)}
    return val_exact
