"""Training curves (loss and accuracy per epoch, per model) drawn with matplotlib."""

from __future__ import annotations

import json
from pathlib import Path


def plot_training_curves(histories: dict[str, dict], out_png: str | Path) -> Path:
    """Draw loss and accuracy per epoch for every model into one PNG.

    Args:
        histories: model type -> the ``training_history.json`` dict written by
            :mod:`training.train` (keys ``history.loss``, ``history.accuracy`` and, when
            validation ran, ``history.val_loss``, ``history.val_accuracy``).
        out_png: output path (parent directories are created).

    Returns:
        The PNG path.

    Raises:
        ValueError: ``histories`` is empty.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    histories = {k: h for k, h in histories.items() if h.get("history", {}).get("loss")}
    if not histories:
        raise ValueError("no training histories to plot")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (name, h) in enumerate(sorted(histories.items())):
        hist = h["history"]
        color = f"C{i}"
        epochs = range(1, len(hist["loss"]) + 1)
        ax_loss.plot(epochs, hist["loss"], color=color, label=f"{name} train")
        ax_acc.plot(epochs, hist["accuracy"], color=color, label=f"{name} train")
        if "val_loss" in hist:
            ax_loss.plot(epochs, hist["val_loss"], color=color, ls="--", label=f"{name} test")
            ax_acc.plot(epochs, hist["val_accuracy"], color=color, ls="--", label=f"{name} test")
    # the trainers' loss: with --label-smoothing (0.1) it stays above the plain cross-entropy
    # that selection reports as test loss (and validation sees raw pixels, not JPEGs)
    ylabel = "loss as trained: label-smoothed cross-entropy (nats)"
    ax_loss.set(title="Loss per epoch", xlabel="epoch", ylabel=ylabel)
    ax_acc.set(title="Accuracy per epoch", xlabel="epoch", ylabel="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Fashion-MNIST: the candidates (solid: train; dashed: validation images of the test split)"
    )
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def load_histories(candidates_dir: str | Path, model_types) -> dict[str, dict]:
    """Read ``<candidates_dir>/<type>/training_history.json`` for each type that has one."""
    out = {}
    for t in model_types:
        f = Path(candidates_dir) / t / "training_history.json"
        if f.is_file():
            out[t] = json.loads(f.read_text())
    return out
