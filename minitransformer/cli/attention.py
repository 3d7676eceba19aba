"""``minitransformer attention``: draw what a trained model attends to, for one molecule.

For a generator (DecoderLM) the pictures show its causal self-attention; for a
property model (PropertyModel) or a pretraining one (MaskedLM), its encoder's
self-attention; for a canonicalizer (Seq2Seq),
the encoder's and decoder's self-attention and the cross-attention (which
source token each output token reads). See ``docs/attention.md`` for how to
read them. The training commands draw the same pictures for one test molecule
with ``--plot-attention``.
"""
from __future__ import annotations

from pathlib import Path


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "attention", help="draw a model's attention maps for one molecule",
                        example="minitransformer attention runs/lm/best.npz 'CC(=O)Oc1ccccc1C(=O)O' --out aspirin\n"
                                "minitransformer attention runs/seq2seq/best.npz 'OCC(C)c1ccccc1' --layers 0 -1")
    p.add_argument("checkpoint", type=cli.existing_file("checkpoint"),
                   help="a checkpoint of any `minitransformer train` run (best.npz or last.npz)")
    p.add_argument("smiles", type=cli.smiles_text, help="the molecule, as SMILES")
    p.add_argument("--out", default="attention", type=cli.run_folder,
                   help="folder for the PNG files (created if needed; default: ./attention)")
    p.add_argument("--layers", type=int, nargs="+", default=None,
                   help="layers to draw, counted from 0 (negative: from the last; default: all)")
    p.add_argument("--heads", default=None, type=heads_option,
                   help="heads to draw, e.g. '0 2', or 'mean' for one panel per layer (default: all)")
    p.add_argument("--scale", default="map", choices=("map", "row", "fixed"),
                   help="colour scale: each map from 0 to its own largest probability (map, the default), "
                        "each row to its own largest (row), or 0 to 1 for all (fixed)")
    p.add_argument("--force", action="store_true", help="overwrite PNG files already in --out")
    p.add_argument("--backend", default=None, choices=("numpy", "cupy"))
    p.set_defaults(run=run)
    return p


def heads_option(text: str):
    """``--heads``: ``mean``, or head numbers separated by spaces or commas."""
    import argparse
    if text.strip().lower() == "mean":
        return "mean"
    try:
        return [int(h) for h in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'mean' or head numbers such as '0 2', got {text!r}") from None


#: The checkpoints whose models attend: the transformers, and the attentional LSTM encoder-decoder.
ATTENDING = ("DecoderLM", "Encoder", "MaskedLM", "PropertyModel", "Seq2Seq", "RNNSeq2Seq")


def load_model(path):
    """(model, vocabulary) of any checkpoint written by a training command."""
    from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
    from minitransformer.chem import Vocab
    ckpt = load_checkpoint(path)
    if ckpt.vocab is None:
        raise ValueError(f"{path} holds a model of kind {ckpt.model_type} without a vocabulary, so its tokens "
                         "cannot be named; give a checkpoint written by `minitransformer train`")
    if ckpt.model_type not in ATTENDING:
        raise ValueError(f"{path} holds an {ckpt.model_type}, which has no attention to draw (an LSTM carries what "
                         "it read in its state, with no weights over the input); give the checkpoint of a "
                         "transformer (train lm, train property, train seq2seq) or of an RNNSeq2Seq")
    model, _ = model_from_checkpoint(ckpt)
    return model.eval(), Vocab.from_json(ckpt.vocab)


def plot_attention_example(model, vocab, smiles, out) -> None:
    """``--plot-attention`` of the training commands: the pictures of one readable test molecule."""
    from minitransformer.cli.outputs import attention_example
    from minitransformer.viz import render_attention
    from minitransformer.chem.judge.draw import DrawingUnavailable
    example = attention_example(smiles)
    try:
        paths = render_attention(model, vocab, example, Path(out), layers=[0, -1])
    except DrawingUnavailable as exc:  # the end of a training run: its results stay
        print(f"attention maps not drawn: {exc}")
        return
    print(f"attention maps of {example} in {', '.join(str(p) for p in paths)}")


def in_the_models_words(smiles: str, vocab) -> str:
    """``smiles`` as given if the model knows all its tokens, else the same molecule in
    Kekulé or canonical aromatic form (a generator trained on Kekulé SMILES has no
    ``c`` token); a one-line ValueError when no form fits."""
    from minitransformer.chem.datasets.data import canonical, kekule
    if canonical(smiles) is None:
        raise ValueError(f"RDKit cannot read the SMILES {smiles!r}; check it, e.g. with a molecule editor")
    for form in (smiles, kekule(smiles), canonical(smiles)):
        if form and vocab.unk_id not in vocab.encode(form):
            if form != smiles:
                print(f"the model does not know every token of {smiles}; drawing the same molecule as {form}")
            return form
    unknown = sorted({t for t in vocab.tokens_of(canonical(smiles)) if t not in vocab})
    raise ValueError(f"the SMILES has tokens this model never saw ({' '.join(unknown)}), in any form; "
                     "pick a molecule made of the atoms it was trained on")


def run(args) -> int:
    model, vocab = load_model(args.checkpoint)
    smiles = in_the_models_words(args.smiles, vocab)
    from minitransformer.viz import render_attention  # heatmaps and molecule drawings, written atomically
    paths = render_attention(model, vocab, smiles, Path(args.out), layers=args.layers, heads=args.heads,
                             scale=args.scale, overwrite=args.force)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
