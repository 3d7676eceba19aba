"""Training curves from a trainer's history (matplotlib, headless)."""
from __future__ import annotations


def plot_curves(history, path, panels=(("NLL", ("train_loss", "val_loss", "val_nll_token")),
                                       ("accuracy", ("val_acc", "val_acc_token", "val_rec_ref")))) -> None:
    """One subplot per panel, one line per metric present in ``history``. Writes a PNG to ``path``.

    ``history`` is a list of per-epoch dicts. Rows with a ``phase`` entry (a run
    that pretrains, then trains: see :func:`minitransformer.train.history.tagged`)
    are drawn one after the other on one epoch axis, each phase on a shaded band
    with its name, so that no phase of the run is left out of the picture.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    axes = [axes] if len(panels) == 1 else list(axes)
    x = list(range(1, len(history) + 1))  # epochs of all phases, one after the other
    phases = []  # (name, first x, last x)
    for i, h in enumerate(history):
        name = h.get("phase", "train")
        if phases and phases[-1][0] == name:
            phases[-1][2] = x[i]
        else:
            phases.append([name, x[i], x[i]])
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            values = [h.get(key) for h in history]
            if any(v is not None for v in values):
                ax.plot(x, [float("nan") if v is None else v for v in values], marker="o", markersize=3,
                        label=key)
        if len(phases) > 1:  # shade every other phase and name each one
            for k, (name, lo, hi) in enumerate(phases):
                if k % 2 == 0:
                    ax.axvspan(lo - 0.5, hi + 0.5, color="0.92", zorder=0)
                ax.text((lo + hi) / 2, 0.98, name, transform=ax.get_xaxis_transform(), ha="center", va="top",
                        fontsize=8, color="0.35")
        ax.set_title(title)
        ax.set_xlabel("epoch" if len(phases) <= 1 else "epoch (all phases)")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
