"""Training curves from a trainer's history (matplotlib, headless)."""
from __future__ import annotations


def plot_curves(history, path, panels=(("NLL", ("train_loss", "val_loss", "val_nll_token")),
                                       ("accuracy", ("val_acc", "val_acc_token", "val_rec_ref")))) -> None:
    """One subplot per panel, one line per metric present in ``history`` (list of
    per-epoch dicts), epochs on the x axis. Writes a PNG to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6))
    axes = [axes] if len(panels) == 1 else list(axes)
    epochs = [h.get("epoch", i + 1) for i, h in enumerate(history)]
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            values = [h.get(key) for h in history]
            if any(v is not None for v in values):
                ax.plot(epochs, values, marker="o", markersize=3, label=key)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
