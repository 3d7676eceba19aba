"""Regenerate the pictures of docs/attention.md (deterministic: fixed seeds, CPU, NumPy).

    PYTHONPATH=. python docs/make_attention_images.py      # about a minute

Trains two tiny models on RDKit's drug-like SMILES with the loop of docs/build.md:
a DecoderLM (causal self-attention) and a Seq2Seq that rewrites a randomized SMILES
as the canonical one (cross-attention). Then draws one molecule with each and writes
docs/images/attention_*.png.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from minitransformer.chem import Vocab, canonical, clean_smiles, load_source, randomize_smiles
from minitransformer.models import DecoderLM, DecoderLMConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.nn import CrossEntropyLoss
from minitransformer.optim import AdamW
from minitransformer.viz import render_attention

OUT = Path(__file__).resolve().parent / "images"
EXAMPLE = "CC(=O)Nc1ccc(O)cc1Cl"  # a chlorinated paracetamol: rings, branches, a two-letter atom


def train(model, batches, steps: int, loss_of) -> None:
    """The training loop of docs/build.md: forward, loss, zero the gradients, backward, step."""
    opt = AdamW(model, lr=3e-3, weight_decay=0.01)
    loss_fn = CrossEntropyLoss(ignore_index=0)
    for step in range(steps):
        logits, targets = loss_of(batches(step))
        loss = loss_fn(logits, targets)
        model.zero_grad()
        model.backward(loss_fn.backward())
        opt.step()
        if step % 100 == 0:
            print(f"  step {step:4d}  loss {float(loss):.3f}", file=sys.stderr)


def main() -> None:
    smiles, _ = clean_smiles(load_source("druglike").smiles[:3000], min_len=10, max_len=40)
    vocab = Vocab.build(smiles + [EXAMPLE])
    rng = np.random.default_rng(0)

    print("decoder-only model (causal self-attention)", file=sys.stderr)
    data, lengths = vocab.encode_batch(smiles)  # (N, T) right-padded
    lm = DecoderLM(DecoderLMConfig(vocab_size=len(vocab), max_len=data.shape[1], d_model=64, n_heads=4,
                                   n_layers=2, d_ff=128, tie_embeddings=True, seed=0))

    def lm_batch(step):
        rows = rng.choice(len(data), size=32, replace=False)
        return data[rows, : lengths[rows].max()]  # (32, T)
    train(lm, lm_batch, 400, lambda b: (lm(b[:, :-1]), b[:, 1:]))
    lm.eval()

    print("encoder-decoder model (randomized -> canonical)", file=sys.stderr)
    pairs = [(randomize_smiles(s, rng), canonical(s)) for s in smiles]
    src_all, _ = vocab.encode_batch([p[0] for p in pairs])  # (N, S)
    tgt_all, _ = vocab.encode_batch([p[1] for p in pairs])  # (N, T)
    width = max(src_all.shape[1], tgt_all.shape[1])
    s2s = Seq2Seq(Seq2SeqConfig(len(vocab), len(vocab), max_len=width, d_model=64, n_heads=4, n_enc_layers=2,
                                n_dec_layers=2, d_ff=128, share_embeddings=True, seed=0))

    def s2s_batch(step):
        rows = rng.choice(len(pairs), size=32, replace=False)
        return src_all[rows], tgt_all[rows]  # (32, S), (32, T)
    train(s2s, s2s_batch, 500, lambda b: (s2s(b[0], b[1][:, :-1]), b[1][:, 1:]))
    s2s.eval()

    with_tmp = OUT / "tmp"
    lm_paths = render_attention(lm, vocab, EXAMPLE, with_tmp / "lm", heads=[0, 1])
    s2s_paths = render_attention(s2s, vocab, randomize_smiles(EXAMPLE, np.random.default_rng(3)), with_tmp / "s2s",
                                 target=canonical(EXAMPLE), heads=[0, 1])
    chosen = {"attention_decoder_self.png": lm_paths[0], "attention_decoder_self_molecule.png": lm_paths[1],
              "attention_cross.png": s2s_paths[4], "attention_cross_molecule.png": s2s_paths[5]}
    for name, path in chosen.items():
        path.replace(OUT / name)
        print(OUT / name, f"{(OUT / name).stat().st_size // 1024} KB")
    for path in lm_paths + s2s_paths:
        path.unlink(missing_ok=True)
    for folder in (with_tmp / "lm", with_tmp / "s2s", with_tmp):
        folder.rmdir()


if __name__ == "__main__":
    kernels.use("fast")
    main()
