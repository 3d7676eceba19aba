"""Attention drawn on the molecule: each atom shaded by the attention its token receives.

A heatmap answers "which token looks at which"; a chemist usually asks "which
*atoms* does the model look at". This module answers the second question for
one SMILES string, in three steps:

1. **Tokens to atoms.** :func:`token_atom_indices` gives each SMILES token its
   RDKit atom index, or None. Atom tokens are the bracket atoms (``[nH]``,
   ``[C@@H]``, ``[O-]``), the organic-subset atoms (``C``, ``Cl``, ``c`` ...)
   and the wildcard ``*``. RDKit numbers atoms in the order they are written,
   so the k-th atom token is atom k, *provided* the molecule is parsed from
   that very string and explicit hydrogens (``[H]``) are kept (RDKit drops
   them by default, which would shift every later index): :func:`molecule_of`
   parses that way and checks the counts agree. Bonds, branches, ring digits
   and special tokens (``<bos>``, ``<cls>``, ``<eos>``) map to None. The graph
   bias of an encoder reads tokens as atoms the same way (:mod:`minitransformer.chem.graph`
   holds both functions).
2. **Attention received.** :func:`attention_received` turns maps (B, H, Tq, Tk)
   into one weight per key token: the probability each key receives, averaged
   over the query rows and over the chosen layers and heads. Every row sums to
   1, so the weights sum to 1 over all keys (atoms and non-atoms together).
3. **Drawing.** :func:`draw_attention_on_molecule` shades each atom with the
   weight of its token (a colour scale from 0 to the largest atom weight, shown
   as a colourbar) and writes the value next to the atom. Non-atom tokens are
   left out of the shading; the caption says so and how much of the attention
   they took.
"""
from __future__ import annotations

import io

import numpy as np

from minitransformer.atomic import write_bytes
from minitransformer.chem._rdkit import quiet_rdkit, require_rdkit
from minitransformer.chem.datasets.ring_marks import MARK, is_closing
from minitransformer.chem.graph import is_atom_token, molecule_of

__all__ = ["is_atom_token", "token_atom_indices", "molecule_of", "attention_received",
           "atom_weights", "draw_attention_on_molecule"]

def token_atom_indices(tokens) -> list[int | None]:
    """For each token, the RDKit index of the atom it writes, or None (not an atom).

    >>> token_atom_indices(["<bos>", "C", "(", "=", "O", ")", "[O-]", "<eos>"])
    [None, 0, None, None, 1, None, 2, None]
    """
    out, k = [], 0
    for t in tokens:
        if is_atom_token(t):
            out.append(k)
            k += 1
        else:
            out.append(None)
    return out


def attention_received(maps, layers=None, heads=None, sample: int = 0, query_rows=None) -> np.ndarray:
    """One weight per key token: the attention it receives, averaged.

    Args:
        maps: list of L arrays (B, H, Tq, Tk) (one per layer, as from
            :func:`~minitransformer.viz.attention_maps`), or one such array.
        layers, heads: indices to average over (None = all; an int = one).
        sample: the batch row b.
        query_rows: indices of the query rows to average over (None = all).

    Returns:
        (Tk,) float64: mean over layers, heads and query rows of ``P[b, h, q, k]``.
        It sums to 1 when no query row is fully masked.
    """
    from minitransformer import backend
    if hasattr(maps, "ndim") and maps.ndim == 4:
        maps = [maps]
    maps = [np.asarray(backend.to_numpy(m), dtype=np.float64) for m in maps]  # L x (B, H, Tq, Tk)
    pick = lambda chosen: slice(None) if chosen is None else np.atleast_1d(chosen)  # noqa: E731
    chosen = [maps[i] for i in np.arange(len(maps))[pick(layers)]]
    stacked = np.stack([m[sample] for m in chosen])  # (L', H, Tq, Tk)
    stacked = stacked[:, pick(heads)][:, :, pick(query_rows)]  # (L', H', Tq', Tk)
    return stacked.mean(axis=(0, 1, 2))  # (Tk,)


def atom_weights(smiles: str, tokens, token_weights) -> tuple[object, np.ndarray, float]:
    """Move token weights onto atoms.

    Args:
        smiles: the molecule; its tokens must appear in ``tokens`` in order.
        tokens: the labels of the weighted positions: ``tokenize(smiles)`` (its closing ring labels
            may be marked, :mod:`~minitransformer.chem.datasets.ring_marks`), possibly with special
            tokens (``<bos>``, ``<cls>``, ``<eos>``) around.
        token_weights: (len(tokens),) one weight per token.

    Returns:
        ``(mol, weights, left_out)``: the RDKit molecule (explicit H kept),
        (n_atoms,) the weight of each atom's token, and the total weight of the
        non-atom tokens (bonds, branches, ring digits, specials).
    """
    tokens = [str(t) for t in tokens]
    w = np.asarray(token_weights, dtype=np.float64).reshape(-1)  # (T,)
    if len(w) != len(tokens):
        raise ValueError(f"got {len(w)} token weights for {len(tokens)} tokens; give one weight per token")
    spelled = "".join(t[:-len(MARK)] if is_closing(t) else t  # a marked closing label is its label
                      for t in tokens if not (t.startswith("<") and t.endswith(">")))
    if spelled != smiles:
        raise ValueError(f"the tokens spell {spelled!r}, not the SMILES {smiles!r}; pass the tokens of that SMILES")
    mol = molecule_of(smiles)
    index = token_atom_indices(tokens)
    weights = np.zeros(mol.GetNumAtoms())  # (n_atoms,)
    for k, i in enumerate(index):
        if i is not None:
            weights[i] = w[k]
    left_out = float(sum(w[k] for k, i in enumerate(index) if i is None))
    return mol, weights, left_out


def draw_attention_on_molecule(smiles: str, token_weights, tokens, path=None, size=(500, 400),
                               title: str | None = None, notes: bool = True) -> bytes:
    """Draw ``smiles`` with each atom shaded by the weight of its token; return PNG bytes.

    Args:
        smiles: the molecule (as written: the atom order follows the string).
        token_weights: (len(tokens),) e.g. from :func:`attention_received`.
        tokens: the tokens the weights belong to (see :func:`atom_weights`).
        path: where to write the PNG (atomically), or None to only return it.
        size: (width, height) of the molecule drawing in pixels; the caption
            and colourbar are added below it.
        title: a line above the caption (e.g. which attention, layers, heads).
        notes: write each atom's weight next to it.

    The colour scale runs from 0 to the largest atom weight (the colourbar shows
    it). Non-atom tokens are not drawn; the caption gives their share.
    """
    require_rdkit()
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.image import imread
    from minitransformer.chem.judge.draw import drawing_module
    rdMolDraw2D = drawing_module()

    width, height = (int(v) for v in size)
    if width < 100 or height < 100:
        raise ValueError(f"size must be at least (100, 100) pixels, got {size!r}")
    mol, weights, left_out = atom_weights(smiles, tokens, token_weights)
    vmax = float(weights.max()) if weights.max() > 0 else 1.0
    # YlOrRd without its darkest reds, so the atom labels drawn on top stay readable
    cmap = ListedColormap(colormaps["YlOrRd"](np.linspace(0.0, 0.75, 256)))  # (256, 4) RGBA
    norm = Normalize(vmin=0.0, vmax=vmax)
    colours = {i: tuple(float(c) for c in cmap(norm(w))[:3]) for i, w in enumerate(weights)}
    for atom in mol.GetAtoms():
        if notes:
            atom.SetProp("atomNote", f"{weights[atom.GetIdx()]:.2f}")
    with quiet_rdkit():
        drawer = rdMolDraw2D.MolDraw2DCairo(width, height)
        drawer.drawOptions().annotationFontScale = 0.6
        rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol, highlightAtoms=list(colours), highlightAtomColors=colours,
                                           highlightAtomRadii={i: 0.45 for i in colours}, highlightBonds=[])
        drawer.FinishDrawing()
        picture = imread(io.BytesIO(drawer.GetDrawingText()))  # (height, width, 4) floats

    dpi, caption_in = 100.0, 1.15  # the caption and colourbar take about 1.15 inch under the molecule
    fig = Figure(figsize=(width / dpi, height / dpi + caption_in), dpi=dpi)
    ax = fig.add_axes((0, caption_in / (height / dpi + caption_in), 1, 1 - caption_in / (height / dpi + caption_in)))
    ax.imshow(picture)
    ax.set_axis_off()
    bar_ax = fig.add_axes((0.1, 0.62 * caption_in / (height / dpi + caption_in), 0.8,
                           0.12 * caption_in / (height / dpi + caption_in)))
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=bar_ax, orientation="horizontal")
    bar.ax.tick_params(labelsize=7)
    bar.set_label(f"attention received by the atom's token (0 to {vmax:.3f})", fontsize=8, labelpad=1)
    caption = (f"{smiles}\nnot shaded: bonds, branches, ring digits and special tokens "
               f"(together {left_out:.0%} of the attention)")
    fig.text(0.5, 0.04 * caption_in / (height / dpi + caption_in), caption, ha="center", va="bottom",
             fontsize=7, wrap=True)
    if title:
        fig.text(0.5, 0.995, title, ha="center", va="top", fontsize=9)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    png = buffer.getvalue()
    if path is not None:
        write_bytes(path, png)
    return png
